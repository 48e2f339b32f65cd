/*
 * Seeded random orthogonal rotations (doc/rotation.md).
 *
 *  - Hadamard (power-of-two d): R = Π_r (H D_r) / d^(rounds/2), D_r seeded ±1 diagonals and H
 *    the unnormalized Walsh–Hadamard matrix (H·H = d·I). One round maps a one-hot vector to a
 *    flat ±1/√d vector; two rounds to values on a lattice of step 2/√d (in codebook units),
 *    coarse enough at d = 64 to cost 1.25–1.7× the random-input MSE at 3–4 bits; three rounds
 *    make the lattice step 2/d and every structured input tested stays within 1.05× of the
 *    random figure (doc/rotation.md), hence TQ_HADAMARD_ROUNDS = 3.
 *  - Block Hadamard (any d): p = 2^⌊log2 d⌋; rounds alternate an orthonormal WHT over the
 *    first p and over the last p coordinates, each after seeded signs on all d. Three rounds
 *    (first, last, first) make every output depend on every input.
 *  - Dense: Q of the Householder QR of a seeded Gaussian matrix, columns sign-fixed so that Q
 *    is Haar-distributed. The reference for every d.
 */
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "kernels/kernels.h"

#define BLOCK_ROUNDS 3

struct tq_rotation {
    int dim;
    tq_rotation_kind kind;
    int rounds;
    int log2p;     /* Hadamard block: log2 of its length p */
    float *signs;  /* (rounds, dim) ±1 */
    float *matrix; /* dense: (dim, dim) row-major, y = Q x */
    float scale;   /* Hadamard: d^(−rounds/2), the normalization of the raw transform */
    float *last;   /* Hadamard: (dim,) signs of round 0 times scale, for the inverse */
};

void tq_rotation_free(tq_rotation *rot) {
    if (!rot) return;
    free(rot->signs);
    free(rot->matrix);
    free(rot->last);
    free(rot);
}

static int build_dense(tq_rotation *rot, uint64_t seed) {
    int d = rot->dim;
    double *a = malloc(sizeof(double) * (size_t)d * (size_t)d); /* (d, d) row-major */
    double *v = malloc(sizeof(double) * (size_t)d);
    double *diag = malloc(sizeof(double) * (size_t)d);
    double *q = malloc(sizeof(double) * (size_t)d * (size_t)d);
    rot->matrix = malloc(sizeof(float) * (size_t)d * (size_t)d);
    if (!a || !v || !diag || !q || !rot->matrix) {
        free(a), free(v), free(diag), free(q);
        return 0;
    }
    tq_rng rng;
    tq_rng_seed(&rng, seed, 0x44454E5345ull ^ (uint64_t)d);
    for (size_t i = 0; i < (size_t)d * (size_t)d; i++) a[i] = tq_rng_gauss(&rng);

    /* Householder QR: A = Q R; the reflectors are applied to the identity afterwards. */
    for (int i = 0; i < d * d; i++) q[i] = (i % (d + 1) == 0) ? 1.0 : 0.0;
    double *vs = malloc(sizeof(double) * (size_t)d * (size_t)d); /* reflector k in row k */
    if (!vs) {
        free(a), free(v), free(diag), free(q);
        return 0;
    }
    for (int k = 0; k < d; k++) {
        double norm = 0.0;
        for (int i = k; i < d; i++) norm += a[i * d + k] * a[i * d + k];
        norm = sqrt(norm);
        double alpha = a[k * d + k] > 0 ? -norm : norm;
        for (int i = 0; i < d; i++) v[i] = 0.0;
        for (int i = k; i < d; i++) v[i] = a[i * d + k];
        v[k] -= alpha;
        double vnorm = 0.0;
        for (int i = k; i < d; i++) vnorm += v[i] * v[i];
        if (vnorm > 0.0) {
            for (int j = k; j < d; j++) {
                double dot = 0.0;
                for (int i = k; i < d; i++) dot += v[i] * a[i * d + j];
                double f = 2.0 * dot / vnorm;
                for (int i = k; i < d; i++) a[i * d + j] -= f * v[i];
            }
        }
        for (int i = 0; i < d; i++) vs[k * d + i] = vnorm > 0.0 ? v[i] / sqrt(vnorm) : 0.0;
        diag[k] = a[k * d + k];
    }
    /* Q = H_0 H_1 … H_{d−1}: apply the reflectors to the identity from the last one. */
    for (int k = d - 1; k >= 0; k--) {
        const double *vk = vs + (size_t)k * (size_t)d;
        for (int j = 0; j < d; j++) {
            double dot = 0.0;
            for (int i = k; i < d; i++) dot += vk[i] * q[i * d + j];
            for (int i = k; i < d; i++) q[i * d + j] -= 2.0 * dot * vk[i];
        }
    }
    /* Haar measure: flip column j by the sign of R_jj (Mezzadri's correction). */
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++)
            rot->matrix[(size_t)i * (size_t)d + (size_t)j] =
                (float)(diag[j] < 0 ? -q[i * d + j] : q[i * d + j]);
    free(vs), free(a), free(v), free(diag), free(q);
    return 1;
}

