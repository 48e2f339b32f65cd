/*
 * tq bench: end-to-end prefill and decode speed, shaped like llama.cpp's llama-bench.
 *
 * For each KV scheme (--kv) and depth (-d): the sequence is filled to the depth with
 * pseudo-random token ids (untimed), then
 *   pp: -p tokens prefilled after the depth (batches of at most 512, the last token's logits),
 *   tg: -n tokens decoded one at a time after the depth (each step's logits computed; the ids
 *       are fixed, not sampled),
 * each repeated -r times on a copy-on-write fork of the filled sequence (context_fork), so
 * every repetition starts from the same state; mean and standard deviation of tokens/s are
 * printed. Before the tg repetitions one untimed decode step ends the scheme's raw prefill
 * phase (it compresses the depth's tokens once: what a generation's first step does), so tg
 * measures decode on the compressed cache.
 *
 * Bytes per decode token: the weights one step reads (model_decode_weight_bytes) plus the K/V
 * its attention reads at that length (eval_kv_read_bytes, sliding windows and the fp16 tail
 * counted), averaged over the tg steps. The machine's read bandwidth is measured in the same
 * run (-t threads summing a buffer far larger than the caches, best of several passes), and
 * each row prints the bandwidth decode reaches (bytes per token × tokens/s) and its share of
 * that limit.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/eval.h"
#include "../engine/quants.h"
#include "commands.h"
#include "common.h"
#include "model_session.h"

#define MAX_DEPTHS 16
#define PP_BATCH 512

/* ---- the machine's read bandwidth ---------------------------------------------------------- */

typedef uint64_t u64x4 __attribute__((vector_size(32), aligned(8)));

typedef struct bw_job {
    const unsigned char *buf;
    size_t bytes, chunk; /* chunk: bytes per task, a multiple of 256 */
    uint64_t sink[64];   /* one per thread, so the sums are not optimized away */
} bw_job;

/* The sum of one task's bytes, 128 per step in four independent chains. BW_TARGET: compiled
 * for AVX2 where the compiler can (32-byte loads read about a quarter faster than SSE2's
 * 16-byte pairs on the machines here), chosen at run time. */
#define BW_SUM_BODY                                                                             \
    bw_job *j = ctx;                                                                            \
    size_t lo = task * j->chunk, hi = lo + j->chunk < j->bytes ? lo + j->chunk : j->bytes;      \
    u64x4 a = {0}, b = {0}, c = {0}, d = {0};                                                   \
    for (size_t i = lo; i + 128 <= hi; i += 128) {                                              \
        u64x4 x0, x1, x2, x3;                                                                   \
        memcpy(&x0, j->buf + i, 32);                                                            \
        memcpy(&x1, j->buf + i + 32, 32);                                                       \
        memcpy(&x2, j->buf + i + 64, 32);                                                       \
        memcpy(&x3, j->buf + i + 96, 32);                                                       \
        a += x0;                                                                                \
        b += x1;                                                                                \
        c += x2;                                                                                \
        d += x3;                                                                                \
    }                                                                                           \
    u64x4 s = a + b + c + d;                                                                    \
    j->sink[thread & 63] += s[0] + s[1] + s[2] + s[3];

static void bw_task(void *ctx, size_t task, int thread) { BW_SUM_BODY }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"))) static void bw_task_avx2(void *ctx, size_t task, int thread) { BW_SUM_BODY }
static tq_task_fn bw_task_best(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? bw_task_avx2 : bw_task;
}
#else
static tq_task_fn bw_task_best(void) { return bw_task; }
#endif

/* Best read bandwidth (bytes/s) of pool's threads over a 1 GiB buffer, or 0 without memory. */
static double measure_read_bandwidth(tq_threadpool *pool) {
    bw_job j;
    memset(&j, 0, sizeof j);
    j.bytes = (size_t)1 << 30;
    unsigned char *buf = malloc(j.bytes);
    if (buf == NULL) return 0.0;
    for (size_t i = 0; i < j.bytes; i += 4096) buf[i] = (unsigned char)i; /* fault every page in */
    memset(buf, 1, j.bytes);
    j.buf = buf;
    j.chunk = (size_t)4 << 20;
    size_t n_tasks = j.bytes / j.chunk;
    double best = 0.0;
    tq_task_fn fn = bw_task_best();
    for (int pass = 0; pass < 6; pass++) {
        double t0 = tool_now();
        tq_threadpool_run(pool, fn, &j, n_tasks);
        double dt = tool_now() - t0;
        if (dt > 0 && (double)j.bytes / dt > best) best = (double)j.bytes / dt;
    }
    free(buf);
    return best;
}

