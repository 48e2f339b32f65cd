/*
 * Records → rows with a kernel set (attn_kernels.h), and the lane layout (record.h).
 */
#include <string.h>

#include "attn_kernels.h"
#include "blockq.h"
#include "trellis.h"

void tq_record_to_lanes(const tq_record *x, const float *in, float *out) {
    for (int s = 0; s < x->n_seg; s++) {
        int n = x->seg[s].count, nb = (n + 127) / 128;
        const float *src = in + x->seg[s].start;
        memset(out, 0, sizeof(float) * 128 * (size_t)nb);
        for (int c = 0; c < n; c++) out[c / 128 * 128 + 16 * (c % 8) + c % 128 / 8] = src[c];
        out += 128 * (size_t)nb;
    }
}

void tq_record_from_lanes(const tq_record *x, const float *in, float *out) {
    for (int s = 0; s < x->n_seg; s++) {
        int n = x->seg[s].count, nb = (n + 127) / 128;
        float *dst = out + x->seg[s].start;
        for (int c = 0; c < n; c++) dst[c] = in[c / 128 * 128 + 16 * (c % 8) + c % 128 / 8];
        in += 128 * (size_t)nb;
    }
}

static const float sign_centroids[2] = {-1.0f, 1.0f};

int tq_record_decode_rows(const tq_kernel_set *ks, const tq_record *x, const uint8_t *rec,
                          size_t n, float *rows, size_t stride) {
    const tq_attn_kernels *ak = ks->attn;
    int ok = 1;
    switch (x->format) {
    case TQ_KV_F16:
        for (size_t t = 0; t < n; t++)
            ak->f16_to_f32((const uint16_t *)(const void *)(rec + t * x->rec_bytes),
                           rows + t * stride, x->dim);
        return 1;
    case TQ_KV_Q8_0:
        for (size_t t = 0; t < n; t++) ak->q8_0_decode(rec + t * x->rec_bytes, x->dim, rows + t * stride);
        return 1;
    case TQ_KV_Q4_0:
        for (size_t t = 0; t < n; t++) ak->q4_0_decode(rec + t * x->rec_bytes, x->dim, rows + t * stride);
        return 1;
    case TQ_KV_TURBO:
        break;
    case TQ_KV_Q8_0R: /* never a record's format: a rotated tensor's records are Q8_0 / Q4_0 */
    case TQ_KV_Q4_0R:
        return 0;
    }
    const tq_kernel_table *k = ks->codec;
    void (*unpack)(const uint8_t *, int, int, const float *, float, float *) = k->unpack_lookup;
    /* fp16 norms of up to 64 records at a time, converted with the SIMD kernel. */
    uint16_t nh[64];
    float nf[64];
    for (size_t t = 0; t < n; t++) {
        const uint8_t *r = rec + t * x->rec_bytes;
        float *row = rows + t * stride;
        if (!x->norm_f32 && t % 64 == 0) {
            size_t m = n - t < 64 ? n - t : 64;
            for (size_t j = 0; j < m; j++) {
                const uint8_t *p = r + j * x->rec_bytes + x->norm_off;
                nh[j] = (uint16_t)(p[0] | (p[1] << 8));
            }
            ak->f16_to_f32(nh, nf, (int)m);
        }
        float nrm = x->norm_f32 ? tq_record_load_norm(x, r + x->norm_off) : nf[t % 64];
        float g = x->prod ? tq_record_load_norm(x, r + x->gamma_off) : 0.0f;
        if (!tq_record_norm_ok(nrm) || !tq_record_gamma_ok(g)) {
            memset(row, 0, sizeof(float) * (size_t)x->row_floats);
            ok = 0;
            continue;
        }
        if (x->n_seg == 0 || x->seg[0].start > 0)
            memset(row, 0, sizeof(float) * (size_t)x->dim); /* PROD at 1 bit: no MSE part */
        for (int s = 0; s < x->n_seg; s++) {
            int b = x->seg[s].bits;
            if (x->seg[s].pairs) {
                tq_trellis_unpack(r + x->seg[s].off, x->seg[s].count, b, x->seg[s].pairs,
                                  nrm * x->inv_sqrt_dim, row + x->seg[s].start);
                continue;
            }
            (b <= 4 && ak->unpack_small ? ak->unpack_small : unpack)(
                r + x->seg[s].off, x->seg[s].count, b, x->seg[s].centroids,
                nrm * x->inv_sqrt_dim, row + x->seg[s].start);
        }
        if (x->prod)
            k->unpack_lookup(r + x->sign_off, x->dim, 1, sign_centroids,
                             nrm * g * x->prod_scale, row + x->dim);
    }
    return ok;
}

void tq_record_f16_rows(const tq_kernel_set *ks, const uint16_t *in, size_t n, int dim,
                        float *out, size_t stride) {
    for (size_t t = 0; t < n; t++)
        ks->attn->f16_to_f32(in + t * (size_t)dim, out + t * stride, dim);
}
