#!/bin/bash
# Instructions per 256 weights of each weight kernel (quant_kernels.dot[type]) of the AArch64 sets
# beside the scalar reference's, at nx = 1 (decode: one activation row per call) and nx = 8 (the
# most rows one call takes), counted under qemu-user: ARM speed cannot be measured on this x86
# machine, instruction counts can. As scripts/arm-instr-counts.sh: qemu-aarch64-static logs every
# translated block (-d in_asm: its instructions) and every execution of a block (-d exec, with
# -d nochain so that none is skipped); here over the whole program, because bench_quant_calls
# does the same setup whatever it is asked (every type's random row, every activation format), so
# a run with TYPE none subtracted from a run with one kernel call leaves that call, whatever
# helpers or library functions the kernel calls (the reference's fp16 loads). Deterministic: the
# same binary gives the same counts.
# Usage: scripts/arm-quant-instr-counts.sh [N]   (after make test-arm; N elements per weight row,
#        a multiple of 256, default 4096; the CPU qemu emulates, "max", has the dot products)
set -eu
cd "$(dirname "$0")/.."
n=${1:-4096}
bin=build-arm/bench_quant_calls
[ -x "$bin" ] || { echo "arm-quant-instr-counts: $bin missing (make test-arm builds it)" >&2; exit 1; }
command -v qemu-aarch64-static >/dev/null || { echo "arm-quant-instr-counts: qemu-aarch64-static missing (apt-get install qemu-user-static)" >&2; exit 1; }
# the cross package's C library (-L), unless Debian's arm64 multiarch libc is installed: then
# that one (cmake/aarch64-linux-gnu.cmake says why)
qemu_prefix=(-L /usr/aarch64-linux-gnu)
[ -e /lib/ld-linux-aarch64.so.1 ] && qemu_prefix=()
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/count.py" <<'PY'
import re, sys
size, cur, total = {}, None, 0
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("IN:"):
        cur = [None, 0]
    elif cur is not None and re.match(r"0x[0-9a-f]+:", line):
        if cur[0] is None:
            cur[0] = int(line.split(":")[0], 16)
        cur[1] += 1
        size[cur[0]] = cur[1]
    elif line.startswith("Trace "):
        total += size[int(line.split("[")[1].split("/")[1], 16)]
    elif not line.strip():
        cur = None
print(total)
PY
count() { # SET TYPE NX -> instructions executed by the whole run
  qemu-aarch64-static "${qemu_prefix[@]}" -d in_asm,exec,nochain -D "$tmp/log" "$bin" "$1" "$2" "$n" "$3" >/dev/null
  python3 "$tmp/count.py" "$tmp/log"
}
sets="ref neon neon-dotprod"
declare -A base
for s in $sets; do base[$s]=$(count "$s" none 1); done
echo "instructions per 256 weights, row of $n elements (qemu-aarch64-static, $(date +%Y-%m-%d)); nx = 8: per call of 8 activation rows"
printf '| type | nx | %s |\n' "$(echo $sets | sed 's/ / | /g')"
printf '|---|---:|%s\n' "$(for s in $sets; do printf -- '---:|'; done)"
for t in Q4_0 Q4_1 Q5_0 Q8_0 Q4_K Q6_K F16 BF16 F32; do
  for nx in 1 8; do
    row="| $t | $nx |"
    for s in $sets; do
      c=$(count "$s" "$t" "$nx")
      row="$row $(python3 -c "print(f'{($c - ${base[$s]}) * 256 / $n:.0f}')") |"
    done
    echo "$row"
  done
done
