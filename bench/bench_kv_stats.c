/* The statistics of a real model's keys, values and queries that decide how TurboQuant's key
 * transform copes (doc/kvcache.md: key mean, key scale, key split), per layer: a benchmark
 * that prints, not a test. doc/smollm2.md compares SmolLM2 with Gemma 3 through it.
 *
 *   bench_kv_stats [-m model.gguf] (-f text | --ids ids.i32) [-c tokens] [-t threads]
 *
 * The first -c tokens (default 2048) of the text (tokenized as llama-perplexity does, BOS
 * first) or of a file of little-endian int32 token ids (--ids: fed as they are, for a model
 * whose vocabulary the engine cannot tokenize yet) go through the model in one sequence; the
 * attention hook (context_set_attn_hook) sees every layer's keys, values and queries after
 * QK-norm and RoPE. Per layer, over its KV heads (min / max over heads where two numbers):
 *   |mean|/rms  the norm of the head's key mean over the rms key norm: how much of a key is an
 *               offset common to all tokens, what the key mean removes (0: none)
 *   kloud       the loudest key channel's energy over the mean channel energy, keys less
 *               their mean (1: flat; the key scale and split weigh such channels)
 *   qloud       the same for the queries (of the q heads on that KV head)
 *   |k| |v|     mean key and value norms; k cv: the key norms' coefficient of variation
 *   gain        the key scale's predicted score-error factor Σa·Σb / (Σ√(ab))² (doc/kvcache.md),
 *               a, b the query and key channel energies
 *   v|mean|/rms the same offset ratio for the values (a value mean would remove that share of
 *               their energy; measured: 0.38 on both models, doc/kvcache.md);
 *   vgain       a value scale's predicted error factor dv·Σc / (Σ√c)², c the value channel
 *               energies (a per-channel scale c^(−1/4) before the rotation, undone after the
 *               sum; W_o's weighting left out: doc/kvcache.md §2, "Key scale").
 *
 * --mean-drift (keeps every key: layers × heads × tokens × head_dim floats) adds, per layer, how
 * much of the key energy at the late positions [c/2, c) each key mean leaves (the residual
 * energy Σ|k − m|² over Σ|k|²; doc/kvcache.md §7, "A key mean that turns with RoPE"):
 *   frozen   the cache's mean: the average key of the first 512 positions, fixed
 *   late     the late positions' own average (what no fixed mean can beat)
 *   rope     R_p μ: μ the average of the first 512 keys turned back by their RoPE angles
 *            (pre-RoPE), turned forward to each position p
 *   block64  R_c μ at the centre c of each 64-position block, for the pairs that turn at most
 *            2 radians per block; the other pairs the frozen mean's (cache files version 9)
 *   fast     block64, and R_p μ at each key's own angle on the faster pairs the cache takes:
 *            the (up to) 8 per layer whose pre-RoPE mean removes the most energy beyond the
 *            frozen mean's, each at least 0.5% of the keys' energy (the cache today)
 * and, per layer (geometric mean over its KV heads), what a lag-1 predictor across tokens would
 * take off (doc/kvcache.md §7, "Prediction across tokens"): Σ|x_t|² / Σ|x_t − ρ·x_{t−1}|², ρ the
 * least-squares factor per head, on [c/2, c): keys less the RoPE mean (x_{t−1} as it is, turned
 * by one position, and as it is in the key scale's weighting — the domain the codec codes),
 * values less their mean of the first 512 positions.
 * The RoPE angles are the model's (rope.freq_base, the sliding-window layers' base, freq_scale;
 * layers whose heads are not wholly rotated print "-"). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "eval.h"
#include "../tests/model_fixture.h"

typedef struct {
    int n_kv, n_q, dk, dv, n_layer;
    float *keys; /* --mean-drift: (layer, kv head, position, dk), else NULL */
    float *vals; /* --mean-drift: (layer, kv head, position, dv), else NULL */
    int n_ctx;
    double *k_sum, *k_sq, *q_sq, *k_norm, *k_norm_sq, *v_norm; /* per layer x kv head (x dk) */
    double *v_sum, *v_norm_sq; /* per layer x kv head (x dv), per layer x kv head */
    double *v_sq;              /* per layer x kv head x dv */
    long n_tok;
} stats;

