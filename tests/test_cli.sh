#!/usr/bin/env bash
# CLI contract of `tq`: usage errors exit 2 with a message, help exits 0, JSON has the keys.
set -u
tq=${1:?usage: test_cli.sh PATH_TO_TQ}
pass=0 fail=0 skipped=0
skip() { # name, reason: a block that cannot run here, reported (never counted as passed)
  skipped=$((skipped+1)); echo "skip $1: $2"
}
check() { # name, expected exit code, command... (a check of 3 s or more says how long it took)
  local name=$1 want=$2 t0=$SECONDS; shift 2
  "$@" >/tmp/tq_cli_out.$$ 2>/tmp/tq_cli_err.$$
  local got=$? took=""
  [ $((SECONDS - t0)) -ge 3 ] && took=" ($((SECONDS - t0)) s)"
  if [ "$got" = "$want" ]; then pass=$((pass+1)); echo "ok   $name$took"
  else fail=$((fail+1)); echo "FAIL $name: exit $got, wanted $want$took"; cat /tmp/tq_cli_err.$$; fi
}
check "no command" 2 "$tq"
check "unknown command" 2 "$tq" frobnicate
check "help" 0 "$tq" --help
check "codec-bench help" 0 "$tq" codec-bench --help
check "bad dim" 2 "$tq" codec-bench --dim 0
check "dim too large" 2 "$tq" codec-bench --dim 5000
check "bad bits" 2 "$tq" codec-bench --bits 9
check "bits not splittable" 2 "$tq" codec-bench --dim 128 --bits 3.3
check "bad variant" 2 "$tq" codec-bench --variant foo
check "missing value" 2 "$tq" codec-bench --n
check "unknown flag" 2 "$tq" codec-bench --frob
check "garbage number" 2 "$tq" codec-bench --n 12x
check "small run" 0 "$tq" codec-bench --dim 64 --bits 2,3.5 --n 200
check "json run" 0 "$tq" codec-bench --dim 128 --bits 4 --n 300 --variant prod --json
for key in '"dim":128' '"variant":"prod"' '"bits":4' '"mse":' '"ip_bias":' '"ip_var":' \
           '"bytes_per_vector":' '"ratio_vs_fp16":' '"encode_vps":' '"decode_vps":' '"memcpy_vps":'; do
  if grep -q -F "$key" /tmp/tq_cli_out.$$; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL json key $key"; fi
done
if python3 -c 'import json,sys; json.load(open(sys.argv[1]))' /tmp/tq_cli_out.$$ 2>/dev/null; then
  pass=$((pass+1)); echo "ok   json parses"
else fail=$((fail+1)); echo "FAIL json does not parse"; cat /tmp/tq_cli_out.$$; fi

# ---- model commands: generate, perplexity, passkey, run ----------------------------------------
# Usage errors exit 2; a missing file exits 1 with a message; -c beyond the model's context length
# is a usage error (exit 2). Real runs only when the model is present.
has() { # name, fixed string expected in stdout+stderr of the last check
  if grep -q -F -- "$2" /tmp/tq_cli_out.$$ /tmp/tq_cli_err.$$; then pass=$((pass+1)); echo "ok   $1"
  else fail=$((fail+1)); echo "FAIL $1: no '$2' in output"; cat /tmp/tq_cli_out.$$ /tmp/tq_cli_err.$$; fi
}
for c in generate perplexity passkey run; do check "$c help" 0 "$tq" $c --help; done
# tq run's --kv is the scheme compared with f16: one --kv line, with its own default
if [ "$(grep -c -- '^  --kv' /tmp/tq_cli_out.$$)" = 1 ] && grep -q -F 'compared with f16 (default turbo3)' /tmp/tq_cli_out.$$; then
  pass=$((pass+1)); echo "ok   run help: one --kv line"
else fail=$((fail+1)); echo "FAIL run help: --kv lines"; grep -- '--kv' /tmp/tq_cli_out.$$; fi
check "generate without -p" 2 "$tq" generate -n 4
check "generate bad -n" 2 "$tq" generate -p hi -n 0
check "generate bad --temp" 2 "$tq" generate -p hi --temp warm
check "generate bad --top-p" 2 "$tq" generate -p hi --top-p 1.5
check "generate missing value" 2 "$tq" generate -p
check "generate unknown flag" 2 "$tq" generate -p hi --frob
check "generate kv list" 2 "$tq" generate -p hi --kv f16,f16
check "generate bad -t" 2 "$tq" generate -p hi -t 0
check "generate bad --prefill-chunk" 2 "$tq" generate -p hi --prefill-chunk 1
check "perplexity without -f" 2 "$tq" perplexity -c 128
check "perplexity bad --chunks" 2 "$tq" perplexity -f x --chunks 0
check "perplexity -c too small" 2 "$tq" perplexity -f x -c 4
for k in auto: auto:1 auto:9 auto:x auto; do # auto:B: bad forms are usage errors
  check "perplexity --kv $k" 2 "$tq" perplexity -f x --kv "turbo3,$k"
  has "--kv $k message" "auto:B[:options], B the average bits per cached element in [2, 8]"
