/* The NEON kernel set again, with the ARMv8.2-A dot product (vdotq_s32: four int8 products summed
 * into each int32 lane) for the integer block sums: see the head of quants_neon.c. GCC: the target
 * is set here, for this file only; quants_dispatch.c registers the set only where the kernel
 * reports HWCAP_ASIMDDP. clang (whose arm_neon.h before version 16 declares vdotq_s32 only under
 * __ARM_FEATURE_DOTPROD) builds it only when the command line targets the dot products; otherwise
 * the fill leaves the table a copy of "neon" and the dispatch does not register it. Elsewhere
 * (x86-64) a declaration only. */
#if defined(__aarch64__) && defined(__ARM_NEON) && !defined(__clang__)
#pragma GCC target("arch=armv8.2-a+dotprod")
#define QUANT_NEON_DOTPROD 1
#elif defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
#define QUANT_NEON_DOTPROD 1
#endif

#if defined(__aarch64__) && defined(__ARM_NEON) && !defined(QUANT_NEON_DOTPROD)
#include "quants.h"
void quant_fill_neon_dotprod(quant_kernels *k) { (void)k; }
#else
#include "quants_neon.c"
#endif
