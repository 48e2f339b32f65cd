/*
 * tq codec-bench: quality and speed of one codec configuration per bit width.
 *
 * Data: N vectors with i.i.d. N(0, 1) coordinates and N independent N(0, 1) queries, from
 * --seed. Quality: mean of ‖x − x̂‖²/‖x‖² (compare with the codebook's D(b)), and the error
 * of ⟨q, x⟩ as the codec scores it without decoding, normalized by ‖q‖·‖x‖ (bias, variance).
 * Speed: best of 3 timed passes of encode and decode over all N vectors, split across
 * --threads, and memcpy of the same fp32 data in the same run as the yardstick.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "common.h"
#include "options.h"
#include "turboquant.h"

#define MAX_BITS_LIST 16

typedef struct job {
    const tq_codec *codec;
    const float *x;
    float *y;
    uint8_t *codes;
    size_t n, dim, bpv;
    int threads, mode; /* 0 encode, 1 decode, 2 memcpy */
    int failed;
} job;

static void job_part(void *p, int t) {
    job *j = p;
    size_t lo = j->n * (size_t)t / (size_t)j->threads, hi = j->n * (size_t)(t + 1) / (size_t)j->threads;
    size_t cnt = hi - lo;
    if (!cnt) return;
    tq_status st = TQ_OK;
    if (j->mode == 0)
        st = tq_codec_encode(j->codec, j->x + lo * j->dim, cnt, j->codes + lo * j->bpv, cnt * j->bpv);
    else if (j->mode == 1)
        st = tq_codec_decode(j->codec, j->codes + lo * j->bpv, cnt, j->y + lo * j->dim, cnt * j->dim);
    else
        memcpy(j->y + lo * j->dim, j->x + lo * j->dim, cnt * j->dim * sizeof(float));
    if (st) j->failed = 1;
}

/* Best of 3 passes, vectors per second. */
static double timed(job *j, int mode) {
    double best = 1e30;
    j->mode = mode;
    for (int r = 0; r < 3; r++) {
        double t0 = tool_now();
        tool_run_threads(j->threads, job_part, j);
        double dt = tool_now() - t0;
        if (dt < best) best = dt;
    }
    return (double)j->n / best;
}

/* The codec configuration of one width of the run. */
static void bench_config(tq_codec_config *cfg, long dim, double bits, tq_variant variant,
                         int norm_corr, int trellis) {
    tq_codec_config_init(cfg, (int)dim, (float)bits, variant);
    cfg->norm_correction = norm_corr;
    cfg->trellis = trellis;
}

