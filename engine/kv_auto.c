/* Per-layer KV bit allocation from a short calibration (kv_auto.h, doc/kv-auto.md). */
#include "kv_auto.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "context.h"
#include "eval.h"

const float kv_auto_widths[KV_AUTO_N_OPT] = {2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f, 8.0f, 16.0f};
#define OPT_F16 (KV_AUTO_N_OPT - 1)
#define OPT_8 (KV_AUTO_N_OPT - 2)

const char *kv_auto_option_name(int o) {
    static const char *const names[KV_AUTO_N_OPT] = {"2", "2.5", "3", "3.5", "4", "5", "6", "8", "f16"};
    return o >= 0 && o < KV_AUTO_N_OPT ? names[o] : "?";
}

static int probe_option(void) {
    for (int o = 0; o < KV_AUTO_N_OPT; o++)
        if (kv_auto_widths[o] == KV_AUTO_PROBE_BITS) return o;
    return 2;
}

/* ---- parsing ------------------------------------------------------------------------------- */

int kv_auto_parse(const char *text, float *bits, tq_kv_scheme *base, char *err, size_t err_cap) {
    static const char *const form = "auto:B[:options], B the average bits per cached element in [2, 8] "
                                    "(e.g. auto:3, auto:3.5, auto:4:prefill_raw=0)";
    if (err_cap > 0) err[0] = 0;
    if (text == NULL || strncmp(text, "auto", 4) != 0) return 0;
    if (text[4] != ':' || text[5] == 0 || text[5] == ':') {
        snprintf(err, err_cap, "'%s' names no width: %s", text, form);
        return -1;
    }
    const char *b = text + 5, *colon = strchr(b, ':');
    char num[32];
    size_t len = colon ? (size_t)(colon - b) : strlen(b);
    if (len >= sizeof num) len = sizeof num - 1;
    memcpy(num, b, len);
    num[len] = 0;
    char *end;
    errno = 0;
    double v = strtod(num, &end);
    if (errno || end == num || *end || !isfinite(v)) {
        snprintf(err, err_cap, "'%s' is not a number: %s", num, form);
        return -1;
    }
    if (!(v >= 2.0 && v <= 8.0)) {
        snprintf(err, err_cap, "width %s is outside [2, 8]: %s", num, form);
        return -1;
    }
    char scheme[300], why[1024];
    snprintf(scheme, sizeof scheme, "turbo%s%s", num, colon ? colon : "");
    if (tq_kv_scheme_parse(scheme, base, why, sizeof why) != TQ_OK) {
        snprintf(err, err_cap, "auto:B takes turboB's options ('%s' does not parse: %s)", scheme, why);
        return -1;
    }
    *bits = (float)v;
    return 1;
}

void kv_auto_layer_scheme(const tq_kv_scheme *base, int ko, int vo, tq_kv_layer_scheme *out) {
    *out = base->layer;
    out->key_format = ko == OPT_F16 ? TQ_KV_F16 : TQ_KV_TURBO;
    out->value_format = vo == OPT_F16 ? TQ_KV_F16 : TQ_KV_TURBO;
    out->key_bits = ko == OPT_F16 ? base->layer.key_bits : kv_auto_widths[ko];
    out->value_bits = vo == OPT_F16 ? base->layer.value_bits : kv_auto_widths[vo];
}

/* ---- the allocation ------------------------------------------------------------------------ */

int kv_auto_option_allowed(float bits, int o, int layer_is_swa) {
    if (o < 0 || o >= KV_AUTO_N_OPT) return 0;
    return bits > 4.0f || kv_auto_widths[o] <= 4.0f || layer_is_swa;
}

/* The options on item's lower convex hull in (bytes, kld), ascending bytes; returns count. */
static int hull(const size_t *bytes, const double *kld, int from, int *h) {
    int k = 0;
    for (int o = from; o < KV_AUTO_N_OPT; o++) {
        if (k > 0 && kld[o] >= kld[h[k - 1]]) continue; /* no better for more bytes */
        if (k > 0 && bytes[o] <= bytes[h[k - 1]]) { /* as cheap and better: replaces */
            k--;
        }
        /* drop the last point while it lies on or above the segment from its predecessor to o */
        while (k >= 2) {
            const int a = h[k - 2], b = h[k - 1];
            const double s_ab = (kld[a] - kld[b]) / (double)(bytes[b] - bytes[a]);
            const double s_ao = (kld[a] - kld[o]) / (double)(bytes[o] - bytes[a]);
            if (s_ao >= s_ab) k--;
            else break;
        }
        h[k++] = o;
    }
    return k;
}

