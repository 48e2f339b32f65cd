/*
 * The decode attention kernels on TurboQuant records alone (attn_kernels.h, lane layout):
 * score_turbo_lanes (keys) and accum_turbo_lanes (values) of every attention table the host
 * supports, for 4 query heads per KV head (GQA 4, as Gemma 3 and the d128 32q/8kv shape) over
 * NK records, in nanoseconds per record (best of several runs: the machine is shared). The
 * ratio columns are against the float table of the same width (avx2 for avx2-int8 and
 * avx2-vnni, avx512 for avx512-vnni, neon for neon-dot), measured in the same run.
 *
 *   bench_attn_lanes [min_ms_per_figure [nk [DIM:BITS[:t|:2][:s] [tile|tile:score|tile:value]]]]
 *   (default 30 ms, nk 4096, every shape; ":t": trellis-coded indices, timed on the tables that
 *   read them; ":2": the same with the two-state tables, TQ_TRELLIS_TWO_STATE; ":s": the key
 *   split's records at a whole width, half the coordinates at one bit more, half at one less,
 *   TQ_SPLIT_BLOCK). "tile": the float tables (avx2, avx512, neon) also through the tile, what
 *   src/attention.c does where a table's lane kernels do not read a record: blocks of 64
 *   records decoded to rows (tq_record_decode_rows), then dot_multi / accum_rows; rows named
 *   "TABLE tile". "tile:score" / "tile:value": only that half of the tile, nothing else (for
 *   instruction counts: scripts/arm-instr-counts.sh).
 *
 * With min_ms 0 each kernel is called once: under `valgrind --tool=callgrind` (x86) or
 * scripts/arm-instr-counts.sh (aarch64 under qemu) that gives instruction counts per record.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn_kernels.h"
#include "codec_record.h"
#include "turboquant.h"

#define NQ 4

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static float gauss(void) {
    double u1 = ((rng = rng * 6364136223846793005ULL + 1442695040888963407ULL) >> 11) * 0x1p-53;
    double u2 = ((rng = rng * 6364136223846793005ULL + 1442695040888963407ULL) >> 11) * 0x1p-53;
    return (float)(sqrt(-2.0 * log(u1 + 1e-300)) * cos(6.283185307179586 * u2));
}

static volatile float sink;

#define TILE_KB 64 /* records per tile, as src/attention.c's KB */

/* One timed call: scores (which = 0) or value sums (1) of table t over nk records, through its
 * lane kernels (tile = 0: q the NQ queries in the lane layout, kl floats each) or the tile
 * (tile = 1: qr the queries as rows, x->row_floats each; rows decoded TILE_KB at a time into
 * tl, stride ts, with ks, then dot_multi / accum_rows). */
typedef struct call {
    const tq_attn_kernels *t;
    tq_kernel_set ks;
    int which, tile, nk, kl;
    const tq_record *x;
    const uint8_t *rec;
    const float *q, *qr, *p;
    float *S, *acc, *tl;
    size_t ts;
} call;

static void run_lanes(const call *c) {
    if (c->which == 0) {
        c->t->score_turbo_lanes(c->x, c->rec, c->nk, c->q, (size_t)c->kl, NQ, c->S, (size_t)c->nk, TQ_ATTN_NO_AHEAD);
        sink += c->S[c->nk / 2];
    } else {
        memset(c->acc, 0, sizeof(float) * (size_t)c->kl * NQ);
        c->t->accum_turbo_lanes(c->x, c->rec, c->nk, c->p, (size_t)c->nk, NQ, c->acc, (size_t)c->kl, TQ_ATTN_NO_AHEAD);
        sink += c->acc[c->kl / 2];
    }
}

static void run_tile(const call *c) {
    int w = c->x->row_floats, nk = c->nk;
    if (c->which) memset(c->acc, 0, sizeof(float) * (size_t)w * NQ);
    for (int b0 = 0; b0 < nk; b0 += TILE_KB) {
        int nb = nk - b0 < TILE_KB ? nk - b0 : TILE_KB;
        tq_record_decode_rows(&c->ks, c->x, c->rec + (size_t)b0 * c->x->rec_bytes, (size_t)nb, c->tl, c->ts);
        if (c->which == 0) {
            float o[NQ];
            for (int r = 0; r < nb; r++) {
                c->t->dot_multi(c->tl + (size_t)r * c->ts, c->qr, (size_t)w, NQ, w, o);
                for (int j = 0; j < NQ; j++) c->S[(size_t)j * (size_t)nk + (size_t)(b0 + r)] = o[j];
            }
        } else {
            for (int j = 0; j < NQ; j++)
                c->t->accum_rows(c->acc + (size_t)j * (size_t)w, c->p + (size_t)j * (size_t)nk + (size_t)b0, c->tl,
                                 c->ts, nb, w);
        }
    }
    sink += c->which ? c->acc[w / 2] : c->S[nk / 2];
}