done
check "perplexity --kv auto:3:frob=1" 2 "$tq" perplexity -f x --kv auto:3:frob=1
has "--kv auto:3:frob=1 message" "auto:B takes turboB's options"
check "perplexity --calib-tokens too few" 2 "$tq" perplexity -f x --kv auto:3 --calib-tokens 10
check "perplexity bad scheme" 2 "$tq" perplexity -f x --kv f16,nonsense
has "bad scheme message" "--kv nonsense: "
check "perplexity bad cache type" 2 "$tq" perplexity -f x --cache-type-k q9
check "passkey bad --trials" 2 "$tq" passkey --trials 0
check "passkey bad --depths" 2 "$tq" passkey --depths 0.5,2
check "run bad -n" 2 "$tq" run -n 0
check "run unknown flag" 2 "$tq" run --frob
check "perplexity missing text" 1 "$tq" perplexity -f /nonexistent/text.txt -c 128
has "missing text message" "cannot open '/nonexistent/text.txt'"
check "run bad scheme" 2 "$tq" run --kv turbo99
check "generate missing model" 1 "$tq" generate -m /nonexistent/model.gguf -p hi -n 1
has "missing model message" "cannot open model '/nonexistent/model.gguf'"
# A FIFO or a directory given as a file is refused at once (exit 1, a message naming the path),
# never opened blocking: each runs under `timeout 20`, so a hang fails here (exit 124) instead
# of hanging the suite. The model path is checked by the tools before the GGUF reader.
fifo=/tmp/tq_cli_fifo.$$
rm -f "$fifo"; mkfifo "$fifo"
check "perplexity -f FIFO" 1 timeout 20 "$tq" perplexity -f "$fifo" -c 128
has "perplexity -f FIFO message" "cannot open '$fifo': not a regular file (a FIFO)"
check "perplexity -f directory" 1 timeout 20 "$tq" perplexity -f /tmp -c 128
has "perplexity -f directory message" "cannot open '/tmp': not a regular file (a directory)"
check "generate -m FIFO" 1 timeout 20 "$tq" generate -m "$fifo" -p hi -n 1
has "generate -m FIFO message" "cannot open model '$fifo': not a regular file (a FIFO)"
check "generate -m directory" 1 timeout 20 "$tq" generate -m /tmp -p hi -n 1
has "generate -m directory message" "cannot open model '/tmp': not a regular file (a directory)"
check "attn-bench -m FIFO" 1 timeout 20 "$tq" attn-bench --from-model x.txt -m "$fifo"
has "attn-bench -m FIFO message" "not a regular file (a FIFO)"
check "TQ_MODEL FIFO" 1 env TQ_MODEL="$fifo" timeout 20 "$tq" generate -p hi -n 1
has "TQ_MODEL FIFO message" "(from \$TQ_MODEL): not a regular file (a FIFO)"
# Models by short name (-m NAME, $TQ_MODEL=NAME): a word that is neither a file nor a name is
# refused with the list of names; a name is looked up in ./models, else in the tq binary's
# ../models (here build/../models: ctest runs this script in the build directory).
check "unknown model name" 1 "$tq" generate -m llama3-8b -p hi -n 1
has "unknown model name message" "cannot open model 'llama3-8b': No such file or directory; nor is it a model name (gemma3-270m, smollm2-135m)"
check "TQ_MODEL unknown name" 1 env TQ_MODEL=llama3-8b "$tq" generate -p hi -n 1
has "TQ_MODEL unknown name message" "(from \$TQ_MODEL): No such file or directory; nor is it a model name (gemma3-270m, smollm2-135m)"
check "attn-bench -m unknown name" 1 "$tq" attn-bench --from-model x.txt -m llama3-8b
has "attn-bench -m unknown name message" "nor is it a model name (gemma3-270m, smollm2-135m)"
# The context check comes after loading and before the vocabulary: the context length in the
# message shows which model the name chose, with or without a tokenizer for it.
models_dir=$(dirname "$0")/../models
if [ -r "$models_dir/gemma3-270m-q4_k_m.gguf" ]; then
  check "-m gemma3-270m" 2 "$tq" generate -m gemma3-270m -p hi -n 1 -c 10000000
  has "-m gemma3-270m is Gemma 3" "the model's context_length 32768"
else
  skip "-m gemma3-270m" "no model at $models_dir/gemma3-270m-q4_k_m.gguf (scripts/get-model.sh)"
fi
if [ -r "$models_dir/smollm2-135m-instruct-q4_1.gguf" ]; then
  check "-m smollm2-135m" 2 "$tq" generate -m smollm2-135m -p hi -n 1 -c 10000000
  has "-m smollm2-135m is SmolLM2" "the model's context_length 8192"
  check "TQ_MODEL=smollm2-135m" 2 env TQ_MODEL=smollm2-135m "$tq" passkey -c 10000000
  has "TQ_MODEL=smollm2-135m is SmolLM2" "the model's context_length 8192"
else
  skip "-m smollm2-135m" "no model at $models_dir/smollm2-135m-instruct-q4_1.gguf (scripts/get-model.sh)"
fi

