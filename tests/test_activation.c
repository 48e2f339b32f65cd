/* engine/activation.h: the forward pass's exp, GELU (tanh form) and SiLU against double
 * precision over the range activations take and past it, and the edges (clamping, infinities,
 * NaN, signed zero). The bounds are what the header promises; a polynomial one degree short or
 * a wrong ln2 split fails them (checked). */
#include <math.h>
#include <stdio.h>

#include "activation.h"
#include "test_util.h"

static double gelu_ref(double x) {
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * x * (1.0 + 0.044715 * x * x)));
}
static double silu_ref(double x) { return x / (1.0 + exp(-x)); }

static void test_exp_accuracy(void) {
    double worst = 0;
    for (int i = -870000; i <= 880000; i++) {
        const float z = (float)i * 1e-4f;
        const double want = exp((double)z), got = act_exp(z);
        const double rel = fabs(got - want) / want;
        if (rel > worst) worst = rel;
    }
    CHECK_MSG(worst < 1.5e-7, "act_exp: largest relative error %.3g on [-87, 88]", worst);
    printf("  act_exp: largest relative error %.3g on [-87, 88]\n", worst);
    CHECK(act_exp(0.0f) == 1.0f);
    CHECK(act_exp(-1000.0f) == act_exp(-87.0f) && act_exp(-87.0f) > 0.0f);
    CHECK(isfinite(act_exp(88.0f)) && isinf(act_exp(89.0f)) && isinf(act_exp(1000.0f)));
    CHECK(isnan(act_exp(NAN)));
}

static void test_gelu_silu_accuracy(void) {
    double wg = 0, ws = 0;
    for (int i = -200000; i <= 200000; i++) {
        const float x = (float)i * 1e-4f; /* [-20, 20] */
        const double bound = fmax(1.0, fabs((double)x));
        const double eg = fabs(act_gelu_tanh(x) - gelu_ref(x)) / bound, es = fabs(act_silu(x) - silu_ref(x)) / bound;
        if (eg > wg) wg = eg;
        if (es > ws) ws = es;
    }
    /* relative to max(1, |x|): both are x times a factor in [0, 1] */
    CHECK_MSG(wg < 5e-7, "act_gelu_tanh: largest error %.3g", wg);
    CHECK_MSG(ws < 5e-7, "act_silu: largest error %.3g", ws);
    printf("  gelu: largest error %.3g, silu %.3g (of max(1, |x|), x in [-20, 20])\n", wg, ws);
    CHECK(act_gelu_tanh(0.0f) == 0.0f && act_silu(0.0f) == 0.0f);
    CHECK(act_gelu_tanh(-1e30f) == 0.0f && act_gelu_tanh(1e30f) == 1e30f);
    CHECK(act_silu(-1e30f) == 0.0f && act_silu(1e30f) == 1e30f);
    CHECK(isnan(act_gelu_tanh(NAN)) && isnan(act_silu(NAN)));
}

int main(void) {
    RUN_TEST(test_exp_accuracy);
    RUN_TEST(test_gelu_silu_accuracy);
    return test_report();
}
