/*
 * tq attn-bench: decode (or prefill) attention over a KV cache of --ctx tokens, per scheme,
 * against the f16 scheme measured in the same run.
 *
 * Data (from --seed, the same for every scheme): keys N(0, 1) per coordinate with four loud
 * channels per head (×6, as the outlier channels of real k_proj outputs), values and queries
 * N(0, 1). Every layer of the --layers L caches holds the same vectors in its own memory, so
 * a step over L layers streams L times the bytes of one (beyond the CPU caches for large L).
 * --from-model TEXT: instead, the real K/V and queries of every attention layer of the model
 * (-m, default the tools' model) reading the first --ctx tokens of TEXT, recorded from the
 * engine (tools/attn_record.h); each layer of the cache holds its own layer's vectors and
 * attends with that layer's scale and sliding window.
 * Quality: the output against exact attention in double over the fp32 vectors (before any
 * fp16 or quantization), as relative L2 and max |error|: of layer 0 for random data (every
 * layer holds the same), over every layer for recorded data. Speed: best of the timed
 * repetitions of one step (all L layers), after a warm-up.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_record.h"
#include "commands.h"
#include "common.h"
#include "kv_auto.h"
#include "model_session.h"
#include "options.h"
#include "turboquant.h"

#define MAX_SCHEMES 16
#define CHUNK 256

typedef struct bench {
    int D, H, G, L, T;
    size_t N, Q;
    uint64_t seed;
    const attn_record *rec; /* recorded data, or NULL: random */
    long rope_base;         /* random data: > 0, the cache's key mean turns with RoPE angles
                               base^(−2j/D) (adjacent pairs); recorded data: 0 keeps it fixed */
} bench;

/* Keys, values of tokens [t0, t0 + n) (n, G, D) from a generator positioned at t0 = 0 and
 * advanced chunk by chunk. */
static void gen_chunk(tool_rng *r, const bench *b, size_t n, float *k, float *v) {
    size_t row = (size_t)b->G * (size_t)b->D;
    for (size_t i = 0; i < n * row; i++) {
        int c = (int)(i % (size_t)b->D);
        float x = (float)tool_rng_gauss(r);
        int loud = c == 3 || c == b->D / 4 + 1 || c == b->D / 2 + 5 || c == b->D - 7;
        k[i] = loud ? 6.0f * x + 2.0f : x;
    }
    for (size_t i = 0; i < n * row; i++) v[i] = (float)tool_rng_gauss(r);
}

/* Keys, values of tokens [t0, t0 + n) of layer l: generated (the generator advanced chunk by
 * chunk from t0 = 0; every layer the same) or recorded. */
static void get_chunk(tool_rng *r, const bench *b, int l, size_t t0, size_t n, float *k, float *v) {
    if (b->rec == NULL) {
        gen_chunk(r, b, n, k, v);
        return;
    }
    size_t row = (size_t)b->G * (size_t)b->D;
    memcpy(k, b->rec->layers[l].k + t0 * row, sizeof(float) * n * row);
    memcpy(v, b->rec->layers[l].v + t0 * row, sizeof(float) * n * row);
}

/* Exact attention of the Q queries (positions N − Q + i, causal, sliding window and scale of
 * p) over the fp32 vectors of layer l, in double with an online softmax, streaming the data
 * chunk by chunk. ref: (Q, H, D). */
