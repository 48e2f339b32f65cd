#!/bin/bash
# Decode attention per kernel set, 8 layers, 2 threads (the README's "Decode attention alone"
# table): for d128 32q/8kv and d256 4q/1kv at ctx 32768 and 4096, build/tq attn-bench with the
# AVX2 float lane kernels (TQ_KERNELS=avx2 TQ_INT8_SCORES=0), the AVX2 integer kernels as a CPU
# without AVX-VNNI runs them (TQ_KERNELS=avx2 TQ_AVXVNNI=0), the same with AVX-VNNI
# (TQ_KERNELS=avx2, where the CPU has it) and the automatic AVX-512 choice (TQ_KERNELS=avx512);
# each cell the best of RUNS runs (default 2; the machine is shared), speed-ups against the f16
# path of the same run. Usage: [RUNS=N] scripts/attn-kernels-grid.sh   (about 2 minutes per run
# on 2 cores)
set -eu
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ctx in 32768 4096; do
  for shape in "128 32 8" "256 4 1"; do
    set -- $shape
    for cfg in "TQ_KERNELS=avx2 TQ_INT8_SCORES=0" "TQ_KERNELS=avx2 TQ_AVXVNNI=0" "TQ_KERNELS=avx2" "TQ_KERNELS=avx512"; do
      for rep in $(seq "${RUNS:-2}"); do
        echo "== $ctx|d$1 $2q/$3kv|$cfg" >>"$out"
        env $cfg build/tq attn-bench --head-dim "$1" --q-heads "$2" --kv-heads "$3" --ctx "$ctx" --layers 8 \
          --scheme f16,turbo3,turbo4 --threads 2 --reps 5 2>&1 | grep -E 'kernels|^(f16|turbo3|turbo4) ' >>"$out"
      done
    done
  done
done
python3 - "$out" <<'PY'
import re, sys
cur, res, kern = None, {}, {}
for line in open(sys.argv[1]):
    if line.startswith("== "):
        cur = tuple(line[3:].strip().split("|"))
        continue
    m = re.search(r"kernels (\S+)", line)
    if m and cur:
        kern[cur] = m.group(1) + (" (float)" if "INT8_SCORES=0" in cur[2] else "")
    m = re.match(r"(f16|turbo3|turbo4)\s+([\d.]+)", line)
    if m and cur:
        res.setdefault(cur, {}).setdefault(m.group(1), []).append(float(m.group(2)))
print("| shape | ctx | kernels | f16 | turbo3 | turbo4 |")
print("|---|---|---|---:|---:|---:|")
for (ctx, shape, cfg), v in res.items():
    f, t3, t4 = min(v["f16"]), min(v["turbo3"]), min(v["turbo4"])
    print(f"| {shape} | {ctx} | {kern[(ctx, shape, cfg)]} | {f:,.0f} | {t3:,.0f} ({f / t3:.2f}×) | {t4:,.0f} ({f / t4:.2f}×) |")
PY
