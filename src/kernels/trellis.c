/*
 * Trellis-coded indices: the reference encoder (trellis_search.h, compiled for the baseline
 * ISA; the kernel sets compile the same source with their own vector width, tq_kernel_table's
 * trellis_quantize_pack) and the decoder every set uses (contracts in trellis.h).
 */
#include "trellis.h"

#include <string.h>

#include "kernels.h"
#include "trellis_search.h"

float tq_trellis_quantize_pack(const float *x, float scale, int n, int bits, const float *pairs,
                               int memory, uint8_t *out) {
    return tq_trellis_encode(x, scale, n, bits, pairs, memory, out, 0);
}

void tq_trellis_unpack(const uint8_t *in, int n, int bits, const float *pairs, float scale,
                       float *out) {
    /* Index i's value is the 2·bits-bit window of the stream that ends with it (bits of zero
     * before the stream for i = 0). A chunk holds the whole indices of 32 bits (bits 2, 4) or
     * 24 bits (bits 3), so chunks start on byte boundaries; with the last index of the chunk
     * before carried below it, every window of a chunk is independent of the others. The
     * last partial chunk is read index by index within the group's bytes. */
    const uint64_t wmask = (1u << (2 * bits)) - 1u;
    const int per = bits == 3 ? 8 : 32 / bits, step = per * bits / 8;
    uint32_t prev = 0;
    int i = 0;
    for (; i + per <= n; i += per) {
        uint32_t w = (uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16;
        if (step == 4) w |= (uint32_t)in[3] << 24;
        in += step;
        uint64_t win = (uint64_t)w << bits | prev;
        for (int j = 0; j < per; j++) out[i + j] = scale * pairs[(win >> (j * bits)) & wmask];
        prev = (uint32_t)(w >> ((per - 1) * bits)) & ((1u << bits) - 1u);
    }
    for (int j = 0; i < n; i++, j++) {
        uint32_t idx = tq_ref_get_index(in, (size_t)j, bits);
        out[i] = scale * pairs[(idx << bits) | prev];
        prev = idx;
    }
}
