#!/usr/bin/env bash
# The whole engine on AArch64, end to end, under qemu-user: cross-builds `tq` (the library, the
# engine, the CLI) for aarch64 and scores SmolLM2-135M on WikiText-2 with the kernels an ARM CPU
# runs — neon-dot (the ARMv8.2 dot products: the integer decode attention kernels and the
# engine's dot-product weight kernels) and, on an emulated Cortex-A72, the ARMv8.0 NEON set —
# beside the x86-64 build of the same checkout, then compares greedy text. Positions are scored
# as token-by-token decode leaves the cache (--as-decode), so decode attention runs the lane
# kernels under test. Not part of
# `make test` (CI time: the engine under emulation runs ~60× slower): a check to run after
# changing NEON kernels. ARM speed cannot be measured here; what this shows is that the engine
# runs on ARM and that its figures match x86's within the spread of x86's own kernel sets.
#
# It installs what it needs (Debian multiarch: libc6, libpcre2-dev, libmicrohttpd-dev and
# libjansson-dev for arm64 beside the amd64 ones; the binaries then run without qemu's -L, on
# the multiarch libc), builds into build-arm-engine, and needs build/tq (make build), the model
# (scripts/get-model.sh) and ../shared/data/wikitext-2-raw-test.txt.
# usage: scripts/arm-engine-check.sh [CTX [CHUNKS [SCHEMES]]]   (default 256 1 turbo3,turbo4)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ctx=${1:-256}
chunks=${2:-1}
schemes=${3:-turbo3,turbo4}
text=../shared/data/wikitext-2-raw-test.txt
[ -f "$text" ] || { echo "arm-engine-check: SKIP: $text absent" >&2; exit 0; }
[ -x build/tq ] || { echo "arm-engine-check: build/tq missing (make build)" >&2; exit 1; }
model=$(scripts/get-model.sh | awk '$1 == "smollm2-135m" { print $2 }')
[ -n "$model" ] && [ -f "$model" ] || { echo "arm-engine-check: SmolLM2 model not found (scripts/get-model.sh)" >&2; exit 1; }

sudo_cmd=""
[ "$(id -u)" = 0 ] || sudo_cmd="sudo"
need=()
for pkg in gcc-aarch64-linux-gnu qemu-user-static libc6:arm64 libpcre2-dev:arm64 libmicrohttpd-dev:arm64 libjansson-dev:arm64; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "arm-engine-check: installing ${need[*]}"
  dpkg --print-foreign-architectures | grep -qx arm64 || $sudo_cmd dpkg --add-architecture arm64
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

cmake -S . -B build-arm-engine -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release \
  >build-arm-engine.log 2>&1 && cmake --build build-arm-engine -j "$(nproc)" --target tq >>build-arm-engine.log 2>&1 ||
  { echo "arm-engine-check: the aarch64 build failed (build-arm-engine.log)" >&2; exit 1; }
arm=(qemu-aarch64-static build-arm-engine/tq)

# run LABEL ENV... -- TQ...: one perplexity run, its table rows prefixed with LABEL
ppl() {
  local label=$1
  shift
  env "$@" perplexity -m "$model" -f "$text" -c "$ctx" --chunks "$chunks" --kv "$schemes" --as-decode -t 2 2>/dev/null |
    awk -v l="$label" '/^(f16|turbo|q[48]|auto)/ { printf "%-22s %s\n", l, $0 }'
}
echo "SmolLM2-135M Q4_1, WikiText-2, ctx $ctx, $chunks chunk(s), scored as decode (tq perplexity --as-decode)"
printf "%-22s %-11s %12s %9s %10s %10s %10s %8s %7s %10s\n" "build, kernels" scheme PPL dPPL "KLD mean" "KLD med" "KLD p99" top-1 ratio "KV B/tok"
ppl "x86-64 (default)" build/tq
ppl "x86-64 float attn" TQ_INT8_SCORES=0 build/tq
ppl "x86-64 ref" TQ_KERNELS=ref build/tq
ppl "aarch64 neon-dot" "${arm[@]}"
ppl "aarch64 neon (A72)" QEMU_CPU=cortex-a72 "${arm[@]}"

prompt="The capital of France is"
x=$(build/tq generate -m "$model" -p "$prompt" -n 24 --temp 0 --kv turbo3 -t 2 2>/dev/null)
a=$("${arm[@]}" generate -m "$model" -p "$prompt" -n 24 --temp 0 --kv turbo3 -t 2 2>/dev/null)
echo "greedy, 24 tokens, --kv turbo3:"
echo "  x86-64:  $(echo "$x" | tr '\n' ' ')"
echo "  aarch64: $(echo "$a" | tr '\n' ' ')"
[ "$x" = "$a" ] && echo "  the same text" || echo "  texts differ (different kernels round differently; compare the PPL rows above)"
