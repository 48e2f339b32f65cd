/* Recording real K/V from the engine (attn_record.h). */
#include "attn_record.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model_session.h"

typedef struct hook_state {
    attn_record *r;
    int failed;
} hook_state;

static void hook(void *ctx, int il, int pos0, int n, const float *q, const float *k, const float *v,
                 const tq_attn_params *ap) {
    hook_state *hs = ctx;
    attn_record *r = hs->r;
    if (il < 0 || il >= r->n_layers || pos0 < 0 || (size_t)pos0 + (size_t)n > r->n_tokens) {
        hs->failed = 1;
        return;
    }
    attn_layer_rec *L = &r->layers[il];
    size_t kr = (size_t)r->n_kv_heads * (size_t)r->dk, vr = (size_t)r->n_kv_heads * (size_t)r->dv;
    size_t qr = (size_t)r->n_q_heads * (size_t)r->dk;
    memcpy(L->k + (size_t)pos0 * kr, k, sizeof(float) * (size_t)n * kr);
    memcpy(L->v + (size_t)pos0 * vr, v, sizeof(float) * (size_t)n * vr);
    size_t q0 = r->n_tokens - r->n_queries;
    for (int t = 0; t < n; t++) {
        size_t pos = (size_t)pos0 + (size_t)t;
        if (pos >= q0) memcpy(L->q + (pos - q0) * qr, q + (size_t)t * qr, sizeof(float) * qr);
        if (pos < r->n_first) memcpy(L->q_first + pos * qr, q + (size_t)t * qr, sizeof(float) * qr);
    }
    L->ap = *ap;
}

void attn_record_free(attn_record *r) {
    if (r == NULL) return;
    for (int i = 0; r->layers != NULL && i < r->n_layers; i++) {
        free(r->layers[i].k);
        free(r->layers[i].v);
        free(r->layers[i].q);
        free(r->layers[i].q_first);
    }
    free(r->layers);
    free(r->rope_freqs);
    memset(r, 0, sizeof *r);
}

int attn_record_from_model(const char *cmd, const char *model_path, const char *text_path,
                           size_t n_tokens, size_t n_queries, int n_threads, attn_record *out) {
    memset(out, 0, sizeof *out);
    session_opts o;
    session_opts_init(&o, cmd, (long)n_tokens, SESSION_KV_ONE); /* the list: f16 */
    o.model_path = model_path;
    o.n_ctx = (long)n_tokens;
    o.n_threads = n_threads;
    int rc = session_opts_finish(&o);
    if (rc) return rc;
    session s;
    memset(&s, 0, sizeof s);
    session_seq seq;
    memset(&seq, 0, sizeof seq);
    char *text = NULL;
    int32_t *ids = NULL;
    size_t len = 0, n_ids = 0;
    if ((rc = session_open(&s, &o)) != 0) goto done;
    if ((rc = session_read_file(cmd, text_path, &text, &len)) != 0) goto done;
    if ((rc = session_tokenize(&s, text, len, 1, &ids, &n_ids)) != 0) goto done;
    if (n_ids < n_tokens) {
        fprintf(stderr, "tq %s: %s has %zu tokens, fewer than --ctx %zu\n", cmd, text_path, n_ids,
                n_tokens);
        rc = TQ_EXIT_USAGE;
        goto done;
    }
    int max_batch = n_tokens < 512 ? (int)n_tokens : 512;
    if ((rc = session_seq_open(&s, &o.schemes[0], max_batch, &seq)) != 0) goto done;
    const model_config *c = seq.cfg;
    out->n_layers = c->n_layer;
    out->n_q_heads = c->n_head;
    out->n_kv_heads = c->n_head_kv;
    out->dk = c->head_dim;
    out->dv = c->head_dim_v;
    out->n_tokens = n_tokens;
    out->n_queries = n_queries;
    out->n_first = n_tokens < ATTN_RECORD_FIRST ? n_tokens : ATTN_RECORD_FIRST;
    out->rope_pairs = model_key_rope_pairs(c);
    out->rope_freqs = malloc((size_t)c->n_layer * (size_t)(c->head_dim / 2 + 1) * sizeof *out->rope_freqs);
    if (out->rope_freqs == NULL || !model_key_rope_freqs(s.m, out->rope_freqs)) free(out->rope_freqs), out->rope_freqs = NULL;
    out->layers = calloc((size_t)c->n_layer, sizeof *out->layers);
    rc = out->layers == NULL;
    for (int i = 0; !rc && i < c->n_layer; i++) {
        attn_layer_rec *L = &out->layers[i];
        L->k = malloc(sizeof(float) * n_tokens * (size_t)out->n_kv_heads * (size_t)out->dk);
        L->v = malloc(sizeof(float) * n_tokens * (size_t)out->n_kv_heads * (size_t)out->dv);
        L->q = malloc(sizeof(float) * n_queries * (size_t)out->n_q_heads * (size_t)out->dk);
        L->q_first = malloc(sizeof(float) * out->n_first * (size_t)out->n_q_heads * (size_t)out->dk);
        rc = L->k == NULL || L->v == NULL || L->q == NULL || L->q_first == NULL;
    }
    if (rc) {
        fprintf(stderr, "tq %s: out of memory for the recorded K/V\n", cmd);
        goto done;
    }
    hook_state hs = {out, 0};
    context_set_attn_hook(seq.x, hook, &hs);
    rc = session_forward(&seq, ids, (int)n_tokens, 0, 0, NULL);
    context_set_attn_hook(seq.x, NULL, NULL);
    if (!rc && hs.failed) {
        fprintf(stderr, "tq %s: the engine reported a layer or position out of range\n", cmd);
        rc = 1;
    }
done:
    if (rc) attn_record_free(out);
    free(ids);
    free(text);
    session_seq_close(&seq);
    session_close(&s);
    return rc;
}

int attn_record_auto_layers(const char *cmd, const char *model_path, int n_threads, int calib_tokens,
                            const session_scheme *schemes, int n, int n_layers,
                            tq_kv_layer_scheme *const *out) {
    session_opts o;
    session_opts_init(&o, cmd, 512, SESSION_KV_ONE); /* the list: f16; the calibration runs
                                                        contexts of its own */
    o.model_path = model_path;
    o.n_threads = n_threads;
    o.calib_tokens = calib_tokens;
    int rc = session_opts_finish(&o);
    if (rc) return rc;
    session s;
    memset(&s, 0, sizeof s);
    if ((rc = session_open(&s, &o)) != 0) return rc;
    if (s.cfg.n_layer != n_layers) {
        fprintf(stderr, "tq %s: the model has %d layers, the recording %d\n", cmd, s.cfg.n_layer, n_layers);
        rc = 1;
    }
    for (int i = 0; !rc && i < n; i++) {
        const tq_kv_layer_scheme *ls = session_auto_layer_schemes(&s, &schemes[i]);
        if (ls == NULL) {
            if (!schemes[i].is_auto) fprintf(stderr, "tq %s: %s is not auto:B\n", cmd, schemes[i].name);
            rc = 1;
        } else {
            memcpy(out[i], ls, sizeof *ls * (size_t)n_layers);
        }
    }
    session_close(&s);
    return rc;
}