static void hook(void *ctx, int il, int pos0, int n, const float *q, const float *k, const float *v,
                 const tq_attn_params *ap) {
    stats *s = ctx;
    (void)ap;
    const int dk = s->dk, dv = s->dv, g = s->n_q / s->n_kv;
    for (int t = 0; s->keys && t < n; t++)
        for (int h = 0; h < s->n_kv; h++) {
            const size_t at = ((size_t)il * s->n_kv + h) * s->n_ctx + (size_t)(pos0 + t);
            memcpy(s->keys + at * dk, k + ((size_t)t * s->n_kv + h) * dk, sizeof(float) * (size_t)dk);
            memcpy(s->vals + at * dv, v + ((size_t)t * s->n_kv + h) * dv, sizeof(float) * (size_t)dv);
        }
    for (int t = 0; t < n; t++)
        for (int h = 0; h < s->n_kv; h++) {
            const size_t lh = (size_t)il * (size_t)s->n_kv + (size_t)h;
            const float *kr = k + ((size_t)t * s->n_kv + h) * dk, *vr = v + ((size_t)t * s->n_kv + h) * dv;
            double kn = 0, vn = 0;
            for (int i = 0; i < dk; i++) {
                s->k_sum[lh * dk + i] += kr[i];
                s->k_sq[lh * dk + i] += (double)kr[i] * kr[i];
                kn += (double)kr[i] * kr[i];
                for (int j = 0; j < g; j++) {
                    double qv = q[((size_t)t * s->n_q + (size_t)h * g + j) * dk + i];
                    s->q_sq[lh * dk + i] += qv * qv;
                }
            }
            for (int i = 0; i < dv; i++) {
                vn += (double)vr[i] * vr[i];
                s->v_sum[lh * dv + i] += vr[i];
                s->v_sq[lh * dv + i] += (double)vr[i] * vr[i];
            }
            s->v_norm_sq[lh] += vn;
            s->k_norm[lh] += sqrt(kn);
            s->k_norm_sq[lh] += kn;
            s->v_norm[lh] += sqrt(vn);
        }
    if (il == 0) s->n_tok += n;
}

/* The tokens: --ids as stored (int32 LE), else the text tokenized as llama-perplexity does. */
static int32_t *read_tokens(const model *m, const char *path, int raw_ids, size_t *n) {
    *n = 0;
    FILE *fp = fopen(path, "rb");
    char *data = NULL;
    size_t len = 0, got;
    for (char buf[65536]; fp && (got = fread(buf, 1, sizeof buf, fp)) > 0; len += got) {
        char *grown = realloc(data, len + got);
        if (grown == NULL) break;
        data = grown;
        memcpy(data + len, buf, got);
    }
    if (fp) fclose(fp);
    if (data == NULL || raw_ids) {
        *n = len / sizeof(int32_t);
        return (int32_t *)data;
    }
    int32_t bos, *ids = eval_tokenize(m, data, len, n, &bos);
    free(data);
    return ids;
}

#define DRIFT_FIT 512 /* the cache's TQ_KV_KEY_SCALE_TOKENS */
#define DRIFT_BLOCK 64

/* RoPE pair j of a head: its two channels (layout as the model's) and its angle per position. */
static void drift_pair(const model_config *c, int il, int j, int *i0, int *i1, double *w) {
    const int half = c->n_rot / 2, local = c->sliding_window && c->swa_pattern && il % c->swa_pattern < c->swa_pattern - 1;
    *i0 = c->rope_layout == MODEL_ROPE_NEOX ? j : 2 * j;
    *i1 = c->rope_layout == MODEL_ROPE_NEOX ? j + half : 2 * j + 1;
    *w = pow(local ? c->rope_base_swa : c->rope_base, -2.0 * j / c->n_rot) * (local ? 1.0 : c->rope_freq_scale);
}

/* out = R_{sign·p} in (pair j's 2-vector turned by sign·w·p), for the pairs where sel[j] (all if NULL). */
static void drift_turn(const model_config *c, int il, const double *in, double p, int sign, const int *sel, double *out) {
    for (int i = 0; i < c->head_dim; i++) out[i] = in[i];
    for (int j = 0; j < c->n_rot / 2; j++) {
        int i0, i1;
        double w;
        drift_pair(c, il, j, &i0, &i1, &w);
        if (sel && !sel[j]) continue;
        double cs = cos(w * p), sn = sign * sin(w * p);
        out[i0] = in[i0] * cs - in[i1] * sn;
        out[i1] = in[i0] * sn + in[i1] * cs;
    }
}