model=${TQ_MODEL:-$(dirname "$0")/../models/gemma3-270m-q4_k_m.gguf}
if [ -r "$model" ]; then
  check "context beyond the model's" 2 "$tq" generate -m "$model" -p hi -n 1 -c 10000000
  has "context message" "larger than the model's context"
  # A scheme other than f16 either runs under its own name or says it cannot: never f16 silently.
  "$tq" generate -m "$model" -p hi -n 2 --temp 0 --kv turbo3 >/tmp/tq_cli_out.$$ 2>/tmp/tq_cli_err.$$
  rc=$?
  if { [ $rc = 1 ] && grep -q "not yet supported by the engine" /tmp/tq_cli_err.$$; } ||
     { [ $rc = 0 ] && grep -q "KV cache (turbo3)" /tmp/tq_cli_err.$$; }; then
    pass=$((pass+1)); echo "ok   turbo3 runs as itself or is refused (exit $rc)"
  else fail=$((fail+1)); echo "FAIL turbo3: exit $rc"; cat /tmp/tq_cli_err.$$; fi
  check "generate run" 0 "$tq" generate -m "$model" -p "The capital of France is" -n 4 --temp 0 -t 2
  has "generate echoes the prompt" "The capital of France is"
  for key in "prefill:" "decode:" "tok/s" "KV cache (f16)" "bytes/token"; do has "generate prints $key" "$key"; done
  # --prompt-cache: a miss writes the file; a hit on the whole prompt prints what the same
  # command without the flag prints, bit for bit (stored logits); every file that does not
  # fit (another scheme, a corrupted byte, cut short, not a cache, not a prefix) is one line on
  # stderr and a fresh prefill, exit 0 (doc/prompt-cache.md).
  pc=/tmp/tq_cli_pc.$$; rm -f "$pc"
  p1="The capital of France is Paris. The capital of Italy is Rome. The capital of Spain is"
  p2="$p1 Madrid. The capital of Germany is"
  gen() { "$tq" generate -m "$model" -n 4 --temp 0 -c 1024 -t 2 --kv turbo3 "$@" 2>/tmp/tq_cli_err.$$; }
  ref1=$(gen -p "$p1"); ref2=$(gen -p "$p2")
  pc_case() { # name, expected stderr text, prompt, expected stdout
    local got; got=$(gen -p "$3" --prompt-cache "$pc"); local rc=$?
    if [ $rc = 0 ] && grep -q -F "$2" /tmp/tq_cli_err.$$ && [ "$got" = "$4" ]; then pass=$((pass+1)); echo "ok   prompt cache: $1"
    else fail=$((fail+1)); echo "FAIL prompt cache: $1 (exit $rc)"; cat /tmp/tq_cli_err.$$; echo "got: $got"; echo "want: $4"; fi
  }
  pc_case "no file yet" "no such file (it will be written)" "$p1" "$ref1"
  pc_case "whole prompt" "0 to prefill" "$p1" "$ref1"
  # a prefix: only the rest runs (the same text here; in general the rest's calls have other
  # lengths than a fresh prefill's, and rounding may differ: doc/prompt-cache.md)
  pc_case "a prefix of a longer prompt" "20 tokens restored, 20 kept, 7 to prefill" "$p2" "$ref2"
  pc_case "not a prefix" "are not a prefix of this prompt's" "$p1" "$ref1"
  cp "$pc" "$pc.good"
  if "$tq" generate -m "$model" -p "$p1" -n 1 --temp 0 -c 256 -t 2 --kv f16 --prompt-cache "$pc" >/dev/null 2>/tmp/tq_cli_err.$$ &&
     grep -q "made with another KV scheme (k=3:v=3" /tmp/tq_cli_err.$$; then pass=$((pass+1)); echo "ok   prompt cache: another scheme"
  else fail=$((fail+1)); echo "FAIL prompt cache: another scheme"; cat /tmp/tq_cli_err.$$; fi
  cp "$pc.good" "$pc"
  printf '\x55' | dd of="$pc" bs=1 seek=3000 conv=notrunc 2>/dev/null
  pc_case "a corrupted byte" "not used: corrupt" "$p1" "$ref1"
  head -c 5000 "$pc.good" >"$pc"
  pc_case "cut short" "not used: truncated" "$p1" "$ref1"
  echo "hello" >"$pc"
  pc_case "not a cache" "not a prompt cache file" "$p1" "$ref1"
  rm -f "$pc" "$pc.good" "$pc".tmp.*
  text=/tmp/tq_cli_text.$$
  for i in 1 2 3 4 5 6; do
    echo "The lighthouse keeper climbed the stairs every evening to light the lamp for the ships."
    echo "In spring the fields turned green, and in autumn the farmers brought in the harvest."
  done >"$text"
  check "perplexity run" 0 "$tq" perplexity -m "$model" -f "$text" -c 128 --chunks 1 --json -t 2
  for key in '"ctx":128' '"chunks":1' '"tokens_scored":63' '"results":[' '"scheme":"f16"' '"ppl":' \
             '"kld_mean":0' '"kld_median":0' '"kld_p99":0' '"top1":1' '"kv_bytes_per_token":' \
             '"delta_ppl_pct":0.000000' '"delta_ppl_pct_se":null'; do
    has "perplexity json $key" "$key"
  done
  if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert 1 < d["results"][0]["ppl"] < 1e4' \
      /tmp/tq_cli_out.$$ 2>/dev/null; then pass=$((pass+1)); echo "ok   perplexity json parses"
  else fail=$((fail+1)); echo "FAIL perplexity json"; cat /tmp/tq_cli_out.$$; fi
  check "perplexity text too short" 1 "$tq" perplexity -m "$model" -f "$text" -c 4096
  check "perplexity f16 vs turbo3" 0 "$tq" perplexity -m "$model" -f "$text" -c 128 --chunks 1 --kv turbo3 --json -t 2
  if python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["results"]
