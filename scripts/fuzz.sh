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
# Every library and engine source with the flags the real build gives it, from sources.list (the
# list CMakeLists.txt reads: "TARGET PATH [FLAG...]", the flags on x86-64 only), into one
# archive the targets link against.
x86=0
case "$(uname -m)" in x86_64|amd64|AMD64) x86=1 ;; esac
objs=()
vnni_obj=
# The sources compile in parallel (FUZZ_JOBS, default: the CPU count); a failure is reported and
# stops the script once every compile has ended.
max_jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
rm -f "$out/compile-failed"
while IFS= read -r line || [ -n "$line" ]; do
  line=${line%%#*}
  read -r -a fields <<<"$line"
  [ "${#fields[@]}" -gt 0 ] || continue
  if [ "${#fields[@]}" -lt 2 ] || { [ "${fields[0]}" != lib ] && [ "${fields[0]}" != engine ]; }; then
    echo "fuzz.sh: sources.list: bad line '$line' (want TARGET PATH [FLAG...])" >&2; exit 1
  fi
  f=${fields[1]}
  [ -f "$f" ] || { echo "fuzz.sh: sources.list names $f, which does not exist" >&2; exit 1; }
  file_flags=()
  # The SIMD kernels (the files with instruction-set flags) at -O0: clang's ASan + UBSan
  # instrumentation of their inlined intrinsics takes about 7 CPU minutes at -O1 and 2 at -O0,
  # with the same checks; the fuzzers spend little of their time in them.
  if [ "$x86" = 1 ] && [ "${#fields[@]}" -gt 2 ]; then file_flags=("${fields[@]:2}" -O0); fi
  o="$out/obj/$(echo "$f" | tr '/' '_').o"
  # shellcheck disable=SC2086
  ( $cc $flags "${file_flags[@]}" -c "$f" -o "$o" || { echo "fuzz.sh: compiling $f failed" >&2; touch "$out/compile-failed"; } ) &
  while [ "$(jobs -rp | wc -l)" -ge "$max_jobs" ]; do wait -n || true; done
  objs+=("$o")
  if [ "$f" = src/kernels/attn_vnni.c ]; then vnni_obj=$o; fi
done <sources.list
wait
[ ! -e "$out/compile-failed" ] || exit 1
# The integer decode kernels exist only when attn_vnni.c gets its VBMI / VNNI flags; without them
# it compiles to a stub and the fuzzers never reach them. (nm's whole output is read first: with
# pipefail, `grep -q` closing the pipe early would fail nm with SIGPIPE.)
vnni_syms=$(nm "$vnni_obj" 2>/dev/null || true)
if [ "$x86" = 1 ] && ! grep -q ' vnni_score_turbo_lanes$' <<<"$vnni_syms"; then
  echo "fuzz.sh: $vnni_obj has no integer kernels (attn_vnni.c compiled without its flags?)" >&2; exit 1
fi
lib="$out/libtq_fuzz.a"
rm -f "$lib"
ar rcs "$lib" "${objs[@]}"
status=0
for target in fuzz/fuzz_*.c; do
  name=$(basename "$target" .c)
  short=${name#fuzz_}
  bin="$out/$name"
  # shellcheck disable=SC2086
  $cc $flags -fsanitize=fuzzer "$target" "$lib" $(pkg-config --libs libpcre2-8 jansson) -lm -lpthread -o "$bin"
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
