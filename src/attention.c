/*
 * Attention on the KV cache's compressed codes (doc/kvcache.md §4).
 *
 * Because the rotation R of a TurboQuant codec is orthogonal, ⟨q, k̂⟩ = ⟨R q, R k̂⟩: each query
 * head is prepared (rotated) once, and every compressed key is scored in the rotated basis.
 * Values accumulate in their codec's rotated basis too, and one inverse rotation per query
 * head ends the call. The raw fp16 part is attended exactly, in the original basis, into a
 * second accumulator that the same online softmax rescales. The rotated block formats
 * (q8_0r / q4_0r) work the same way with their Walsh–Hadamard rotation: queries rotated once,
 * values summed in the rotated basis and rotated back once per query head.
 *
 * Work is cut into tasks (KV head, block of up to QB query positions, key split). A task walks
 * its key range in blocks of at most KB keys (KB_FUSED for fused TURBO decode) that never
 * straddle a page or the raw/compressed boundary; it decodes each block's K codes once into a
 * small tile shared by all G·QB query rows of the group (GQA: a code is decoded once per
 * group), scores, updates each row's online softmax (running max m, sum l), decodes the V
 * tile once and accumulates (decode reads the codes in registers instead: the fused kernels).
 * Splits of one (head, query block) merge with log-sum-exp weights (flash-decoding), so one
 * KV head at long context still keeps every thread busy. Task boundaries and the merge order
 * never depend on the thread count: any pool gives the same bytes (make_plan).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn_kernels.h"
#include "internal.h"
#include "kv_predict.h"
#include "kvcache_internal.h"

#define KB 64 /* keys per tile */
#define KB_FUSED 256 /* keys per block of the fused TURBO decode (a page): fewer calls, each
                        setting up its lookup registers once (the f16 kernels stay at KB: their
                        column sweeps over 256 fp16 rows leave L1) */
/* Query positions per task up to which decode uses the fused kernels (codes read in
 * registers, once per position) instead of a decoded tile shared by all positions. */
#define FUSED_QUERIES 2
#define QB 64 /* query positions per task */
/* Key splits (make_plan): at least SPLIT_TASKS tasks, one split per SPLIT_KEYS keys beyond
 * that, at most SPLIT_MAX_TASKS tasks. Sequences up to SPLIT_KEYS long split exactly as the
 * earlier thread-count rule did with 2 threads, so figures measured that way stand. */
#define SPLIT_TASKS 8
#define SPLIT_KEYS 2048
#define SPLIT_MAX_TASKS 32

/* The fields every sized tq_attn_params has (doc/api.md): struct_size and scale. */
#define ATTN_PARAMS_MIN offsetof(tq_attn_params, causal)

static void attn_params_defaults(tq_attn_params *p, int head_dim_k) {
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->scale = head_dim_k > 0 ? (float)(1.0 / sqrt((double)head_dim_k)) : 1.0f;
    p->causal = 1;
}

void tq_attn_params_init_sized(tq_attn_params *p, size_t p_size, int head_dim_k) {
    tq_attn_params d;
    attn_params_defaults(&d, head_dim_k);
    if (p) tq_sized_out(p, p_size, &d, sizeof d, ATTN_PARAMS_MIN, 1);
}

/* Checks the arguments of an attention call; *p becomes the caller's params as this version's
 * struct (missing fields at their defaults). pos: the query positions (tq_kv_attention_at), or
 * NULL: the last n_queries. */
static tq_status check_args(const tq_kv_cache *c, int layer, const float *q, int n_q_heads,
                            size_t n_queries, const int64_t *pos, const tq_attn_params *given,
                            const float *out, size_t out_capacity, tq_attn_params *p) {
    if (!c || !given || (n_queries && (!q || !out))) return TQ_ERR_NULL;
    attn_params_defaults(p, 1);
    if (tq_sized_in(p, given, sizeof *p, ATTN_PARAMS_MIN)) return TQ_ERR_INVALID;
    if (layer < 0 || layer >= c->cfg.n_layers) return TQ_ERR_INVALID;
    if (n_q_heads < 1 || n_q_heads % c->cfg.n_kv_heads) return TQ_ERR_INVALID;
    if (!pos && n_queries > c->layers[layer].len) return TQ_ERR_INVALID;
    if (!(isfinite(p->scale) && p->scale > 0.0f)) return TQ_ERR_INVALID;
    if (p->sliding_window < 0 || !(p->softcap >= 0.0f) || !isfinite(p->softcap))
        return TQ_ERR_INVALID;
    /* A windowed layer's dropped positions must be out of every query's sight. */
    const tq_kv_layer *l = &c->layers[layer];
    size_t first = pos ? SIZE_MAX : l->len - n_queries; /* the lowest query position */
    for (size_t i = 0; pos && i < n_queries; i++) {
        if (pos[i] < 0 || (uint64_t)pos[i] >= l->len) return TQ_ERR_INVALID;
        if ((size_t)pos[i] < first) first = (size_t)pos[i];
    }
    if (n_queries && l->dropped) {
        size_t w = (size_t)p->sliding_window;
        if (!p->causal || !w || first + 1 < w || first + 1 - w < l->dropped) return TQ_ERR_INVALID;
    }
    if (out_capacity / (size_t)n_q_heads / (size_t)c->cfg.head_dim_v < n_queries)
        return TQ_ERR_CAPACITY;
    return TQ_OK;
}

/* ---- sizes ---- */

typedef struct plan {
    int H, G, nqh, dk, dv;
    int kw, vw;   /* compressed-part row floats of K and V */
    int kl, vl;   /* lane-layout row floats of K and V (tq_record_lanes), 0: none */
    int va;       /* floats of the compressed part's accumulator: max(vw, vl) */
    int kt, vt;   /* tile row stride: max(kw, dk), max(vw, dv) rounded up to 16 */
    size_t qb;    /* query positions per task */
    size_t n_qb;
    int n_split;  /* key splits per (head, query block) */
    int max_split; /* the most n_split any sequence length gives (workspace size) */
    size_t rows;  /* G·qb */
    size_t s_floats; /* score buffer: rows·KB, or G·FUSED_QUERIES·KB_FUSED if more */
    size_t row_floats;  /* partial per row: m, l, acc_c (va), acc_r (dv), rounded to 16 */
    size_t part_floats; /* per task */
    size_t scratch_floats; /* per thread */
} plan;

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