/* block64's and fast's mean at position t: z (the pre-RoPE mean on the pairs in sel, else 0)
 * turned to t's block centre on the pairs in sel (and to t itself on those in fsel), plus st. */
static void drift_mean_at(const model_config *c, int il, const double *mu, const double *st, const int *sel,
                          const int *fsel, int t, double *out) {
    const int dk = c->head_dim;
    double z[1024] = {0}, a[1024], b[1024];
    int any[512];
    for (int j = 0; j < c->n_rot / 2; j++) {
        int i0, i1;
        double w;
        drift_pair(c, il, j, &i0, &i1, &w);
        any[j] = sel[j] || (fsel && fsel[j]);
        if (any[j]) z[i0] = mu[i0], z[i1] = mu[i1];
    }
    drift_turn(c, il, z, (double)(t / DRIFT_BLOCK * DRIFT_BLOCK) + DRIFT_BLOCK / 2.0, 1, sel, a);
    drift_turn(c, il, z, t, 1, fsel ? fsel : sel, b);
    for (int j = 0; j < c->n_rot / 2; j++) {
        int i0, i1;
        double w;
        drift_pair(c, il, j, &i0, &i1, &w);
        if (fsel && fsel[j]) a[i0] = b[i0], a[i1] = b[i1];
    }
    for (int i = 0; i < dk; i++) out[i] = a[i] + st[i];
}

/* The static part the turned pairs (any) leave: the frozen mean less what their means give on
 * average over the fitted positions (the frozen mean itself on the other pairs). */
static void drift_static(const model_config *c, int il, const double *fr, const double *mu, const int *any, int fit,
                         double *st) {
    const int dk = c->head_dim;
    double z[1024] = {0};
    for (int i = 0; i < dk; i++) st[i] = fr[i];
    for (int j = 0; j < c->n_rot / 2; j++) {
        int i0, i1;
        double w;
        drift_pair(c, il, j, &i0, &i1, &w);
        if (any[j]) z[i0] = mu[i0], z[i1] = mu[i1];
    }
    for (int t = 0; t < fit; t++) {
        double m[1024];
        drift_turn(c, il, z, t, 1, any, m);
        for (int i = 0; i < dk; i++) st[i] -= m[i] / fit;
    }
}

