#!/usr/bin/env bash
# CLI contract of `tq`: usage errors exit 2 with a message, help exits 0, JSON has the keys.
set -u
tq=${1:?usage: test_cli.sh PATH_TO_TQ}
pass=0 fail=0
check() { # name, expected exit code, command...
  local name=$1 want=$2; shift 2
  "$@" >/tmp/tq_cli_out.$$ 2>/tmp/tq_cli_err.$$
  local got=$?
  if [ "$got" = "$want" ]; then pass=$((pass+1)); echo "ok   $name"
  else fail=$((fail+1)); echo "FAIL $name: exit $got, wanted $want"; cat /tmp/tq_cli_err.$$; fi
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
rm -f /tmp/tq_cli_out.$$ /tmp/tq_cli_err.$$
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
