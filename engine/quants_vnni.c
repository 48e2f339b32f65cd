/* The AVX-512 kernel set again, with VNNI (vpdpbusd) for the u8 x s8 block sums: see the head
 * of quants_avx512.c. Compile alone with the AVX-512 flags plus -mavx512vnni; quants_dispatch.c
 * picks it only where cpuid reports AVX512_VNNI. */
#define QUANT_VNNI 1
#include "quants_avx512.c"
