/*
 * Lloyd-Max codebooks of the exact coordinate density (paper §3.1; doc/codec.md, "Codebooks").
 *
 * A coordinate t of a uniformly random unit vector in R^d has density ∝ (1 − t²)^((d−3)/2) on
 * [−1, 1]. With t = sin θ the density of θ is ∝ cos^(d−2) θ on (−π/2, π/2), which has no
 * endpoint singularity (d = 2 is uniform in θ), so we integrate in θ on a uniform grid. We
 * work with s = √d·t, in which the density tends to N(0, 1).
 *
 * Cumulative integrals M0 (mass), M1 (∫ s) and M2 (∫ s²) on the grid give any cell's mass
 * and conditional mean by interpolation, so one Lloyd iteration costs O(levels). Centroids
 * start from the high-resolution optimum (point density ∝ f^(1/3)) and iterate (boundaries =
 * midpoints, centroids = conditional means) until they move less than 1e-12.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "internal.h"

#define TQ_MAX_BITS_CODEBOOK 8

#define GRID 65536 /* intervals of the θ grid */
#define MAX_ITERS 20000

typedef struct grid {
    double theta0, h; /* θ_k = theta0 + k·h */
    double sqrt_d;
    double *m0, *m1, *m2, *m3; /* cumulative ∫ f, ∫ f·s, ∫ f·s², ∫ f^(1/3) from theta0; GRID+1 */
} grid;

static void grid_free(grid *g) {
    free(g->m0), free(g->m1), free(g->m2), free(g->m3);
}

static int grid_build(grid *g, int dim) {
    g->m0 = malloc(sizeof(double) * (GRID + 1));
    g->m1 = malloc(sizeof(double) * (GRID + 1));
    g->m2 = malloc(sizeof(double) * (GRID + 1));
    g->m3 = malloc(sizeof(double) * (GRID + 1));
    if (!g->m0 || !g->m1 || !g->m2 || !g->m3) return 0;
    const double half_pi = 1.5707963267948966;
    g->sqrt_d = sqrt((double)dim);
    /* Beyond |θ| = 16/√d the density is below e^−128 of its peak. */
    double tmax = fmin(half_pi, 16.0 / g->sqrt_d);
    g->theta0 = -tmax;
    g->h = 2.0 * tmax / GRID;
    double prev[4] = {0, 0, 0, 0};
    g->m0[0] = g->m1[0] = g->m2[0] = g->m3[0] = 0.0;
    for (int k = 0; k <= GRID; k++) {
        double th = g->theta0 + k * g->h;
        double c = cos(th);
        double f = (dim == 2) ? 1.0 : (c > 0 ? exp((dim - 2) * log(c)) : 0.0);
        double s = g->sqrt_d * sin(th);
        double cur[4] = {f, f * s, f * s * s, cbrt(f)};
        if (k > 0) {
            /* Trapezoid rule on the uniform θ grid. */
            g->m0[k] = g->m0[k - 1] + 0.5 * g->h * (prev[0] + cur[0]);
            g->m1[k] = g->m1[k - 1] + 0.5 * g->h * (prev[1] + cur[1]);
            g->m2[k] = g->m2[k - 1] + 0.5 * g->h * (prev[2] + cur[2]);
            g->m3[k] = g->m3[k - 1] + 0.5 * g->h * (prev[3] + cur[3]);
        }
        for (int j = 0; j < 4; j++) prev[j] = cur[j];
    }
    /* Normalize to a probability density. */
    double z0 = g->m0[GRID], z3 = g->m3[GRID];
    for (int k = 0; k <= GRID; k++) {
        g->m0[k] /= z0, g->m1[k] /= z0, g->m2[k] /= z0, g->m3[k] /= z3;
    }
    return 1;
}

/* Cumulative value of table m at s (in √d·t units), linear in θ between grid points. */
static double cum_at(const grid *g, const double *m, double s) {
    double t = s / g->sqrt_d;
    if (t <= -1.0) return 0.0;
    if (t >= 1.0) return m[GRID];
    double u = (asin(t) - g->theta0) / g->h;
    if (u <= 0) return 0.0;
    if (u >= GRID) return m[GRID];
    int k = (int)u;
    double w = u - k;
    return m[k] + w * (m[k + 1] - m[k]);
}

