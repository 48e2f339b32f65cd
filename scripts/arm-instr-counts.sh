#!/bin/bash
# Instructions per record of the AArch64 decode attention kernels (score_turbo_lanes,
# accum_turbo_lanes of attn_neon.c — floats — and of attn_neon_dot.c — sdot / udot —, with the
# helpers they call), counted under qemu-user:
# ARM speed cannot be measured on this x86 machine, instruction counts can. qemu-aarch64-static
# logs every translated block (-d in_asm: its instructions, under its function's name) and every
# execution of a block (-d exec, with -d nochain so that none is skipped), both limited to the
# kernels' addresses (-dfilter); the script sums instructions per function and divides by the
# records of one call (bench_attn_lanes with min_ms 0 calls each kernel once). It also counts
# the tile (decoded rows, then the float kernels: what an attention table
# whose lane kernels do not read a record runs; bench_attn_lanes … tile:score / tile:value).
# Usage: [SHAPES="DIM:BITS[:t] …"] scripts/arm-instr-counts.sh [NK]   (after make test-arm; NK
# records per call, default 256 — a page, what src/attention.c hands a decode kernel; ":t":
# trellis codes, ":2": the two-state tables of trellis=2, the default)
set -eu
cd "$(dirname "$0")/.."
nk=${1:-256}
bin=build-arm/bench_attn_lanes
[ -x "$bin" ] || { echo "arm-instr-counts: $bin missing (make test-arm builds it)" >&2; exit 1; }
command -v qemu-aarch64-static >/dev/null || { echo "arm-instr-counts: qemu-aarch64-static missing (apt-get install qemu-user-static)" >&2; exit 1; }
# qemu-user maps a PIE executable at 0x5500000000; the kernels' ranges from the symbol table
base=$((0x5500000000))
# the -dfilter ranges of the functions whose names match an awk regex
ranges_of() {
  aarch64-linux-gnu-nm -S --defined-only "$bin" | awk -v re="$1" '$4 ~ re { print $1, $2 }' |
    while read -r a s; do printf '0x%x+0x%x,' $((base + 0x$a)) $((0x$s)); done
}
ranges=$(ranges_of '^(neon_(score|accum)_turbo_lanes|nseg_setup|neon_dot_multi|neon_accum_rows|nd_(score|accum)_turbo_lanes|nd_score_prepared|nd_prep_turbo_lanes|nd_setup|nd_flush|nd_float_(scores|accum))([.]part[.][0-9]+)?$')
# the tile (bench_attn_lanes … tile:score / tile:value): rows decoded, then the float kernels
tile_ranges=$(ranges_of '^(tq_record_decode_rows|tq_trellis_unpack|neon_unpack_lookup|neon_f16_to_f32|neon_dot_multi|neon_accum_rows)([.]part[.][0-9]+)?$')
[ -n "$ranges" ] && [ -n "$tile_ranges" ] || { echo "arm-instr-counts: kernel symbols not found in $bin" >&2; exit 1; }
# the cross package's C library (-L), unless Debian's arm64 multiarch libc is installed: then
# that one (cmake/aarch64-linux-gnu.cmake says why)
qemu_prefix=(-L /usr/aarch64-linux-gnu)
[ -e /lib/ld-linux-aarch64.so.1 ] && qemu_prefix=()
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# instructions executed per function in a qemu log (-d in_asm,exec,nochain), as JSON
cat > "$tmp/count.py" <<'PY'
import json, re, sys
size, name, counts = {}, {}, {}
cur = None
for line in open(sys.argv[1], errors="replace"):
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
json.dump(counts, sys.stdout)
PY
run() { # run RANGES OUT ARGS…: the bench under qemu, its counts into OUT
  local r=$1 out=$2
  shift 2
  qemu-aarch64-static "${qemu_prefix[@]}" -d in_asm,exec,nochain -dfilter "${r%,}" -D "$tmp/log" "$bin" "$@" >/dev/null
  python3 "$tmp/count.py" "$tmp/log" > "$out"
}
for shape in ${SHAPES:-128:2 128:3 128:4 256:3 256:4 64:3 64:4 128:3:t 128:4:t 256:3:t 256:4:t 128:3:2 128:4:2 256:3:2 256:4:2 64:3:2 64:4:2}; do
  run "$ranges" "$tmp/lanes.json" 0 "$nk" "$shape"
  # the tile too, on an emulated Cortex-A72 (NEON without the dot products)
  QEMU_CPU=cortex-a72 run "$tile_ranges" "$tmp/ts.json" 0 "$nk" "$shape" tile:score
  QEMU_CPU=cortex-a72 run "$tile_ranges" "$tmp/tv.json" 0 "$nk" "$shape" tile:value
  python3 - "$tmp" "$nk" "$shape" <<'PY'
import json, sys
tmp, nk, shape = sys.argv[1], int(sys.argv[2]), sys.argv[3]
counts = json.load(open(f"{tmp}/lanes.json"))
tile_s, tile_v = (sum(json.load(open(f"{tmp}/{f}.json")).values()) for f in ("ts", "tv"))
# (a function and the parts the compiler split off it, name.part.N, together)
c = lambda n: sum(v for k, v in counts.items() if k == n or k.startswith(n + ".part."))
# the score kernel calls neon_dot_multi, the value kernel neon_accum_rows, each nseg_setup once
# (half of its count to each); neon-dot's score kernel calls nd_prep_turbo_lanes and
# nd_score_prepared, each neon-dot kernel nd_setup once (half of its count to each), and
# nd_float_* only for what the integer path leaves (none here: NK a multiple of 4, finite inputs)
score = c("neon_score_turbo_lanes") + c("neon_dot_multi") + c("nseg_setup") / 2
accum = c("neon_accum_turbo_lanes") + c("neon_accum_rows") + c("nseg_setup") / 2
dscore = (c("nd_score_turbo_lanes") + c("nd_prep_turbo_lanes") + c("nd_score_prepared") + c("nd_setup") / 2
          + c("nd_float_scores"))
daccum = c("nd_accum_turbo_lanes") + c("nd_flush") + c("nd_setup") / 2 + c("nd_float_accum")
d, b = shape.split(":")[:2]
tags = shape.split(":")[2:]
kind = (" trellis (two-state)" if "2" in tags else " trellis" if "t" in tags else "") + \
    (", the key split" if "s" in tags else "")
# neon (floats) reads trellis codes of tables of at most 32 values (2 bits, the two-state
# tables); the free tables of 3 and 4 bits take the tile
fl = "neon: the tile" if score == 0 else f"neon score {score / nk:.0f}, value sum {accum / nk:.0f}"
tl = f"; the tile (Cortex-A72): score {tile_s / nk:.0f}, value sum {tile_v / nk:.0f}"
print(f"d{d} {b} bits{kind}, 4 query heads, instructions per record: {fl}; "
      f"neon-dot score {dscore / nk:.0f}, value sum {daccum / nk:.0f}{tl}")
PY
done
