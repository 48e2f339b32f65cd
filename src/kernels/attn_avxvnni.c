/*
 * Decode attention in integers on AVX2 CPUs with AVX-VNNI (Alder Lake and later Intel cores,
 * AMD Zen 5): attn_avx2_int8.c compiled again with its one byte dot product as vpdpbusd on
 * 256-bit vectors instead of vpmaddubsw + vpmaddwd + vpaddd; the same ranges (7-bit
 * centroids), bounds and byte order, so the results equal avx2-int8's bit for bit
 * (tests/test_attention.c). Compiled with -mavx2 -mfma -mf16c -mavxvnni; table "avx2-vnni",
 * chosen under the AVX2 set where CPUID says AVX-VNNI.
 */
#define I8_AVXVNNI 1
#include "attn_avx2_int8.c"