/* Item i's lowest option: lowest[i] (at most the last), 0 without floors. */
static int lowest_option(const unsigned char *lowest, int i) {
    return lowest ? (lowest[i] < KV_AUTO_N_OPT ? lowest[i] : KV_AUTO_N_OPT - 1) : 0;
}

int kv_auto_allocate(int n, const size_t *bytes, const double *kld, size_t budget, int uniform,
                     const unsigned char *lowest, unsigned char *choice) {
    if (n < 1 || bytes == NULL || kld == NULL || choice == NULL) return -1;
    int(*h)[KV_AUTO_N_OPT] = malloc((size_t)n * sizeof *h);
    int *nh = malloc((size_t)n * sizeof *nh), *at = malloc((size_t)n * sizeof *at);
    if (h == NULL || nh == NULL || at == NULL) {
        free(h), free(nh), free(at);
        return -1;
    }
    /* item i starts at its lowest option (0, or lowest[i]); at B = 8 nothing goes below 8 bits */
    size_t at8 = 0, at0 = 0;
    for (int i = 0; i < n; i++) {
        const int lo = lowest_option(lowest, i);
        at0 += bytes[(size_t)i * KV_AUTO_N_OPT + lo];
        at8 += bytes[(size_t)i * KV_AUTO_N_OPT + (lo > OPT_8 ? lo : OPT_8)];
    }
    const int from = at8 <= budget ? OPT_8 : 0;
    size_t used = from == OPT_8 ? at8 : at0;
    int rc = used <= budget ? 0 : -1;
    for (int i = 0; i < n && rc == 0; i++) {
        const int lo = lowest_option(lowest, i);
        nh[i] = hull(bytes + (size_t)i * KV_AUTO_N_OPT, kld + (size_t)i * KV_AUTO_N_OPT, from > lo ? from : lo, h[i]);
        at[i] = 0;
    }
    while (rc == 0) { /* the best affordable next hull step of any item */
        int best = -1;
        double best_rate = 0.0;
        for (int i = 0; i < n; i++) {
            if (at[i] + 1 >= nh[i]) continue;
            const size_t *b = bytes + (size_t)i * KV_AUTO_N_OPT;
            const double *d = kld + (size_t)i * KV_AUTO_N_OPT;
            const int o = h[i][at[i]], p = h[i][at[i] + 1];
            const size_t cost = b[p] - b[o];
            if (used + cost > budget) continue;
            const double rate = (d[o] - d[p]) / (double)cost;
            if (best < 0 || rate > best_rate) best = i, best_rate = rate;
        }
        if (best < 0) break;
        const int *hb = h[best];
        used += bytes[(size_t)best * KV_AUTO_N_OPT + hb[at[best] + 1]] - bytes[(size_t)best * KV_AUTO_N_OPT + hb[at[best]]];
        at[best]++;
    }
    if (rc == 0) {
        double pred = 0.0, upred = 0.0;
        size_t ubytes = 0;
        for (int i = 0; i < n; i++) {
            choice[i] = (unsigned char)h[i][at[i]];
            pred += kld[(size_t)i * KV_AUTO_N_OPT + choice[i]];
            if (uniform >= 0) {
                upred += kld[(size_t)i * KV_AUTO_N_OPT + uniform];
                ubytes += bytes[(size_t)i * KV_AUTO_N_OPT + uniform];
            }
        }
        if (uniform >= 0 && uniform < KV_AUTO_N_OPT && ubytes <= budget && upred < pred)
            for (int i = 0; i < n; i++) choice[i] = (unsigned char)uniform;
    }
    free(h), free(nh), free(at);
    return rc;
}

/* ---- calibration runs ---------------------------------------------------------------------- */

typedef struct calib {
    const model *m;
    model_context *x;
    const int32_t *tok;
    int n, nv, n_embd, n_rows, n_pieces, runs;
    int head_cap;      /* > 0: probes score each row on its head (run) */
    int32_t *head_ids; /* (n_rows, head_cap) each row's head tokens (eval_head) */
    int *head_n;       /* (n_rows) their count */
    float *head_z;     /* (EVAL_PIECE, head_cap) a piece's logits there */
    eval_piece *plan;
    float *logits, *lp, *ref; /* (EVAL_PIECE, max(nv, n_embd)), (nv), (n_rows, nv) */
    tq_kv_scheme base;        /* prefill_raw = 0; the probes' (no prediction across tokens) */
    int predict[2];           /* the layer / edge form predicts keys (mean=2): the check and the
                                 result do, the probes not (doc/kv-auto.md, "Predicted keys") */
    char *err;
    size_t err_cap;
} calib;