assert [x["scheme"] for x in r] == ["f16", "turbo3"], r
assert r[0]["kld_mean"] == 0 and r[0]["top1"] == 1
t = r[1]
assert t["kld_mean"] > 0 and 0 <= t["kld_median"] <= t["kld_p99"] and 0 <= t["top1"] <= 1
assert 0 < t["kv_bytes_per_token"] < r[0]["kv_bytes_per_token"]
' /tmp/tq_cli_out.$$; then pass=$((pass+1)); echo "ok   perplexity turbo3 row"
  else fail=$((fail+1)); echo "FAIL perplexity turbo3 row"; cat /tmp/tq_cli_out.$$; fi
  # --f32-act (doc/gemma3.md §8, "The activation floor"): the JSON says so, and turbo8's KLD
  # falls far below what the 8-bit activations' floor gives it
  # Under the sanitizers (TQ_TEST_QUICK) the path only: "--f32-act text" below.
  if [ -n "${TQ_TEST_QUICK:-}" ]; then skip "perplexity --f32-act removes the floor" "TQ_TEST_QUICK (sanitizer build: a figure; --f32-act's path runs below)"; else
  check "perplexity turbo8" 0 "$tq" perplexity -m "$model" -f "$text" -c 128 --chunks 1 --kv turbo8 --json -t 2
  cp /tmp/tq_cli_out.$$ /tmp/tq_cli_q8act.$$
  check "perplexity turbo8 --f32-act" 0 "$tq" perplexity -m "$model" -f "$text" -c 128 --chunks 1 --kv turbo8 \
    --f32-act --json -t 2
  if python3 -c '
import json, sys
q, f = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert q["f32_act"] is False and f["f32_act"] is True
assert f["results"][1]["kld_mean"] < 0.5 * q["results"][1]["kld_mean"], (q, f)
' /tmp/tq_cli_q8act.$$ /tmp/tq_cli_out.$$; then pass=$((pass+1)); echo "ok   perplexity --f32-act removes the floor"
  else fail=$((fail+1)); echo "FAIL perplexity --f32-act"; cat /tmp/tq_cli_q8act.$$ /tmp/tq_cli_out.$$; fi
  rm -f /tmp/tq_cli_q8act.$$
  fi
  check "perplexity --f32-act text" 0 "$tq" perplexity -m "$model" -f "$text" -c 128 --chunks 1 --kv turbo8 --f32-act -t 2
  has "--f32-act says so" "matmuls on fp32 activations (--f32-act)"
  # auto:3 (doc/kv-auto.md): calibrated on 64 tokens of the built-in text, the table printed, the
  # row named auto:3, no more bytes per token than turbo3. Under the sanitizers (TQ_TEST_QUICK)
  # the calibration is test_kv_auto's alone: 45 model passes here cost minutes there.
  if [ -n "${TQ_TEST_QUICK:-}" ]; then skip "perplexity auto:3" "TQ_TEST_QUICK (sanitizer build: test_kv_auto calibrates)"; else
  check "perplexity auto:3" 0 "$tq" perplexity -m "$model" -f "$text" -c 128 --chunks 1 --kv turbo3,auto:3 \
    --calib-tokens 64 --json -t 2
  has "auto:3 calibration table" "auto:3: calibrated on 64 tokens of the built-in text"
  has "auto:3 layer 0" "  layer  0: k "
  if python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["results"]
assert [x["scheme"] for x in r] == ["f16", "turbo3", "auto:3"], r
assert 0 < r[2]["kv_bytes_per_token"] <= r[1]["kv_bytes_per_token"], r
assert r[2]["kld_mean"] > 0
' /tmp/tq_cli_out.$$; then pass=$((pass+1)); echo "ok   perplexity auto:3 row at turbo3 bytes or fewer"
  else fail=$((fail+1)); echo "FAIL perplexity auto:3 row"; cat /tmp/tq_cli_out.$$; fi
  fi
  printf 'short\n' >"$text.calib"
  check "perplexity --calib-file too short" 2 "$tq" perplexity -m "$model" -f "$text" -c 128 --chunks 1 --kv auto:3 \
    --calib-file "$text.calib"
  has "--calib-file too short message" "auto:B needs at least 64"
  rm -f "$text.calib"
  # --as-decode: positions 64..126 see the tokens from 64 on still fp16 (the two-phase rule's
  # raw tail), so turbo2 loses less than with every key compressed.
  check "perplexity turbo2 worst case" 0 "$tq" perplexity -m "$model" -f "$text" -c 128 --chunks 1 --kv turbo2 --json -t 2
  cp /tmp/tq_cli_out.$$ /tmp/tq_cli_worst.$$
  check "perplexity turbo2 --as-decode" 0 "$tq" perplexity -m "$model" -f "$text" -c 128 --chunks 1 --kv turbo2 --as-decode --json -t 2
  if python3 -c '
import json, sys
w, d = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert w["as_decode"] is False and d["as_decode"] is True
assert d["tokens_scored"] == w["tokens_scored"] == 63
assert abs(d["results"][0]["ppl"] - w["results"][0]["ppl"]) < 1e-3 * w["results"][0]["ppl"]
assert 0 < d["results"][1]["kld_mean"] < w["results"][1]["kld_mean"], (d, w)
' /tmp/tq_cli_worst.$$ /tmp/tq_cli_out.$$; then pass=$((pass+1)); echo "ok   perplexity --as-decode below the worst case"
  else fail=$((fail+1)); echo "FAIL perplexity --as-decode"; cat /tmp/tq_cli_worst.$$ /tmp/tq_cli_out.$$; fi
  # --prompt: the first half (64 tokens) is a raw prompt, compressed at position 64 alone, so
  # its K/V come from exact attention: turbo2 loses less again than --as-decode, whose first
  # half ran compressed.
  cp /tmp/tq_cli_out.$$ /tmp/tq_cli_worst.$$
  check "perplexity turbo2 --prompt" 0 "$tq" perplexity -m "$model" -f "$text" -c 128 --chunks 1 --kv turbo2 --prompt --json -t 2
  if python3 -c '