tq_status tq_rotation_create(tq_rotation **out, int dim, uint64_t seed, tq_rotation_kind kind) {
    return tq_rotation_create_rounds(out, dim, seed, kind, 0);
}

tq_status tq_rotation_create_rounds(tq_rotation **out, int dim, uint64_t seed,
                                    tq_rotation_kind kind, int rounds) {
    if (!out) return TQ_ERR_NULL;
    *out = NULL;
    if (dim < TQ_MIN_DIM || dim > TQ_MAX_DIM) return TQ_ERR_DIM;
    if (kind < TQ_ROTATION_AUTO || kind > TQ_ROTATION_BLOCK_HADAMARD) return TQ_ERR_VARIANT;
    if (kind == TQ_ROTATION_AUTO)
        kind = tq_is_pow2(dim) ? TQ_ROTATION_HADAMARD : TQ_ROTATION_BLOCK_HADAMARD;
    if (kind == TQ_ROTATION_HADAMARD && !tq_is_pow2(dim)) return TQ_ERR_DIM;

    tq_rotation *rot = calloc(1, sizeof *rot);
    if (!rot) return TQ_ERR_NOMEM;
    rot->dim = dim;
    rot->kind = kind;
    rot->log2p = tq_log2i(dim);
    if (kind == TQ_ROTATION_DENSE) {
        if (!build_dense(rot, seed)) {
            tq_rotation_free(rot);
            return TQ_ERR_NOMEM;
        }
    } else {
        rot->rounds = rounds > 0                     ? rounds
                      : kind == TQ_ROTATION_HADAMARD ? TQ_HADAMARD_ROUNDS
                                                     : BLOCK_ROUNDS;
        rot->signs = malloc(sizeof(float) * (size_t)rot->rounds * (size_t)dim);
        if (!rot->signs) {
            tq_rotation_free(rot);
            return TQ_ERR_NOMEM;
        }
        tq_rng rng;
        tq_rng_seed(&rng, seed, 0x5349474E53ull ^ ((uint64_t)dim << 8) ^ (uint64_t)kind);
        for (int i = 0; i < rot->rounds * dim; i++)
            rot->signs[i] = (tq_rng_next(&rng) >> 63) ? -1.0f : 1.0f;
        rot->scale = (float)pow((double)dim, -0.5 * rot->rounds);
        if (kind == TQ_ROTATION_HADAMARD) {
            rot->last = malloc(sizeof(float) * (size_t)dim);
            if (!rot->last) {
                tq_rotation_free(rot);
                return TQ_ERR_NOMEM;
            }
            /* ±scale is exact, so x·(±scale) equals (±x)·scale bit for bit. */
            for (int i = 0; i < dim; i++) rot->last[i] = rot->signs[i] * rot->scale;
        }
    }
    *out = rot;
    return TQ_OK;
}

int tq_rotation_dim(const tq_rotation *rot) { return rot ? rot->dim : 0; }
tq_rotation_kind tq_rotation_get_kind(const tq_rotation *rot) {
    return rot ? rot->kind : TQ_ROTATION_AUTO;
}

const float *tq_rotation_signs(const tq_rotation *rot, int round) {
    return rot->signs + (size_t)round * (size_t)rot->dim;
}
int tq_rotation_rounds(const tq_rotation *rot) { return rot->rounds; }

/* Offset of round r's Hadamard block for the block kind: first, last, first, … */
static int block_offset(const tq_rotation *rot, int r) {
    return (r & 1) ? rot->dim - (1 << rot->log2p) : 0;
}

