#!/bin/bash
# Instruction counts that a noisy machine cannot blur (valgrind --tool=callgrind), for the
# README: per decode step of the engine and per decode attention call. Each figure is the
# difference of two runs that differ only in how many steps they time (so loading, filling and
# the f16 baseline of attn-bench cancel), divided by the extra steps. Valgrind has no AVX-512:
# these are the counts of the AVX2 kernel set (and TQ_KERNELS=avx512* cannot be measured).
# Usage: scripts/instr-counts.sh   (about 5 minutes)
set -eu
cd "$(dirname "$0")/.."
ir() { callgrind_annotate --inclusive=yes "$1" 2>/dev/null | grep -m1 "PROGRAM TOTALS" | awk '{gsub(",","",$1); print $1}'; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for kv in f16 turbo3; do
  for n in 4 8; do
    valgrind --tool=callgrind --callgrind-out-file="$tmp/dec_${kv}_$n" --toggle-collect=session_forward -q \
      build/tq bench -p 0 -n $n -r 1 -t 1 --no-bandwidth --kv $kv >/dev/null 2>&1
  done
  echo "decode step, Gemma 3, depth 0, $kv: $(( ($(ir "$tmp/dec_${kv}_8") - $(ir "$tmp/dec_${kv}_4")) / 4 )) instructions"
done
f16=0
for sc in f16 turbo3 turbo4; do
  for r in 3 6; do
    valgrind --tool=callgrind --callgrind-out-file="$tmp/at_${sc}_$r" --toggle-collect=tq_kv_attention -q \
      build/tq attn-bench --head-dim 128 --q-heads 32 --kv-heads 8 --ctx 4096 --scheme $sc --reps $r --threads 1 >/dev/null 2>&1
  done
  both=$(( ($(ir "$tmp/at_${sc}_6") - $(ir "$tmp/at_${sc}_3")) / 3 )) # f16 baseline + the scheme
  [ $sc = f16 ] && f16=$both && one=$both || one=$((both - f16))
  echo "decode attention call, d128 32q/8kv, ctx 4096, $sc: $one instructions"
done
