/* Lloyd-Max codebooks: predicted D(b) against the figures of doc/codec.md ("Codebooks"), and
 * codebook invariants. */
#include "test_util.h"
#include "turboquant.h"

/* doc/codec.md, "Codebooks": the exact density at d = 128; the N(0, 1) limit (large d). */
static const double d128[4] = {0.3609, 0.1160, 0.03397, 0.00931};
static const double gauss[4] = {0.3634, 0.1175, 0.03455, 0.00950};
static const double c128_b4[8] = {0.1280, 0.3867, 0.6541, 0.9377, 1.2485, 1.6051, 2.0466, 2.6895};

static void test_d128_matches_table(void) {
    for (int b = 1; b <= 4; b++) {
        const tq_codebook *cb;
        CHECK(tq_codebook_get(128, b, &cb) == TQ_OK);
        CHECK_MSG(fabs(cb->mse / d128[b - 1] - 1.0) < 0.01, "b=%d D=%.5f want %.5f", b, cb->mse,
                  d128[b - 1]);
    }
}

static void test_centroids_b4(void) {
    const tq_codebook *cb;
    CHECK(tq_codebook_get(128, 4, &cb) == TQ_OK);
    CHECK(cb->levels == 16);
    for (int i = 0; i < 8; i++) CHECK_NEAR(cb->centroids[8 + i], c128_b4[i], 0.002);
}

static void test_large_dim_tends_to_gaussian(void) {
    for (int b = 1; b <= 4; b++) {
        const tq_codebook *cb;
        CHECK(tq_codebook_get(1024, b, &cb) == TQ_OK);
        CHECK_MSG(fabs(cb->mse / gauss[b - 1] - 1.0) < 0.01, "b=%d D=%.5f", b, cb->mse);
    }
}

static void test_other_dims_near_d128(void) {
    /* d = 64 and 256 lie on either side of 128; within 2% of its figure. */
    int dims[2] = {64, 256};
    for (int k = 0; k < 2; k++)
        for (int b = 1; b <= 4; b++) {
            const tq_codebook *cb;
            CHECK(tq_codebook_get(dims[k], b, &cb) == TQ_OK);
            CHECK_MSG(fabs(cb->mse / d128[b - 1] - 1.0) < 0.02, "d=%d b=%d D=%.5f", dims[k], b,
                      cb->mse);
        }
}

/* D(b) grows with d toward the Gaussian figure: D(64) < D(128) < D(256) < D(1024) < N(0,1)'s.
 * With the d = 128 figures matched to 1% and the limit to 1%, this pins d = 64 and 256 too. */
static void test_monotone_in_dim(void) {
    int ds[4] = {64, 128, 256, 1024};
    for (int b = 1; b <= 4; b++) {
        double prev = 0;
        for (int k = 0; k < 4; k++) {
            const tq_codebook *cb;
            CHECK(tq_codebook_get(ds[k], b, &cb) == TQ_OK);
            CHECK_MSG(cb->mse > prev, "b=%d d=%d D=%.6f not above %.6f", b, ds[k], cb->mse, prev);
            prev = cb->mse;
        }
        CHECK(prev < gauss[b - 1] * 1.0005);
    }
}

static void test_invariants(void) {
    int dims[] = {2, 3, 5, 64, 80, 96, 128, 1024};
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++)
        for (int b = 1; b <= 8; b++) {
            const tq_codebook *cb;
            CHECK(tq_codebook_get(dims[k], b, &cb) == TQ_OK);
            CHECK(cb->dim == dims[k] && cb->bits == b && cb->levels == (1 << b));
            double prev_mse = 1.0;
            for (int i = 0; i < cb->levels; i++) {
                CHECK(cb->centroids[i] == -cb->centroids[cb->levels - 1 - i]);
                if (i) CHECK(cb->centroids[i] > cb->centroids[i - 1]);
                CHECK(fabs(cb->centroids[i]) < sqrt((double)dims[k]));
            }
            for (int i = 0; i + 1 < cb->levels; i++) {
                CHECK(cb->boundaries[i] > cb->centroids[i]);
                CHECK(cb->boundaries[i] < cb->centroids[i + 1]);
            }
            CHECK(cb->mse > 0 && cb->mse < prev_mse);
            /* Below the paper's upper bound √3·π/2·4^−b and above the 4^−b lower bound
             * (loosely: small d is not Gaussian). */
            CHECK_MSG(cb->mse <= 2.73 * pow(4.0, -b), "d=%d b=%d D=%g", dims[k], b, cb->mse);
            if (dims[k] >= 64) CHECK(cb->mse >= pow(4.0, -b));
        }
}

static void test_monotone_in_bits(void) {
    double prev = 1.0;
    for (int b = 1; b <= 8; b++) {
        const tq_codebook *cb;
        CHECK(tq_codebook_get(128, b, &cb) == TQ_OK);
        CHECK(cb->mse < prev);
        /* Each extra bit divides D by roughly 4 (3 to 4.2 across 1..8 bits). */
        if (b > 1) CHECK(prev / cb->mse > 3.0 && prev / cb->mse < 4.3);
        prev = cb->mse;
    }
}

static void test_cached_pointer_is_stable(void) {
    const tq_codebook *a, *b;
    CHECK(tq_codebook_get(96, 3, &a) == TQ_OK);
    CHECK(tq_codebook_get(96, 3, &b) == TQ_OK);
    CHECK(a == b);
}

static void test_errors(void) {
    const tq_codebook *cb = (const tq_codebook *)1;
    CHECK(tq_codebook_get(128, 4, NULL) == TQ_ERR_NULL);
    CHECK(tq_codebook_get(1, 4, &cb) == TQ_ERR_DIM && cb == NULL);
    CHECK(tq_codebook_get(1025, 4, &cb) == TQ_ERR_DIM);
    CHECK(tq_codebook_get(128, 0, &cb) == TQ_ERR_BITS);
    CHECK(tq_codebook_get(128, 9, &cb) == TQ_ERR_BITS);
}

int main(void) {
    RUN_TEST(test_d128_matches_table);
    RUN_TEST(test_centroids_b4);
    RUN_TEST(test_large_dim_tends_to_gaussian);
    RUN_TEST(test_other_dims_near_d128);
    RUN_TEST(test_monotone_in_dim);
    RUN_TEST(test_invariants);
    RUN_TEST(test_monotone_in_bits);
    RUN_TEST(test_cached_pointer_is_stable);
    RUN_TEST(test_errors);
    return test_report();
}