static void dense_apply(const float *m, int d, int transpose, const float *x, float *y) {
    float tmp[TQ_MAX_DIM];
    if (!transpose) {
        for (int i = 0; i < d; i++) {
            const float *row = m + (size_t)i * (size_t)d;
            float acc = 0.0f;
            for (int j = 0; j < d; j++) acc += row[j] * x[j];
            tmp[i] = acc;
        }
    } else {
        for (int j = 0; j < d; j++) tmp[j] = 0.0f;
        for (int i = 0; i < d; i++) {
            const float *row = m + (size_t)i * (size_t)d;
            float xi = x[i];
            for (int j = 0; j < d; j++) tmp[j] += row[j] * xi;
        }
    }
    memcpy(y, tmp, sizeof(float) * (size_t)d);
}

void tq_rotation_forward_raw(const tq_rotation *rot, float *x, float *scale) {
    const tq_kernel_table *k = tq_kernels();
    int d = rot->dim;
    switch (rot->kind) {
    case TQ_ROTATION_HADAMARD:
        for (int r = 0; r < rot->rounds; r++) k->rht(x, rot->signs + (size_t)r * (size_t)d, rot->log2p);
        *scale = rot->scale;
        return;
    case TQ_ROTATION_BLOCK_HADAMARD: {
        int p = 1 << rot->log2p;
        float s = (float)(1.0 / sqrt((double)p));
        for (int r = 0; r < rot->rounds; r++) {
            const float *sg = rot->signs + (size_t)r * (size_t)d;
            for (int i = 0; i < d; i++) x[i] *= sg[i];
            float *blk = x + block_offset(rot, r);
            k->rht(blk, NULL, rot->log2p);
            for (int i = 0; i < p; i++) blk[i] *= s;
        }
        *scale = 1.0f;
        return;
    }
    default:
        dense_apply(rot->matrix, d, 0, x, x);
        *scale = 1.0f;
        return;
    }
}

static void inverse_one(const tq_rotation *rot, float *x) {
    const tq_kernel_table *k = tq_kernels();
    int d = rot->dim;
    switch (rot->kind) {
    case TQ_ROTATION_HADAMARD: {
        /* (H D_r)^-1 = D_r H / d. The inverse H, D_R, H, D_{R−1}, …, H, D_1, scale is run as
         * rht(·, NULL), then rht(·, D_r) for r = R…2 (each multiplies its signs first), then
         * one multiply by D_1·scale. */
        k->rht(x, NULL, rot->log2p);
        for (int r = rot->rounds - 1; r >= 1; r--)
            k->rht(x, rot->signs + (size_t)r * (size_t)d, rot->log2p);
        for (int i = 0; i < d; i++) x[i] *= rot->last[i];
        return;
    }
    case TQ_ROTATION_BLOCK_HADAMARD: {
        int p = 1 << rot->log2p;
        float s = (float)(1.0 / sqrt((double)p));
        for (int r = rot->rounds - 1; r >= 0; r--) {
            float *blk = x + block_offset(rot, r);
            k->rht(blk, NULL, rot->log2p);
            for (int i = 0; i < p; i++) blk[i] *= s;
            const float *sg = rot->signs + (size_t)r * (size_t)d;
            for (int i = 0; i < d; i++) x[i] *= sg[i];
        }
        return;
    }
    default:
        dense_apply(rot->matrix, d, 1, x, x);
        return;
    }
}

tq_status tq_rotation_forward(const tq_rotation *rot, const float *x, float *y, size_t n) {
    if (!rot || (n && (!x || !y))) return TQ_ERR_NULL;
    size_t d = (size_t)rot->dim;
    for (size_t v = 0; v < n; v++) {
        float *yv = y + v * d;
        if (yv != x + v * d) memmove(yv, x + v * d, sizeof(float) * d);
        float scale;
        tq_rotation_forward_raw(rot, yv, &scale);
        if (scale != 1.0f)
            for (size_t i = 0; i < d; i++) yv[i] *= scale;
    }
    return TQ_OK;
}

tq_status tq_rotation_inverse(const tq_rotation *rot, const float *y, float *x, size_t n) {
    if (!rot || (n && (!x || !y))) return TQ_ERR_NULL;
    size_t d = (size_t)rot->dim;
    for (size_t v = 0; v < n; v++) {
        float *xv = x + v * d;
        if (xv != y + v * d) memmove(xv, y + v * d, sizeof(float) * d);
        inverse_one(rot, xv);
    }
    return TQ_OK;
}
