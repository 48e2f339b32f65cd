#!/bin/bash
# The attention op alone against llama.cpp's (issue 21, README "Against llama.cpp's flash
# attention"): one decode query, one layer, the two shapes of the issue at ctx 32768 and 4096,
# llama.cpp's FLASH_ATTN_EXT (test-backend-ops perf: f16 and q4_0 K/V) beside build/tq
# attn-bench --layers 1 (f16, q4_0, turbo3, turbo4), 2 threads each, interleaved per shape.
#
# Usage: scripts/peers-attn.sh LLAMA_CPP_SRC OUT_DIR
#   LLAMA_CPP_SRC: llama.cpp's source, e.g. vendor/llama.cpp of the llama-cpp-python 0.3.36 sdist
#   (pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36). The script copies it,
#   adds the issue's shapes to the copy's perf cases (test-backend-ops has none of them) and runs
#   its CPU backend with 2 threads (it takes half the cores by default: 1 here), then builds
#   test-backend-ops with the flags of scripts/peers-bench.sh (AVX-512, no AMX). The peer is a
#   test oracle: nothing of it is committed. About 10 minutes on 2 cores (most of it the build).
set -eu
cd "$(dirname "$0")/.."
SRC=${1:?usage: scripts/peers-attn.sh LLAMA_CPP_SRC OUT_DIR}
OUT=${2:?usage: scripts/peers-attn.sh LLAMA_CPP_SRC OUT_DIR}
mkdir -p "$OUT"
W="$OUT/llama.cpp"
if [ ! -x "$W/build/bin/test-backend-ops" ]; then
  rm -rf "$W"
  cp -r "$SRC" "$W"
  f="$W/tests/test-backend-ops.cpp"
  grep -q 'static std::vector<std::unique_ptr<test_case>> make_test_cases_perf() {' "$f"
  # After the perf list's declaration: hsk, hsv, KV heads, {GQA, 1}, kv, one query, mask.
  cases=''
  for kv in 32768 4096; do
    for t in GGML_TYPE_F16 GGML_TYPE_Q4_0; do
      cases="$cases test_cases.emplace_back(new test_flash_attn_ext(128, 128, 8, {4, 1}, $kv, 1, true, false, 0, 0, GGML_PREC_F32, $t, $t));"
      cases="$cases test_cases.emplace_back(new test_flash_attn_ext(256, 256, 1, {4, 1}, $kv, 1, true, false, 0, 0, GGML_PREC_F32, $t, $t));"
    done
  done
  sed -i "/static std::vector<std::unique_ptr<test_case>> make_test_cases_perf() {/{n;s|\$|$cases|}" "$f"
  grep -q 'test_flash_attn_ext(256, 256, 1, {4, 1}, 4096' "$f"
  sed -i 's|std::max<int>(1, N_THREADS/2)|2|' "$f"
  grep -q 'ggml_backend_set_n_threads_fn(backend.get(), 2)' "$f"
  cmake -S "$W" -B "$W/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON \
    -DGGML_F16C=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON \
    -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=ON \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF >"$OUT/cmake.log" 2>&1
  cmake --build "$W/build" --target test-backend-ops -j 2 >"$OUT/build.log" 2>&1
fi
lscpu >"$OUT/lscpu.txt"
: >"$OUT/llama.txt"
: >"$OUT/tq.txt"
for kv in 32768 4096; do
  for shape in "128 32 8" "256 4 1"; do
    set -- $shape
    for rep in 1 2; do
      "$W/build/bin/test-backend-ops" perf -b CPU -o FLASH_ATTN_EXT \
        -p "hsk=$1,hsv=$1,nh=$3,nr23=\[4,1\],kv=$kv,nb=1," 2>&1 | grep 'FLASH_ATTN_EXT' >>"$OUT/llama.txt" || true
      echo "== d$1 $2q/$3kv ctx $kv" >>"$OUT/tq.txt"
      build/tq attn-bench --head-dim "$1" --q-heads "$2" --kv-heads "$3" --ctx "$kv" --layers 1 --threads 2 \
        --reps 20 --scheme f16,q4_0,turbo3,turbo4 2>&1 | grep -E 'kernels|^(f16|q4_0|turbo3|turbo4) ' >>"$OUT/tq.txt"
    done
  done
done
echo "raw: $OUT/llama.txt $OUT/tq.txt"
