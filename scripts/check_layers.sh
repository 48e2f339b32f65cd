#!/bin/sh
# The include rules of src/ (doc/architecture.md, "Layers"), from the #include lines:
#  1. the kernel layer is a leaf: a file under src/kernels/ includes only system headers, other
#     files of src/kernels/ and the public turboquant.h (never a cache, attention or codec header),
#     and names no type of the KV cache or attention;
#  2. the codec (codec*.c, codec_*.h, rotation.c, codebook.c) includes nothing of the KV
#     cache or attention;
#  3. no include cycle among the files of src/.
# Run from anywhere; exits 1 with the offending lines, 0 when the rules hold.
cd "$(dirname "$0")/.." || exit 2
status=0

# quoted includes of a file, one a line
includes() { sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$1"; }

bad=$(for f in src/kernels/*.c src/kernels/*.h; do
    includes "$f" | while read -r h; do
        [ "$h" = turboquant.h ] || { case "$h" in */*) ;; *) [ -f "src/kernels/$h" ] && continue ;; esac
            echo "$f includes \"$h\""; }
    done
done)
bad="$bad$(grep -Hn 'tq_kv_tensor\|tq_kv_layer\|tq_kv_cache\|tq_attn_params' src/kernels/*.c src/kernels/*.h)"
if [ -n "$bad" ]; then
    echo "check_layers: src/kernels/ includes a header above the kernel layer or names its types:"
    echo "$bad"
    status=1
fi

bad=$(grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"\(kvcache_internal\|attention\|kv_\)' \
      src/codec.c src/codec_coding.c src/codec_internal.h src/codec_record.h src/rotation.c src/codebook.c 2>/dev/null)
if [ -n "$bad" ]; then
    echo "check_layers: the codec includes a KV cache or attention header:"
    echo "$bad"
    status=1
fi

# Include graph: one line "FILE HEADER" per quoted include, HEADER resolved next to FILE, then
# in src/, then in include/ (headers found nowhere, such as system ones, are left out).
edges=$(for f in src/*.c src/*.h src/kernels/*.c src/kernels/*.h; do
    d=$(dirname "$f")
    includes "$f" | while read -r h; do
        for c in "$d/$h" "src/$h" "include/$h"; do
            if [ -f "$c" ]; then
                # normalize a/b/../c to a/c
                n=$(echo "$c" | sed -e 's#/[^/]*/\.\./#/#g' -e 's#^\./##')
                echo "$f $n"
                break
            fi
        done
    done
done)
cycle=$(echo "$edges" | awk '
    NF == 2 { adj[$1] = adj[$1] " " $2; nodes[$1] = 1; nodes[$2] = 1 }
    function visit(v,   n, i, k, path) {
        if (state[v] == 1) { found = v; start = v; return 1 }
        if (state[v] == 2) return 0
        state[v] = 1
        n = split(adj[v], k, " ")
        for (i = 1; i <= n; i++)
            if (visit(k[i])) { if (found != "") trail = v " -> " trail; if (v == found) found = ""; return 1 }
        state[v] = 2
        return 0
    }
    END { for (v in nodes) if (visit(v)) { print trail start; exit } }')
if [ -n "$cycle" ]; then
    echo "check_layers: include cycle: $cycle"
    status=1
fi
[ $status -eq 0 ] && echo "check_layers: kernels are leaves, the codec sees no cache, no include cycle"
exit $status