static void make_plan(const tq_kv_cache *c, const tq_kv_layer *l, int n_q_heads,
                      size_t n_queries, plan *pl) {
    pl->H = c->cfg.n_kv_heads;
    pl->G = n_q_heads / pl->H;
    pl->nqh = n_q_heads;
    pl->dk = c->cfg.head_dim_k;
    pl->dv = c->cfg.head_dim_v;
    pl->kw = l->k.row_floats;
    pl->vw = l->v.row_floats;
    pl->kl = tq_record_lanes(&l->k);
    pl->vl = tq_record_lanes(&l->v);
    pl->va = pl->vl > pl->vw ? pl->vl : pl->vw;
    pl->kt = (int)round16((size_t)(pl->kw > pl->dk ? pl->kw : pl->dk));
    pl->vt = (int)round16((size_t)(pl->vw > pl->dv ? pl->vw : pl->dv));
    pl->qb = n_queries < QB ? (n_queries ? n_queries : 1) : QB;
    pl->n_qb = n_queries ? (n_queries + pl->qb - 1) / pl->qb : 0;
    /* Key splits: a function of the shape and the sequence length alone, never of n_threads,
     * so that the result is bit-identical for any number of threads (each split is summed by
     * one task in key order, and the merge adds the splits in split order). At least
     * SPLIT_TASKS (head, query block, split) tasks, more as the sequence grows (one split per
     * SPLIT_KEYS keys), at most SPLIT_MAX_TASKS; the workspace holds max_split. */
    size_t base = (size_t)pl->H * (pl->n_qb ? pl->n_qb : 1);
    size_t lo = (SPLIT_TASKS + base - 1) / base, hi = (SPLIT_MAX_TASKS + base - 1) / base;
    size_t by_len = (l->len + SPLIT_KEYS - 1) / SPLIT_KEYS;
    size_t n = by_len > lo ? by_len : lo;
    pl->max_split = (int)hi;
    pl->n_split = (int)(n < hi ? n : hi);
    pl->rows = (size_t)pl->G * pl->qb;
    pl->row_floats = round16(2 + (size_t)pl->va + (size_t)pl->dv);
    pl->part_floats = pl->rows * pl->row_floats;
    pl->s_floats = pl->rows * KB;
    if ((size_t)pl->G * FUSED_QUERIES * KB_FUSED > pl->s_floats)
        pl->s_floats = (size_t)pl->G * FUSED_QUERIES * KB_FUSED;
    /* ktile, vtile, S, tmp (G floats), merge_fn's two rows, then the key panels of the tile
     * path (score_panels) */
    pl->scratch_floats = KB * (size_t)pl->kt + KB * (size_t)pl->vt + pl->s_floats +
                         round16((size_t)pl->G) + 2 * round16((size_t)pl->vt) + KB * (size_t)pl->kt;
}

static size_t work_floats(const plan *pl, size_t n_queries, int n_threads) {
    return round16(n_queries * (size_t)pl->nqh * (size_t)pl->kw) +
           round16(n_queries * (size_t)pl->nqh * (size_t)pl->kl) +
           round16(n_queries * (size_t)pl->nqh) + round16(n_queries * (size_t)pl->nqh * (size_t)pl->dk) +
           (size_t)pl->H * pl->n_qb * (size_t)pl->max_split * pl->part_floats +
           (size_t)n_threads * pl->scratch_floats;
}

size_t tq_kv_attention_workspace_size(const tq_kv_cache *c, int layer, int n_q_heads,
                                      size_t n_queries, int n_threads) {
    if (!c || layer < 0 || layer >= c->cfg.n_layers || n_q_heads < 1 ||
        n_q_heads % c->cfg.n_kv_heads || n_threads < 1)
        return 0;
    /* The plan's split of the sequence depends on the chunk size, so the need is not monotone
     * in n_queries; return the largest over every chunk up to n_queries, so that one workspace
     * sized for the largest chunk serves every smaller one (plans are O(1) to make). */
    size_t best = 0;
    for (size_t n = 1; n <= n_queries; n++) {
        plan pl;
        make_plan(c, &c->layers[layer], n_q_heads, n, &pl);
        size_t w = work_floats(&pl, n, n_threads);
        if (w > best) best = w;
    }
    return best * sizeof(float) + 64;
}

/* ---- the fast path ---- */

enum { FUSED_NONE = 0, FUSED_TURBO = 1, FUSED_F16 = 2 };

/* Which fused kernel reads tensor x (NULL: the raw fp16 part); FUSED_NONE: use the tile. A
 * TURBO tensor needs score_turbo / accum_turbo (the scalar table) or a lane layout and the
 * lane kernels (the SIMD tables, which have no others): on AVX2 and AVX-512 a tensor with a
 * segment count not a multiple of 8 takes the tile. */
static int fused_kind(const tq_attn_kernels *ak, const tq_kv_tensor *x, int is_key) {
    if (!x || x->format == TQ_KV_F16)
        return (is_key ? ak->score_f16 != NULL : ak->accum_f16 != NULL) ? FUSED_F16 : FUSED_NONE;
    int lanes = tq_record_lanes(x) > 0 && tq_attn_reads_lanes(ak, x);
    if (tq_record_trellis(x)) /* only lane kernels read trellis codes */
        return lanes && (is_key ? ak->score_turbo_lanes : ak->accum_turbo_lanes) ? FUSED_TURBO
                                                                                 : FUSED_NONE;
    if (tq_attn_fused_turbo(x) &&
        (is_key ? ak->score_turbo != NULL || (lanes && ak->score_turbo_lanes != NULL)
                : ak->accum_turbo != NULL || (lanes && ak->accum_turbo_lanes != NULL)))
        return FUSED_TURBO;
    return FUSED_NONE;
}

