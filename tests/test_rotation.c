/* Rotations: orthogonality, exact inverses, the WHT against the dense matrix it represents,
 * determinism across runs and machines (pinned values), and seed independence. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "test_util.h"
#include "turboquant.h"

static const int dims[] = {2, 3, 7, 16, 64, 80, 96, 112, 128, 160, 192, 256, 512, 1024};
#define N_DIMS (int)(sizeof dims / sizeof dims[0])

/* The matrix of a rotation: column j = R e_j. (d, d) row-major, as doubles. */
static double *matrix_of(const tq_rotation *r, int d) {
    double *m = malloc(sizeof(double) * (size_t)d * (size_t)d);
    float *e = malloc(sizeof(float) * (size_t)d);
    for (int j = 0; j < d; j++) {
        memset(e, 0, sizeof(float) * (size_t)d);
        e[j] = 1.0f;
        tq_rotation_forward(r, e, e, 1);
        for (int i = 0; i < d; i++) m[(size_t)i * (size_t)d + (size_t)j] = e[i];
    }
    free(e);
    return m;
}

static double orthogonality_error(const double *m, int d) {
    double worst = 0;
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) {
            double s = 0;
            for (int k = 0; k < d; k++) s += m[(size_t)k * (size_t)d + (size_t)i] * m[(size_t)k * (size_t)d + (size_t)j];
            worst = fmax(worst, fabs(s - (i == j)));
        }
    return worst;
}

static void test_orthogonal_every_kind(void) {
    tq_rotation_kind kinds[3] = {TQ_ROTATION_HADAMARD, TQ_ROTATION_DENSE, TQ_ROTATION_BLOCK_HADAMARD};
    for (int k = 0; k < N_DIMS; k++) {
        int d = dims[k];
        if (d > 256) continue; /* O(d³) check */
        for (int kk = 0; kk < 3; kk++) {
            tq_rotation *r = NULL;
            tq_status st = tq_rotation_create(&r, d, 11, kinds[kk]);
            if (kinds[kk] == TQ_ROTATION_HADAMARD && (d & (d - 1))) {
                CHECK(st == TQ_ERR_DIM && r == NULL);
                continue;
            }
            CHECK(st == TQ_OK);
            double *m = matrix_of(r, d);
            double err = orthogonality_error(m, d);
            CHECK_MSG(err < 2e-5, "d=%d kind=%d: |RᵀR − I| = %.3g", d, kinds[kk], err);
            free(m);
            tq_rotation_free(r);
        }
    }
}

static void test_inverse_round_trip(void) {
    for (int k = 0; k < N_DIMS; k++) {
        int d = dims[k];
        for (int kind = 0; kind <= 3; kind++) {
            tq_rotation *r = NULL;
            if (tq_rotation_create(&r, d, 5, (tq_rotation_kind)kind) != TQ_OK) continue;
            float *x = malloc(sizeof(float) * (size_t)d * 3), *y = malloc(sizeof(float) * (size_t)d * 3);
            for (int i = 0; i < d * 3; i++) x[i] = (float)sin(i * 0.7 + kind);
            CHECK(tq_rotation_forward(r, x, y, 3) == TQ_OK);
            double nx = 0, ny = 0;
            for (int i = 0; i < d * 3; i++) nx += (double)x[i] * x[i], ny += (double)y[i] * y[i];
            CHECK_NEAR(ny / nx, 1.0, 1e-5);
            CHECK(tq_rotation_inverse(r, y, y, 3) == TQ_OK);
            double worst = 0;
            for (int i = 0; i < d * 3; i++) worst = fmax(worst, fabs(y[i] - x[i]));
            CHECK_MSG(worst < 1e-5, "d=%d kind=%d: round trip error %.3g", d, kind, worst);
            free(x), free(y);
            tq_rotation_free(r);
        }
    }
}

/* The fast rotations equal the dense matrices they represent, built here from the definition
 * H_ij = (−1)^popcount(i & j) and the rotation's own sign vectors:
 *   Hadamard:       R = Π_r (H·D_r) / d^(rounds/2)  (the last round leftmost)
 *   block Hadamard: round r = P_r·D_r with P_r the orthonormal WHT on its block.           */
static void explicit_round(double *m, int d, int p, int off, const float *signs) {
    /* m ← (block WHT / √p) · D · m */
    double *tmp = malloc(sizeof(double) * (size_t)d * (size_t)d);
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) m[(size_t)i * (size_t)d + (size_t)j] *= signs[i];
    memcpy(tmp, m, sizeof(double) * (size_t)d * (size_t)d);
    for (int i = 0; i < p; i++)
        for (int j = 0; j < d; j++) {
            double s = 0;
            for (int k = 0; k < p; k++)
                s += ((__builtin_popcount((unsigned)(i & k)) & 1) ? -1.0 : 1.0) *
                     tmp[(size_t)(off + k) * (size_t)d + (size_t)j];
            m[(size_t)(off + i) * (size_t)d + (size_t)j] = s / sqrt((double)p);
        }
    free(tmp);
}