int cmd_codec_bench(int argc, char **argv) {
    long dim = 128, n = 100000, threads = 1;
    double bits[MAX_BITS_LIST] = {1, 2, 3, 4, 8};
    int n_bits = 5, json = 0, plain_norm = 0, variant_index = 0, trellis = 0, two_state = 0;
    uint64_t seed = 1;
    static const char *const variants[] = {"mse", "prod", NULL};
    const tool_opt opts[] = {
        {OPT_INT("--dim", "D", &dim, TQ_MIN_DIM, TQ_MAX_DIM, "vector length, 2..1024 (default 128)")},
        {OPT_DOUBLES("--bits", "LIST", bits, &n_bits, MAX_BITS_LIST, 1, 8,
                     "bit widths, 1..8, fractions like 3.5 allowed (default 1,2,3,4,8)")},
        {OPT_CHOICE("--variant", "V", &variant_index, variants, "mse (default) or prod")},
        {OPT_INT("--n", "N", &n, 1, 100000000, "vectors (default 100000)")},
        {OPT_U64("--seed", "S", &seed, "data and rotation seed (default 1)")},
        {OPT_INT("--threads", "T", &threads, 1, 256, "threads for the timed passes (default 1)")},
        {OPT_FLAG("--no-norm-correction", &plain_norm, "store the plain norm (MSE only)")},
        {OPT_FLAG("--trellis", &trellis, "trellis-coded indices at 2 to 4 bits (MSE only)")},
        {OPT_FLAG("--two-state", &two_state, "with --trellis: the two-state tables (trellis=2)")},
        {OPT_FLAG("--json", &json, "one JSON object instead of a table")},
    };
    const tool_cmd cmd = {
        .name = "codec-bench",
        .synopsis = "usage: tq codec-bench [--dim D] [--bits B[,B...]] [--variant mse|prod] [--n N]\n"
                    "                      [--seed S] [--threads T] [--no-norm-correction] [--trellis]\n"
                    "                      [--two-state] [--json]\n",
        .opts = opts, .n_opts = OPT_COUNT(opts),
        .epilogue = "\nA run that needs more than the machine's physical memory (or $TQ_MEM_LIMIT_GIB GiB\n"
                    "when set) for its data (3 x N x D floats) and codes is refused with the figure\n"
                    "(exit 2).\n",
    };
    int rc = 0;
    if (!tool_opts_parse(&cmd, argc, argv, &rc)) return rc;
    const tq_variant variant = variant_index ? TQ_VARIANT_PROD : TQ_VARIANT_MSE;
    const int norm_corr = !plain_norm && variant == TQ_VARIANT_MSE; /* PROD: plain always */
    if (trellis && variant != TQ_VARIANT_MSE) {
        fprintf(stderr, "tq codec-bench: --trellis needs --variant mse\n");
        return TQ_EXIT_USAGE;
    }
    if (two_state && !trellis) {
        fprintf(stderr, "tq codec-bench: --two-state needs --trellis\n");
        return TQ_EXIT_USAGE;
    }
    if (two_state) trellis = TQ_TRELLIS_TWO_STATE;

    /* Validate every configuration before doing any work. */
    for (int b = 0; b < n_bits; b++) {
        tq_codec_config cfg;
        bench_config(&cfg, dim, bits[b], variant, norm_corr, trellis);
        size_t bpv;
        tq_status st = tq_codec_config_bytes(&cfg, &bpv);
        if (st) {
            fprintf(stderr, "tq codec-bench: --bits %g at --dim %ld: %s (%s)\n", bits[b], dim,
                    tq_error_message(st), tq_error_name(st));
            return TQ_EXIT_USAGE;
        }
    }

    /* The memory it will hold: data, reconstructions and queries in fp32, and the largest
     * width's codes. */
    {
        size_t bpv_max = 0;
        for (int b = 0; b < n_bits; b++) {
            tq_codec_config cfg;
            bench_config(&cfg, dim, bits[b], variant, norm_corr, trellis);
            size_t bpv = 0;
            tq_codec_config_bytes(&cfg, &bpv);
            if (bpv > bpv_max) bpv_max = bpv;
        }
        const double gib = 1024.0 * 1024.0 * 1024.0;
        double data = 3.0 * sizeof(float) * (double)n * (double)dim, codes = (double)n * (double)bpv_max;
        char detail[128];
        snprintf(detail, sizeof detail, "vectors, queries and decodes %.2f GiB, codes %.2f GiB",
                 data / gib, codes / gib);
        if (tool_check_memory("codec-bench", data + codes, detail, "lower --n or --dim") != 1)
            return TQ_EXIT_USAGE;
    }

    size_t nd = (size_t)n * (size_t)dim;
    float *x = malloc(nd * sizeof(float)), *y = malloc(nd * sizeof(float));
    float *q = malloc(nd * sizeof(float));
    uint8_t *codes = NULL;
    float *prep = malloc(2 * (size_t)dim * sizeof(float));
    if (!x || !y || !q || !prep) {
        fprintf(stderr, "tq codec-bench: out of memory for %ld vectors\n", n);
        return 1;
    }
    tool_rng rng;
    tool_rng_seed(&rng, seed);
    for (size_t i = 0; i < nd; i++) x[i] = (float)tool_rng_gauss(&rng);
    for (size_t i = 0; i < nd; i++) q[i] = (float)tool_rng_gauss(&rng);

    if (json)
        printf("{\"dim\":%ld,\"variant\":\"%s\",\"n\":%ld,\"threads\":%ld,\"kernels\":\"%s\","
               "\"norm_correction\":%s,\"trellis\":%s,\"two_state\":%s,\"results\":[",
               dim, variant == TQ_VARIANT_MSE ? "mse" : "prod", n, threads, tq_kernels_name(),
               norm_corr ? "true" : "false", trellis ? "true" : "false", two_state ? "true" : "false");
    else
        printf("codec-bench: dim %ld, variant %s%s, %ld vectors, %ld thread(s), kernels %s, norm "
               "correction %s\n%6s %10s %11s %10s %7s %7s %12s %12s %12s %8s\n",
               dim, variant == TQ_VARIANT_MSE ? "mse" : "prod",
               two_state ? " (trellis, two-state)" : trellis ? " (trellis)" : "", n,
               threads, tq_kernels_name(), norm_corr ? "on" : "off", "bits", "mse", "ip_bias", "ip_var", "bytes", "ratio",
               "encode/s", "decode/s", "memcpy/s", "enc/mcp");
    for (int b = 0; b < n_bits; b++) {
        tq_codec_config cfg;
        bench_config(&cfg, dim, bits[b], variant, norm_corr, trellis);
        cfg.seed = seed;
        tq_codec *codec;
        tq_status st = tq_codec_create(&codec, &cfg);
        if (st) {
            fprintf(stderr, "tq codec-bench: %s\n", tq_error_message(st));
            rc = 1;
            break;
        }
        size_t bpv = tq_codec_bytes_per_vector(codec);
        free(codes);
        codes = malloc((size_t)n * bpv);
        if (!codes) {
            fprintf(stderr, "tq codec-bench: out of memory\n");
            tq_codec_free(codec);
            rc = 1;
            break;
        }
        job j = {codec, x, y, codes, (size_t)n, (size_t)dim, bpv, (int)threads, 0, 0};
        double enc = timed(&j, 0), dec = timed(&j, 1), mcp = timed(&j, 2);
        /* timed(…, 2) overwrote y: decode once more for the quality figures. */
        st = tq_codec_decode(codec, codes, (size_t)n, y, nd);
        if (st || j.failed) {
            fprintf(stderr, "tq codec-bench: encode/decode failed: %s\n", tq_error_message(st));
            tq_codec_free(codec);
            rc = 1;
            break;
        }
        double mse = 0, ip_sum = 0, ip_sq = 0;
        for (long v = 0; v < n; v++) {
            const float *xv = x + (size_t)v * (size_t)dim, *yv = y + (size_t)v * (size_t)dim;
            const float *qv = q + (size_t)v * (size_t)dim;
            double err = 0, nx = 0, nq = 0, ip = 0;
            for (long i = 0; i < dim; i++) {
                double e = (double)xv[i] - yv[i];
                err += e * e, nx += (double)xv[i] * xv[i], nq += (double)qv[i] * qv[i];
                ip += (double)qv[i] * xv[i];
            }
            mse += err / nx;
            float score;
            tq_codec_prepare_query(codec, qv, prep, 2 * (size_t)dim);
            tq_codec_scores(codec, prep, codes + (size_t)v * bpv, 1, &score, 1);
            double e = (score - ip) / sqrt(nx * nq);
            ip_sum += e, ip_sq += e * e;
        }
        mse /= (double)n;
        double bias = ip_sum / (double)n, var = ip_sq / (double)n - bias * bias;
        double ratio = (double)dim * 2.0 / (double)bpv;
        if (json)
            printf("%s{\"bits\":%g,\"mse\":%.6g,\"ip_bias\":%.4g,\"ip_var\":%.4g,"
                   "\"bytes_per_vector\":%zu,\"ratio_vs_fp16\":%.4f,\"encode_vps\":%.4g,"
                   "\"decode_vps\":%.4g,\"memcpy_vps\":%.4g}",
                   b ? "," : "", bits[b], mse, bias, var, bpv, ratio, enc, dec, mcp);
        else
            printf("%6g %10.6f %11.3e %10.3e %7zu %6.2fx %12.4g %12.4g %12.4g %8.3f\n", bits[b], mse,
                   bias, var, bpv, ratio, enc, dec, mcp, enc / mcp);
        tq_codec_free(codec);
    }
    if (json && !rc) printf("]}\n");
    free(x), free(y), free(q), free(codes), free(prep);
    return rc;
}