typedef struct attn_ctx {
    const tq_kv_cache *c;
    const tq_kv_layer *l;
    const tq_kernel_set *ks; /* the kernels of this call */
    const tq_attn_kernels *ak; /* ks->attn */
    plan pl;
    tq_attn_params p;
    size_t n_q, len, q0; /* query i sits at position q0 + i, */
    const int64_t *pos;  /* or at pos[i] when not NULL (tq_kv_attention_at) */
    const float *q;      /* (n_q, nqh, dk) */
    float *qprep;        /* (n_q, nqh, kw) */
    float *qlane;        /* (n_q, nqh, kl): qprep in the lane layout, when lanes_k */
    int lanes_k, lanes_v; /* decode reads K / V with the lane kernels */
    float *qmu;          /* (n_q, nqh) ⟨q, key mean⟩, or its part that does not turn */
    float *qab;          /* (n_q, nqh, dk): with a mean that turns with RoPE (n_turn or n_fast
                            > 0), each row's A, B per turning and fast pair
                            (tq_key_transform_rope_terms) */
    int n_turn, n_fast;  /* turning pairs (block-centred) and fast pairs (at each key's angle) */
    const float *ftab;   /* the fast pairs' cos, sin table (tq_key_transform_fast_table) */
    float *parts;        /* (H, n_qb, n_split, rows, row_floats) */
    float *scratch;      /* (threads, scratch_floats) */
    float *out;          /* (n_q, nqh, dv) */
    atomic_int corrupt;
} attn_ctx;

static inline float transform_score(const attn_ctx *x, float s) {
    s *= x->p.scale;
    if (x->p.softcap > 0.0f) s = x->p.softcap * tanhf(s / x->p.softcap);
    return s;
}

static inline size_t qpos(const attn_ctx *x, size_t i) {
    return x->pos ? (size_t)x->pos[i] : x->q0 + i;
}

/* Key range [lo, hi) that query position pos may see. */
static inline void row_range(const attn_ctx *x, size_t pos, size_t *lo, size_t *hi) {
    *hi = x->p.causal ? pos + 1 : x->len;
    size_t w = (size_t)x->p.sliding_window;
    *lo = w && pos + 1 > w ? pos + 1 - w : 0;
}

/* What a task reads after the values of the block ending at b1 (the lane kernels prefetch it
 * along the way, tq_attn_ahead): the keys of the next block, when it is compressed and taken
 * by the fused kernels (the blocks of such a task are pages, one head's records contiguous). */
static tq_attn_ahead next_keys(const attn_ctx *x, size_t b1, size_t t1, int h) {
    const tq_kv_layer *l = x->l;
    size_t end = (b1 / TQ_KV_P + 1) * TQ_KV_P;
    if (end > t1) end = t1;
    if (end > l->n_comp) end = l->n_comp;
    if (b1 >= end || b1 < tq_kv_sink_len(x->c, l)) return TQ_ATTN_NO_AHEAD;
    return (tq_attn_ahead){tq_kv_krec(x->c, l, b1, h), (end - b1) * l->k.rec_bytes};
}

/* The blocks of TQ_KEY_MEAN_BLOCK positions a tile may touch (KB_FUSED keys, unaligned). */
#define TURN_BLOCKS (KB_FUSED / TQ_KEY_MEAN_BLOCK + 2)
/* A task's cos, sin move on one block at a time in float, computed afresh (in double) at
 * blocks that are multiples of this: the float rotations then drift by a few 10⁻⁵ at most. */
#define TURN_RESEED 256

/* Si[g·sb + t − v0] += ⟨q_g, R_c μ⟩ for keys t in [v0, v1) and the G query heads of row
 * qrow…qrow + G − 1, c the centre of t's block of TQ_KEY_MEAN_BLOCK positions: per block, G dot
 * products of the rows' A, B (x->qab) with the cos, sin there (cst: blocks cfirst, cfirst + 1,
 * …, TQ_MAX_DIM floats each; one dot_multi). The fast pairs add ⟨q_g, R_t μ⟩ at each key's own
 * angle: their A, B turned to the block's start T (cos, sin after the turning pairs' in cst),
 * then Σ_k A'_k cos(θ_k i) + B'_k sin(θ_k i) for i = t − T from the table. */
static void add_turning_mean(const attn_ctx *x, size_t qrow, int G, size_t v0, size_t v1, const float *cst,
                             size_t cfirst, float *Si, size_t sb) {
    const int nt = x->n_turn, nf = x->n_fast, n2 = 2 * nt;
    const size_t dk = (size_t)x->pl.dk;
    float o[TQ_MAX_DIM];
    for (size_t b = v0 / TQ_KEY_MEAN_BLOCK; b <= (v1 - 1) / TQ_KEY_MEAN_BLOCK; b++) {
        const float *cb = cst + (b - cfirst) * (size_t)TQ_MAX_DIM;
        if (nt) x->ak->dot_multi(cb, x->qab + qrow * dk, dk, G, n2, o);
        size_t T = b * TQ_KEY_MEAN_BLOCK;
        size_t e0 = T > v0 ? T : v0;
        size_t e1 = T + TQ_KEY_MEAN_BLOCK < v1 ? T + TQ_KEY_MEAN_BLOCK : v1;
        if (nt)
            for (int g = 0; g < G; g++) {
                float *s = Si + (size_t)g * sb - v0;
                for (size_t t = e0; t < e1; t++) s[t] += o[g];
            }
        if (!nf) continue;
        /* coefficients of the table's rows (pair k: cos row 2k, sin row 2k + 1) per head */
        float coef[4 * 2 * TQ_KEY_MEAN_FAST];
        const float *cT = cb + n2, *sT = cT + nf;
        for (int g0 = 0; g0 < G; g0 += 4) {
            int gn = G - g0 < 4 ? G - g0 : 4;
            for (int g = 0; g < gn; g++) {
                const float *ab = x->qab + (qrow + (size_t)(g0 + g)) * dk + n2;
                for (int k = 0; k < nf; k++) {
                    coef[g * 2 * nf + 2 * k] = ab[k] * cT[k] + ab[nf + k] * sT[k];
                    coef[g * 2 * nf + 2 * k + 1] = ab[nf + k] * cT[k] - ab[k] * sT[k];
                }
            }
            float *acc = Si + (size_t)g0 * sb + (e0 - v0);
            const float *rows = x->ftab + (e0 - T);
            if (x->ak->accum_multi)
                x->ak->accum_multi(acc, sb, coef, (size_t)(2 * nf), gn, rows, TQ_KEY_MEAN_BLOCK, 2 * nf, (int)(e1 - e0));
            else
                for (int g = 0; g < gn; g++)
                    x->ak->accum_rows(acc + (size_t)g * sb, coef + g * 2 * nf, rows, TQ_KEY_MEAN_BLOCK, 2 * nf,
                                      (int)(e1 - e0));
        }
    }
}

