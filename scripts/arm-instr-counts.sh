#!/bin/bash
# Instructions per record of the AArch64 decode attention kernels (score_turbo_lanes,
# accum_turbo_lanes of attn_neon.c — floats — and of attn_neon_dot.c — sdot / udot —, with the
# helpers they call), counted under qemu-user:
# ARM speed cannot be measured on this x86 machine, instruction counts can. qemu-aarch64-static
# logs every translated block (-d in_asm: its instructions, under its function's name) and every
# execution of a block (-d exec, with -d nochain so that none is skipped), both limited to the
# kernels' addresses (-dfilter); the script sums instructions per function and divides by the
# records of one call (bench_attn_lanes with min_ms 0 calls each kernel once).
# Usage: [SHAPES="DIM:BITS[:t] …"] scripts/arm-instr-counts.sh [NK]   (after make test-arm; NK
# records per call, default 256 — a page, what src/attention.c hands a decode kernel; ":t":
# trellis codes)
set -eu
cd "$(dirname "$0")/.."
nk=${1:-256}
bin=build-arm/bench_attn_lanes
[ -x "$bin" ] || { echo "arm-instr-counts: $bin missing (make test-arm builds it)" >&2; exit 1; }
command -v qemu-aarch64-static >/dev/null || { echo "arm-instr-counts: qemu-aarch64-static missing (apt-get install qemu-user-static)" >&2; exit 1; }
# qemu-user maps a PIE executable at 0x5500000000; the kernels' ranges from the symbol table
base=$((0x5500000000))
ranges=$(aarch64-linux-gnu-nm -S --defined-only "$bin" |
  awk '$4 ~ /^neon_(score|accum)_turbo_lanes$|^neon_dot_multi$|^neon_accum_rows$|^nd_(score|accum)_turbo_lanes$|^nd_setup$|^nd_flush$|^nd_float_(scores|accum)$/ { print $1, $2 }' |
  while read -r a s; do printf '0x%x+0x%x,' $((base + 0x$a)) $((0x$s)); done)
[ -n "$ranges" ] || { echo "arm-instr-counts: kernel symbols not found in $bin" >&2; exit 1; }
# the cross package's C library (-L), unless Debian's arm64 multiarch libc is installed: then
# that one (cmake/aarch64-linux-gnu.cmake says why)
qemu_prefix=(-L /usr/aarch64-linux-gnu)
[ -e /lib/ld-linux-aarch64.so.1 ] && qemu_prefix=()
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for shape in ${SHAPES:-128:2 128:3 128:4 256:3 256:4 64:3 128:3:t 128:4:t 256:3:t 256:4:t}; do
  qemu-aarch64-static "${qemu_prefix[@]}" -d in_asm,exec,nochain -dfilter "${ranges%,}" -D "$tmp/log" \
    "$bin" 0 "$nk" "$shape" >/dev/null
  python3 - "$tmp/log" "$nk" "$shape" <<'EOF'
import re, sys
log, nk, shape = sys.argv[1], int(sys.argv[2]), sys.argv[3]
size, name, counts = {}, {}, {}
cur = None
for line in open(log, errors="replace"):
    if line.startswith("IN: "):
        cur = [line[4:].strip(), None, 0]
    elif cur is not None and re.match(r"0x[0-9a-f]+:", line):
        if cur[1] is None:
            cur[1] = int(line.split(":")[0], 16)
        cur[2] += 1
        size[cur[1]], name[cur[1]] = cur[2], cur[0]
    elif line.startswith("Trace "):
        pc = int(line.split("[")[1].split("/")[1], 16)
        counts[name[pc]] = counts.get(name[pc], 0) + size[pc]
    elif not line.strip():
        cur = None
# the score kernel calls neon_dot_multi, the value kernel neon_accum_rows; each neon-dot kernel
# calls nd_setup once (half of its count to each), and nd_float_* only for what the integer path
# leaves (none here: NK a multiple of 4, finite inputs)
c = lambda n: counts.get(n, 0)
score = c("neon_score_turbo_lanes") + c("neon_dot_multi")
accum = c("neon_accum_turbo_lanes") + c("neon_accum_rows")
dscore = c("nd_score_turbo_lanes") + c("nd_setup") / 2 + c("nd_float_scores")
daccum = c("nd_accum_turbo_lanes") + c("nd_flush") + c("nd_setup") / 2 + c("nd_float_accum")
d, b = shape.split(":")[:2]
tr = shape.endswith(":t")
# trellis codes: neon (floats) does not read them (the tile does), so only neon-dot's counts
fl = "neon: the tile" if tr else f"neon score {score / nk:.0f}, value sum {accum / nk:.0f}"
print(f"d{d} {b} bits{' trellis' if tr else ''}, 4 query heads, instructions per record: {fl}; "
      f"neon-dot score {dscore / nk:.0f}, value sum {daccum / nk:.0f}")
EOF
done
