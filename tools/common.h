/* Helpers shared by the tq subcommands: strict number parsing, timing, a seeded PRNG. */
#ifndef TQ_TOOLS_COMMON_H
#define TQ_TOOLS_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* Exit code for usage errors (bad flags or values), as the CLI documents. */
#define TQ_EXIT_USAGE 2

/* Strict parsers: the whole string must be a number in [lo, hi]. Return 1 on success. */
int tool_parse_int(const char *s, long lo, long hi, long *out);
int tool_parse_u64(const char *s, uint64_t *out);
int tool_parse_double(const char *s, double lo, double hi, double *out);
/* Comma-separated doubles, each in [lo, hi]; at most cap values. Returns the count or -1. */
int tool_parse_double_list(const char *s, double lo, double hi, double *out, int cap);

/* Physical memory of this machine in bytes (sysconf _SC_PHYS_PAGES × _SC_PAGE_SIZE); 0 when
 * unknown. */
double tool_phys_mem_bytes(void);
/* The memory guard of the benchmarks: a run whose estimated need, `bytes` (itemized in
 * `detail`, e.g. "KV cache 3.20 GiB, ..."), exceeds the limit is refused before any work.
 * The limit is $TQ_MEM_LIMIT_GIB (GiB) when set, else the physical memory. Returns 1 when it
 * fits (or the memory is unknown); 0 after printing "tq CMD: this run needs about N GiB
 * (DETAIL), more than the M GiB of physical memory here; HINT"; -1 after printing that
 * $TQ_MEM_LIMIT_GIB is not a number. Callers exit TQ_EXIT_USAGE unless it returns 1. */
int tool_check_memory(const char *cmd, double bytes, const char *detail, const char *hint);

/* Reads the whole regular file at path (regular_file_open: never blocks on a FIFO) into a NUL-terminated malloc'ed
 * buffer; *len excludes the NUL. Returns 0, or 1 after printing "tq CMD: cannot open 'PATH':
 * WHY" or "tq CMD: cannot read 'PATH': WHY". */
int tool_read_file(const char *cmd, const char *path, char **out, size_t *len);

/* Monotonic seconds. */
double tool_now(void);

/* Deterministic PRNG for benchmark data (xorshift-based, independent of the library's). */
typedef struct tool_rng {
    uint64_t s;
} tool_rng;
void tool_rng_seed(tool_rng *r, uint64_t seed);
double tool_rng_gauss(tool_rng *r);

/* Runs fn(ctx, t) for t in [0, n_threads) on n_threads pthreads (inline when 1) and waits. */
int tool_run_threads(int n_threads, void (*fn)(void *ctx, int t), void *ctx);

#endif