static void task_fn(void *ctxp, size_t task, int thread) {
    attn_ctx *x = ctxp;
    const plan *pl = &x->pl;
    const tq_kv_cache *c = x->c;
    const tq_kv_layer *l = x->l;
    const tq_attn_kernels *ak = x->ak;
    int split = (int)(task % (size_t)pl->n_split);
    size_t qbi = (task / (size_t)pl->n_split) % pl->n_qb;
    int h = (int)(task / ((size_t)pl->n_split * pl->n_qb));
    size_t i0 = qbi * pl->qb, i1 = i0 + pl->qb < x->n_q ? i0 + pl->qb : x->n_q;
    int G = pl->G;
    float *part = x->parts + task * pl->part_floats;
    float *sc = x->scratch + (size_t)thread * pl->scratch_floats;
    float *ktile = sc, *vtile = ktile + KB * (size_t)pl->kt, *S = vtile + KB * (size_t)pl->vt;
    float *tmp = S + pl->s_floats;
    float *panels = tmp + round16((size_t)G) + 2 * round16((size_t)pl->vt);

    size_t nrows = (i1 - i0) * (size_t)G;
    for (size_t r = 0; r < nrows; r++) {
        float *pr = part + r * pl->row_floats;
        pr[0] = -INFINITY;
        pr[1] = 0.0f;
        memset(pr + 2, 0, sizeof(float) * (size_t)(pl->va + pl->dv));
    }
    /* The keys any row of this query block sees, cut into n_split pieces. */
    size_t lo0, hi0, lo1, hi1;
    row_range(x, qpos(x, i0), &lo0, &hi0);
    row_range(x, qpos(x, i1 - 1), &lo1, &hi1);
    size_t klo = lo0, khi = hi1 > hi0 ? hi1 : hi0;
    for (size_t i = i0; x->pos && i < i1; i++) { /* positions in any order: the union */
        row_range(x, qpos(x, i), &lo1, &hi1);
        if (lo1 < klo) klo = lo1;
        if (hi1 > khi) khi = hi1;
    }
    if (khi <= klo) return;
    size_t chunk = ((khi - klo + (size_t)pl->n_split - 1) / (size_t)pl->n_split + KB - 1) / KB * KB;
    size_t t0 = klo + (size_t)split * chunk;
    size_t t1 = t0 + chunk < khi ? t0 + chunk : khi;
    /* Decode (few query positions) reads the records in registers, no tile; S rows then
     * hold KB_FUSED scores, and compressed blocks are KB_FUSED long when both K and V take
     * the fused TURBO kernels. */
    int few = i1 - i0 <= FUSED_QUERIES;
    size_t sb = few ? KB_FUSED : KB;
    /* Which kernels read K and V of the compressed part (c) and of the raw part (r): fixed for
     * the task, so chosen once here. */
    int fk_c = few ? fused_kind(ak, &l->k, 1) : FUSED_NONE, fv_c = few ? fused_kind(ak, &l->v, 0) : FUSED_NONE;
    int fk_r = few ? fused_kind(ak, NULL, 1) : FUSED_NONE, fv_r = few ? fused_kind(ak, NULL, 0) : FUSED_NONE;
    int big = fk_c == FUSED_TURBO && fv_c == FUSED_TURBO;
    /* Prefill scores a block's keys against all rows at once (score_panels): S rows are then
     * indexed from the block's first key, b0, not from each row's first visible key. */
    const int tile_scores = !few && ak->score_panels != NULL;
    /* Attention sinks: keys below ns are read exact from the sink store, as the raw part is
     * (fp16 rows, the raw kernels and accumulator); a block is sink, compressed or raw. */
    const size_t ns = tq_kv_sink_len(c, l);
    /* Predicted keys (kv_predict.h): a compressed block's scores are summed along their chains
     * (the kernels' chain_scan), so each row scores its keys from its first one's chain start, cs ≤ v0
     * (the tile from kb0, the chain start of b0), and its scores sit v0 − cs into its S row. */
    const float rho = tq_kv_pred_rho(l, h);
    /* Decode on the integer lane kernels: each row's queries prepared once for all the task's
     * pages (prep_turbo_lanes), in the key panels' scratch, which decode does not use. */
    void *qprep[FUSED_QUERIES] = {NULL};
    if (few && fk_c == FUSED_TURBO && x->lanes_k && ak->prep_turbo_lanes) {
        size_t pb = ak->lanes_prep_bytes(&l->k, G);
        if (pb && pb * (i1 - i0) <= KB * (size_t)pl->kt * sizeof(float))
            for (size_t i = i0; i < i1; i++) {
                qprep[i - i0] = (char *)(void *)panels + (i - i0) * pb;
                const size_t qrow = i * (size_t)pl->nqh + (size_t)h * (size_t)G;
                ak->prep_turbo_lanes(&l->k, x->qlane + qrow * (size_t)pl->kl, (size_t)pl->kl, G, qprep[i - i0]);
            }
    }
    /* A turning key mean: cos, sin of each turning pair at the centres of the tile's blocks of
     * TQ_KEY_MEAN_BLOCK positions, then of each fast pair at their starts (cs), carried from
     * tile to tile by one rotation per block. */
    const int nt = x->n_turn + x->n_fast;
    float cs_cur[TQ_MAX_DIM], cst[TURN_BLOCKS * TQ_MAX_DIM];
    size_t cs_blk = (size_t)-1, cfirst = 0;
    for (size_t b0 = t0; b0 < t1;) {
        int comp = b0 < l->n_comp && b0 >= ns;
        size_t bl = big && comp ? KB_FUSED : KB;
        size_t b1 = b0 + bl < t1 ? b0 + bl : t1;
        size_t page_end = (b0 / TQ_KV_P + 1) * TQ_KV_P;
        if (b1 > page_end) b1 = page_end;
        if (comp && b1 > l->n_comp) b1 = l->n_comp;
        if (b0 < ns && b1 > ns) b1 = ns;
        const int pred = comp && rho != 0.0f;
        const size_t kb0 = pred ? tq_kv_pred_chain_start(c, l, b0) : b0; /* chain starts divide pages */
        if (b1 > kb0 + bl) b1 = kb0 + bl; /* a row's scores from its chain start fit its S row */
        size_t nb = b1 - b0, nbk = b1 - kb0;
        if (comp && nt) {
            cfirst = b0 / TQ_KEY_MEAN_BLOCK;
            for (size_t b = cfirst; b <= (b1 - 1) / TQ_KEY_MEAN_BLOCK; b++) {
                if (cs_blk != b) {
                    /* one block on: a rotation; afresh every TURN_RESEED blocks (float error) */
                    if (cs_blk + 1 == b && b % TURN_RESEED)
                        tq_key_transform_block_cs_next(l->kt, cs_cur);
                    else
                        tq_key_transform_block_cs(l->kt, b, cs_cur);
                    cs_blk = b;
                }
                memcpy(cst + (b - cfirst) * (size_t)TQ_MAX_DIM, cs_cur, 2 * (size_t)nt * sizeof(float));
            }
        }
        /* Which query positions see any key of the block. */
        int any = 0;
        for (size_t i = i0; i < i1 && !any; i++) {
            size_t lo, hi;
            row_range(x, qpos(x, i), &lo, &hi);
            any = lo < b1 && hi > b0;
        }
        if (!any) {
            b0 = b1;
            continue;
        }
        int kw = comp ? pl->kw : pl->dk, vw = comp ? pl->vw : pl->dv;
        /* Prefill: the tile, decoded once and reused by every query position of the block. */
        int fk = comp ? fk_c : fk_r, fv = comp ? fv_c : fv_r;
        if (fk) {
        } else if (comp) {
            if (!tq_record_decode_rows(x->ks, &l->k, tq_kv_krec(c, l, kb0, h), nbk, ktile, (size_t)pl->kt))
                atomic_store(&x->corrupt, 1);
        } else {
            tq_record_f16_rows(x->ks, tq_kv_kexact(c, l, b0, h), nb, pl->dk, ktile, (size_t)pl->kt);
        }
        if (tile_scores) {
            tq_attn_key_panels(ktile, (size_t)pl->kt, (int)nbk, kw, panels);
            const size_t qrow0 = i0 * (size_t)pl->nqh + (size_t)h * (size_t)G;
            const float *q0 = comp ? x->qprep + qrow0 * (size_t)pl->kw : x->q + qrow0 * (size_t)pl->dk;
            const size_t qw = comp ? (size_t)pl->kw : (size_t)pl->dk;
            ak->score_panels(panels, (int)nbk, kw, q0, (size_t)pl->nqh * qw, G, qw, (int)(i1 - i0), S, sb);
        }
        /* Scores and online-softmax updates of every row. */
        for (size_t i = i0; i < i1; i++) {
            size_t lo, hi;
            row_range(x, qpos(x, i), &lo, &hi);
            size_t v0 = lo > b0 ? lo : b0, v1 = hi < b1 ? hi : b1;
            if (v0 >= v1) continue;
            size_t qrow = i * (size_t)pl->nqh + (size_t)h * (size_t)G;
            const float *qv = comp ? x->qprep + qrow * (size_t)pl->kw : x->q + qrow * (size_t)pl->dk;
            /* The row's scores start at key u0 (its chain start where keys are predicted), Si
             * at key v0 */
            const size_t u0 = pred ? tq_kv_pred_chain_start(c, l, v0) : v0;
            float *Su = S + (i - i0) * (size_t)G * sb + (tile_scores ? u0 - kb0 : 0);
            float *Si = Su + (v0 - u0);
            if (tile_scores) {
            } else if (fk == FUSED_TURBO && x->lanes_k) {
                /* ahead: the values of these keys, summed next */
                tq_attn_ahead next = fv == FUSED_TURBO ? (tq_attn_ahead){tq_kv_vrec(c, l, v0, h), (v1 - v0) * l->v.rec_bytes}
                                                       : TQ_ATTN_NO_AHEAD;
                const float *ql = x->qlane + qrow * (size_t)pl->kl;
                const uint8_t *kr = tq_kv_krec(c, l, u0, h);
                if (!(qprep[i - i0] ? ak->score_turbo_lanes_prepared(&l->k, kr, (int)(v1 - u0), qprep[i - i0], ql,
                                                                     (size_t)pl->kl, G, Su, sb, next)
                                    : ak->score_turbo_lanes(&l->k, kr, (int)(v1 - u0), ql, (size_t)pl->kl, G, Su, sb,
                                                            next)))
                    atomic_store(&x->corrupt, 1);
            } else if (fk == FUSED_TURBO) {
                if (!ak->score_turbo(&l->k, tq_kv_krec(c, l, u0, h), (int)(v1 - u0), qv,
                                     (size_t)kw, G, Su, sb))
                    atomic_store(&x->corrupt, 1);
            } else if (fk == FUSED_F16) {
                const uint16_t *rows = comp ? (const uint16_t *)(const void *)tq_kv_krec(c, l, v0, h)
                                            : tq_kv_kexact(c, l, v0, h);
                ak->score_f16(rows, (size_t)pl->dk, (int)(v1 - v0), pl->dk, qv, (size_t)kw, G, Si, sb);
            } else {
                for (size_t t = u0; t < v1; t++) {
                    ak->dot_multi(ktile + (t - kb0) * (size_t)pl->kt, qv, (size_t)kw, G, kw, tmp);
                    for (int g = 0; g < G; g++) Su[(size_t)g * sb + (t - u0)] = tmp[g];
                }
            }
            if (pred) ak->chain_scan(Su, sb, G, (int)(v1 - u0), (int)(u0 % TQ_KV_PRED_CHAIN), TQ_KV_PRED_CHAIN, rho);
            if (comp && nt) add_turning_mean(x, qrow, G, v0, v1, cst, cfirst, Si, sb);
            for (int g = 0; g < G; g++) {
                float *s = Si + (size_t)g * sb;
                int n = (int)(v1 - v0);
                float add = comp ? x->qmu[qrow + (size_t)g] : 0.0f;
                float mb = -INFINITY;
                if (x->p.softcap > 0.0f) {
                    for (int t = 0; t < n; t++) {
                        s[t] = transform_score(x, s[t] + add);
                        if (s[t] > mb) mb = s[t];
                    }
                } else {
                    /* The same operations as transform_score without a cap. */
                    mb = ak->shift_scale_max(s, n, add, x->p.scale);
                }
                float *pr = part + ((i - i0) * (size_t)G + (size_t)g) * pl->row_floats;
                if (mb > pr[0]) {
                    if (pr[1] > 0.0f) {
                        float f = expf(pr[0] - mb);
                        pr[1] *= f;
                        ak->scale(pr + 2, f, pl->va + pl->dv);
                    }
                    pr[0] = mb;
                }
                pr[1] += ak->exp_sum(s, n, pr[0]);
            }
        }
        if (fv) {
        } else if (comp) {
            if (!tq_record_decode_rows(x->ks, &l->v, tq_kv_vrec(c, l, b0, h), nb, vtile, (size_t)pl->vt))
                atomic_store(&x->corrupt, 1);
        } else {
            tq_record_f16_rows(x->ks, tq_kv_vexact(c, l, b0, h), nb, pl->dv, vtile, (size_t)pl->vt);
        }
        for (size_t i = i0, inext; i < i1; i = inext) {
            size_t lo, hi;
            row_range(x, qpos(x, i), &lo, &hi);
            size_t v0 = lo > b0 ? lo : b0, v1 = hi < b1 ? hi : b1;
            inext = i + 1;
            if (v0 >= v1) continue;
            /* where the row's scores of keys v0… sit (the scores section's Si) */
            const size_t u0 = pred ? tq_kv_pred_chain_start(c, l, v0) : v0;
            const size_t soff = tile_scores ? v0 - kb0 : v0 - u0;
            if (fv) {
                float *acc0 = part + (i - i0) * (size_t)G * pl->row_floats + (comp ? 2 : 2 + (size_t)pl->va);
                const float *p0 = S + (i - i0) * (size_t)G * sb + soff;
                if (fv == FUSED_TURBO && x->lanes_v) {
                    if (!ak->accum_turbo_lanes(&l->v, tq_kv_vrec(c, l, v0, h), (int)(v1 - v0), p0, sb,
                                               G, acc0, pl->row_floats, next_keys(x, b1, t1, h)))
                        atomic_store(&x->corrupt, 1);
                } else if (fv == FUSED_TURBO) {
                    if (!ak->accum_turbo(&l->v, tq_kv_vrec(c, l, v0, h), (int)(v1 - v0), p0, sb, G,
                                         acc0, pl->row_floats))
                        atomic_store(&x->corrupt, 1);
                } else {
                    const uint16_t *rows = comp ? (const uint16_t *)(const void *)tq_kv_vrec(c, l, v0, h)
                                                : tq_kv_vexact(c, l, v0, h);
                    ak->accum_f16(rows, (size_t)pl->dv, (int)(v1 - v0), pl->dv, p0, sb, G, acc0,
                                  pl->row_floats);
                }
                continue;
            }
            /* The rows of the positions after i that see the same keys of the block (all of
             * them but at the causal diagonal and a window's edge) in one call. */
            for (size_t lo2, hi2; inext < i1; inext++) {
                row_range(x, qpos(x, inext), &lo2, &hi2);
                if ((lo2 > b0 ? lo2 : b0) != v0 || (hi2 < b1 ? hi2 : b1) != v1) break;
            }
            float *acc = part + (i - i0) * (size_t)G * pl->row_floats + (comp ? 2 : 2 + (size_t)pl->va);
            const float *p0 = S + (i - i0) * (size_t)G * sb + soff;
            const int nr = (int)(inext - i) * G;
            if (ak->accum_multi)
                ak->accum_multi(acc, pl->row_floats, p0, sb, nr, vtile + (v0 - b0) * (size_t)pl->vt, (size_t)pl->vt,
                                (int)(v1 - v0), vw);
            else
                for (int r = 0; r < nr; r++)
                    ak->accum_rows(acc + (size_t)r * pl->row_floats, p0 + (size_t)r * sb,
                                   vtile + (v0 - b0) * (size_t)pl->vt, (size_t)pl->vt, (int)(v1 - v0), vw);
        }
        b0 = b1;
    }
}