/* s at which the cumulative table m reaches p (bisection on the grid index). */
static double inverse_cum(const grid *g, const double *m, double p) {
    int lo = 0, hi = GRID;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (m[mid] < p) lo = mid;
        else hi = mid;
    }
    double span = m[hi] - m[lo];
    double w = span > 0 ? (p - m[lo]) / span : 0.5;
    double th = g->theta0 + (lo + w) * g->h;
    return g->sqrt_d * sin(th);
}

static int compute(int dim, int bits, tq_codebook *cb) {
    int levels = 1 << bits;
    float *cent = malloc(sizeof(float) * (size_t)levels);
    float *bound = malloc(sizeof(float) * (size_t)(levels > 1 ? levels - 1 : 1));
    double *c = malloc(sizeof(double) * (size_t)levels);
    double *b = malloc(sizeof(double) * (size_t)(levels + 1));
    grid g = {0};
    int ok = cent && bound && c && b && grid_build(&g, dim);
    if (ok) {
        for (int i = 0; i < levels; i++) c[i] = inverse_cum(&g, g.m3, (i + 0.5) / levels);
        double lo_s = -g.sqrt_d, hi_s = g.sqrt_d;
        for (int it = 0; it < MAX_ITERS; it++) {
            b[0] = lo_s;
            b[levels] = hi_s;
            for (int i = 1; i < levels; i++) b[i] = 0.5 * (c[i - 1] + c[i]);
            double moved = 0.0;
            double p_lo = cum_at(&g, g.m0, b[0]), q_lo = cum_at(&g, g.m1, b[0]);
            for (int i = 0; i < levels; i++) {
                double p_hi = cum_at(&g, g.m0, b[i + 1]), q_hi = cum_at(&g, g.m1, b[i + 1]);
                double mass = p_hi - p_lo;
                if (mass > 1e-300) {
                    double nc = (q_hi - q_lo) / mass;
                    moved = fmax(moved, fabs(nc - c[i]));
                    c[i] = nc;
                }
                p_lo = p_hi, q_lo = q_hi;
            }
            /* The density is even: keep the codebook exactly symmetric. */
            for (int i = 0; i < levels / 2; i++) {
                double m = 0.5 * (c[levels - 1 - i] - c[i]);
                c[i] = -m, c[levels - 1 - i] = m;
            }
            if (moved < 1e-12) break;
        }
        /* D = E[(s − c(s))²] = Σ_cells (M2 − 2c·M1 + c²·M0). */
        for (int i = 1; i < levels; i++) b[i] = 0.5 * (c[i - 1] + c[i]);
        double mse = 0.0;
        for (int i = 0; i < levels; i++) {
            double p = cum_at(&g, g.m0, b[i + 1]) - cum_at(&g, g.m0, b[i]);
            double q = cum_at(&g, g.m1, b[i + 1]) - cum_at(&g, g.m1, b[i]);
            double r = cum_at(&g, g.m2, b[i + 1]) - cum_at(&g, g.m2, b[i]);
            mse += r - 2.0 * c[i] * q + c[i] * c[i] * p;
        }
        for (int i = 0; i < levels; i++) cent[i] = (float)c[i];
        for (int i = 0; i + 1 < levels; i++) bound[i] = (float)b[i + 1];
        cb->dim = dim;
        cb->bits = bits;
        cb->levels = levels;
        cb->centroids = cent;
        cb->boundaries = bound;
        cb->mse = mse;
    } else {
        free(cent), free(bound);
    }
    free(c), free(b);
    grid_free(&g);
    return ok;
}

/* The cache: one slot per (dim, bits), filled on first use, kept for the life of the process. */
static tq_codebook *cache[TQ_MAX_DIM + 1][TQ_MAX_BITS_CODEBOOK + 1];
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

tq_status tq_codebook_get(int dim, int bits, const tq_codebook **out) {
    if (!out) return TQ_ERR_NULL;
    *out = NULL;
    if (dim < TQ_MIN_DIM || dim > TQ_MAX_DIM) return TQ_ERR_DIM;
    if (bits < 1 || bits > TQ_MAX_BITS_CODEBOOK) return TQ_ERR_BITS;
    tq_status st = TQ_OK;
    pthread_mutex_lock(&cache_lock);
    if (!cache[dim][bits]) {
        tq_codebook *cb = calloc(1, sizeof *cb);
        if (cb && compute(dim, bits, cb)) {
            cache[dim][bits] = cb;
        } else {
            free(cb);
            st = TQ_ERR_NOMEM;
        }
    }
    *out = cache[dim][bits];
    pthread_mutex_unlock(&cache_lock);
    return st;
}