/* ---- the runs ------------------------------------------------------------------------------ */

typedef struct bench_row {
    const char *kv;
    int depth;
    double pp_mean, pp_sd, tg_mean, tg_sd; /* tokens/s */
    double kv_read_bytes;                  /* K/V read per decode token, mean over the tg steps */
    size_t kv_bytes_per_token;             /* what one token takes compressed */
} bench_row;

static void mean_sd(const double *x, int n, double *mean, double *sd) {
    double m = 0, v = 0;
    for (int i = 0; i < n; i++) m += x[i];
    m /= n;
    for (int i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
    *mean = m;
    *sd = n > 1 ? sqrt(v / (n - 1)) : 0.0;
}

/* Feeds toks[0, n) at positions pos0.. in batches of at most PP_BATCH; the last token's logits
 * into logits (may be NULL). */
static int feed(session_seq *q, const int32_t *toks, int n, int pos0, float *logits) {
    for (int i = 0; i < n; i += PP_BATCH) {
        int k = n - i < PP_BATCH ? n - i : PP_BATCH;
        if (session_forward(q, toks + i, k, pos0 + i, 0, i + k == n ? logits : NULL)) return 1;
    }
    return 0;
}

static int run_depth(session *s, session_seq *base, int depth, int n_pp, int n_tg, int reps,
                     const int32_t *toks, float *logits, double *t_pp, double *t_tg, bench_row *row) {
    session_seq f, w;
    memset(&f, 0, sizeof f);
    memset(&w, 0, sizeof w);
    int rc = 0;
    session_seq_reset(base);
    if (depth > 0 && (rc = feed(base, toks, depth, 0, NULL))) goto done;
    for (int r = 0; r < reps && n_pp > 0; r++) {
        if ((rc = session_seq_fork(s, base, &f))) goto done;
        double t0 = tool_now();
        if ((rc = feed(&f, toks + depth, n_pp, depth, logits))) goto done;
        t_pp[r] = (double)n_pp / (tool_now() - t0);
        session_seq_close(&f);
    }
    if (n_tg > 0) {
        /* The untimed step: ends the raw phase (compresses the depth once), as a generation's
         * first step after its prompt does. */
        if ((rc = session_seq_fork(s, base, &w)) || (rc = feed(&w, toks + depth, 1, depth, logits))) goto done;
        double kv = 0;
        for (int i = 0; i < n_tg; i++) kv += (double)eval_kv_read_bytes(w.x, depth + 2 + i);
        row->kv_read_bytes = kv / n_tg;
        row->kv_bytes_per_token = session_kv_bytes_per_token(&w);
        for (int r = 0; r < reps; r++) {
            if ((rc = session_seq_fork(s, &w, &f))) goto done;
            double t0 = tool_now();
            for (int i = 0; i < n_tg; i++)
                if ((rc = session_forward(&f, toks + depth + 1 + i, 1, depth + 1 + i, 0, logits))) goto done;
            t_tg[r] = (double)n_tg / (tool_now() - t0);
            session_seq_close(&f);
        }
    }
    if (n_pp > 0) mean_sd(t_pp, reps, &row->pp_mean, &row->pp_sd);
    if (n_tg > 0) mean_sd(t_tg, reps, &row->tg_mean, &row->tg_sd);
done:
    session_seq_close(&f);
    session_seq_close(&w);
    return rc;
}

/* The CPU's name from /proc/cpuinfo ("unknown" elsewhere). */
static void cpu_name(char *out, size_t cap) {
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        char *v = strchr(line, ':');
        if (v == NULL) break;
        v += 1 + (v[1] == ' ');
        v[strcspn(v, "\n")] = 0;
        snprintf(out, cap, "%s", v);
        break;
    }
    fclose(f);
}