/* 1 if layer il of n_layer takes the scheme's edge form (its first edge_first and last edge_last). */
static int edge_layer(const tq_kv_scheme *s, int il, int n_layer) {
    return il < s->edge_first || il >= n_layer - s->edge_last;
}

/* The layer schemes of the cache itself: TurboQuant MSE keys predicted where the scheme
 * calibrated says so (the probes' schemes do not). */
static void with_prediction(const calib *c, tq_kv_layer_scheme *ls, int n_layer) {
    for (int il = 0; il < n_layer; il++) {
        const int edge = edge_layer(&c->base, il, n_layer);
        if (c->predict[edge] && ls[il].key_format == TQ_KV_TURBO && ls[il].key_variant == TQ_VARIANT_MSE)
            ls[il].key_mean = TQ_KV_KEY_MEAN_PREDICT;
    }
}

/* Runs the tokens with layer schemes ls; ref run (kld NULL): stores the log-probabilities. */
static model_status run(calib *c, const tq_kv_layer_scheme *ls, double *kld) {
    model_status st = context_set_kv_layer_schemes(c->x, &c->base, ls);
    if (st == MODEL_OK) st = eval_prefill(c->x, c->tok, c->n);
    eval_acc a;
    if (st == MODEL_OK && eval_acc_init(&a, 0) != 0) st = MODEL_ERR_NOMEM;
    if (st != MODEL_OK) {
        snprintf(c->err, c->err_cap, "%s", context_last_error(c->x));
        return st;
    }
    for (int i = 0, row = 0; i < c->n_pieces && st == MODEL_OK; i++) {
        const eval_piece *pc = &c->plan[i];
        st = eval_run_piece(c->x, c->tok, pc, c->logits);
        const int head = c->head_cap > 0 && kld != NULL; /* c->logits holds norm(x) rows */
        const size_t hc = (size_t)c->head_cap;
        if (head && st == MODEL_OK)
            st = context_output_logits(c->x, c->logits, pc->n_score, c->head_ids + (size_t)row * hc, c->head_n + row,
                                       hc, c->head_z);
        for (int r = 0; r < pc->n_score && st == MODEL_OK; r++, row++) {
            float *rf = c->ref + (size_t)row * (size_t)c->nv;
            if (head) {
                a.kld += eval_kld_head(rf, c->head_ids + (size_t)row * hc, c->head_n[row], c->head_z + (size_t)r * hc);
                a.rows++;
                continue;
            }
            float *mine = kld == NULL ? rf : c->lp;
            eval_log_softmax(c->logits + (size_t)r * (size_t)c->nv, mine, c->nv);
            eval_score_row(&a, rf, mine, c->nv, c->tok[pc->pos + r + 1]);
        }
    }
    if (st != MODEL_OK) snprintf(c->err, c->err_cap, "%s", context_last_error(c->x));
    else if (kld != NULL) *kld = a.rows > 0 ? a.kld / (double)a.rows : 0.0;
    eval_acc_free(&a);
    c->runs++;
    return st;
}

/* Every layer at (ko, vo). */
static void fill_layers(tq_kv_layer_scheme *ls, int n_layer, const tq_kv_scheme *base, int ko, int vo) {
    for (int il = 0; il < n_layer; il++) kv_auto_layer_scheme(base, ko, vo, &ls[il]);
}

/* The codec's mean squared error at bits on 64 seeded Gaussian vectors of dim (the library's
 * tq_codec_gaussian_mse); -1 if there is no such codec. */
static double codec_mse(const tq_kv_scheme *base, int dim, float bits) {
    tq_codec_config cfg;
    tq_codec_config_init(&cfg, dim, bits, TQ_VARIANT_MSE);
    cfg.seed = base->seed;
    cfg.norm_correction = base->layer.norm_correction;
    cfg.trellis = base->trellis; /* auto:B:trellis=1: the curve of the codes the cache will hold */
    tq_codec *codec = NULL;
    if (tq_codec_create(&codec, &cfg) != TQ_OK) return -1.0;
    double mse = -1.0;
    if (tq_codec_gaussian_mse(codec, 64, 0x6b765f6175746fULL /* "kv_auto" */, &mse) != TQ_OK) mse = -1.0;
    tq_codec_free(codec);
    return mse;
}

