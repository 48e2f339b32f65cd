#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds examples/encode_decode.c against it
# with pkg-config, statically and dynamically, as a user of the library would; compiles each
# installed header alone (C and, when there is a C++ compiler, C++) and a program that uses one
# call of each layer; and checks that the shared library exports exactly the public API. A step whose tool is missing (pkg-config,
# nm) is reported skipped; exit 77 (ctest: skipped) if nothing ran, 1 if anything failed.
set -u
build=${1:?usage: test_install.sh BUILD_DIR SOURCE_DIR}
src=${2:?usage: test_install.sh BUILD_DIR SOURCE_DIR}
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
pass=0 fail=0 skipped=0
skip() { skipped=$((skipped+1)); echo "skip $1: $2"; }
step() { local name=$1; shift; if "$@" >"$prefix/log" 2>&1; then pass=$((pass+1)); echo "ok   $name";
  else fail=$((fail+1)); echo "FAIL $name"; cat "$prefix/log"; fi; }
step "cmake --install" cmake --install "$build" --prefix "$prefix"
headers="turboquant.h turboquant/codec.h turboquant/kv.h turboquant/experimental.h"
for h in $headers; do step "header $h installed" test -f "$prefix/include/$h"; done
cc=${CC:-cc}
# Each layer's header stands alone: a file that includes only it compiles.
for h in $headers; do
  step "$h compiles alone" sh -c "printf '#include <$h>\nint tq_abi_probe;\n' |
    $cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -I'$prefix/include' -x c -"
done
if command -v c++ >/dev/null 2>&1; then
  step "turboquant.h compiles as C++" sh -c "printf '#include <turboquant.h>\nint tq_abi_probe;\n' |
    c++ -Wall -Werror -fsyntax-only -I'$prefix/include' -x c++ -"
fi
# One call of each layer, built and run against the installed headers and static library.
cat > "$prefix/layers.c" <<'PROG'
#include <stdio.h>
#include <turboquant.h>
int main(void) {
    tq_codec_config cc;
    tq_codec_config_init(&cc, 64, 3.0f, TQ_VARIANT_MSE);
    size_t bytes = 0;
    tq_kv_scheme s;
    if (tq_codec_config_bytes(&cc, &bytes) != TQ_OK ||
        tq_kv_scheme_parse("turbo3", &s, NULL, 0) != TQ_OK ||
        tq_kv_scheme_decode_chunk(&s, 0, 8) == 0 || tq_version_number() != TQ_VERSION_NUMBER)
        return 1;
    printf("%s: %zu bytes per vector\n", tq_version_string(), bytes);
    return 0;
}
PROG
step "build a program on all three layers" $cc -std=c11 -Wall -Wextra -Werror "$prefix/layers.c" \
  -I"$prefix/include" "$(find "$prefix" -name libturboquant.a | head -1)" -lm -lpthread -o "$prefix/layers"
step "run it" "$prefix/layers"
pcdir=$(dirname "$(find "$prefix" -name turboquant.pc | head -1)")
export PKG_CONFIG_PATH="$pcdir"
if command -v pkg-config >/dev/null 2>&1; then
  step "pkg-config finds turboquant" pkg-config --exists turboquant
  step "pkg-config's version is the header's" grep -q \
    "define TQ_VERSION_STRING \"$(pkg-config --modversion turboquant)\"" "$prefix/include/turboquant/codec.h"
  # shellcheck disable=SC2046
  step "build against the shared library" $cc -std=c11 "$src/examples/encode_decode.c" -o "$prefix/ex_shared" \
    $(pkg-config --cflags --libs turboquant) -lm
  step "run shared" env LD_LIBRARY_PATH="$prefix/lib:$prefix/lib64" "$prefix/ex_shared"
  # shellcheck disable=SC2046
  step "build against the static library" $cc -std=c11 "$src/examples/encode_decode.c" -o "$prefix/ex_static" \
    $(pkg-config --cflags turboquant) "$(find "$prefix" -name libturboquant.a | head -1)" -lm -lpthread
  step "run static" "$prefix/ex_static"
