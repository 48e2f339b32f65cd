#!/usr/bin/env bash
# tq chat on a real model, turns piped on stdin (doc/chat.md): usage errors, two greedy turns
# whose prefill counts are checked against counts computed independently (tq generate's prefill
# of each plain-text fragment of the template), exit 0 at EOF, a compressed scheme, and a
# context too small for the conversation.
#   tests/test_chat.sh PATH_TO_TQ MODEL.gguf
# The model's template must be gemma or chatml (the two layouts the independent count knows);
# $TQ_CHAT_BOS (0 or 1) says whether its vocabulary adds BOS, else gemma 1, chatml 0.
set -u
tq=${1:?usage: test_chat.sh PATH_TO_TQ MODEL}
model=${2:?usage: test_chat.sh PATH_TO_TQ MODEL}
out=/tmp/tq_chat_out.$$ err=/tmp/tq_chat_err.$$
trap 'rm -f "$out" "$err"' EXIT
pass=0 fail=0
ok() { pass=$((pass+1)); echo "ok   $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; cat "$out" "$err"; }
check() { # name, expected exit code, stdin text, command...
  local name=$1 want=$2 input=$3; shift 3
  printf '%s' "$input" | "$@" >"$out" 2>"$err"
  local got=$?
  if [ "$got" = "$want" ]; then ok "$name"; else bad "$name: exit $got, wanted $want"; fi
}
has() { # name, fixed string expected in the last check's stdout+stderr
  if grep -q -F -- "$2" "$out" "$err"; then ok "$1"; else bad "$1: no '$2'"; fi
}

# ---- usage errors (no model needed) ---------------------------------------------------------------
check "help" 0 "" "$tq" chat --help
has "help names the templates" "chatml, gemma, llama3"
check "unknown flag" 2 "" "$tq" chat --frob
check "bad -n" 2 "" "$tq" chat -n 0
check "bad --temp" 2 "" "$tq" chat --temp warm
check "bad --top-p" 2 "" "$tq" chat --top-p 0
check "missing value" 2 "" "$tq" chat --system
check "kv list" 2 "" "$tq" chat --kv f16,turbo3
check "unknown --chat-template" 2 "" "$tq" chat --chat-template nonsense
has "unknown template message" "--chat-template nonsense: unknown template; known: chatml, gemma, llama3, llama2, llama2-sys"
check "missing model" 1 "hi\n" "$tq" chat -m /nonexistent/model.gguf
has "missing model message" "cannot open model '/nonexistent/model.gguf'"

if [ ! -r "$model" ]; then
  echo "skip real-model checks: no model at $model"
  echo "$pass passed, $fail failed"
  [ "$fail" = 0 ] || exit 1
  exit 77
fi

# ---- two greedy turns --------------------------------------------------------------------------
u1="What is the capital of France?"
u2="And what is the capital of Italy?"
check "two turns" 0 "$u1"$'\n'"$u2"$'\n' "$tq" chat -m "$model" --temp 0 -n 8 -t 2
family=$(sed -n 's/^tq chat: template \([a-z0-9-]*\),.*/\1/p' "$err")
case "$family" in
  gemma) ai=model bos=${TQ_CHAT_BOS:-1} ;;
  chatml) ai=assistant bos=${TQ_CHAT_BOS:-0} ;;
  *) bad "template '$family': the independent count knows gemma and chatml only"; ai= ;;