int cmd_bench(int argc, char **argv) {
    session_opts o;
    session_opts_init(&o, "bench", 0, SESSION_KV_EACH);
    long n_pp = 512, n_tg = 64, reps = 3;
    double depths_d[MAX_DEPTHS] = {0};
    int n_depths = 1, json = 0, no_bw = 0;
    const tool_opt opts[] = {
        {OPT_INT("-p", "N", &n_pp, 0, 65536, "prompt tokens prefilled after the depth, timed (default 512; 0: no pp)"),
         .alias = "--n-prompt"},
        {OPT_INT("-n", "N", &n_tg, 0, 65536, "tokens decoded one at a time after the depth, timed (default 64; 0: no tg)"),
         .alias = "--n-gen"},
        {OPT_DOUBLES("-d", "LIST", depths_d, &n_depths, MAX_DEPTHS, 0, 1 << 20,
                     "depths: tokens already in the sequence (default 0), e.g. 0,4096,16384"),
         .alias = "--n-depth"},
        {OPT_INT("-r", "N", &reps, 1, 1000, "repetitions of each test (default 3): mean ± sd"),
         .alias = "--repetitions"},
        {OPT_FLAG("--json", &json, "a JSON array on stdout, one object per scheme and depth")},
        {OPT_FLAG("--no-bandwidth", &no_bw, "skip measuring the read bandwidth (its fields are then 0)")},
        {OPT_TEXT("-c is set from -d, -p and -n (depth + p + n + 1 positions at most).")},
    };
    const tool_cmd cmd = {
        .name = "bench",
        .synopsis = "usage: tq bench [-p N] [-n N] [-d D1,D2,...] [--kv S[,S...]] [-r N] [-m MODEL]\n"
                    "                [-t THREADS] [--json] [--no-bandwidth]\n",
        .opts = opts, .n_opts = OPT_COUNT(opts), .shared = o.flags, .n_shared = o.n_flags,
    };
    int rc;
    if (!tool_opts_parse(&cmd, argc, argv, &rc)) return rc;
    int depths[MAX_DEPTHS], max_depth = 0;
    for (int i = 0; i < n_depths; i++) {
        if (depths_d[i] != floor(depths_d[i])) {
            fprintf(stderr, "tq bench: -d: %g is not a whole number of tokens\n", depths_d[i]);
            return TQ_EXIT_USAGE;
        }
        depths[i] = (int)depths_d[i];
        if (depths[i] > max_depth) max_depth = depths[i];
    }
    if (n_pp == 0 && n_tg == 0) {
        fprintf(stderr, "tq bench: -p 0 and -n 0: nothing to measure\n");
        return TQ_EXIT_USAGE;
    }
    o.n_ctx = (long)max_depth + (n_pp > n_tg + 1 ? n_pp : n_tg + 1);
    if ((rc = session_opts_finish(&o)) != 0) return rc;

    session s;
    session_seq q;
    memset(&q, 0, sizeof q);
    int32_t *toks = NULL;
    float *logits = NULL;
    double *t_pp = NULL, *t_tg = NULL;
    bench_row *rows = NULL;
    if ((rc = session_open(&s, &o)) != 0) return rc; /* checks the length against the model's */
    const int nv = s.cfg.n_vocab;
    const int n_toks = max_depth + (int)(n_pp > n_tg + 1 ? n_pp : n_tg + 1);
    toks = malloc((size_t)n_toks * sizeof *toks);
    logits = malloc((size_t)nv * sizeof *logits);
    t_pp = calloc((size_t)reps, sizeof *t_pp);
    t_tg = calloc((size_t)reps, sizeof *t_tg);
    rows = calloc((size_t)o.n_schemes * (size_t)n_depths, sizeof *rows);
    if (!toks || !logits || !t_pp || !t_tg || !rows) {
        fprintf(stderr, "tq bench: out of memory\n");
        rc = 1;
        goto done;
    }
    uint32_t lcg = 12345; /* ids away from the vocabulary's ends (special tokens) */
    for (int i = 0; i < n_toks; i++) {
        lcg = lcg * 1664525u + 1013904223u;
        toks[i] = nv > 400 ? (int32_t)(100 + (lcg >> 8) % (uint32_t)(nv - 200)) : (int32_t)((lcg >> 8) % (uint32_t)nv);
    }
    char cpu[160];
    cpu_name(cpu, sizeof cpu);
    const double weight_bytes = (double)model_decode_weight_bytes(s.m);
    const double bw = no_bw ? 0.0 : measure_read_bandwidth(s.pool);
    if (!json) {
        printf("tq bench: %s\n    %s, kernels %s, %d threads; weights read per decode token %.1f MB; "
               "read bandwidth %.1f GB/s (measured now, %d threads)\n",
               s.model_path, cpu, quant_kernels_name(), s.n_threads, weight_bytes / 1e6, bw / 1e9, s.n_threads);
        printf("    pp%ld: %ld tokens prefilled after the depth; tg%ld: %ld decode steps after it; "
               "mean ± sd of %ld runs\n\n",
               n_pp, n_pp, n_tg, n_tg, reps);
        printf("| kv | depth | pp%ld tok/s | tg%ld tok/s | KV bytes/token | MB read/decode token | GB/s | of read bw |\n",
               n_pp, n_tg);
        printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
        fflush(stdout);
    }
    for (int k = 0; k < o.n_schemes; k++) {
        if ((rc = session_seq_open(&s, &o.schemes[k], PP_BATCH, &q)) != 0) goto done;
        for (int d = 0; d < n_depths; d++) {
            bench_row *row = &rows[k * n_depths + d];
            row->kv = o.schemes[k].name;
            row->depth = depths[d];
            if ((rc = run_depth(&s, &q, depths[d], (int)n_pp, (int)n_tg, (int)reps, toks, logits, t_pp, t_tg, row)))
                goto done;
            if (json) continue;
            double bpt = weight_bytes + row->kv_read_bytes, gbs = bpt * row->tg_mean / 1e9;
            printf("| %s | %d | ", row->kv, row->depth);
            if (n_pp) printf("%.1f ± %.1f | ", row->pp_mean, row->pp_sd); else printf("— | ");
            if (n_tg) printf("%.1f ± %.1f | %zu | %.1f | %.1f | %.0f%% |\n", row->tg_mean, row->tg_sd,
                             row->kv_bytes_per_token, bpt / 1e6, gbs, bw > 0 ? 100.0 * gbs * 1e9 / bw : 0.0);
            else printf("— | — | %.1f | — | — |\n", weight_bytes / 1e6);
            fflush(stdout);
        }
        session_seq_close(&q);
    }
    if (json) {
        printf("[");
        for (int i = 0; i < o.n_schemes * n_depths; i++) {
            const bench_row *row = &rows[i];
            double bpt = weight_bytes + row->kv_read_bytes, gbs = bpt * row->tg_mean / 1e9;
            printf("%s\n{\"model\":", i ? "," : "");
            session_json_str(stdout, s.model_path);
            printf(",\"cpu\":");
            session_json_str(stdout, cpu);
            printf(",\"kernels\":\"%s\",\"threads\":%d,\"kv\":", quant_kernels_name(), s.n_threads);
            session_json_str(stdout, row->kv);
            printf(",\"depth\":%d,\"n_prompt\":%ld,\"n_gen\":%ld,\"repetitions\":%ld,"
                   "\"pp_tok_s\":%.3f,\"pp_sd\":%.3f,\"tg_tok_s\":%.3f,\"tg_sd\":%.3f,"
                   "\"kv_bytes_per_token\":%zu,\"weight_bytes\":%.0f,\"kv_read_bytes\":%.0f,"
                   "\"bytes_per_token\":%.0f,\"bandwidth_gb_s\":%.3f,\"read_bw_gb_s\":%.3f,"
                   "\"bw_fraction\":%.4f}",
                   row->depth, n_pp, n_tg, reps, row->pp_mean, row->pp_sd, row->tg_mean, row->tg_sd,
                   row->kv_bytes_per_token, weight_bytes, row->kv_read_bytes, n_tg ? bpt : 0.0, gbs,
                   bw / 1e9, bw > 0 ? gbs * 1e9 / bw : 0.0);
        }
        printf("\n]\n");
    }
    rc = 0;
done:
    session_seq_close(&q);
    free(toks);
    free(logits);
    free(t_pp);
    free(t_tg);
    free(rows);
    session_close(&s);
    return rc;
}