else
  for name in "pkg-config finds turboquant" "build against the shared library" "run shared" \
              "build against the static library" "run static"; do
    skip "$name" "pkg-config is not installed (apt-get install pkg-config)"
  done
fi
# The shared library exports exactly the public API: every function declared TQ_API in the
# installed header, and nothing else (both directions).
so=$(find "$prefix" -name 'libturboquant.so.*.*' | head -1)
# Names declared TQ_API in a header: comments and string literals handled, preprocessor lines
# (the #define TQ_API ones included) dropped, declarations joined across lines and split at ';';
# in each one that has TQ_API, the identifier before the first '(' after it (a function) or,
# without '(', the last identifier (an exported variable).
api_names() {
  awk '
    {
      line = $0; out = ""; n = length(line); i = 1
      while (i <= n) {
        two = substr(line, i, 2)
        if (incomment) { if (two == "*/") { incomment = 0; out = out " "; i += 2 } else i++; continue }
        if (two == "/*") { incomment = 1; i += 2; continue }
        if (two == "//") break
        c = substr(line, i, 1)
        if (c == "\"" || c == "\047") {
          j = i + 1
          while (j <= n && substr(line, j, 1) != c) { if (substr(line, j, 1) == "\\") j++; j++ }
          out = out " \"\" "; i = j + 1; continue
        }
        out = out c; i++
      }
      if (continued || out ~ /^[ \t]*#/) { continued = out ~ /\\[ \t]*$/; next }
      body = body " " out
    }
    END {
      m = split(body, decl, ";")
      for (k = 1; k <= m; k++) {
        d = decl[k]
        if (!match(d, /(^|[^A-Za-z0-9_])TQ_API([^A-Za-z0-9_]|$)/)) continue
        d = substr(d, RSTART + RLENGTH - 1)
        if (match(d, /[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/)) {
          name = substr(d, RSTART, RLENGTH); sub(/[ \t]*\($/, "", name); print name
        } else {
          sub(/[ \t]*(\[[^]]*\])?[ \t]*(=.*)?$/, "", d)
          if (match(d, /[A-Za-z_][A-Za-z0-9_]*$/)) print substr(d, RSTART, RLENGTH)
        }
      }
    }' "$1" | LC_ALL=C sort -u
}
# Defined dynamic symbols, less the ones the toolchain adds to every shared object.
exported_names() {
  nm -D --defined-only "$1" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' |
    grep -v -x -E '_init|_fini|_edata|_end|__bss_start' | LC_ALL=C sort -u
}
# exports_match HEADER SO: prints each difference; fails on any, or when either list is empty.
exports_match() {
  local want got
  want=$(api_names "$1") got=$(exported_names "$2")
  [ -n "$want" ] || { echo "no TQ_API declaration found in $1"; return 1; }
  [ -n "$got" ] || { echo "no exported symbol in $2"; return 1; }
  local extra missing
  extra=$(LC_ALL=C comm -13 <(echo "$want") <(echo "$got"))
  missing=$(LC_ALL=C comm -23 <(echo "$want") <(echo "$got"))
  [ -z "$extra" ] || echo "exported but not declared TQ_API in $1: $(echo "$extra" | tr '\n' ' ')"
  [ -z "$missing" ] || echo "declared TQ_API but not exported by $2: $(echo "$missing" | tr '\n' ' ')"
  echo "$(echo "$want" | wc -l) TQ_API names, $(echo "$got" | wc -l) exported symbols"
  [ -z "$extra" ] && [ -z "$missing" ]
}
if command -v nm >/dev/null 2>&1; then
  cat "$prefix/include/turboquant.h" "$prefix"/include/turboquant/*.h > "$prefix/all_headers.h"
  step "exports exactly the TQ_API functions" exports_match "$prefix/all_headers.h" "$so"
else
  skip "exports exactly the TQ_API functions" "nm is not installed (apt-get install binutils)"
fi
echo "$pass passed, $fail failed, $skipped skipped"
[ "$fail" = 0 ] || exit 1
[ "$pass" -gt 0 ] || exit 77