static void print_lag(const model_config *c, const stats *s) {
    const int dk = s->dk, dv = s->dv, n = s->n_ctx, fit = 512 < n / 2 ? 512 : n / 2, l0 = n / 2;
    printf("\nlag-1 prediction gain on [%d, %d): keys (less the RoPE mean) as they are / turned by one position; values (less their mean)\nlayer   keys  turned  scaled  values\n", l0, n);
    double gk = 0, gr = 0, gv = 0, gs = 0;
    const int rot = c->n_rot == dk && dk % 2 == 0; /* else the keys' plain mean, nothing turned */
    for (int il = 0; il < s->n_layer; il++) {
        double lk = 0, lr = 0, lv = 0, ls = 0;
        for (int h = 0; h < s->n_kv; h++) {
            const float *K = s->keys + ((size_t)il * s->n_kv + h) * (size_t)n * dk;
            const float *V = s->vals + ((size_t)il * s->n_kv + h) * (size_t)n * dv;
            double mu[1024] = {0}, u[1024], vm[1024] = {0};
            for (int t = 0; t < fit; t++) {
                double row[1024];
                for (int i = 0; i < dk; i++) row[i] = K[(size_t)t * dk + i];
                if (rot) drift_turn(c, il, row, t, -1, NULL, u);
                for (int i = 0; i < dk; i++) mu[i] += (rot ? u[i] : row[i]) / fit;
                for (int i = 0; i < dv; i++) vm[i] += V[(size_t)t * dv + i] / fit;
            }
            /* the key scale's weights s_i² (doc/kvcache.md §2, "Key scale": channel energies
             * normalized to mean 1, +0.01, exponent 1/4 on a / b), from the whole text's statistics */
            const size_t o = ((size_t)il * s->n_kv + h) * (size_t)dk;
            double wa = 0, wb = 0, sw[1024];
            for (int i = 0; i < dk; i++) {
                double m1 = s->k_sum[o + i] / s->n_tok;
                wa += s->q_sq[o + i] / s->n_tok / dk, wb += (s->k_sq[o + i] / s->n_tok - m1 * m1) / dk;
            }
            for (int i = 0; i < dk; i++) {
                double m1 = s->k_sum[o + i] / s->n_tok, a = s->q_sq[o + i] / s->n_tok / wa,
                       b = (s->k_sq[o + i] / s->n_tok - m1 * m1) / wb;
                sw[i] = sqrt((a + 0.01) / (fmax(b, 0.0) + 0.01));
            }
            double xx = 0, xp = 0, pp = 0, xr = 0, rr = 0, vv = 0, vp = 0, v2 = 0, wx = 0, wxp = 0, wpp = 0;
            double prev[1024], cur[1024], turned[1024], mt[1024];
            for (int t = l0 - 1; t < n; t++) {
                if (rot) drift_turn(c, il, mu, t, 1, NULL, mt);
                for (int i = 0; i < dk; i++) cur[i] = K[(size_t)t * dk + i] - (rot ? mt[i] : mu[i]);
                if (t >= l0) {
                    if (rot) drift_turn(c, il, prev, 1, 1, NULL, turned);
                    else memcpy(turned, prev, sizeof(double) * (size_t)dk);
                    for (int i = 0; i < dk; i++) {
                        xx += cur[i] * cur[i], xp += cur[i] * prev[i], pp += prev[i] * prev[i];
                        xr += cur[i] * turned[i], rr += turned[i] * turned[i];
                        wx += sw[i] * cur[i] * cur[i], wxp += sw[i] * cur[i] * prev[i], wpp += sw[i] * prev[i] * prev[i];
                    }
                    for (int i = 0; i < dv; i++) {
                        double a = V[(size_t)t * dv + i] - vm[i], b = V[(size_t)(t - 1) * dv + i] - vm[i];
                        vv += a * a, vp += a * b, v2 += b * b;
                    }
                }
                for (int i = 0; i < dk; i++) prev[i] = cur[i];
            }
            double rk = pp > 0 ? xp / pp : 0, rt = rr > 0 ? xr / rr : 0, rv = v2 > 0 ? vp / v2 : 0;
            if (xx <= 0 || vv <= 0) continue; /* a silent head: nothing to predict */
            lk += log(xx / (xx - rk * xp)) / s->n_kv;
            lr += log(xx / (xx - rt * xr)) / s->n_kv;
            lv += log(vv / (vv - rv * vp)) / s->n_kv;
            double rw = wpp > 0 ? wxp / wpp : 0;
            ls += log(wx / (wx - rw * wxp)) / s->n_kv;
        }
        printf("%5d  %.3f  %.3f  %.3f  %.3f\n", il, exp(lk), exp(lr), exp(ls), exp(lv));
        gk += lk / s->n_layer, gr += lr / s->n_layer, gv += lv / s->n_layer, gs += ls / s->n_layer;
    }
    printf("geo mean  %.3f  %.3f  %.3f  %.3f\n", exp(gk), exp(gr), exp(gs), exp(gv));
}

