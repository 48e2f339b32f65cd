#!/usr/bin/env bash
# Builds every libFuzzer target with clang (ASan + UBSan) and runs each for a bounded time.
# usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [BUILD_DIR]
# Seeds come from fuzz/corpus/<target>/ (copied: libFuzzer writes into its first folder).
set -euo pipefail
secs=${1:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${2:-$root/build-fuzz}
cc=${FUZZ_CC:-}
if [ -z "$cc" ]; then
  for c in clang-14 clang; do command -v "$c" >/dev/null 2>&1 && { cc=$c; break; }; done
fi
[ -n "$cc" ] || { echo "fuzz.sh: clang not found (apt-get install clang-14)" >&2; exit 1; }
mkdir -p "$out/obj"
cd "$root"
flags="-std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -ffp-contract=off -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -Iinclude -Isrc -Isrc/kernels -Iengine"
isa_flags() {
  case "$1" in
    *avx512*) echo "-mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c" ;;
    *avx2*) echo "-mavx2 -mfma -mf16c" ;;
    *) echo "" ;;
  esac
}
objs=()
for f in src/*.c src/kernels/*.c; do
  o="$out/obj/$(echo "$f" | tr '/' '_').o"
  # shellcheck disable=SC2046
  $cc $flags $(isa_flags "$f") -c "$f" -o "$o"
  objs+=("$o")
done
engine_objs=()
for f in engine/gguf.c engine/tokenizer.c; do
  [ -f "$f" ] || continue
  o="$out/obj/$(echo "$f" | tr '/' '_').o"
  $cc $flags -c "$f" -o "$o"
  engine_objs+=("$o")
done
status=0
for target in fuzz/fuzz_*.c; do
  name=$(basename "$target" .c)
  short=${name#fuzz_}
  bin="$out/$name"
  $cc $flags -fsanitize=fuzzer "$target" "${objs[@]}" "${engine_objs[@]}" -lm -lpthread -o "$bin"
  corpus="$out/corpus-$short"
  mkdir -p "$corpus"
  [ -d "fuzz/corpus/$short" ] && cp -n fuzz/corpus/"$short"/* "$corpus"/ 2>/dev/null || true
  echo "fuzz: $name for ${secs}s"
  if ! "$bin" -max_total_time="$secs" -max_len=8192 -timeout=10 -print_final_stats=0 \
       -artifact_prefix="$out/$name-" "$corpus" >"$out/$name.log" 2>&1; then
    echo "fuzz: $name FAILED; last lines of $out/$name.log:"; tail -30 "$out/$name.log"; status=1
  else
    grep -E "^#[0-9]+.*DONE|Done [0-9]+ runs" "$out/$name.log" | tail -1 || true
  fi
done
exit $status