/* Merges the splits of one (head, query block) and writes the output rows. */
static void merge_fn(void *ctxp, size_t task, int thread) {
    attn_ctx *x = ctxp;
    const plan *pl = &x->pl;
    const tq_kv_layer *l = x->l;
    size_t qbi = task % pl->n_qb;
    int h = (int)(task / pl->n_qb);
    size_t i0 = qbi * pl->qb, i1 = i0 + pl->qb < x->n_q ? i0 + pl->qb : x->n_q;
    float *sc = x->scratch + (size_t)thread * pl->scratch_floats;
    float *vout = sc + KB * (size_t)pl->kt + KB * (size_t)pl->vt + pl->s_floats + round16((size_t)pl->G);
    const float *base = x->parts + task * (size_t)pl->n_split * pl->part_floats;
    int W = pl->va + pl->dv;
    /* Decode blocks accumulated the compressed part in the lane layout (task_fn). */
    int lanes = x->lanes_v && i1 - i0 <= FUSED_QUERIES;
    float *nat = vout + round16((size_t)pl->vt);
    for (size_t r = 0; r < (i1 - i0) * (size_t)pl->G; r++) {
        float *p0 = (float *)base + r * pl->row_floats;
        float M = -INFINITY;
        for (int s = 0; s < pl->n_split; s++) {
            float m = base[(size_t)s * pl->part_floats + r * pl->row_floats];
            if (m > M) M = m;
        }
        size_t i = i0 + r / (size_t)pl->G;
        int qh = h * pl->G + (int)(r % (size_t)pl->G);
        float *o = x->out + (i * (size_t)pl->nqh + (size_t)qh) * (size_t)pl->dv;
        if (M == -INFINITY) {
            memset(o, 0, sizeof(float) * (size_t)pl->dv);
            continue;
        }
        float f0 = expf(p0[0] - M);
        float L = p0[1] * f0;
        x->ak->scale(p0 + 2, f0, W);
        for (int s = 1; s < pl->n_split; s++) {
            const float *ps = base + (size_t)s * pl->part_floats + r * pl->row_floats;
            if (ps[1] == 0.0f) continue;
            float f = expf(ps[0] - M);
            L += ps[1] * f;
            for (int j = 0; j < W; j++) p0[2 + j] += f * ps[2 + j];
        }
        if (lanes) {
            tq_record_from_lanes(&l->v, p0 + 2, nat);
            tq_codec_accum_finish(l->v.codec, nat, (size_t)pl->vt, vout, (size_t)pl->dv);
        } else if (l->v.format == TQ_KV_TURBO)
            tq_codec_accum_finish(l->v.codec, p0 + 2, (size_t)pl->va, vout, (size_t)pl->dv);
        else if (l->v.rot) /* q8_0r / q4_0r: summed in the rotated basis */
            tq_rotation_inverse(l->v.rot, p0 + 2, vout, 1);
        else
            memcpy(vout, p0 + 2, sizeof(float) * (size_t)pl->dv);
        float inv = 1.0f / L;
        const float *ar = p0 + 2 + pl->va;
        for (int j = 0; j < pl->dv; j++) o[j] = (vout[j] + ar[j]) * inv;
    }
}

