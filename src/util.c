/* Version, error names, half-precision conversion and the deterministic PRNG. */
#include <math.h>
#include <string.h>

#include "internal.h"

int tq_version_number(void) { return TQ_VERSION_NUMBER; }
const char *tq_version_string(void) { return TQ_VERSION_STRING; }

tq_status tq_sized_in(void *dst, const void *src, size_t known, size_t min) {
    size_t size;
    memcpy(&size, src, sizeof size);
    /* An uninitialized size is refused unread rather than scanned. */
    if (size < min || size < sizeof size || size > TQ_SIZED_MAX) return TQ_ERR_INVALID;
    for (size_t i = known; i < size; i++)
        if (((const unsigned char *)src)[i]) return TQ_ERR_INVALID;
    memcpy(dst, src, size < known ? size : known);
    memcpy(dst, &known, sizeof known);
    return TQ_OK;
}

tq_status tq_sized_out(void *out, size_t out_size, const void *src, size_t known, size_t min,
                       int has_size) {
    if (out_size < min) return TQ_ERR_CAPACITY;
    size_t n = out_size < known ? out_size : known;
    memcpy(out, src, n);
    memset((unsigned char *)out + n, 0, out_size - n);
    if (has_size) memcpy(out, &n, sizeof n);
    return TQ_OK;
}

static const struct {
    const char *name;
    const char *message;
} status_text[] = {
    [TQ_OK] = {"TQ_OK", "success"},
    [TQ_ERR_NULL] = {"TQ_ERR_NULL", "a required pointer argument is NULL"},
    [TQ_ERR_DIM] = {"TQ_ERR_DIM", "dimension out of range or unsupported"},
    [TQ_ERR_BITS] = {"TQ_ERR_BITS",
                     "bit width out of range, or a fraction that does not split the dimension"},
    [TQ_ERR_VARIANT] = {"TQ_ERR_VARIANT", "unknown variant, kind or format"},
    [TQ_ERR_CAPACITY] = {"TQ_ERR_CAPACITY", "output buffer too small"},
    [TQ_ERR_NONFINITE] = {"TQ_ERR_NONFINITE", "input holds NaN or Inf"},
    [TQ_ERR_RANGE] = {"TQ_ERR_RANGE", "value outside the range the format stores"},
    [TQ_ERR_NOMEM] = {"TQ_ERR_NOMEM", "out of memory"},
    [TQ_ERR_INVALID] = {"TQ_ERR_INVALID", "inconsistent arguments"},
    [TQ_ERR_CORRUPT] = {"TQ_ERR_CORRUPT", "codes hold values no encoder produces"},
    [TQ_ERR_UNSUPPORTED] = {"TQ_ERR_UNSUPPORTED", "not supported by this CPU or build"},
    [TQ_ERR_SCHEME] = {"TQ_ERR_SCHEME", "scheme string does not parse"},
    [TQ_ERR_IO] = {"TQ_ERR_IO", "file could not be read or written"},
    [TQ_ERR_FORMAT] = {"TQ_ERR_FORMAT", "not a valid file of this format, or truncated"},
    [TQ_ERR_VERSION] = {"TQ_ERR_VERSION", "unsupported format version"},
    [TQ_ERR_CHECKSUM] = {"TQ_ERR_CHECKSUM", "checksum mismatch"},
    [TQ_ERR_MISMATCH] = {"TQ_ERR_MISMATCH", "file does not match the expected shapes or scheme"},
    [TQ_ERR_STATE] = {"TQ_ERR_STATE", "call not valid in the current state"},
};

const char *tq_error_name(tq_status status) {
    if ((unsigned)status >= sizeof status_text / sizeof status_text[0]) return "TQ_ERR_UNKNOWN";
    return status_text[status].name;
}

const char *tq_error_message(tq_status status) {
    if ((unsigned)status >= sizeof status_text / sizeof status_text[0]) return "unknown error";
    return status_text[status].message;
}

uint16_t tq_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xFFu;
    uint32_t mant = x & 0x7FFFFFu;
    if (exp == 0xFFu) return (uint16_t)(sign | 0x7C00u | (mant ? 0x200u : 0u)); /* Inf, NaN */
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7C00u); /* overflow → Inf */
    if (e <= 0) {
        /* Subnormal half (or zero): shift the full significand, round to nearest even. */
        if (e < -10) return (uint16_t)sign;
        uint32_t m = mant | 0x800000u;
        unsigned shift = (unsigned)(14 - e);
        uint32_t half = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)e << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++; /* may carry into Inf: right */
    return (uint16_t)half;
}

float tq_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    uint32_t x;
    if (exp == 0) {
        if (mant == 0) {
            x = sign;
        } else {
            /* Subnormal: normalize. */
            int e = -1;
            do {
                mant <<= 1;
                e++;
            } while (!(mant & 0x400u));
            x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3FFu) << 13);
        }
    } else if (exp == 31) {
        x = sign | 0x7F800000u | (mant << 13);
    } else {
        x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void tq_rng_seed(tq_rng *rng, uint64_t seed, uint64_t stream) {
    uint64_t s = seed ^ (stream * 0xD1B54A32D192ED03ull);
    rng->state = splitmix64(&s);
}

uint64_t tq_rng_next(tq_rng *rng) { return splitmix64(&rng->state); }

double tq_rng_uniform(tq_rng *rng) { return (double)(tq_rng_next(rng) >> 11) * 0x1.0p-53; }

double tq_rng_gauss(tq_rng *rng) {
    for (;;) {
        double u = 2.0 * tq_rng_uniform(rng) - 1.0;
        double v = 2.0 * tq_rng_uniform(rng) - 1.0;
        double s = u * u + v * v;
        if (s > 0.0 && s < 1.0) return u * sqrt(-2.0 * log(s) / s);
    }
}