static double now_s(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void kv_auto_result_free(kv_auto_result *r) {
    if (r == NULL) return;
    free(r->layer_schemes);
    free(r->choice);
    free(r->sens);
    memset(r, 0, sizeof *r);
}

/* One point of side's curve at option o (< fp16): the codec's MSE on Gaussian vectors, or with
 * KV_AUTO_MEASURED_CURVE the KLD of a run with every layer's side at o. */
static model_status curve_point(calib *c, const model_config *cfg, tq_kv_layer_scheme *ls, int flags, int side,
                                int o, double *v) {
    if (flags & KV_AUTO_MEASURED_CURVE) {
        fill_layers(ls, cfg->n_layer, &c->base, side == 0 ? o : OPT_F16, side == 0 ? OPT_F16 : o);
        return run(c, ls, v);
    }
    const int dim = side == 0 ? cfg->head_dim : cfg->head_dim_v;
    *v = codec_mse(&c->base, dim, kv_auto_widths[o]);
    if (*v >= 0.0) return MODEL_OK;
    snprintf(c->err, c->err_cap, "no codec of %g bits for dim %d", (double)kv_auto_widths[o], dim);
    return MODEL_ERR_KV_SCHEME;
}

/* The curve g of both sides: 1 at the probe width, 0 at fp16. */
static model_status curves(calib *c, const model_config *cfg, tq_kv_layer_scheme *ls, int flags,
                           kv_auto_result *out) {
    const int probe = probe_option();
    out->key_split_gain = 1.0;
    for (int side = 0; side < 2; side++) {
        double at_probe, v;
        model_status st = curve_point(c, cfg, ls, flags, side, probe, &at_probe);
        for (int o = 0; o < KV_AUTO_N_OPT && st == MODEL_OK; o++) {
            v = o == probe ? at_probe : 0.0;
            if (o != probe && o != OPT_F16) st = curve_point(c, cfg, ls, flags, side, o, &v);
            out->curve[side][o] = o == probe ? 1.0 : at_probe > 0.0 ? v / at_probe : 0.0;
        }
        if (st != MODEL_OK) return st;
    }
    if (flags & KV_AUTO_MEASURED_CURVE) return MODEL_OK;
    tq_kv_layer_scheme probe_ls;
    kv_auto_layer_scheme(&c->base, probe, OPT_F16, &probe_ls);
    if (!tq_kv_layer_scheme_key_split(&probe_ls, c->base.trellis, cfg->head_dim)) return MODEL_OK; /* none here */
    /* The codec curve is that of keys without the key split, which the cache applies at the
     * probe width 3 (half the channels at 4 bits, half at 2, ranked by the key scale's
     * statistics: doc/kvcache.md §2) and which Gaussian vectors cannot show: the probe's
     * sensitivities are of split keys. Two whole-model runs (every layer's keys at the probe,
     * values fp16, with and without the split) give the ratio that puts the other widths on
     * the probe's footing (doc/kv-auto.md, "The key split"). */
    double with_split = 0.0, without = 0.0;
    fill_layers(ls, cfg->n_layer, &c->base, probe, OPT_F16);
    model_status st = run(c, ls, &with_split);
    for (int il = 0; il < cfg->n_layer; il++) ls[il].key_split = 0;
    if (st == MODEL_OK) st = run(c, ls, &without);
    if (st != MODEL_OK) return st;
    out->key_split_gain = with_split > 0.0 && without > 0.0 ? without / with_split : 1.0;
    for (int o = 0; o < OPT_F16; o++)
        if (o != probe) out->curve[0][o] *= out->key_split_gain;
    return MODEL_OK;
}

static model_status calibrate(calib *c, const model_config *cfg, int flags, const kv_auto_result *prior,
                              kv_auto_result *out) {
    const int L = cfg->n_layer, probe = probe_option();
    tq_kv_layer_scheme *ls = malloc((size_t)L * sizeof *ls);
    size_t *bytes = malloc((size_t)2 * (size_t)L * KV_AUTO_N_OPT * sizeof *bytes);
    double *kld = malloc((size_t)2 * (size_t)L * KV_AUTO_N_OPT * sizeof *kld);
    unsigned char *ch = malloc((size_t)2 * (size_t)L), *lowest = malloc((size_t)2 * (size_t)L);
    model_status st = ls && bytes && kld && ch && lowest ? MODEL_OK : MODEL_ERR_NOMEM;
    /* bytes of each option, the budget of turboB, f16 */
    size_t ob[2][KV_AUTO_N_OPT];
    for (int o = 0; o < KV_AUTO_N_OPT && st == MODEL_OK; o++) {
        tq_kv_layer_scheme one;
        kv_auto_layer_scheme(&c->base, o, o, &one);
        if (tq_kv_layer_scheme_bytes(&one, cfg->head_dim, cfg->head_dim_v, &ob[0][o], &ob[1][o]) != TQ_OK) {
            snprintf(c->err, c->err_cap, "a %s-bit layer does not fit head dims %d / %d", kv_auto_option_name(o),
                     cfg->head_dim, cfg->head_dim_v);
            st = MODEL_ERR_KV_SCHEME;
        }
    }
    out->budget_bytes = 0;
    for (int il = 0; il < L && st == MODEL_OK; il++) {
        const int edge = edge_layer(&c->base, il, L);
        size_t kb, vb;
        if (tq_kv_layer_scheme_bytes(edge ? &c->base.edge : &c->base.layer, cfg->head_dim, cfg->head_dim_v, &kb, &vb) !=
            TQ_OK) {
            snprintf(c->err, c->err_cap, "turbo%g does not fit head dims %d / %d", (double)out->bits,
                     cfg->head_dim, cfg->head_dim_v);
            st = MODEL_ERR_KV_SCHEME;
        }
        out->budget_bytes += (kb + vb) * (size_t)cfg->n_head_kv;
    }
    out->f16_bytes = (size_t)2 * (size_t)(cfg->head_dim + cfg->head_dim_v) * (size_t)cfg->n_head_kv * (size_t)L;
    /* the reference, then one run per layer and side at the probe width (or prior's) */
    if (prior != NULL) {
        memcpy(out->sens, prior->sens, (size_t)L * sizeof *out->sens);
        memcpy(out->curve, prior->curve, sizeof out->curve);
        out->key_split_gain = prior->key_split_gain;
    }
    /* The reference run records every layer (context_replay_record); a probe of layer il then
     * takes layers 0 .. il − 1, fp16 in both, from the record: the same results bit for bit,
     * about half the transformer's work of the 2·L probes. Without the memory for the record
     * every layer is computed. */
    const int replay = prior == NULL && !(flags & KV_AUTO_NO_REPLAY) && context_replay_record(c->x, c->n) == MODEL_OK;
    if (st == MODEL_OK && (prior == NULL || !(flags & KV_AUTO_NO_CHECK))) {
        fill_layers(ls, L, &c->base, OPT_F16, OPT_F16);
        st = run(c, ls, NULL);
    }
    /* The probes score each row on its head: the most probable tokens of the reference, as
     * few as hold KV_AUTO_HEAD_MASS of its probability (the output matrix for those rows
     * alone instead of all n_vocab; doc/kv-auto.md, "Cost"). */
    if (st == MODEL_OK && prior == NULL && !(flags & KV_AUTO_FULL_LOGITS)) {
        c->head_cap = cfg->n_vocab < KV_AUTO_HEAD_CAP ? cfg->n_vocab : KV_AUTO_HEAD_CAP;
        c->head_ids = malloc((size_t)c->n_rows * (size_t)c->head_cap * sizeof *c->head_ids);
        c->head_n = malloc((size_t)c->n_rows * sizeof *c->head_n);
        c->head_z = malloc((size_t)EVAL_PIECE * (size_t)c->head_cap * sizeof *c->head_z);
        if (c->head_ids == NULL || c->head_n == NULL || c->head_z == NULL) c->head_cap = 0; /* full rows */
        for (int r = 0; r < c->n_rows && c->head_cap > 0; r++)
            c->head_n[r] = eval_head(c->ref + (size_t)r * (size_t)c->nv, c->nv, KV_AUTO_HEAD_MASS, c->head_cap,
                                     c->head_ids + (size_t)r * (size_t)c->head_cap);
        context_set_hidden_out(c->x, c->head_cap > 0);
    }
    for (int il = 0; il < L && st == MODEL_OK && prior == NULL; il++)
        for (int side = 0; side < 2 && st == MODEL_OK; side++) {
            fill_layers(ls, L, &c->base, OPT_F16, OPT_F16);
            kv_auto_layer_scheme(&c->base, side == 0 ? probe : OPT_F16, side == 0 ? OPT_F16 : probe, &ls[il]);
            if (replay) context_replay_from(c->x, il);
            st = run(c, ls, &out->sens[il][side]);
        }
    if (replay) context_replay_record(c->x, 0); /* the other runs compress every layer */
    if (st == MODEL_OK && prior == NULL) st = curves(c, cfg, ls, flags, out);
    /* the closing runs (their KLDs are printed as measured) score whole rows */
    c->head_cap = 0;
    context_set_hidden_out(c->x, 0);
    int uniform = -1; /* turboB's option, when B is one of the widths */
    for (int o = 0; o < OPT_F16; o++)
        if (kv_auto_widths[o] == out->bits) uniform = o;
    if (st == MODEL_OK) {
        for (int i = 0; i < 2 * L; i++)
            for (int o = 0; o < KV_AUTO_N_OPT; o++) {
                bytes[(size_t)i * KV_AUTO_N_OPT + o] = ob[i % 2][o] * (size_t)cfg->n_head_kv;
                kld[(size_t)i * KV_AUTO_N_OPT + o] = out->sens[i / 2][i % 2] * out->curve[i % 2][o];
                if (!kv_auto_option_allowed(out->bits, o, model_layer_is_swa(c->m, i / 2)))
                    kld[(size_t)i * KV_AUTO_N_OPT + o] = HUGE_VAL; /* off every lower hull */
            }
        /* Global layers of a model with sliding-window layers, calibrated on no more tokens than
         * the window: every layer attends all the calibration tokens, so the probes see a
         * global layer as a local one, and the reach that sets it apart at longer context
         * goes unmeasured. Such a layer does not go below B (doc/kv-auto.md, "Global layers").
         */
        int floor_o = 0;
        for (int o = 0; o < OPT_F16; o++)
            if (kv_auto_widths[o] <= out->bits) floor_o = o;
        int any_swa = 0;
        for (int il = 0; il < L; il++) any_swa |= model_layer_is_swa(c->m, il);
        out->global_floor = any_swa && cfg->sliding_window > 0 && c->n <= cfg->sliding_window;
        for (int i = 0; i < 2 * L; i++)
            lowest[i] = (unsigned char)(out->global_floor && !model_layer_is_swa(c->m, i / 2) ? floor_o : 0);
        if (kv_auto_allocate(2 * L, bytes, kld, out->budget_bytes, uniform, out->global_floor ? lowest : NULL, ch) != 0) {
            snprintf(c->err, c->err_cap, "no allocation fits %zu bytes per token", out->budget_bytes);
            st = MODEL_ERR_KV_SCHEME;
        }
    }
    if (st == MODEL_OK) {
        out->predicted_kld = 0.0;
        out->bytes_per_token = 0;
        for (int il = 0; il < L; il++) {
            out->choice[il][0] = ch[2 * il];
            out->choice[il][1] = ch[2 * il + 1];
            kv_auto_layer_scheme(&c->base, ch[2 * il], ch[2 * il + 1], &out->layer_schemes[il]);
            for (int side = 0; side < 2; side++) {
                out->predicted_kld += kld[(size_t)(2 * il + side) * KV_AUTO_N_OPT + ch[2 * il + side]];
                out->bytes_per_token += bytes[(size_t)(2 * il + side) * KV_AUTO_N_OPT + ch[2 * il + side]];
            }
        }
    }
    if (st == MODEL_OK) with_prediction(c, out->layer_schemes, L);
    if (st == MODEL_OK && !(flags & KV_AUTO_NO_CHECK)) {
        st = run(c, out->layer_schemes, &out->measured_kld);
        if (st == MODEL_OK) {
            for (int il = 0; il < L; il++) {
                const int edge = edge_layer(&c->base, il, L);
                ls[il] = edge ? c->base.edge : c->base.layer;
            }
            with_prediction(c, ls, L);
            st = run(c, ls, &out->uniform_kld);
        }
        /* The allocation measured worse than uniform turboB on the very tokens it was made
         * from: turboB is kept (the prediction's error is larger than what the allocation
         * moves; doc/kv-auto.md, "Kept uniform"). */
        size_t ubytes = 0;
        for (int i = 0; uniform >= 0 && i < 2 * L; i++) ubytes += bytes[(size_t)i * KV_AUTO_N_OPT + uniform];
        if (st == MODEL_OK && uniform >= 0 && out->measured_kld > out->uniform_kld && ubytes <= out->budget_bytes &&
            c->base.edge_first == 0 && c->base.edge_last == 0) {
            out->allocated_kld = out->measured_kld;
            out->measured_kld = out->uniform_kld;
            out->kept_uniform = 1;
            out->predicted_kld = 0.0;
            out->bytes_per_token = 0;
            for (int il = 0; il < L; il++) {
                out->choice[il][0] = out->choice[il][1] = (unsigned char)uniform;
                kv_auto_layer_scheme(&c->base, uniform, uniform, &out->layer_schemes[il]);
                for (int side = 0; side < 2; side++) {
                    out->predicted_kld += kld[(size_t)(2 * il + side) * KV_AUTO_N_OPT + uniform];
                    out->bytes_per_token += bytes[(size_t)(2 * il + side) * KV_AUTO_N_OPT + uniform];
                }
            }
            with_prediction(c, out->layer_schemes, L);
        }
    }
    free(ls), free(bytes), free(kld), free(ch), free(lowest);
    return st;
}

model_status kv_auto_calibrate(const model *m, tq_threadpool *pool, const int32_t *tokens, int n,
                               const tq_kv_scheme *base, float bits, int flags, kv_auto_result *out,
                               char *err, size_t err_cap) {
    return kv_auto_calibrate_from(m, pool, tokens, n, base, bits, flags, NULL, out, err, err_cap);
}

model_status kv_auto_calibrate_from(const model *m, tq_threadpool *pool, const int32_t *tokens, int n,
                                    const tq_kv_scheme *base, float bits, int flags, const kv_auto_result *prior,
                                    kv_auto_result *out, char *err, size_t err_cap) {
    char dummy[1];
    if (err == NULL || err_cap == 0) err = dummy, err_cap = sizeof dummy;
    err[0] = 0;
    if (out == NULL) return MODEL_ERR_ARG;
    memset(out, 0, sizeof *out);
    if (m == NULL || tokens == NULL || base == NULL || n < KV_AUTO_MIN_TOKENS || !(bits >= 2.0f && bits <= 8.0f)) {
        snprintf(err, err_cap, "calibration needs a model, a scheme, B in [2, 8] and at least %d tokens",
                 KV_AUTO_MIN_TOKENS);
        return MODEL_ERR_ARG;
    }
    const double t0 = now_s();
    const model_config *cfg = model_get_config(m);
    n -= n % EVAL_PIECE;
    if (n > cfg->n_ctx_train) n = cfg->n_ctx_train - cfg->n_ctx_train % EVAL_PIECE;
    const int L = cfg->n_layer;
    calib c = {0};
    c.m = m;
    c.tok = tokens;
    c.n = n;
    c.nv = cfg->n_vocab;
    c.n_embd = cfg->n_embd;
    c.n_rows = eval_rows_per_window(n);
    c.base = *base;
    c.base.prefill_raw = 0; /* every key compressed (eval_scheme_for_view, EVAL_COMPRESSED) */
    /* The probes run without prediction across tokens (mean=2 becomes 1): its gain on a short
     * calibration is not its gain at a long context, and allocations made from probes with it
     * measured worse there (SmolLM2's auto:3 1.14x turbo3 at ctx 2048; doc/kv-auto.md,
     * "Predicted keys"). The check against uniform turboB and the result predict as asked.
     * TQ_AUTO_PROBE_PREDICT set (any value): the probes predict too (that measurement). */
    for (int e = 0; e < 2; e++) {
        tq_kv_layer_scheme *side = e ? &c.base.edge : &c.base.layer;
        c.predict[e] = side->key_mean == TQ_KV_KEY_MEAN_PREDICT;
        if (c.predict[e] && getenv("TQ_AUTO_PROBE_PREDICT") == NULL) side->key_mean = 1;
    }
    c.err = err;
    c.err_cap = err_cap;
    c.n_pieces = eval_plan(n, EVAL_COMPRESSED, NULL, 0);
    out->n_layer = L;
    out->bits = bits;
    out->measured_kld = out->uniform_kld = out->allocated_kld = -1.0;
    out->kept_uniform = 0;
    out->n_tokens = n;
    out->n_rows = c.n_rows;
    out->layer_schemes = malloc((size_t)L * sizeof *out->layer_schemes);
    out->choice = malloc((size_t)L * sizeof *out->choice);
    out->sens = calloc((size_t)L, sizeof *out->sens);
    c.plan = malloc((size_t)c.n_pieces * sizeof *c.plan);
    /* logits, or norm(x) rows for the head's probes (context_set_hidden_out) */
    c.logits = malloc((size_t)EVAL_PIECE * (size_t)(c.nv > c.n_embd ? c.nv : c.n_embd) * sizeof *c.logits);
    c.lp = malloc((size_t)c.nv * sizeof *c.lp);
    c.ref = malloc((size_t)c.n_rows * (size_t)c.nv * sizeof *c.ref);
    model_status st = MODEL_ERR_NOMEM;
    if (out->layer_schemes && out->choice && out->sens && c.plan && c.logits && c.lp && c.ref &&
        eval_plan(n, EVAL_COMPRESSED, c.plan, c.n_pieces) == c.n_pieces) {
        /* fp32 activations: a pass's KLD is then its KV error alone, without the floor that the
         * activations' 8-bit rounding, redrawn by any change, adds to every pass (doc/kv-auto.md) */
        const context_params p = {n, eval_context_batch(n), 0, &c.base, 1};
        st = prior != NULL && prior->n_layer != L ? MODEL_ERR_ARG : context_create(m, &p, pool, &c.x, err, err_cap);
        if (st == MODEL_OK) st = calibrate(&c, cfg, flags, prior, out);
    } else
        snprintf(err, err_cap, "out of memory");
    context_free(c.x);
    free(c.plan), free(c.logits), free(c.lp), free(c.ref);
    free(c.head_ids), free(c.head_n), free(c.head_z);
    out->runs = c.runs;
    out->seconds = now_s() - t0;
    if (st != MODEL_OK) kv_auto_result_free(out);
    return st;
}

/* ---- the built-in calibration text --------------------------------------------------------- */

/* Original prose written for this project (no corpus text): a little narrative, some facts and
 * numbers, dialogue and a list, so that the calibration sees ordinary English of several kinds. */
static const char default_text[] =
    "The lighthouse on the northern cape was built in 1871, three years after a grain ship ran "
    "aground on the rocks below it in a winter storm. For most of its life it was kept by a single "
    "family. The first keeper, a former carpenter named Tobias Wren, kept a logbook in which he "
    "wrote down the weather twice a day, the ships he saw, and the price he paid for lamp oil. His "
    "daughter Margaret took over the light when he grew too old to climb the stairs, and she kept "
    "the same book in the same careful hand for another forty years.\n\n"
    "Visitors today can still read a few of those pages in the small museum at the foot of the "
    "tower. One entry, from a calm morning in May, says only: \"Fog until nine. Two fishing boats "
    "out, both returned. Painted the railing.\" Another, from a night in November, runs to three "
    "pages and describes how the keeper and her brother rowed out to a schooner that had lost its "
    "mast, and brought six sailors back to shore before the tide turned.\n\n"
    "The tower itself is about thirty metres tall and has one hundred and twelve steps. The lamp "
    "was first fed with whale oil, then with paraffin, and since 1952 it has run on electricity. "
    "A modern lens turns once every ten seconds, and its beam can be seen from about twenty "
    "nautical miles away on a clear night. The light is now controlled from a station in the "
    "harbour town, and nobody has lived in the keeper's cottage since the last family moved out.\n\n"
    "Why do people still come here? A guide who has worked at the museum for many years gave a "
    "simple answer. \"They come for the view, mostly,\" she said, \"but they stay for the stories. "
    "Everyone knows what a lighthouse is for. Very few people have thought about what it meant "
    "to keep one burning every single night, whatever happened, for half a century.\"\n\n"
    "If you plan a visit, there are a few things worth knowing. First, the road from the village "
    "is narrow, and the car park fills up early in summer, so it is better to walk the coastal "
    "path, which takes about an hour. Second, the tower is closed in strong winds, even when the "
    "sky is blue. Third, bring a warm coat: the gallery at the top is exposed on every side, and "
    "the temperature there can be several degrees lower than on the beach. Finally, leave some "
    "time for the museum, where the logbooks, a brass telescope and a model of the old lamp are "
    "kept in a single bright room that looks out over the sea.\n\n"
    "In the evening, when the light comes on and the first beam sweeps across the water, the "
    "cape becomes very quiet. Gulls settle on the cliffs, the wind drops a little, and it is easy "
    "to imagine the keeper at the window with her pen, writing down one more ordinary night.\n";

const char *kv_auto_default_text(void) { return default_text; }