static tq_status attention(const tq_kv_cache *c, int layer, const float *q, int n_q_heads,
                           size_t n_queries, const int64_t *positions,
                           const tq_attn_params *params, tq_threadpool *pool, void *work,
                           size_t work_bytes, float *out, size_t out_capacity) {
    tq_attn_params p;
    tq_status st = check_args(c, layer, q, n_q_heads, n_queries, positions, params, out,
                              out_capacity, &p);
    if (st) return st;
    if (n_queries == 0) return TQ_OK;
    if (!work) return TQ_ERR_NULL;
    int T = tq_threadpool_size(pool);
    const tq_kv_layer *l = &c->layers[layer];
    attn_ctx x;
    memset(&x, 0, sizeof x);
    make_plan(c, l, n_q_heads, n_queries, &x.pl);
    if (work_bytes < work_floats(&x.pl, n_queries, T) * sizeof(float) + 64) return TQ_ERR_CAPACITY;
    const plan *pl = &x.pl;
    float *w = (float *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
    x.c = c;
    x.l = l;
    x.ks = tq_kernel_set_get();
    x.ak = x.ks->attn;
    x.p = p;
    x.n_q = n_queries;
    x.len = l->len;
    x.q0 = l->len - n_queries;
    x.pos = positions;
    x.q = q;
    x.out = out;
    x.qprep = w;
    w += round16(n_queries * (size_t)pl->nqh * (size_t)pl->kw);
    x.qlane = w;
    w += round16(n_queries * (size_t)pl->nqh * (size_t)pl->kl);
    x.qmu = w;
    w += round16(n_queries * (size_t)pl->nqh);
    x.qab = w;
    w += round16(n_queries * (size_t)pl->nqh * (size_t)pl->dk);
    x.n_turn = l->k.format == TQ_KV_TURBO ? tq_key_transform_n_turn(l->kt) : 0;
    x.n_fast = l->k.format == TQ_KV_TURBO ? tq_key_transform_n_fast(l->kt) : 0;
    if (x.n_fast) x.ftab = tq_key_transform_fast_table(l->kt);
    x.lanes_k = pl->kl > 0 && x.ak->score_turbo_lanes != NULL && tq_attn_reads_lanes(x.ak, &l->k);
    x.lanes_v = pl->vl > 0 && x.ak->accum_turbo_lanes != NULL && tq_attn_reads_lanes(x.ak, &l->v);
    x.parts = w;
    w += (size_t)pl->H * pl->n_qb * (size_t)pl->n_split * pl->part_floats;
    x.scratch = w;
    atomic_init(&x.corrupt, 0);
    /* Prepare every query head once: rotated (and sketched) for TURBO keys, rotated for
     * q8_0r / q4_0r keys (⟨q, k⟩ = ⟨R q, R k⟩). */
    size_t nrow = n_queries * (size_t)pl->nqh;
    for (size_t r = 0; r < nrow; r++) {
        const float *qr = q + r * (size_t)pl->dk;
        float *pr = x.qprep + r * (size_t)pl->kw;
        int h = (int)(r % (size_t)pl->nqh) / pl->G;
        if (l->k.format == TQ_KV_TURBO) {
            /* In the stored keys' basis (the key transform: q / s in the split's order). */
            float qs[TQ_MAX_DIM];
            st = tq_codec_prepare_query(l->k.codec, tq_key_transform_query_row(l->kt, h, qr, qs), pr,
                                        (size_t)pl->kw);
            if (st) return st;
            if (x.lanes_k) tq_record_to_lanes(&l->k, pr, x.qlane + r * (size_t)pl->kl);
        } else {
            for (int j = 0; j < pl->dk; j++) {
                if (!isfinite(qr[j])) return TQ_ERR_NONFINITE;
                pr[j] = qr[j];
            }
            if (l->k.rot) tq_rotation_forward(l->k.rot, pr, pr, 1); /* q8_0r / q4_0r keys */
        }
        /* ⟨q, mean⟩, added to scores: one number, or with a turning mean its fixed part and
         * the A, B that give the rest per block of positions */
        x.qmu[r] = x.n_turn || x.n_fast ? tq_key_transform_rope_terms(l->kt, h, qr, x.qab + r * (size_t)pl->dk)
                            : tq_key_transform_offset_row(l->kt, h, qr);
    }
    tq_threadpool_run(pool, task_fn, &x, (size_t)pl->H * pl->n_qb * (size_t)pl->n_split);
    tq_threadpool_run(pool, merge_fn, &x, (size_t)pl->H * pl->n_qb);
    return atomic_load(&x.corrupt) ? TQ_ERR_CORRUPT : TQ_OK;
}

tq_status tq_kv_attention(const tq_kv_cache *c, int layer, const float *q, int n_q_heads,
                          size_t n_queries, const tq_attn_params *params, tq_threadpool *pool,
                          void *work, size_t work_bytes, float *out, size_t out_capacity) {
    return attention(c, layer, q, n_q_heads, n_queries, NULL, params, pool, work, work_bytes,
                     out, out_capacity);
}

tq_status tq_kv_attention_at(const tq_kv_cache *c, int layer, const float *q, int n_q_heads,
                             size_t n_queries, const int64_t *positions,
                             const tq_attn_params *params, tq_threadpool *pool, void *work,
                             size_t work_bytes, float *out, size_t out_capacity) {
    if (n_queries && !positions) return TQ_ERR_NULL;
    return attention(c, layer, q, n_q_heads, n_queries, positions, params, pool, work,
                     work_bytes, out, out_capacity);
}

/* ---- the reference path ---- */

static tq_status attention_ref(const tq_kv_cache *c, int layer, const float *q, int n_q_heads,
                               size_t n_queries, const int64_t *positions,
                               const tq_attn_params *params, float *out, size_t out_capacity) {
    tq_attn_params params_in;
    const tq_attn_params *p = &params_in;
    tq_status st = check_args(c, layer, q, n_q_heads, n_queries, positions, params, out,
                              out_capacity, &params_in);
    if (st) return st;
    if (n_queries == 0) return TQ_OK;
    size_t len = c->layers[layer].len, H = (size_t)c->cfg.n_kv_heads;
    size_t base = c->layers[layer].dropped; /* K, V hold tokens [base, len) */
    size_t dk = (size_t)c->cfg.head_dim_k, dv = (size_t)c->cfg.head_dim_v;
    size_t G = (size_t)n_q_heads / H;
    for (size_t i = 0; i < n_queries * (size_t)n_q_heads * dk; i++)
        if (!isfinite(q[i])) return TQ_ERR_NONFINITE;
    float *K = malloc(sizeof(float) * (len - base ? len - base : 1) * H * dk);
    float *V = malloc(sizeof(float) * (len - base ? len - base : 1) * H * dv);
    double *w = malloc(sizeof(double) * (len ? len : 1));
    double *acc = malloc(sizeof(double) * dv);
    if (!K || !V || !w || !acc) {
        st = TQ_ERR_NOMEM;
        goto done;
    }
    st = tq_kv_cache_read(c, layer, base, len - base, K, (len - base) * H * dk, V,
                          (len - base) * H * dv);
    if (st && st != TQ_ERR_CORRUPT) goto done;
    size_t q0 = len - n_queries;
    for (size_t i = 0; i < n_queries; i++) {
        size_t pos = positions ? (size_t)positions[i] : q0 + i;
        size_t hi = p->causal ? pos + 1 : len;
        size_t win = (size_t)p->sliding_window;
        size_t lo = win && pos + 1 > win ? pos + 1 - win : 0;
        for (size_t qh = 0; qh < (size_t)n_q_heads; qh++) {
            size_t h = qh / G;
            const float *qv = q + (i * (size_t)n_q_heads + qh) * dk;
            float *o = out + (i * (size_t)n_q_heads + qh) * dv;
            double m = -INFINITY;
            for (size_t t = lo; t < hi; t++) {
                const float *kv = K + ((t - base) * H + h) * dk;
                /* four partial sums in double: independent chains, not one serial one (the
                 * tests' references; exact far below any tolerance they use) */
                double s4[4] = {0.0, 0.0, 0.0, 0.0};
                size_t j = 0;
                for (; j + 4 <= dk; j += 4)
                    for (int u = 0; u < 4; u++) s4[u] += (double)qv[j + u] * kv[j + u];
                for (; j < dk; j++) s4[0] += (double)qv[j] * kv[j];
                double s = (s4[0] + s4[1]) + (s4[2] + s4[3]);
                s *= p->scale;
                if (p->softcap > 0.0f) s = p->softcap * tanh(s / p->softcap);
                w[t] = s;
                if (s > m) m = s;
            }
            memset(acc, 0, sizeof(double) * dv);
            double l = 0.0;
            for (size_t t = lo; t < hi; t++) {
                double e = exp(w[t] - m);
                l += e;
                const float *vv = V + ((t - base) * H + h) * dv;
                for (size_t j = 0; j < dv; j++) acc[j] += e * vv[j];
            }
            for (size_t j = 0; j < dv; j++) o[j] = l > 0.0 ? (float)(acc[j] / l) : 0.0f;
        }
    }
done:
    free(K);
    free(V);
    free(w);
    free(acc);
    return st;
}

tq_status tq_kv_attention_ref(const tq_kv_cache *c, int layer, const float *q, int n_q_heads,
                              size_t n_queries, const tq_attn_params *p, float *out,
                              size_t out_capacity) {
    return attention_ref(c, layer, q, n_q_heads, n_queries, NULL, p, out, out_capacity);
}

tq_status tq_kv_attention_ref_at(const tq_kv_cache *c, int layer, const float *q,
                                 int n_q_heads, size_t n_queries, const int64_t *positions,
                                 const tq_attn_params *p, float *out, size_t out_capacity) {
    if (n_queries && !positions) return TQ_ERR_NULL;
    return attention_ref(c, layer, q, n_q_heads, n_queries, positions, p, out, out_capacity);
}