/* Best ns per record of call c (at least 3 runs, more until min_ms is spent; min_ms 0: one). */
static double time_call(const call *c, double min_ms) {
    double best = 1e300, spent = 0;
    int runs = 0;
    while (runs < 3 || (spent < min_ms * 1e6 && runs < 1000)) {
        double t0 = now_ns();
        if (c->tile)
            run_tile(c);
        else
            run_lanes(c);
        double dt = now_ns() - t0;
        spent += dt;
        runs++;
        if (dt < best) best = dt;
        if (min_ms <= 0 && runs >= 1) break;
    }
    return best / c->nk;
}

int main(int argc, char **argv) {
    double min_ms = argc > 1 ? atof(argv[1]) : 30.0;
    int nk = argc > 2 ? atoi(argv[2]) : 4096;
    int only_dim = 0, only_tr = 0, only_sp = 0, two_state = 0; /* ":2" */
    int tile = 0; /* 1: the tile too; 2: only its scores; 3: only its value sums */
    if (argc > 4) {
        tile = strcmp(argv[4], "tile") == 0 ? 1 : strcmp(argv[4], "tile:score") == 0 ? 2
             : strcmp(argv[4], "tile:value") == 0 ? 3 : -1;
        if (tile < 0 || argc > 5) nk = 0;
    }
    float only_bits = 0;
    char tags[16] = "";
    if (argc > 3) {
        int got = sscanf(argv[3], "%d:%f%15s", &only_dim, &only_bits, tags);
        two_state = strstr(tags, ":2") != NULL;
        only_tr = strstr(tags, ":t") != NULL || two_state;
        only_sp = strstr(tags, ":s") != NULL;
        if (got < 2 || strlen(tags) != 2u * (unsigned)(only_tr + only_sp)) nk = 0;
    }
    if (nk < 1 || nk > 1 << 20 || !(min_ms >= 0)) {
        fprintf(stderr, "usage: bench_attn_lanes [min_ms_per_figure [nk [DIM:BITS[:t|:2][:s] [tile|tile:score|tile:value]]]]\n");
        return 2;
    }
    const tq_attn_kernels *tabs[7] = {tq_attn_kernels_avx2(), tq_attn_kernels_avx2_int8(),
                                      tq_attn_kernels_avxvnni(), tq_attn_kernels_avx512(),
                                      tq_attn_kernels_avx512_vnni(), tq_attn_kernels_neon(),
                                      tq_attn_kernels_neon_dot()};
    const int need[7] = {TQ_KERNELS_AVX2, TQ_KERNELS_AVX2, TQ_KERNELS_AVX2, TQ_KERNELS_AVX512,
                         TQ_KERNELS_AVX512, TQ_KERNELS_NEON, TQ_KERNELS_NEON};
    const int base[7] = {0, 0, 0, 3, 3, 5, 5};
    /* tr: trellis-coded indices (the tables that read them; the others skip the shape); sp: the
     * key split at a whole width */
    static const struct { int dim; float bits; int tr, sp; } cfgs[] = {
        {128, 2, 0, 0}, {128, 3, 0, 0}, {128, 3, 0, 1}, {128, 3.5f, 0, 0}, {128, 4, 0, 0}, {256, 3, 0, 0},
        {256, 3, 0, 1}, {256, 4, 0, 0}, {64, 3, 0, 0}, {64, 2.5f, 0, 0}, {128, 3, 1, 0}, {128, 3, 1, 1},
        {128, 4, 1, 0}, {256, 3, 1, 0}, {256, 3, 1, 1}, {256, 4, 1, 0}, {64, 3, 0, 1}, {64, 3, 1, 0},
        {64, 3, 1, 1}, {64, 2, 0, 0}, {64, 3.5f, 0, 0}, {64, 4, 0, 0}, {64, 4, 1, 0},
        {128, 3.5f, 1, 0}, {128, 2.5f, 1, 0}, {64, 3.5f, 1, 0}, {64, 2, 1, 0}, {64, 2.5f, 1, 0}};
    printf("%-12s %4s %9s %8s %10s %9s %9s\n", "table", "dim", "bits", "score ns", "accum ns",
           "score x", "accum x");
    for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs; ci++) {
        int d = cfgs[ci].dim;
        if (only_dim && (d != only_dim || cfgs[ci].bits != only_bits || cfgs[ci].tr != only_tr ||
                         cfgs[ci].sp != only_sp))
            continue;
        tq_codec_config cc;
        tq_codec_config_init(&cc, d, cfgs[ci].bits, TQ_VARIANT_MSE);
        cc.trellis = cfgs[ci].tr ? (two_state ? TQ_TRELLIS_TWO_STATE : 1) : 0;
        if (cfgs[ci].sp) cc.split = TQ_SPLIT_BLOCK, cc.block_dim = d / 2, cc.block_bits = (int)cfgs[ci].bits + 1;
        tq_codec *codec = NULL;
        if (tq_codec_create(&codec, &cc) != TQ_OK) return 1;
        tq_record kx, vx;
        if (tq_codec_describe(codec, 0, &kx) != TQ_OK || tq_codec_describe(codec, 1, &vx) != TQ_OK) return 1;
        int kl = tq_record_lanes(&kx);
        size_t rb = kx.rec_bytes;
        uint8_t *rec = malloc(rb * (size_t)nk);
        float *v = malloc(sizeof(float) * (size_t)d * (size_t)nk);
        float *q = calloc((size_t)kl * NQ, sizeof(float)), *qn = malloc(sizeof(float) * (size_t)d);
        float *p = malloc(sizeof(float) * (size_t)nk * NQ), *S = malloc(sizeof(float) * (size_t)nk * NQ);
        size_t ts = ((size_t)kx.row_floats + 15) / 16 * 16;
        float *acc = malloc(sizeof(float) * (size_t)(kl > kx.row_floats ? kl : kx.row_floats) * NQ);
        float *qr = malloc(sizeof(float) * (size_t)kx.row_floats * NQ), *tl = malloc(sizeof(float) * ts * TILE_KB);
        if (!rec || !v || !q || !qn || !p || !S || !acc || !qr || !tl || !kl) return 1;
        for (size_t i = 0; i < (size_t)d * (size_t)nk; i++) v[i] = gauss();
        if (tq_codec_encode(codec, v, (size_t)nk, rec, rb * (size_t)nk) != TQ_OK) return 1;
        for (int j = 0; j < NQ; j++) {
            for (int i = 0; i < d; i++) qn[i] = gauss();
            tq_record_to_lanes(&kx, qn, q + (size_t)j * (size_t)kl);
            for (int i = 0; i < kx.row_floats; i++) qr[(size_t)j * (size_t)kx.row_floats + (size_t)i] = i < d ? qn[i] : 0.0f;
        }
        for (size_t i = 0; i < (size_t)nk * NQ; i++) p[i] = (float)fabs(gauss()) / (float)nk;
        double ns[7][2];
        for (int ti = 0; ti < 7; ti++) {
            const tq_attn_kernels *t = tabs[ti];
            ns[ti][0] = ns[ti][1] = 0;
            if (!t || !tq_kernels_supported(need[ti])) continue;
            call c = {t, *tq_kernel_set_get(), 0, 0, nk, kl, &kx, rec, q, qr, p, S, acc, tl, ts};
            c.ks.attn = t;
            if (tile && base[ti] == ti) { /* a float table through the tile */
                c.tile = 1;
                c.which = 0;
                double a = tile != 3 ? time_call(&c, min_ms) : 0;
                c.which = 1, c.x = &vx;
                double b = tile != 2 ? time_call(&c, min_ms) : 0;
                c.tile = 0, c.x = &kx;
                char tn[32];
                snprintf(tn, sizeof tn, "%s tile", t->name);
                printf("%-12s %4d %5g%-4s %8.2f %10.2f %9s %9s\n", tn, d, (double)cfgs[ci].bits,
                       cfgs[ci].tr ? (two_state ? ":2" : ":t") : cfgs[ci].sp ? ":s" : "", a, b, "-", "-");
            }
            if (tile > 1 || !t->score_turbo_lanes || !tq_attn_reads_lanes(t, &kx)) continue;
            c.which = 0;
            ns[ti][0] = time_call(&c, min_ms);
            c.which = 1, c.x = &vx;
            ns[ti][1] = time_call(&c, min_ms);
            double b0 = ns[base[ti]][0], b1 = ns[base[ti]][1];
            char r0[16] = "-", r1[16] = "-"; /* the float table reads no trellis codes */
            if (b0 > 0) snprintf(r0, sizeof r0, "%.2fx", b0 / ns[ti][0]);
            if (b1 > 0) snprintf(r1, sizeof r1, "%.2fx", b1 / ns[ti][1]);
            printf("%-12s %4d %5g%-4s %8.2f %10.2f %9s %9s\n", t->name, d, (double)cfgs[ci].bits,
                   cfgs[ci].tr && cfgs[ci].sp ? (two_state ? ":2:s" : ":t:s") : cfgs[ci].tr ? (two_state ? ":2" : ":t")
                   : cfgs[ci].sp ? ":s" : "", ns[ti][0], ns[ti][1],
                   r0, r1);
        }
        free(rec), free(v), free(q), free(qn), free(p), free(S), free(acc), free(qr), free(tl);
        tq_codec_free(codec);
    }
    return 0;
}
