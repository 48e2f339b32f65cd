#!/bin/bash
# The side-by-side speed table of the README ("End to end"): tq bench, llama.cpp's llama-bench
# and ik_llama.cpp's llama-bench on both real models, 2 threads, the engines interleaved per KV
# type, raw outputs (JSON) into OUT. Run on an idle machine; it checks nothing itself but logs
# the load average before every run (OUT/log.txt).
#
# Usage: LLAMA_BENCH=PATH IK_BENCH=PATH|none scripts/peers-bench.sh OUT_DIR
# (IK_BENCH=none leaves ik_llama.cpp out. As an AVX2-only CPU: TQ_KERNELS=avx2 TQ_AVXVNNI=0 in
# the environment, which tq reads, and LLAMA_BENCH a llama.cpp built with -DGGML_NATIVE=OFF
# -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF.)
#
# The peers are test oracles, never committed. How they were built for the README figures:
#   llama.cpp: pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36; in its
#     vendor/llama.cpp: cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF
#     -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON
#     -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
#     -DGGML_AMX_BF16=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF;
#     cmake --build build --target llama-bench   (a native build faults on VMs without AMX
#     permission: ldtilecfg in ggml_backend_amx_mul_mat)
#   ik_llama.cpp: the search tool's fetch of ikawrakow/ik_llama.cpp, a sparse checkout without
#     models/ggml-vocab-* and examples/server/{public*,webui*}; cmake -B build
#     -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
#     -DLLAMA_BUILD_SERVER=OFF; cmake --build build --target llama-bench
set -u
cd "$(dirname "$0")/.."
OUT=${1:?usage: LLAMA_BENCH=PATH IK_BENCH=PATH scripts/peers-bench.sh OUT_DIR}
LB=${LLAMA_BENCH:?set LLAMA_BENCH to the llama-bench of llama.cpp}
IK=${IK_BENCH:?set IK_BENCH to the llama-bench of ik_llama.cpp}
mkdir -p "$OUT"
lscpu > "$OUT/lscpu.txt"
env | grep -E '^TQ_' > "$OUT/env.txt" || true
run() { echo "== $(date +%T) load $(cut -d' ' -f1 /proc/loadavg): $*" >> "$OUT/log.txt"; "$@"; }
for m in gemma3 smollm2; do
  if [ $m = gemma3 ]; then f=models/gemma3-270m-q4_k_m.gguf; D=0,4096,16384
  else f=models/smollm2-135m-instruct-q4_1.gguf; D=0,4096; fi # SmolLM2: context 8192
  for kv in f16 q8_0 q4_0; do
    run build/tq bench -m $f -p 512 -n 64 -d $D --kv $kv -r 2 -t 2 --json > "$OUT/tq_${m}_$kv.json" 2>>"$OUT/log.txt"
    run "$LB" -m $f -p 512 -n 64 -d $D -ctk $kv -ctv $kv -fa on -t 2 -r 2 -o jsonl > "$OUT/llama_${m}_$kv.jsonl" 2>>"$OUT/log.txt"
    [ "$IK" = none ] && continue
    # ik_llama.cpp's llama-bench has no -d: pp at depth 0, tg at depth d as -gp d,64
    run "$IK" -m $f -p 512 -n 0 -ctk $kv -ctv $kv -fa 1 -t 2 -r 2 -o json > "$OUT/ik_${m}_${kv}_pp.json" 2>>"$OUT/log.txt"
    for d in ${D//,/ }; do
      if [ $d = 0 ]; then
        run "$IK" -m $f -p 0 -n 64 -ctk $kv -ctv $kv -fa 1 -t 2 -r 2 -o json > "$OUT/ik_${m}_${kv}_d0.json" 2>>"$OUT/log.txt"
      else
        run "$IK" -m $f -p 0 -n 0 -gp $d,64 -ctk $kv -ctv $kv -fa 1 -t 2 -r 2 -o json > "$OUT/ik_${m}_${kv}_d$d.json" 2>>"$OUT/log.txt"
      fi
    done
  done
  for kv in turbo3 turbo4; do
    run build/tq bench -m $f -p 512 -n 64 -d $D --kv $kv -r 2 -t 2 --json > "$OUT/tq_${m}_$kv.json" 2>>"$OUT/log.txt"
  done
done
echo "== done $(date +%T)" >> "$OUT/log.txt"