static int exact_attention(const bench *b, int layer, const float *q, const tq_attn_params *p,
                           double *ref) {
    double scale = p->scale;
    size_t win = (size_t)p->sliding_window;
    size_t row = (size_t)b->G * (size_t)b->D, nr = b->Q * (size_t)b->H;
    float *k = malloc(sizeof(float) * CHUNK * row), *v = malloc(sizeof(float) * CHUNK * row);
    double *m = malloc(sizeof(double) * nr), *l = malloc(sizeof(double) * nr);
    if (!k || !v || !m || !l) return 0;
    for (size_t r = 0; r < nr; r++) m[r] = -INFINITY, l[r] = 0.0;
    memset(ref, 0, sizeof(double) * nr * (size_t)b->D);
    tool_rng rng;
    tool_rng_seed(&rng, b->seed);
    int grp = b->H / b->G;
    for (size_t t0 = 0; t0 < b->N; t0 += CHUNK) {
        size_t n = b->N - t0 < CHUNK ? b->N - t0 : CHUNK;
        get_chunk(&rng, b, layer, t0, n, k, v);
        for (size_t i = 0; i < b->Q; i++) {
            size_t pos = b->N - b->Q + i;
            for (int h = 0; h < b->H; h++) {
                size_t r = i * (size_t)b->H + (size_t)h;
                const float *qv = q + r * (size_t)b->D;
                double *acc = ref + r * (size_t)b->D;
                int g = h / grp;
                for (size_t t = 0; t < n && t0 + t <= pos; t++) {
                    if (win && t0 + t + win <= pos) continue;
                    const float *kv = k + (t * (size_t)b->G + (size_t)g) * (size_t)b->D;
                    const float *vv = v + (t * (size_t)b->G + (size_t)g) * (size_t)b->D;
                    double s = 0.0;
                    for (int j = 0; j < b->D; j++) s += (double)qv[j] * kv[j];
                    s *= scale;
                    if (p->softcap > 0.0f) s = p->softcap * tanh(s / p->softcap);
                    if (s > m[r]) {
                        double f = exp(m[r] - s);
                        l[r] *= f;
                        for (int j = 0; j < b->D; j++) acc[j] *= f;
                        m[r] = s;
                    }
                    double e = exp(s - m[r]);
                    l[r] += e;
                    for (int j = 0; j < b->D; j++) acc[j] += e * vv[j];
                }
            }
        }
    }
    for (size_t r = 0; r < nr; r++)
        for (int j = 0; j < b->D; j++) ref[r * (size_t)b->D + (size_t)j] /= l[r];
    free(k), free(v), free(m), free(l);
    return 1;
}

/* Builds the L-layer cache of one scheme holding the benchmark data, compressed as after the
 * first decode step (layer_schemes: auto:B's per-layer schemes, or NULL). Recorded data also hands the cache the queries of the first positions,
 * as the engine does before each append (random data: none, so the key scale comes from the
 * keys alone). */
static tq_status build_cache(const bench *b, const tq_kv_scheme *s, const tq_kv_layer_scheme *layer_schemes,
                             tq_threadpool *pool, tq_kv_cache **out) {
    tq_kv_cache_config cfg;
    tq_kv_cache_config_init(&cfg, b->L, b->G, b->D, b->D);
    cfg.scheme = *s;
    cfg.layer_schemes = layer_schemes; /* auto:B: each layer's own (NULL: the scheme's) */
    cfg.reserve_tokens = b->N;
    float *freqs = NULL;
    if (b->rec != NULL) { /* as the engine's cache */
        cfg.key_rope_pairs = b->rec->rope_pairs;
        if (b->rope_base) cfg.key_rope_freqs = b->rec->rope_freqs;
    } else if (b->rope_base > 0 && b->D % 2 == 0) {
        freqs = malloc(sizeof *freqs * (size_t)b->L * (size_t)(b->D / 2));
        if (!freqs) return TQ_ERR_NOMEM;
        for (int l = 0; l < b->L; l++)
            for (int j = 0; j < b->D / 2; j++)
                freqs[(size_t)l * (size_t)(b->D / 2) + (size_t)j] = (float)pow((double)b->rope_base, -2.0 * j / b->D);
        cfg.key_rope_pairs = TQ_ROPE_PAIRS_ADJACENT;
        cfg.key_rope_freqs = freqs;
    }
    tq_status st = tq_kv_cache_create(out, &cfg);
    free(freqs); /* copied by create */
    if (st) return st;
    size_t row = (size_t)b->G * (size_t)b->D;
    float *k = malloc(sizeof(float) * CHUNK * row), *v = malloc(sizeof(float) * CHUNK * row);
    if (!k || !v) st = TQ_ERR_NOMEM;
    tool_rng rng;
    tool_rng_seed(&rng, b->seed);
    for (size_t t0 = 0; !st && t0 < b->N; t0 += CHUNK) {
        size_t n = b->N - t0 < CHUNK ? b->N - t0 : CHUNK;
        if (b->rec == NULL) gen_chunk(&rng, b, n, k, v);
        for (int l = 0; !st && l < b->L; l++) {
            if (b->rec != NULL) {
                get_chunk(&rng, b, l, t0, n, k, v);
                size_t nf = b->rec->n_first > t0 ? b->rec->n_first - t0 : 0;
                if (nf > n) nf = n;
                if (nf)
                    st = tq_kv_cache_observe_queries(
                        *out, l, b->rec->layers[l].q_first + t0 * (size_t)b->H * (size_t)b->D, b->H, nf);
            }
            if (!st) st = tq_kv_cache_append(*out, l, k, v, n);
        }
    }
    if (!st) st = tq_kv_cache_compress_pool(*out, -1, pool);
    free(k), free(v);
    if (st) {
        tq_kv_cache_free(*out);
        *out = NULL;
    }
    return st;
}