import json, sys
d, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert d["prompt"] is False and p["prompt"] is True and p["as_decode"] is True
assert p["tokens_scored"] == 63
assert abs(p["results"][0]["ppl"] - d["results"][0]["ppl"]) < 1e-2 * d["results"][0]["ppl"]
assert 0 < p["results"][1]["kld_mean"] < d["results"][1]["kld_mean"], (p, d)
' /tmp/tq_cli_worst.$$ /tmp/tq_cli_out.$$; then pass=$((pass+1)); echo "ok   perplexity --prompt below --as-decode"
  else fail=$((fail+1)); echo "FAIL perplexity --prompt"; cat /tmp/tq_cli_worst.$$ /tmp/tq_cli_out.$$; fi
  check "perplexity --prompt with --as-decode" 2 "$tq" perplexity -m "$model" -f "$text" -c 128 --as-decode --prompt
  # The thread count changes nothing: two chunks of real text (or of the text above where the
  # WikiText-2 file is absent), f16 and turbo3, identical results for 1 and 3 threads.
  wiki=${TQ_WIKITEXT:-$(dirname "$0")/../../shared/data/wikitext-2-raw-test.txt}
  if [ -r "$wiki" ]; then ptext=$wiki; else
    ptext=$text; skip "perplexity thread invariance on WikiText-2" "no file at $wiki (the repeated text instead)"
    for i in 1 2 3; do cat "$text"; done >"$text.3" && ptext=$text.3
  fi
  # 1 and 3 threads (test_thread_invariance runs the model at 1, 2, 3 and 5 threads); under
  # TQ_TEST_QUICK (sanitizer builds) on one chunk.
  tchunks=2; [ -n "${TQ_TEST_QUICK:-}" ] && tchunks=1
  for t in 1 3; do
    "$tq" perplexity -m "$model" -f "$ptext" -c 128 --chunks $tchunks --kv turbo3 --json -t $t \
      >/tmp/tq_cli_t$t.$$ 2>/tmp/tq_cli_err.$$ || { echo "FAIL perplexity -t $t"; cat /tmp/tq_cli_err.$$; }
  done
  [ -n "${TQ_TEST_QUICK:-}" ] && skip "perplexity with 1 and 3 threads, the second chunk" "TQ_TEST_QUICK (sanitizer build)"
  if python3 -c '
import json, sys
r = [json.load(open(f)) for f in sys.argv[2:]]
assert r[0]["tokens_scored"] == 63 * int(sys.argv[1]) and [x["scheme"] for x in r[0]["results"]] == ["f16", "turbo3"], r[0]
for x in r[1:]: assert x["results"] == r[0]["results"], (x["results"], r[0]["results"])
' "$tchunks" /tmp/tq_cli_t1.$$ /tmp/tq_cli_t3.$$; then
    pass=$((pass+1)); echo "ok   perplexity identical for 1 and 3 threads"
  else fail=$((fail+1)); echo "FAIL perplexity differs with the thread count"; cat /tmp/tq_cli_t[13].$$; fi
  rm -f /tmp/tq_cli_t[13].$$ "$text.3"
  rm -f "$text" /tmp/tq_cli_worst.$$
  check "passkey run" 0 "$tq" passkey -m "$model" -c 256 --trials 1 -t 2
  has "passkey depth line" "f16          depth 0.50  "
  has "passkey retrieval line" "f16          retrieval "
  check "run" 0 "$tq" run -m "$model" -n 4 -t 2
  has "run f16 text" "[f16] "
  has "run memory and speed" "bytes/token"
  has "run compressed line" "[turbo3] "
  has "run KLD line" "turbo3 vs f16 along the f16 continuation"
else
  skip "model runs" "no model at $model (scripts/get-model.sh)"
fi

# ---- tq attn-bench (appended block: decode attention benchmark) ---------------------------------
check "attn-bench help" 0 "$tq" attn-bench --help
check "attn-bench bad head dim" 2 "$tq" attn-bench --head-dim 1
check "attn-bench heads not a multiple" 2 "$tq" attn-bench --q-heads 6 --kv-heads 4
check "attn-bench bad scheme" 2 "$tq" attn-bench --scheme turbo3,frob
check "attn-bench scheme not for dim" 2 "$tq" attn-bench --head-dim 64 --scheme turbo3.3
check "attn-bench missing value" 2 "$tq" attn-bench --ctx
check "attn-bench garbage ctx" 2 "$tq" attn-bench --ctx 12x
check "attn-bench queries beyond ctx" 2 "$tq" attn-bench --ctx 8 --queries 9
check "attn-bench unknown flag" 2 "$tq" attn-bench --frob
# Scheme lists: the list and every item non-empty (a usage error, not a run of f16 alone).
check "attn-bench empty --scheme" 2 timeout 20 "$tq" attn-bench --scheme ""
has "attn-bench empty --scheme message" "--scheme '': an empty list"
for list in "turbo3,,f16" ",turbo3" "turbo3," "f16," ","; do
  check "attn-bench --scheme '$list'" 2 timeout 20 "$tq" attn-bench --scheme "$list"
  has "attn-bench --scheme '$list' message" "--scheme '$list': an empty item"