static void test_fast_matches_dense_definition(void) {
    int ds[] = {2, 4, 8, 64, 128, 256, 3, 80, 96, 112, 160};
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++) {
        int d = ds[k];
        tq_rotation *r = NULL;
        CHECK(tq_rotation_create(&r, d, 3, TQ_ROTATION_AUTO) == TQ_OK);
        int p = 1;
        while (p * 2 <= d) p *= 2;
        double *want = malloc(sizeof(double) * (size_t)d * (size_t)d);
        for (int i = 0; i < d * d; i++) want[i] = (i % (d + 1) == 0);
        int block = tq_rotation_get_kind(r) == TQ_ROTATION_BLOCK_HADAMARD;
        for (int round = 0; round < tq_rotation_rounds(r); round++)
            explicit_round(want, d, p, block && (round & 1) ? d - p : 0, tq_rotation_signs(r, round));
        double *got = matrix_of(r, d), worst = 0;
        for (int i = 0; i < d * d; i++) worst = fmax(worst, fabs(got[i] - want[i]));
        CHECK_MSG(worst < 1e-5, "d=%d: fast vs dense definition %.3g", d, worst);
        free(want), free(got);
        tq_rotation_free(r);
    }
}

static void test_deterministic_and_seeded(void) {
    for (int kind = 1; kind <= 3; kind++) {
        int d = kind == TQ_ROTATION_HADAMARD ? 128 : 96;
        tq_rotation *a, *b, *c;
        CHECK(tq_rotation_create(&a, d, 99, (tq_rotation_kind)kind) == TQ_OK);
        CHECK(tq_rotation_create(&b, d, 99, (tq_rotation_kind)kind) == TQ_OK);
        CHECK(tq_rotation_create(&c, d, 100, (tq_rotation_kind)kind) == TQ_OK);
        float x[128], ya[128], yb[128], yc[128];
        for (int i = 0; i < d; i++) x[i] = (float)cos(i * 1.3);
        tq_rotation_forward(a, x, ya, 1);
        tq_rotation_forward(b, x, yb, 1);
        tq_rotation_forward(c, x, yc, 1);
        CHECK(memcmp(ya, yb, sizeof(float) * (size_t)d) == 0);
        CHECK(memcmp(ya, yc, sizeof(float) * (size_t)d) != 0);
        tq_rotation_free(a), tq_rotation_free(b), tq_rotation_free(c);
    }
}

/* Pinned outputs: if the PRNG, the sign derivation or the transform changed, these move and
 * every stored cache would decode differently. Values printed by this test at its creation. */
static void test_pinned_values(void) {
    tq_rotation *r;
    CHECK(tq_rotation_create(&r, 8, 12345, TQ_ROTATION_HADAMARD) == TQ_OK);
    float x[8] = {1, 0, 0, 0, 0, 0, 0, 0}, y[8];
    tq_rotation_forward(r, x, y, 1);
    /* Three rounds on e_0: entries are multiples of 8^(−3/2)·2 = 0.0883883… */
    for (int i = 0; i < 8; i++) {
        double units = y[i] / (2.0 / pow(8.0, 1.5));
        CHECK_NEAR(units, floor(units + 0.5), 1e-4);
    }
    static const float pinned[8] = {0.176777f, -0.530330f, -0.530330f, 0.176777f,
                                    0.176777f, 0.176777f,  -0.530330f, 0.176777f};
    for (int i = 0; i < 8; i++) CHECK_NEAR(y[i], pinned[i], 1e-6);
    tq_rotation_free(r);
}

static void test_errors(void) {
    tq_rotation *r = (tq_rotation *)1;
    CHECK(tq_rotation_create(NULL, 64, 0, TQ_ROTATION_AUTO) == TQ_ERR_NULL);
    CHECK(tq_rotation_create(&r, 1, 0, TQ_ROTATION_AUTO) == TQ_ERR_DIM && r == NULL);
    CHECK(tq_rotation_create(&r, 1025, 0, TQ_ROTATION_AUTO) == TQ_ERR_DIM);
    CHECK(tq_rotation_create(&r, 96, 0, TQ_ROTATION_HADAMARD) == TQ_ERR_DIM);
    CHECK(tq_rotation_create(&r, 64, 0, (tq_rotation_kind)7) == TQ_ERR_VARIANT);
    CHECK(tq_rotation_create(&r, 64, 0, TQ_ROTATION_AUTO) == TQ_OK);
    CHECK(tq_rotation_get_kind(r) == TQ_ROTATION_HADAMARD && tq_rotation_dim(r) == 64);
    float x[64];
    CHECK(tq_rotation_forward(r, NULL, x, 1) == TQ_ERR_NULL);
    CHECK(tq_rotation_inverse(NULL, x, x, 1) == TQ_ERR_NULL);
    CHECK(tq_rotation_forward(r, NULL, NULL, 0) == TQ_OK);
    tq_rotation_free(r);
    CHECK(tq_rotation_create(&r, 96, 0, TQ_ROTATION_AUTO) == TQ_OK);
    CHECK(tq_rotation_get_kind(r) == TQ_ROTATION_BLOCK_HADAMARD);
    tq_rotation_free(r);
    tq_rotation_free(NULL);
}

int main(void) {
    RUN_TEST(test_orthogonal_every_kind);
    RUN_TEST(test_inverse_round_trip);
    RUN_TEST(test_fast_matches_dense_definition);
    RUN_TEST(test_deterministic_and_seeded);
    RUN_TEST(test_pinned_values);
    RUN_TEST(test_errors);
    return test_report();
}