esac
n_turns=$(grep -c '^turn [0-9]*: prefill' "$err")
[ "$n_turns" = 2 ] && ok "two stats lines" || bad "stats lines: $n_turns"
field() { # turn, sed expression on its stats line
  sed -n "s/^turn $1: $2/\\1/p" "$err"
}
p1=$(field 1 'prefill \([0-9]*\) tokens.*')
p2=$(field 2 'prefill \([0-9]*\) tokens.*')
r2=$(field 2 'prefill [0-9]* tokens (\([0-9]*\) reused.*')
g1=$(field 1 '.*; \([0-9]*\) tokens generated.*')
kv2=$(field 2 '.*KV (f16): \([0-9]*\) tokens.*')
g2=$(field 2 '.*; \([0-9]*\) tokens generated.*')
if [ -n "$ai" ] && [ -n "$p1" ] && [ -n "$p2" ]; then
  # Tokens of a plain text (no control tokens): tq generate's prefill count less its BOS. The
  # template's control tokens split the text into fragments tokenized one by one, so a turn's
  # count is its control tokens plus the counts of its fragments.
  count() {
    local n
    n=$("$tq" generate -m "$model" -p "$1" -n 1 --temp 0 -t 2 2>&1 >/dev/null | sed -n 's/^prefill: \([0-9]*\) tokens.*/\1/p')
    echo $((n - bos))
  }
  nl=$(count $'\n')
  c_ai=$(count "$ai"$'\n')
  c_u1=$(count "user"$'\n'"$u1")
  c_u2=$(count "user"$'\n'"$u2")
  # turn 1: [BOS] OPEN "user\nU1" CLOSE "\n" OPEN "AI\n"
  want1=$((bos + 3 + c_u1 + nl + c_ai))
  # turn 2, after the answer the cache holds: CLOSE "\n" OPEN "user\nU2" CLOSE "\n" OPEN "AI\n"
  want2=$((4 + 2 * nl + c_u2 + c_ai))
  [ "$p1" = "$want1" ] && ok "turn 1 prefills $p1 tokens" || bad "turn 1 prefill $p1, independent count $want1"
  [ "$p2" = "$want2" ] && ok "turn 2 prefills only its own $p2 tokens" || bad "turn 2 prefill $p2, independent count $want2"
  [ "$r2" = $((p1 + g1)) ] && ok "turn 2 reuses turn 1's prompt and answer ($r2)" || bad "turn 2 reused $r2, not $p1 + $g1"
  [ "$kv2" = $((r2 + p2 + g2)) ] && ok "cache holds $kv2 tokens" || bad "cache $kv2, not $r2 + $p2 + $g2"
  if grep -q 're-prefilled' "$err"; then bad "turn 2 re-prefilled answer tokens"; else ok "nothing re-prefilled"; fi
fi
has "speed on stderr" "tok/s"
has "memory on stderr" "f16 would use"

# The same conversation again: deterministic at --temp 0 (stdout byte for byte).
cp "$out" "$out.1"
check "repeat" 0 "$u1"$'\n'"$u2"$'\n' "$tq" chat -m "$model" --temp 0 -n 8 -t 2
cmp -s "$out" "$out.1" && ok "greedy answers repeat" || bad "answers differ between two runs"
rm -f "$out.1"

check "EOF at once" 0 "" "$tq" chat -m "$model" -t 2
[ "$(grep -c '^turn' "$err")" = 0 ] && ok "no turn without input" || bad "turns without input"
check "blank lines skipped, no final newline" 0 $'\n\n'"$u1" "$tq" chat -m "$model" --temp 0 -n 4 -t 2
[ "$(grep -c '^turn' "$err")" = 1 ] && ok "one turn" || bad "turns: $(grep -c '^turn' "$err")"
check "system text" 0 "$u1"$'\n' "$tq" chat -m "$model" --temp 0 -n 4 -t 2 --system "Answer in one word."
check "turbo3" 0 "$u1"$'\n'"$u2"$'\n' "$tq" chat -m "$model" --temp 0 -n 8 -t 2 --kv turbo3
has "turbo3 stats" "KV (turbo3)"
check "sampled" 0 "$u1"$'\n' "$tq" chat -m "$model" --temp 0.8 --seed 7 -n 8 -t 2

# ---- context full -------------------------------------------------------------------------------
# -c 48: three turns of up to 12 tokens cannot all stay; the oldest exchanges are dropped.
check "small context" 0 "$u1"$'\n'"$u2"$'\n'"$u1"$'\n'"$u2"$'\n' "$tq" chat -m "$model" --temp 0 -n 12 -t 2 -c 48
has "dropped message" "dropped the"
[ "$(grep -c '^turn' "$err")" = 4 ] && ok "every turn answered" || bad "turns: $(grep -c '^turn' "$err")"
# An answer that reaches the end of the context stops there.
check "answer hits the end" 0 "$u1"$'\n' "$tq" chat -m "$model" --temp 0 -n 100 -t 2 -c 24
if grep -q "end of turn" "$err"; then ok "answer ended before the context did (nothing to check)"
else has "context full message" "the answer stops here"; fi
# A message that cannot fit even alone is skipped; the chat goes on.
long=$(printf 'word %.0s' $(seq 1 60))
check "message too long" 0 "$long"$'\n'"$u1"$'\n' "$tq" chat -m "$model" --temp 0 -n 4 -t 2 -c 32
has "skip message" "leaves no room for an answer: skipped"
[ "$(grep -c '^turn' "$err")" = 1 ] && ok "the next message is answered" || bad "turns: $(grep -c '^turn' "$err")"