done
check "attn-bench too many schemes" 2 timeout 20 "$tq" attn-bench \
  --scheme turbo1,turbo2,turbo3,turbo4,turbo5,turbo6,turbo7,turbo8,q8_0,q4_0,turbo2.5,turbo3.5,turbo4v2,turbo4v3,turbo8v3,turbo0v4
has "attn-bench too many schemes message" "more than 15 schemes"
# Every number: empty, sign, space, negative, zero, beyond its range, overflow, trailing junk.
for opt in --head-dim --q-heads --kv-heads --ctx --layers --threads --queries --reps --seed; do
  for val in "" "-1" "+1" " 1" "1 " "1x" "0x" "99999999999999999999999" "1e3" "1.5"; do
    check "attn-bench $opt '$val'" 2 timeout 20 "$tq" attn-bench $opt "$val"
    has "attn-bench $opt '$val' message" "bad value for $opt: '$val'"
  done
done
for bad in "--head-dim 1025" "--q-heads 1025" "--kv-heads 0" "--ctx 0" "--ctx 16777217" \
           "--layers 4097" "--threads 257" "--queries 4097" "--reps 0" "--seed -0"; do
  # shellcheck disable=SC2086
  check "attn-bench $bad" 2 timeout 20 "$tq" attn-bench $bad
done
# A run that cannot fit in memory is refused at once with the figure (it used to allocate and
# compute for minutes, silently): the brief's case, and the largest of every dimension.
check "attn-bench beyond memory" 2 env -u TQ_MEM_LIMIT_GIB timeout 20 "$tq" attn-bench --head-dim 1024 --q-heads 1024 \
  --kv-heads 1024 --ctx 100000
has "attn-bench beyond memory figure" "this run needs about "
has "attn-bench beyond memory physical" "GiB of physical memory here"
check "attn-bench largest everything" 2 timeout 20 "$tq" attn-bench --head-dim 1024 --q-heads 1024 \
  --kv-heads 1024 --ctx 16777216 --layers 4096 --queries 4096 --threads 256
has "attn-bench largest everything figure" "this run needs about "
check "codec-bench beyond memory" 2 timeout 20 "$tq" codec-bench --dim 1024 --n 100000000 --bits 8
has "codec-bench beyond memory figure" "this run needs about "
# TQ_MEM_LIMIT_GIB pins the limit (default: the physical memory), so these do not depend on
# the machine: 1 GiB refuses what 64 GiB allows, without running either.
check "attn-bench over TQ_MEM_LIMIT_GIB" 2 env TQ_MEM_LIMIT_GIB=1 timeout 20 "$tq" attn-bench \
  --head-dim 1024 --q-heads 8 --kv-heads 8 --ctx 100000
has "attn-bench over TQ_MEM_LIMIT_GIB message" "more than the 1.0 GiB limit of TQ_MEM_LIMIT_GIB"
check "attn-bench bad TQ_MEM_LIMIT_GIB" 2 env TQ_MEM_LIMIT_GIB=lots timeout 20 "$tq" attn-bench --ctx 16
has "attn-bench bad TQ_MEM_LIMIT_GIB message" "TQ_MEM_LIMIT_GIB"
check "attn-bench under TQ_MEM_LIMIT_GIB" 0 env TQ_MEM_LIMIT_GIB=64 timeout 60 "$tq" attn-bench \
  --head-dim 64 --q-heads 2 --kv-heads 1 --ctx 64 --scheme turbo3 --reps 1
check "attn-bench json run" 0 "$tq" attn-bench --head-dim 64 --q-heads 4 --kv-heads 2 --ctx 300 \
  --scheme q8_0,q4_0r,turbo3 --layers 2 --threads 2 --reps 2 --json
for key in '"ctx":300' '"results":[' '"scheme":"f16"' '"scheme":"turbo3"' '"scheme":"q4_0r"' '"us_per_step":' \
           '"speedup_vs_f16":' '"bytes_per_token":' '"ratio_vs_fp16":' '"rel_l2":' '"max_abs":' \
           '"f16_gflops":' '"gb_per_s":'; do
  if grep -q -F "$key" /tmp/tq_cli_out.$$; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL attn-bench json key $key"; fi
done
if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["results"])==4' /tmp/tq_cli_out.$$ 2>/dev/null; then
  pass=$((pass+1)); echo "ok   attn-bench json parses"
else fail=$((fail+1)); echo "FAIL attn-bench json does not parse"; cat /tmp/tq_cli_out.$$; fi
check "attn-bench table prefill run" 0 "$tq" attn-bench --head-dim 64 --q-heads 2 --kv-heads 1 --ctx 100 \
  --queries 4 --scheme turbo4v2 --reps 1
