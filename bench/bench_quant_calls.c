/* One call of one weight kernel (quant_kernels.dot[type] of a set), for counting its instructions
 * under an emulator: scripts/arm-quant-instr-counts.sh runs this under qemu-aarch64-static with
 * TYPE none (the same setup, no call) and with each type, and takes the difference. The setup —
 * a random weight row of every direct type and 8 activation rows in every activation format, by
 * the reference quantizers — does not depend on SET, TYPE or NX, so the difference is the call.
 *
 * Usage: bench_quant_calls SET TYPE N NX
 *   SET: a set's name (ref, avx2, neon, neon-dotprod, ...; one this CPU runs), TYPE: Q4_0 ... or
 *   none, N: row length (a multiple of 256), NX: activation rows (1..8). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/quants.h"
#include "../tests/quant_rows.h"

static const int types[] = {QUANT_F32, QUANT_F16, QUANT_BF16, QUANT_Q4_0, QUANT_Q4_1,
                            QUANT_Q5_0, QUANT_Q8_0, QUANT_Q4_K, QUANT_Q6_K};
#define N_TYPES ((int)(sizeof types / sizeof types[0]))

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: bench_quant_calls SET TYPE|none N NX\n");
        return 2;
    }
    const char *set_name = argv[1], *type_name = argv[2];
    const int64_t n = atoll(argv[3]);
    const int nx = atoi(argv[4]);
    if (n <= 0 || n % QUANT_QK_K != 0 || nx < 1 || nx > QUANT_DOT_MAX_NX) {
        fprintf(stderr, "bench_quant_calls: N must be a positive multiple of 256, NX 1..8\n");
        return 2;
    }
    const quant_kernels *sets[8], *k = NULL;
    int ns = quant_kernels_list(sets, 8);
    for (int s = 0; s < ns; s++)
        if (strcmp(sets[s]->name, set_name) == 0) k = sets[s];
    if (k == NULL) {
        fprintf(stderr, "bench_quant_calls: no set %s on this CPU\n", set_name);
        return 2;
    }
    int type = -1;
    for (int t = 0; t < N_TYPES; t++)
        if (strcmp(quant_type_name(types[t]), type_name) == 0) type = types[t];
    if (type < 0 && strcmp(type_name, "none") != 0) {
        fprintf(stderr, "bench_quant_calls: type %s has no direct kernel here\n", type_name);
        return 2;
    }

    /* every type's row and every format's activations, whatever is called */
    uint8_t *w[N_TYPES];
    for (int t = 0; t < N_TYPES; t++) {
        w[t] = malloc(quant_row_bytes(types[t], n));
        random_row(types[t], w[t], n);
    }
    float *x = malloc((size_t)QUANT_DOT_MAX_NX * (size_t)n * sizeof *x);
    for (size_t i = 0; i < (size_t)QUANT_DOT_MAX_NX * (size_t)n; i++) x[i] = rnd_uniform(-1.0f, 1.0f);
    const size_t sa = quant_act_row_bytes(QUANT_ACT_Q8_A, n), sa1 = quant_act_row_bytes(QUANT_ACT_Q8_A1, n),
                 sk = quant_act_row_bytes(QUANT_ACT_Q8_K, n);
    uint8_t *xa = aligned_alloc(64, QUANT_DOT_MAX_NX * sa), *xa1 = aligned_alloc(64, QUANT_DOT_MAX_NX * sa1),
            *xk = aligned_alloc(64, QUANT_DOT_MAX_NX * sk);
    for (int r = 0; r < QUANT_DOT_MAX_NX; r++) {
        quant_quantize_q8_a_ref(x + (size_t)r * (size_t)n, xa + (size_t)r * sa, n);
        quant_quantize_q8_a1_ref(x + (size_t)r * (size_t)n, xa1 + (size_t)r * sa1, n);
        quant_quantize_q8_K_ref(x + (size_t)r * (size_t)n, xk + (size_t)r * sk, n);
    }

    float out[QUANT_DOT_MAX_NX] = {0};
    if (type >= 0) {
        int t = 0;
        while (types[t] != type) t++;
        const quant_act act = quant_act_format(type);
        const void *xq = act == QUANT_ACT_Q8_A ? (const void *)xa : act == QUANT_ACT_Q8_A1 ? (const void *)xa1
                         : act == QUANT_ACT_Q8_K ? (const void *)xk : (const void *)x;
        const size_t xs = act == QUANT_ACT_Q8_A ? sa : act == QUANT_ACT_Q8_A1 ? sa1
                          : act == QUANT_ACT_Q8_K ? sk : (size_t)n * sizeof(float);
        k->dot[type](n, w[t], xq, xs, nx, out);
    }
    volatile float sink = out[0]; /* no printing of the value: the same work with and without the call */
    (void)sink;
    for (int t = 0; t < N_TYPES; t++) free(w[t]);
    free(x), free(xa), free(xa1), free(xk);
    return 0;
}