typedef struct result {
    char scheme[64];
    double us, bytes_per_token, ratio, rel_l2, max_abs, gbs;
} result;

int cmd_attn_bench(int argc, char **argv) {
    /* 0 for --head-dim, --q-heads, --kv-heads and --layers: not given (the ranges start at 1
     * or more); --from-model takes them from the model, else the defaults below. */
    long D = 0, H = 0, G = 0, N = 4096, L = 0, T = 1, Q = 1, reps = 0, rope_base = -1,
         calib = KV_AUTO_DEFAULT_TOKENS;
    uint64_t seed = 1;
    int json = 0;
    const char *scheme_list = "f16,q8_0,q4_0,turbo3,turbo4";
    const char *from_model = NULL, *model_path = NULL;
    _Static_assert(MAX_SCHEMES == 16, "the --scheme help says at most 15 besides f16");
    const tool_opt opts[] = {
        {OPT_INT("--head-dim", "D", &D, TQ_MIN_DIM, TQ_MAX_DIM,
                 "head dim of keys and values, 2..1024 (default 128)")},
        {OPT_INT("--q-heads", "H", &H, 1, 1024,
                 "query heads, 1..1024, a multiple of --kv-heads (default 32)")},
        {OPT_INT("--kv-heads", "G", &G, 1, 1024, "KV heads, 1..1024 (default 8)")},
        {OPT_INT("--ctx", "N", &N, 1, 1L << 24, "tokens in the cache, 1..16777216 (default 4096)")},
        {OPT_STRING("--scheme", "LIST", &scheme_list,
                    "KV schemes, comma-separated, none empty (default\n"
                    "f16,q8_0,q4_0,turbo3,turbo4; at most 15 besides f16); f16 is always\n"
                    "measured, as the baseline; auto:B[:options] (with --from-model):\n"
                    "each layer's widths from a calibration on the model's built-in\n"
                    "text, as tq perplexity chooses them (printed to stderr)")},
        {OPT_INT("--layers", "L", &L, 1, 4096,
                 "independent caches cycled per step, 1..4096 (default 1)")},
        {OPT_INT("--threads", "T", &T, 1, 256, "attention threads, 1..256 (default 1)")},
        {OPT_INT("--queries", "Q", &Q, 1, 4096,
                 "query positions per call, 1..4096: 1 = decode (default), >1 =\nprefill chunk")},
        {OPT_INT("--reps", "R", &reps, 1, 100000,
                 "timed repetitions, 1..100000 (default: about 1 s of work, 3..200)")},
        {OPT_U64("--seed", "S", &seed, "data seed, 0..2^64-1 (default 1)")},
        {OPT_INT("--calib-tokens", "N", &calib, KV_AUTO_MIN_TOKENS, 1L << 20,
                 "auto:B calibrates on at most N tokens of the built-in text (default\n128)")},
        {OPT_FLAG("--json", &json, "one JSON object instead of a table")},
        {OPT_INT("--rope-base", "B", &rope_base, 0, 100000000,
                 "the TurboQuant key mean turns with RoPE angles B^(-2j/D)\n"
                 "(random data; default 0: a fixed mean); with --from-model\n"
                 "the model's angles unless B is 0 (default: the model's)")},
        {OPT_STRING("--from-model", "TEXT", &from_model,
                    "real K/V and queries: every attention layer of the model\n"
                    "reading the first --ctx tokens of TEXT (head dims, heads and\n"
                    "layers come from the model; --queries last positions)")},
        {OPT_STRING("-m", "MODEL", &model_path,
                    "the GGUF model (a path or a name: gemma3-270m,\n"
                    "smollm2-135m) for --from-model (default: $TQ_MODEL, then\n"
                    "gemma3-270m)")},
    };
    const tool_cmd cmd = {
        .name = "attn-bench",
        .synopsis =
            "usage: tq attn-bench [--head-dim D] [--q-heads H] [--kv-heads G] [--ctx N]\n"
            "                     [--scheme S[,S...]] [--layers L] [--threads T] [--queries Q]\n"
            "                     [--reps R] [--seed S] [--json] [--rope-base B]\n"
            "                     [--from-model TEXT [-m MODEL]]\n",
        .opts = opts, .n_opts = OPT_COUNT(opts),
        .epilogue =
            "\nNumbers are whole, in the ranges above (no sign, space or trailing characters);\n"
            "anything else is a usage error (exit 2). The memory a run needs (the KV cache of\n"
            "the largest scheme as it is built, fp16 staging included, queries, outputs, the\n"
            "exact reference, the attention workspace and, with --from-model, the recorded\n"
            "K/V) is computed first; a run that needs more than the machine's physical memory\n"
            "(or $TQ_MEM_LIMIT_GIB GiB when set) is refused with the figure (exit 2).\n",
    };
    int rc;
    if (!tool_opts_parse(&cmd, argc, argv, &rc)) return rc;
    if (from_model && (D || H || G || L)) {
        fprintf(stderr, "tq attn-bench: --from-model takes the head dims, heads and layers from "
                        "the model: drop --head-dim, --q-heads, --kv-heads and --layers\n");
        return TQ_EXIT_USAGE;
    }
    if (!from_model) {
        D = D ? D : 128, H = H ? H : 32, G = G ? G : 8, L = L ? L : 1;
        if (H % G) {
            fprintf(stderr, "tq attn-bench: --q-heads %ld is not a multiple of --kv-heads %ld\n", H, G);
            return TQ_EXIT_USAGE;
        }
    }
    if (Q > N) {
        fprintf(stderr, "tq attn-bench: --queries %ld exceeds --ctx %ld\n", Q, N);
        return TQ_EXIT_USAGE;
    }
    if (model_path && !from_model) {
        fprintf(stderr, "tq attn-bench: -m needs --from-model\n");
        return TQ_EXIT_USAGE;
    }
    attn_record rec;
    memset(&rec, 0, sizeof rec);
    if (from_model) {
        rc = attn_record_from_model("attn-bench", model_path, from_model, (size_t)N, (size_t)Q,
                                    (int)T, &rec);
        if (rc) return rc;
        if (rec.dk != rec.dv) {
            fprintf(stderr, "tq attn-bench: the model's K and V head dims differ (%d, %d)\n",
                    rec.dk, rec.dv);
            attn_record_free(&rec);
            return 1;
        }
        D = rec.dk, H = rec.n_q_heads, G = rec.n_kv_heads, L = rec.n_layers;
    }
    if (rope_base > 0 && D % 2) {
        fprintf(stderr, "tq attn-bench: --rope-base needs an even --head-dim\n");
        attn_record_free(&rec);
        return TQ_EXIT_USAGE;
    }
    bench b = {(int)D, (int)H, (int)G, (int)L, (int)T, (size_t)N, (size_t)Q, seed,
               from_model ? &rec : NULL, rope_base < 0 ? (from_model ? 1 : 0) : rope_base};
    int n_qual = from_model ? b.L : 1; /* layers whose output is checked */

    /* Parse and validate every scheme first; f16 goes first as the baseline. */
    char names[MAX_SCHEMES][64];
    tq_kv_scheme schemes[MAX_SCHEMES];
    /* auto:B (--from-model): turboB's scheme, and the layers' own from the calibration */
    session_scheme autos[MAX_SCHEMES];
    int auto_of[MAX_SCHEMES] = {0}, n_auto = 0; /* auto_of[s]: 1 + its index in autos, or 0 */
    tq_kv_layer_scheme *lsch[MAX_SCHEMES] = {NULL};
    int n_s = 1;
    strcpy(names[0], "f16");
    tq_kv_scheme_parse("f16", &schemes[0], NULL, 0);
    for (const char *p = scheme_list;;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char err[2048];
        if (n == 0)
            return tool_opts_usage_error(&cmd, "--scheme '%s': %s", scheme_list,
                                         *scheme_list ? "an empty item (two commas, or one at an end)"
                                                      : "an empty list");
        if (n >= sizeof names[0]) {
            fprintf(stderr, "tq attn-bench: --scheme: '%.*s' is longer than %zu characters\n",
                    (int)n, p, sizeof names[0] - 1);
            return TQ_EXIT_USAGE;
        }
        char name[64];
        memcpy(name, p, n);
        name[n] = 0;
        p += n + (e ? 1 : 0);
        if (!strcmp(name, "f16")) {
            if (!e) break;
            continue;
        }
        if (n_s >= MAX_SCHEMES) {
            fprintf(stderr, "tq attn-bench: --scheme: more than %d schemes besides f16\n",
                    MAX_SCHEMES - 1);
            return TQ_EXIT_USAGE;
        }
        session_scheme ss; /* the model commands' parse: a scheme, or auto:B as turboB */
        if (session_scheme_parse(name, &ss, err, sizeof err)) {
            fprintf(stderr, "tq attn-bench: %s", err);
            return TQ_EXIT_USAGE;
        }
        if (ss.is_auto) { /* per-layer widths from a calibration: the model runs it */
            if (!from_model) {
                fprintf(stderr, "tq attn-bench: --scheme %s: auto:B needs --from-model (its calibration runs the "
                                "model)\n", name);
                return TQ_EXIT_USAGE;
            }
            autos[n_auto] = ss;
            auto_of[n_s] = ++n_auto;
        }
        schemes[n_s] = ss.scheme; /* auto:B: turboB[:options], checked below */
        size_t kb, vb;
        tq_status st = tq_kv_layer_scheme_bytes(&schemes[n_s].layer, (int)D, (int)D, &kb, &vb);
        if (!st && schemes[n_s].layer.key_format == TQ_KV_TURBO) {
            /* Fractional bits must split the head dim: creating the codec is the check. */
            tq_kv_cache_config cfg;
            tq_kv_cache *c;
            tq_kv_cache_config_init(&cfg, 1, 1, (int)D, (int)D);
            cfg.scheme = schemes[n_s];
            st = tq_kv_cache_create(&c, &cfg);
            if (!st) tq_kv_cache_free(c);
        }
        if (st) {
            fprintf(stderr, "tq attn-bench: scheme %s at head dim %ld: %s (%s)\n", name, D,
                    tq_error_message(st), tq_error_name(st));
            return TQ_EXIT_USAGE;
        }
        strcpy(names[n_s++], name);
        if (!e) break;
    }

    /* auto:B: each layer's scheme from a calibration on the model (printed to stderr). */
    if (n_auto) {
        tq_kv_layer_scheme *dst[MAX_SCHEMES];
        for (int s = 1; s < n_s; s++)
            if (auto_of[s] && !(lsch[s] = dst[auto_of[s] - 1] = malloc(sizeof *lsch[s] * (size_t)b.L))) {
                fprintf(stderr, "tq attn-bench: out of memory\n");
                rc = 1;
            }
        if (!rc) rc = attn_record_auto_layers("attn-bench", model_path, (int)T, (int)calib, autos, n_auto, b.L, dst);
        if (rc) {
            for (int s = 0; s < n_s; s++) free(lsch[s]);
            attn_record_free(&rec);
            return rc;
        }
    }

    /* What the run will hold at its peak, before any of it is allocated: one scheme's cache at
     * a time (the largest; raw fp16 while it is filled, as prefill_raw keeps it, plus the
     * compressed pages), queries, outputs, the exact reference, the chunk buffers, the
     * attention workspace, and the recorded K/V with --from-model. */
    {
        double cache_max = 0.0, work_max = 0.0;
        for (int s = 0; s < n_s; s++) {
            const tq_kv_scheme *sc = &schemes[s];
            double per_token = 0.0; /* bytes per token per KV head, the dearest layer */
            const tq_kv_layer_scheme *two[2] = {&sc->layer, &sc->edge};
            const int n_ls = lsch[s] ? b.L : sc->edge_first || sc->edge_last ? 2 : 1;
            for (int j = 0; j < n_ls; j++) {
                const tq_kv_layer_scheme *li = lsch[s] ? &lsch[s][j] : two[j];
                size_t kb = 0, vb = 0;
                tq_kv_layer_scheme_bytes(li, (int)D, (int)D, &kb, &vb);
                int plain = li->key_format == TQ_KV_F16 && li->value_format == TQ_KV_F16;
                double t = (double)(kb + vb) + (plain ? 0.0 : 4.0 * (double)D);
                if (t > per_token) per_token = t;
                /* The workspace depends on the layer's scheme and the shapes, not on the
                 * length or the layer count: ask an empty one-layer cache of this scheme. */
                tq_kv_scheme one = *sc;
                one.layer = one.edge = *li;
                one.edge_first = one.edge_last = 0;
                tq_kv_cache_config cfg;
                tq_kv_cache *c;
                tq_kv_cache_config_init(&cfg, 1, (int)G, (int)D, (int)D);
                cfg.scheme = one;
                if (tq_kv_cache_create(&c, &cfg) == TQ_OK) {
                    double w = (double)tq_kv_attention_workspace_size(c, 0, (int)H, b.Q, (int)T);
                    if (w > work_max) work_max = w;
                    tq_kv_cache_free(c);
                }
            }
            double cache = per_token * (double)b.N * (double)G * (double)b.L;
            if (cache > cache_max) cache_max = cache;
        }
        double qhd = (double)b.Q * (double)H * (double)D;
        double io = 2.0 * sizeof(float) * qhd + sizeof(double) * qhd * (double)n_qual +
                    2.0 * sizeof(double) * (double)b.Q * (double)H +
                    2.0 * sizeof(float) * CHUNK * (double)G * (double)D;
        double recorded = 0.0;
        if (from_model)
            recorded = sizeof(float) * (double)rec.n_layers *
                       ((double)rec.n_tokens * (double)rec.n_kv_heads * (double)(rec.dk + rec.dv) +
                        (double)(rec.n_queries + rec.n_first) * (double)rec.n_q_heads * (double)rec.dk);
        const double gib = 1024.0 * 1024.0 * 1024.0;
        char detail[256], rec_part[64] = "";
        if (from_model) snprintf(rec_part, sizeof rec_part, ", recorded K/V %.2f GiB", recorded / gib);
        snprintf(detail, sizeof detail,
                 "KV cache of the largest scheme %.2f GiB, queries, outputs and reference "
                 "%.2f GiB, workspace %.2f GiB%s",
                 cache_max / gib, io / gib, work_max / gib, rec_part);
        if (tool_check_memory("attn-bench", cache_max + io + work_max + recorded, detail,
                               "lower --ctx, --layers, --kv-heads, --head-dim, --q-heads or "
                               "--queries") != 1) {
            for (int s = 0; s < n_s; s++) free(lsch[s]);
            attn_record_free(&rec);
            return TQ_EXIT_USAGE;
        }
    }

    size_t qn = b.Q * (size_t)H * (size_t)D;
    float *q = malloc(sizeof(float) * qn), *out = malloc(sizeof(float) * qn);
    double *ref = malloc(sizeof(double) * qn * (size_t)n_qual);
    result *res = calloc((size_t)n_s, sizeof *res);
    tq_threadpool *pool = NULL;
    if (!q || !out || !ref || !res) {
        fprintf(stderr, "tq attn-bench: out of memory\n");
        return 1;
    }
    tool_rng qr;
    tool_rng_seed(&qr, seed ^ 0x9E3779B97F4A7C15ull);
    for (size_t i = 0; i < qn; i++) q[i] = (float)tool_rng_gauss(&qr);
    tq_attn_params params;
    tq_attn_params_init(&params, (int)D);
    /* Layer l's queries and parameters. */
#define LQ(l) (from_model ? rec.layers[l].q : q)
#define LP(l) (from_model ? &rec.layers[l].ap : &params)
    for (int l = 0; l < n_qual; l++)
        if (!exact_attention(&b, l, LQ(l), LP(l), ref + (size_t)l * qn)) {
            fprintf(stderr, "tq attn-bench: out of memory\n");
            return 1;
        }
    if (T > 1 && tq_threadpool_create(&pool, (int)T)) {
        fprintf(stderr, "tq attn-bench: cannot start %ld threads\n", T);
        return 1;
    }
    rc = 0;
    double f16_gflops = 0.0;
    for (int s = 0; s < n_s && !rc; s++) {
        tq_kv_cache *c = NULL;
        tq_status st = build_cache(&b, &schemes[s], lsch[s], pool, &c);
        if (st) {
            fprintf(stderr, "tq attn-bench: building the %s cache: %s\n", names[s], tq_error_message(st));
            rc = 1;
            break;
        }
        size_t wb = 0; /* layers may differ in scheme (first=/last=): the largest need */
        for (int l = 0; l < b.L; l++) {
            size_t w = tq_kv_attention_workspace_size(c, l, (int)H, b.Q, (int)T);
            if (w > wb) wb = w;
        }
        void *work = malloc(wb);
        if (!work) {
            fprintf(stderr, "tq attn-bench: out of memory\n");
            tq_kv_cache_free(c);
            rc = 1;
            break;
        }
        /* Quality: against the exact fp32 attention (layer 0, or every recorded layer). */
        double e2 = 0.0, r2 = 0.0, emax = 0.0;
        for (int l = 0; !st && l < n_qual; l++) {
            st = tq_kv_attention(c, l, LQ(l), (int)H, b.Q, LP(l), pool, work, wb, out, qn);
            const double *rl = ref + (size_t)l * qn;
            for (size_t i = 0; i < qn; i++) {
                double e = (double)out[i] - rl[i];
                e2 += e * e, r2 += rl[i] * rl[i];
                if (fabs(e) > emax) emax = fabs(e);
            }
        }
        /* Speed: one warm-up step, then the best of the timed steps. */
        double t0 = tool_now();
        for (int l = 0; !st && l < b.L; l++)
            st = tq_kv_attention(c, l, LQ(l), (int)H, b.Q, LP(l), pool, work, wb, out, qn);
        double first = tool_now() - t0, best = first;
        long n_reps = reps ? reps : (long)(1.0 / (first > 1e-6 ? first : 1e-6));
        if (!reps) n_reps = n_reps < 3 ? 3 : n_reps > 200 ? 200 : n_reps;
        for (long r = 0; !st && r < n_reps; r++) {
            t0 = tool_now();
            for (int l = 0; !st && l < b.L; l++)
                st = tq_kv_attention(c, l, LQ(l), (int)H, b.Q, LP(l), pool, work, wb, out, qn);
            double dt = tool_now() - t0;
            if (dt < best) best = dt;
        }
        if (st) {
            fprintf(stderr, "tq attn-bench: attention (%s): %s\n", names[s], tq_error_message(st));
            rc = 1;
        }
        /* bytes per token of one layer: auto:B's mean over the layers */
        double kvb = 0.0;
        for (int l = 0; l < (lsch[s] ? b.L : 1); l++) {
            size_t kb = 0, vb = 0;
            tq_kv_layer_scheme_bytes(lsch[s] ? &lsch[s][l] : &schemes[s].layer, (int)D, (int)D, &kb, &vb);
            kvb += (double)(kb + vb);
        }
        result *r = &res[s];
        snprintf(r->scheme, sizeof r->scheme, "%.63s", names[s]);
        r->us = best * 1e6;
        r->bytes_per_token = kvb / (lsch[s] ? b.L : 1) * (double)G;
        r->ratio = 4.0 * (double)D * (double)G / r->bytes_per_token;
        r->rel_l2 = r2 > 0 ? sqrt(e2 / r2) : 0.0;
        r->max_abs = emax;
        /* Keys the step's queries see over all layers (causal, sliding windows), and the
         * tokens it reads (those the last query sees). */
        double keys = 0.0, read = 0.0;
        for (int l = 0; l < b.L; l++)
            for (size_t i = 0; i < b.Q; i++) {
                size_t pos = b.N - b.Q + i, win = (size_t)LP(l)->sliding_window;
                double vis = (double)(win && win < pos + 1 ? win : pos + 1);
                keys += vis;
                if (i + 1 == b.Q) read += vis;
            }
        r->gbs = read * r->bytes_per_token / best * 1e-9;
        /* Scores and value sums: 2 flops per multiply-add, over the visible keys. */
        if (s == 0) f16_gflops = 2.0 * keys * (double)H * 2.0 * (double)D / best * 1e-9;
        free(work);
        tq_kv_cache_free(c);
    }
    if (!rc) {
        double f16_us = res[0].us;
        if (json) {
            printf("{\"ctx\":%zu,\"head_dim\":%d,\"q_heads\":%d,\"kv_heads\":%d,\"layers\":%d,"
                   "\"threads\":%d,\"queries\":%zu,\"kernels\":\"%s\",\"f16_gflops\":%.4g,"
                   "\"data\":\"%s\",\"results\":[",
                   b.N, b.D, b.H, b.G, b.L, b.T, b.Q, tq_attn_kernels_name(), f16_gflops,
                   from_model ? "model" : "random");
            for (int s = 0; s < n_s; s++)
                printf("%s{\"scheme\":\"%s\",\"us_per_step\":%.4g,\"speedup_vs_f16\":%.4g,"
                       "\"bytes_per_token\":%.0f,\"ratio_vs_fp16\":%.4g,\"rel_l2\":%.4g,"
                       "\"max_abs\":%.4g,\"gb_per_s\":%.4g}",
                       s ? "," : "", res[s].scheme, res[s].us, f16_us / res[s].us,
                       res[s].bytes_per_token, res[s].ratio, res[s].rel_l2, res[s].max_abs,
                       res[s].gbs);
            printf("]}\n");
        } else {
            printf("attn-bench: head dim %d, %d q / %d kv heads, ctx %zu, %zu quer%s, %d layer(s), "
                   "%d thread(s), kernels %s\n",
                   b.D, b.H, b.G, b.N, b.Q, b.Q == 1 ? "y" : "ies", b.L, b.T, tq_attn_kernels_name());
            if (from_model)
                printf("data: K/V and queries recorded from the model on %s; error over all %d "
                       "layers\n", from_model, b.L);
            printf("f16 baseline: %.2f GFLOP/s\n", f16_gflops);
            printf("%-22s %12s %9s %11s %8s %10s %10s %8s\n", "scheme", "us/step", "vs f16",
                   "bytes/tok", "ratio", "rel_l2", "max_abs", "GB/s");
            for (int s = 0; s < n_s; s++)
                printf("%-22s %12.1f %8.2fx %11.0f %7.2fx %10.3e %10.3e %8.2f\n", res[s].scheme,
                       res[s].us, f16_us / res[s].us, res[s].bytes_per_token, res[s].ratio,
                       res[s].rel_l2, res[s].max_abs, res[s].gbs);
        }
    }
    tq_threadpool_free(pool);
    free(q), free(out), free(ref), free(res);
    for (int s = 0; s < n_s; s++) free(lsch[s]);
    attn_record_free(&rec);
    return rc;
}