check "attn-bench -m without --from-model" 2 "$tq" attn-bench -m x.gguf
check "attn-bench --from-model with --layers" 2 "$tq" attn-bench --from-model x.txt --layers 2
check "attn-bench --from-model missing model" 1 "$tq" attn-bench --from-model x.txt -m /nonexistent/m.gguf
check "attn-bench auto:3 without --from-model" 2 "$tq" attn-bench --scheme turbo3,auto:3
has "attn-bench auto:3 without --from-model message" "auto:B needs --from-model"
check "attn-bench --calib-tokens below 64" 2 "$tq" attn-bench --from-model x.txt --calib-tokens 63
if [ -r "$model" ]; then
  text=/tmp/tq_cli_text.$$
  for i in 1 2 3 4 5 6 7 8; do
    echo "The lighthouse keeper climbed the stairs every evening to light the lamp for the ships."
  done >"$text"
  check "attn-bench --from-model missing text" 1 "$tq" attn-bench --from-model /nonexistent.txt -m "$model"
  check "attn-bench --from-model FIFO text" 1 timeout 60 "$tq" attn-bench --from-model "$fifo" -m "$model" --ctx 128
  has "attn-bench --from-model FIFO text message" "cannot open '$fifo': not a regular file (a FIFO)"
  check "attn-bench --from-model text too short" 2 "$tq" attn-bench --from-model "$text" -m "$model" --ctx 4096
  # Real K/V: the error of f16 is fp16 rounding only, turbo4's is far below turbo2's.
  check "attn-bench --from-model run" 0 "$tq" attn-bench --from-model "$text" -m "$model" --ctx 128 \
    --queries 2 --scheme turbo4,turbo2 --reps 1 --threads 2 --json
  if python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["data"] == "model" and d["layers"] == 18 and d["head_dim"] == 256, d
r = {x["scheme"]: x for x in d["results"]}
assert r["f16"]["rel_l2"] < 2e-3 and r["turbo4"]["rel_l2"] < r["turbo2"]["rel_l2"] < 1, r
' /tmp/tq_cli_out.$$; then pass=$((pass+1)); echo "ok   attn-bench --from-model figures"
  else fail=$((fail+1)); echo "FAIL attn-bench --from-model figures"; cat /tmp/tq_cli_out.$$; fi
  # auto:B: each layer's scheme from the calibration (printed), at turbo3's bytes or fewer. Under
  # the sanitizers (TQ_TEST_QUICK) the calibration is test_kv_auto's alone.
  if [ -n "${TQ_TEST_QUICK:-}" ]; then skip "attn-bench auto:3" "TQ_TEST_QUICK (sanitizer build: test_kv_auto calibrates)"; else
  check "attn-bench auto:3" 0 "$tq" attn-bench --from-model "$text" -m "$model" --ctx 128 --scheme turbo3,auto:3 \
    --calib-tokens 64 --reps 1 --threads 2 --json
  has "attn-bench auto:3 calibration" "auto:3: calibrated on 64 tokens of the built-in text"
  has "attn-bench auto:3 layer 0" "  layer  0: k "
  if python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
r = {x["scheme"]: x for x in d["results"]}
assert list(r) == ["f16", "turbo3", "auto:3"], r
assert 0 < r["auto:3"]["bytes_per_token"] <= r["turbo3"]["bytes_per_token"], r
assert r["auto:3"]["rel_l2"] < 1 and r["auto:3"]["us_per_step"] > 0, r
' /tmp/tq_cli_out.$$; then pass=$((pass+1)); echo "ok   attn-bench auto:3 row at turbo3 bytes or fewer"
  else fail=$((fail+1)); echo "FAIL attn-bench auto:3 row"; cat /tmp/tq_cli_out.$$; fi
  fi
  rm -f "$text"
else
  skip "attn-bench --from-model runs" "no model at $model (scripts/get-model.sh)"
fi

# ---- tq tokenize (appended block: tokenizer on GGUF metadata only) -------------------------------
# Tiny vocabulary-only GGUFs written here (python3, no package): a byte-level BPE one whose merges
# make "ab" one token, one with an unknown pre-tokenizer, one with an unknown model.
tokdir=$(mktemp -d)
if python3 - "$tokdir" <<'PY'
import struct, sys
def s(x): b = x.encode(); return struct.pack('<Q', len(b)) + b
def kv_str(k, v): return s(k) + struct.pack('<I', 8) + s(v)
def kv_arr(k, items): return s(k) + struct.pack('<IIQ', 9, 8, len(items)) + b''.join(s(i) for i in items)
def write(path, model, pre):
    kvs = [kv_str('tokenizer.ggml.model', model), kv_str('tokenizer.ggml.pre', pre),
           kv_arr('tokenizer.ggml.tokens', ['a', 'b', 'ab', '\u0120', '\u0120ab', '<|end|>']),
           kv_arr('tokenizer.ggml.merges', ['a b', '\u0120 ab'])]
    body = b'GGUF' + struct.pack('<IQQ', 3, 0, len(kvs)) + b''.join(kvs)
    open(path, 'wb').write(body + b'\0' * (-len(body) % 32))