static void print_mean_drift(const model_config *c, const stats *s) {
    const int dk = s->dk, n = s->n_ctx, fit = n / 2 < DRIFT_FIT ? n / 2 : DRIFT_FIT, l0 = n / 2, half = c->n_rot / 2;
    printf("\nkey energy left at positions [%d, %d) by each key mean (fitted on [0, %d)):\n", l0, n, fit);
    printf("layer  frozen   late    rope  block64   fast  (fast pairs)\n");
    double T[6] = {0};
    for (int il = 0; il < s->n_layer; il++) {
        double L[6] = {0};
        int rot = c->n_rot == dk && dk % 2 == 0, sel[512] = {0}, fsel[512] = {0}, any[512], nf = 0;
        double *mus = malloc(sizeof(double) * (size_t)s->n_kv * dk), *frs = malloc(sizeof(double) * (size_t)s->n_kv * dk);
        double gain[512] = {0}, energy = 0.0;
        for (int j = 0; rot && j < half; j++) {
            int i0, i1;
            double w;
            drift_pair(c, il, j, &i0, &i1, &w);
            sel[j] = w * DRIFT_BLOCK <= 2.0;
        }
        /* every head's frozen and pre-RoPE means, and each fast pair's gain (the cache's rule) */
        for (int h = 0; h < s->n_kv; h++) {
            const float *K = s->keys + ((size_t)il * s->n_kv + h) * (size_t)n * dk;
            double *fr = frs + (size_t)h * dk, *mu = mus + (size_t)h * dk, row[1024], u[1024];
            for (int i = 0; i < dk; i++) fr[i] = mu[i] = 0.0;
            for (int t = 0; t < fit; t++) {
                for (int i = 0; i < dk; i++) row[i] = K[(size_t)t * dk + i], fr[i] += row[i] / fit, energy += row[i] * row[i] / fit;
                if (rot) drift_turn(c, il, row, t, -1, NULL, u);
                for (int i = 0; rot && i < dk; i++) mu[i] += u[i] / fit;
            }
            for (int j = 0; rot && j < half; j++) {
                int i0, i1;
                double w;
                drift_pair(c, il, j, &i0, &i1, &w);
                gain[j] += mu[i0] * mu[i0] + mu[i1] * mu[i1] - fr[i0] * fr[i0] - fr[i1] * fr[i1];
            }
        }
        while (rot && nf < 8) {
            int best = -1;
            for (int j = 0; j < half; j++)
                if (!sel[j] && !fsel[j] && gain[j] > 0.005 * energy && (best < 0 || gain[j] > gain[best])) best = j;
            if (best < 0) break;
            fsel[best] = 1, nf++;
        }
        for (int j = 0; j < half; j++) any[j] = sel[j] || fsel[j];
        for (int h = 0; h < s->n_kv; h++) {
            const float *K = s->keys + ((size_t)il * s->n_kv + h) * (size_t)n * dk;
            const double *fr = frs + (size_t)h * dk, *mu = mus + (size_t)h * dk;
            double late[1024] = {0}, st[1024], stf[1024];
            if (rot) {
                drift_static(c, il, fr, mu, sel, fit, st);
                drift_static(c, il, fr, mu, any, fit, stf);
            }
            for (int t = l0; t < n; t++)
                for (int i = 0; i < dk; i++) late[i] += K[(size_t)t * dk + i] / (n - l0);
            for (int t = l0; t < n; t++) {
                double mr[1024], mb[1024], mf[1024];
                if (rot) {
                    drift_turn(c, il, mu, t, 1, NULL, mr);
                    drift_mean_at(c, il, mu, st, sel, NULL, t, mb);
                    drift_mean_at(c, il, mu, stf, sel, fsel, t, mf);
                }
                for (int i = 0; i < dk; i++) {
                    double k = K[(size_t)t * dk + i];
                    L[0] += k * k;
                    L[1] += (k - fr[i]) * (k - fr[i]);
                    L[2] += (k - late[i]) * (k - late[i]);
                    if (rot)
                        L[3] += (k - mr[i]) * (k - mr[i]), L[4] += (k - mb[i]) * (k - mb[i]), L[5] += (k - mf[i]) * (k - mf[i]);
                }
            }
        }
        free(mus), free(frs);
        for (int i = 0; i < 6; i++) T[i] += L[i];
        if (rot) printf("%5d  %6.3f  %6.3f  %6.3f  %6.3f  %6.3f  %d\n", il, L[1] / L[0], L[2] / L[0], L[3] / L[0], L[4] / L[0], L[5] / L[0], nf);
        else printf("%5d  %6.3f  %6.3f       -       -       -\n", il, L[1] / L[0], L[2] / L[0]);
    }
    printf("all    %6.3f  %6.3f  %6.3f  %6.3f  %6.3f\n", T[1] / T[0], T[2] / T[0], T[3] / T[0], T[4] / T[0], T[5] / T[0]);
}