# ---- sessions (--session FILE: FILE.turns + a prompt cache) ----------------------------------------
sess=/tmp/tq_chat_sess.$$
trap 'rm -f "$out" "$err" "$sess" "$sess.turns" "$out".*' EXIT
check "both turns in one run" 0 "$u1"$'\n'"$u2"$'\n' "$tq" chat -m "$model" --temp 0 -n 8 -t 2 --kv turbo3
cp "$out" "$out.whole"
check "session turn 1" 0 "$u1"$'\n' "$tq" chat -m "$model" --temp 0 -n 8 -t 2 --kv turbo3 --session "$sess"
has "new session" "session '$sess' is new"
cp "$out" "$out.s1"
held=$(sed -n 's/^turn 1: .*KV (turbo3): \([0-9]*\) tokens.*/\1/p' "$err")
[ -s "$sess" ] && [ -s "$sess.turns" ] && ok "session files written" || bad "no session files"
check "session turn 2" 0 "$u2"$'\n' "$tq" chat -m "$model" --temp 0 -n 8 -t 2 --kv turbo3 --session "$sess"
has "session restored" "2 messages, $held tokens restored"
has "turn 2 prefills only its own tokens" "($held reused)"
cat "$out.s1" "$out" > "$out.s12"
cmp -s "$out.s12" "$out.whole" && ok "resumed answers = one-run answers" || bad "resumed answers differ"
cp "$sess" "$sess.keep"; cp "$sess.turns" "$sess.turns.keep"
# Another scheme: the turns resume, the cache does not (prefilled again).
check "session, other scheme" 0 "$u2"$'\n' "$tq" chat -m "$model" --temp 0 -n 8 -t 2 --kv f16 --session "$sess"
has "other scheme message" "KV cache not restored"
has "other scheme: prefill from 0" "(0 reused)"
# A corrupted cache: one byte flipped in its middle.
cp "$sess.keep" "$sess"; cp "$sess.turns.keep" "$sess.turns"
size=$(stat -c %s "$sess")
printf '\xff' | dd of="$sess" bs=1 seek=$((size / 2)) conv=notrunc status=none
check "session, corrupted cache" 0 "$u2"$'\n' "$tq" chat -m "$model" --temp 0 -n 8 -t 2 --kv turbo3 --session "$sess"
has "corrupted cache message" "KV cache not restored"
has "corrupted cache: prefill from 0" "(0 reused)"
# A truncated cache.
head -c 1000 "$sess.keep" > "$sess"; cp "$sess.turns.keep" "$sess.turns"
check "session, truncated cache" 0 "$u2"$'\n' "$tq" chat -m "$model" --temp 0 -n 8 -t 2 --kv turbo3 --session "$sess"
has "truncated cache message" "KV cache not restored"
# Broken turns: a fresh conversation (the cache is not used without them).
cp "$sess.keep" "$sess"; printf 'tq-chat-turns 1\nuser 99\nshort\n' > "$sess.turns"
check "session, truncated turns" 0 "$u2"$'\n' "$tq" chat -m "$model" --temp 0 -n 8 -t 2 --kv turbo3 --session "$sess"
has "bad turns message" "starting a new conversation"
has "bad turns: prefill from 0" "(0 reused)"
printf 'not a turns file\n' > "$sess.turns"
check "session, not a turns file" 0 "$u2"$'\n' "$tq" chat -m "$model" --temp 0 -n 8 -t 2 --kv turbo3 --session "$sess"
has "not a turns file message" "not a tq chat turns file"
check "session in a missing folder" 0 "$u1"$'\n' "$tq" chat -m "$model" --temp 0 -n 4 -t 2 --session /nonexistent/dir/s
has "unsaved message" "not saved"
rm -f "$sess.keep" "$sess.turns.keep"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