d = sys.argv[1]
write(d + '/bpe.gguf', 'gpt2', 'gpt-2')
write(d + '/pre.gguf', 'gpt2', 'frobnicate')
write(d + '/model.gguf', 'wordpiece', 'gpt-2')
PY
then
  check "tokenize help" 0 "$tq" tokenize --help
  TQ_MODEL=/nonexistent/m.gguf check "tokenize without -m: \$TQ_MODEL" 1 "$tq" tokenize -p hi
  check "tokenize without text" 2 "$tq" tokenize -m "$tokdir/bpe.gguf"
  check "tokenize -p and -f" 2 "$tq" tokenize -m "$tokdir/bpe.gguf" -p hi -f x
  check "tokenize missing model" 1 "$tq" tokenize -m "$tokdir/none.gguf" -p ab
  has "tokenize missing model: message" "cannot open model"
  check "tokenize non-GGUF" 1 "$tq" tokenize -m "$0" -p ab
  has "tokenize non-GGUF: message" "GGUF_ERR_BAD_MAGIC"
  check "tokenize unknown pre" 1 "$tq" tokenize -m "$tokdir/pre.gguf" -p ab
  has "tokenize unknown pre: names it" "tokenizer.ggml.pre 'frobnicate' is not a pre-tokenizer we have"
  check "tokenize unknown model" 1 "$tq" tokenize -m "$tokdir/model.gguf" -p ab
  has "tokenize unknown model: names it" "tokenizer.ggml.model 'wordpiece' is not supported"
  check "tokenize missing -f file" 1 "$tq" tokenize -m "$tokdir/bpe.gguf" -f "$tokdir/none.txt"
  check "tokenize ids" 0 "$tq" tokenize -m "$tokdir/bpe.gguf" -p "ab ab<|end|>" --ids
  has "tokenize ids: merged, control text matched" "[2, 4, 5]"
  if [ -r "$(dirname "$0")/../models/smollm2-135m-instruct-q4_1.gguf" ]; then
    check "tokenize -m smollm2-135m (a name)" 0 "$tq" tokenize -m smollm2-135m -p "Hello world" --ids
    has "tokenize by name: llama.cpp's ids" "[19556, 905]"
  else
    echo "skip tokenize by model name: no models/smollm2-135m-instruct-q4_1.gguf"
  fi
  check "tokenize no-parse-special" 0 "$tq" tokenize -m "$tokdir/bpe.gguf" -p "ab<|end|>" --ids --no-parse-special
  has "tokenize no-parse-special: no control token" "[2]"
  printf 'ab ab' >"$tokdir/text.txt"
  check "tokenize -f pieces" 0 "$tq" tokenize -m "$tokdir/bpe.gguf" -f "$tokdir/text.txt" --show-count
  has "tokenize -f pieces: piece" "     4 -> ' ab'"
  has "tokenize -f pieces: count" "Total number of tokens: 2"
else
  skip "tokenize" "python3 could not write the test GGUFs"
fi
rm -rf "$tokdir"
vocab=${TQ_VOCAB_DIR:-$(dirname "$0")/../../shared/data/vocab}/ggml-vocab-llama-bpe.gguf
if [ -f "$vocab" ]; then
  check "tokenize llama-bpe vocab" 0 "$tq" tokenize -m "$vocab" -p "Hello world" --ids
  has "tokenize llama-bpe vocab: ids with BOS" "[128000, 9906, 1917]"
else
  skip "tokenize llama-bpe vocab" "no $vocab (set TQ_VOCAB_DIR)"
fi
# ---- tq bench (prefill/decode speed at depths, bytes per decode token) --------------------------
check "bench help" 0 "$tq" bench --help
check "bench nothing to measure" 2 "$tq" bench -p 0 -n 0
check "bench fractional depth" 2 "$tq" bench -d 0,1.5
check "bench bad -r" 2 "$tq" bench -r 0
check "bench bad scheme" 2 "$tq" bench --kv turbo3,frob
check "bench missing model" 1 "$tq" bench -m /nonexistent/model.gguf
if [ -r "$model" ]; then
  check "bench depth beyond the model" 2 "$tq" bench -m "$model" -d 40000 -p 8 -n 2 --no-bandwidth
  has "bench depth message" "larger than the model's context"
  check "bench run" 0 "$tq" bench -m "$model" -p 16 -n 4 -d 0,80 --kv f16,turbo3 -r 2 -t 2 --json
  if python3 -c '
import json, sys
rows = json.load(open(sys.argv[1]))
assert [(r["kv"], r["depth"]) for r in rows] == [("f16", 0), ("f16", 80), ("turbo3", 0), ("turbo3", 80)], rows
for r in rows:
    for k in ("pp_tok_s", "tg_tok_s", "bytes_per_token", "bandwidth_gb_s", "read_bw_gb_s", "bw_fraction"):
        assert r[k] > 0, (k, r)
    assert r["bytes_per_token"] == r["weight_bytes"] + r["kv_read_bytes"], r
    assert abs(r["bandwidth_gb_s"] - r["bytes_per_token"] * r["tg_tok_s"] / 1e9) < 1e-3 * r["bandwidth_gb_s"] + 1e-3, r
f16, t3 = rows[1], rows[3]
# K/V read at depth 80: every layer sees ~81..85 positions; turbo3 reads the compressed bytes
assert f16["kv_read_bytes"] >= 81 * f16["kv_bytes_per_token"], f16
assert t3["kv_bytes_per_token"] * 4 < f16["kv_bytes_per_token"], t3
assert t3["kv_read_bytes"] < f16["kv_read_bytes"], (t3, f16)
assert rows[0]["kv_read_bytes"] < f16["kv_read_bytes"], rows
' /tmp/tq_cli_out.$$; then pass=$((pass+1)); echo "ok   bench json rows and byte counts"
  else fail=$((fail+1)); echo "FAIL bench json"; cat /tmp/tq_cli_out.$$; fi
  check "bench table" 0 "$tq" bench -m "$model" -p 8 -n 0 -r 1 -t 1 --no-bandwidth
  has "bench table header" "| kv | depth | pp8 tok/s | tg0 tok/s |"
  has "bench table row" "| f16 | 0 | "
else
  skip "bench runs" "no model at $model (scripts/get-model.sh)"
fi
rm -f /tmp/tq_cli_out.$$ /tmp/tq_cli_err.$$ "$fifo"
echo "$pass passed, $fail failed, $skipped skipped"
[ "$fail" = 0 ] || exit 1
# Nothing ran at all: ctest's SKIP_RETURN_CODE (CMakeLists.txt).
[ "$pass" -gt 0 ] || exit 77
