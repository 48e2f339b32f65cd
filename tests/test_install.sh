#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds examples/encode_decode.c against it
# with pkg-config, statically and dynamically, as a user of the library would.
set -u
build=${1:?usage: test_install.sh BUILD_DIR SOURCE_DIR}
src=${2:?usage: test_install.sh BUILD_DIR SOURCE_DIR}
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
pass=0 fail=0
step() { local name=$1; shift; if "$@" >"$prefix/log" 2>&1; then pass=$((pass+1)); echo "ok   $name";
  else fail=$((fail+1)); echo "FAIL $name"; cat "$prefix/log"; fi; }
step "cmake --install" cmake --install "$build" --prefix "$prefix"
step "header installed" test -f "$prefix/include/turboquant.h"
pcdir=$(dirname "$(find "$prefix" -name turboquant.pc | head -1)")
export PKG_CONFIG_PATH="$pcdir"
step "pkg-config finds turboquant" pkg-config --exists turboquant
cc=${CC:-cc}
# shellcheck disable=SC2046
step "build against the shared library" $cc -std=c11 "$src/examples/encode_decode.c" -o "$prefix/ex_shared" \
  $(pkg-config --cflags --libs turboquant) -lm
step "run shared" env LD_LIBRARY_PATH="$prefix/lib:$prefix/lib64" "$prefix/ex_shared"
# shellcheck disable=SC2046
step "build against the static library" $cc -std=c11 "$src/examples/encode_decode.c" -o "$prefix/ex_static" \
  $(pkg-config --cflags turboquant) "$(find "$prefix" -name libturboquant.a | head -1)" -lm -lpthread
step "run static" "$prefix/ex_static"
# Only the public API is exported from the shared library.
so=$(find "$prefix" -name 'libturboquant.so.*.*' | head -1)
step "exports only tq_ symbols" bash -c "! nm -D --defined-only '$so' | awk '{print \$3}' | grep -v -E '^(tq_|_init|_fini|$)'"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
