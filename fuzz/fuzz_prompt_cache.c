/*
 * libFuzzer target: arbitrary bytes parsed as a prompt cache file (engine/prompt_cache.h,
 * doc/prompt-cache.md), then its cache image loaded by the library.
 *
 * prompt_cache_parse must never crash or read out of bounds, whatever the input; when it
 * accepts an image, every part it points at lies inside the input, in order, the tokens are in
 * [0, n_vocab), and the cache image is handed to
 * tq_kv_cache_load_memory (fuzzed on its own by fuzz_cachefile.c), which must not crash either.
 * A one-byte change anywhere in the front (header, scheme, tokens, logits, checksum) of an
 * accepted file must be refused.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "prompt_cache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1); /* exact size: ASan sees reads past the input */
    if (size) memcpy(buf, data, size);
    prompt_cache_view v;
    char why[256];
    prompt_cache_status st = prompt_cache_parse(buf, size, &v, why, sizeof why);
    if (st == PCACHE_OK) {
        const uint8_t *end = buf + size;
        if ((const uint8_t *)v.scheme != buf + PROMPT_CACHE_HEADER_BYTES || v.tokens != (const uint8_t *)v.scheme + v.scheme_len ||
            v.image + v.image_bytes != end || v.image < v.tokens + 4 * v.n_tokens)
            abort();
        if (v.logits && v.logits + 4 * v.n_vocab + 8 != v.image) abort();
        for (size_t i = 0; i < v.n_tokens; i++) {
            const uint8_t *t = v.tokens + 4 * i;
            uint32_t id = (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24;
            if (id >= v.n_vocab) abort();
        }
        tq_kv_cache *c = NULL;
        if (tq_kv_cache_load_memory(v.image, v.image_bytes, &c) != TQ_OK && c != NULL) abort();
        tq_kv_cache_free(c);
        /* the front is checksummed: any flipped byte there is refused */
        size_t front = (size_t)(v.image - buf);
        size_t at = (size_t)(buf[size - 1] * 131u + size) % front;
        buf[at] ^= 0x01;
        if (prompt_cache_parse(buf, size, &v, why, sizeof why) == PCACHE_OK) abort();
    } else if (!why[0]) {
        abort(); /* every refusal says why */
    }
    free(buf);
    return 0;
}