int main(int argc, char **argv) {
    const char *model_path = "models/gemma3-270m-q4_k_m.gguf", *text = NULL, *ids_path = NULL;
    int n_ctx = 2048, threads = 2, drift = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(a, "-m")) model_path = v, i++;
        else if (v && !strcmp(a, "-f")) text = v, i++;
        else if (v && !strcmp(a, "--ids")) ids_path = v, i++;
        else if (v && !strcmp(a, "-c")) n_ctx = atoi(v), i++;
        else if (v && !strcmp(a, "-t")) threads = atoi(v), i++;
        else if (!strcmp(a, "--mean-drift")) drift = 1;
        else {
            fprintf(stderr, "usage: %s [-m model] (-f text | --ids ids.i32) [-c tokens] [-t threads] [--mean-drift]\n", argv[0]);
            return 2;
        }
    }
    if ((text == NULL) == (ids_path == NULL) || n_ctx < 1 || threads < 1 || (drift && n_ctx < 128)) {
        fprintf(stderr, "%s: give one of -f and --ids; -c, -t >= 1 (--mean-drift: -c >= 128)\n", argv[0]);
        return 2;
    }
    fixture f;
    char err[300];
    const model_params p = {n_ctx, 512, threads, 0, NULL};
    model_status ms = fixture_open(model_path, &p, &f, err, sizeof err);
    if (ms != MODEL_OK) {
        fprintf(stderr, "%s: %s (%s)\n", model_path, err, model_status_name(ms));
        return 1;
    }
    model *m = f.m;
    model_context *x = f.x;
    size_t n = 0;
    int32_t *ids = read_tokens(m, ids_path ? ids_path : text, ids_path != NULL, &n);
    if (ids == NULL || n < (size_t)n_ctx) {
        fprintf(stderr, "%s: cannot read %d tokens\n", ids_path ? ids_path : text, n_ctx);
        return 1;
    }
    const model_config *c = model_get_config(m);
    stats s = {c->n_head_kv, c->n_head, c->head_dim, c->head_dim_v, c->n_layer, NULL, NULL, n_ctx, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0};
    if (drift && (c->head_dim > 1024 || c->head_dim_v > 1024)) {
        fprintf(stderr, "--mean-drift: head_dim %d / %d > 1024\n", c->head_dim, c->head_dim_v);
        return 1;
    }
    if (drift && (!(s.keys = malloc(sizeof(float) * (size_t)c->n_layer * (size_t)c->n_head_kv * (size_t)n_ctx * (size_t)c->head_dim)) ||
                  !(s.vals = malloc(sizeof(float) * (size_t)c->n_layer * (size_t)c->n_head_kv * (size_t)n_ctx * (size_t)c->head_dim_v)))) {
        fprintf(stderr, "--mean-drift: out of memory\n");
        free(s.keys), free(s.vals);
        return 1;
    }
    const size_t lh = (size_t)c->n_layer * (size_t)c->n_head_kv;
    s.k_sum = calloc(lh * (size_t)s.dk, sizeof(double));
    s.k_sq = calloc(lh * (size_t)s.dk, sizeof(double));
    s.q_sq = calloc(lh * (size_t)s.dk, sizeof(double));
    s.k_norm = calloc(lh, sizeof(double));
    s.k_norm_sq = calloc(lh, sizeof(double));
    s.v_norm = calloc(lh, sizeof(double));
    s.v_sum = calloc(lh * (size_t)s.dv, sizeof(double));
    s.v_sq = calloc(lh * (size_t)s.dv, sizeof(double));
    s.v_norm_sq = calloc(lh, sizeof(double));
    context_set_attn_hook(x, hook, &s);
    for (int p0 = 0; p0 < n_ctx && ms == MODEL_OK; p0 += 512)
        ms = context_forward(x, ids + p0, n_ctx - p0 < 512 ? n_ctx - p0 : 512, p0, 0, NULL);
    if (ms != MODEL_OK) {
        fprintf(stderr, "forward: %s\n", context_last_error(x));
        return 1;
    }
    printf("%s: %ld tokens, %d layers, %d q heads on %d kv heads, head_dim %d\n", model_path, s.n_tok, s.n_layer,
           s.n_q, s.n_kv, s.dk);
    printf("layer  |mean|/rms        kloud           qloud           |k|     k cv   |v|     gain  v|mean|/rms    vgain\n");
    const double N = (double)s.n_tok;
    double all_mr = 0, all_kl = 0, all_ql = 0, all_gain = 0, all_vr = 0, all_vgain = 0;
    for (int il = 0; il < s.n_layer; il++) {
        double mr[2] = {1e9, 0}, kl[2] = {1e9, 0}, ql[2] = {1e9, 0}, kn = 0, cv = 0, vn = 0, gain = 0, vgain = 0;
        double vr[2] = {1e9, 0};
        for (int h = 0; h < s.n_kv; h++) {
            const size_t o = ((size_t)il * s.n_kv + h) * (size_t)s.dk;
            double mean_sq = 0, e_sum = 0, e_max = 0, q_sum = 0, q_max = 0, sa = 0, sb = 0, sab = 0;
            for (int i = 0; i < s.dk; i++) {
                double mu = s.k_sum[o + i] / N, e = s.k_sq[o + i] / N - mu * mu, a = s.q_sq[o + i] / N;
                mean_sq += mu * mu;
                e_sum += e, q_sum += a;
                if (e > e_max) e_max = e;
                if (a > q_max) q_max = a;
                sa += a, sb += e, sab += sqrt(a * (e > 0 ? e : 0));
            }
            const size_t l = (size_t)il * s.n_kv + h;
            double vmean_sq = 0, vc = 0, vrc = 0;
            for (int i = 0; i < s.dv; i++) {
                double mu = s.v_sum[l * (size_t)s.dv + i] / N;
                vmean_sq += mu * mu;
                vc += s.v_sq[l * (size_t)s.dv + i] / N, vrc += sqrt(s.v_sq[l * (size_t)s.dv + i] / N);
            }
            vgain += log(s.dv * vc / (vrc * vrc)) / s.n_kv;
            double vrat = sqrt(vmean_sq / (s.v_norm_sq[l] / N));
            vr[0] = fmin(vr[0], vrat), vr[1] = fmax(vr[1], vrat);
            all_vr += vrat;
            const double rms = sqrt(s.k_norm_sq[l] / N), mkn = s.k_norm[l] / N;
            double r = sqrt(mean_sq) / rms, k1 = e_max / (e_sum / s.dk), q1 = q_max / (q_sum / s.dk);
            mr[0] = fmin(mr[0], r), mr[1] = fmax(mr[1], r);
            kl[0] = fmin(kl[0], k1), kl[1] = fmax(kl[1], k1);
            ql[0] = fmin(ql[0], q1), ql[1] = fmax(ql[1], q1);
            kn += mkn / s.n_kv;
            cv += sqrt(fmax(0, s.k_norm_sq[l] / N - mkn * mkn)) / mkn / s.n_kv;
            vn += s.v_norm[l] / N / s.n_kv;
            gain += log(sa * sb / (sab * sab)) / s.n_kv;
            all_mr += r, all_kl += log(k1), all_ql += log(q1);
        }
        all_gain += gain, all_vgain += vgain;
        printf("%5d  %.3f .. %.3f  %6.1f .. %5.1f  %6.1f .. %5.1f  %6.2f  %.3f  %6.2f  %.2f  %.3f .. %.3f  %.2f\n", il,
               mr[0], mr[1], kl[0], kl[1], ql[0], ql[1], kn, cv, vn, exp(gain), vr[0], vr[1], exp(vgain));
    }
    const double nh = (double)s.n_layer * s.n_kv;
    printf("mean over heads: |mean|/rms %.3f, kloud (geo) %.1f, qloud (geo) %.1f, gain (geo) %.2f, value |mean|/rms "
           "%.3f, vgain (geo) %.2f\n", all_mr / nh, exp(all_kl / nh), exp(all_ql / nh), exp(all_gain / s.n_layer), all_vr / nh,
           exp(all_vgain / s.n_layer));
    if (s.keys) print_mean_drift(c, &s), print_lag(c, &s);
    fixture_close(&f);
    free(ids);
    free(s.keys), free(s.vals);
    free(s.k_sum), free(s.k_sq), free(s.q_sq), free(s.k_norm), free(s.k_norm_sq), free(s.v_norm);
    free(s.v_sum), free(s.v_norm_sq), free(s.v_sq);
    return 0;
}
