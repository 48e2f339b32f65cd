#!/usr/bin/env bash
# tq serve on a real model: tests/test_serve.py through the project's Python (it needs the openai
# package). Exit 77 (ctest: skipped) with a `skip ...` line when the Python, its openai module or
# the model is missing; otherwise the Python test's own exit status.
#   tests/test_serve.sh PATH_TO_TQ [MODEL_NAME]     (MODEL_NAME default smollm2-135m, or a .gguf path)
# The Python: $TQ_VENV/bin/python when TQ_VENV is set, else .venv/bin/python in the repository.
set -u
tq=${1:?usage: test_serve.sh PATH_TO_TQ [MODEL_NAME]}
model=${2:-smollm2-135m}
root=$(cd "$(dirname "$0")/.." && pwd)
case "$tq" in /*) ;; *) tq=$(cd "$(dirname "$tq")" && pwd)/$(basename "$tq") ;; esac
cd "$root" || exit 1

if [ -n "${TQ_VENV:-}" ]; then py=$TQ_VENV/bin/python; else py=$root/.venv/bin/python; fi
if [ ! -x "$py" ]; then
  echo "skip tq_serve: no Python at $py (set TQ_VENV to a virtual environment with openai)"
  exit 77
fi
if ! "$py" -c 'import openai' >/dev/null 2>&1; then
  echo "skip tq_serve: $py has no openai module (pip install openai)"
  exit 77
fi
# The model: a path as given, else a name tq knows, installed as models/NAME*.gguf.
case "$model" in
  */*|*.gguf) file=$model ;;
  *) file=$(ls models/"$model".gguf models/"$model"-*.gguf 2>/dev/null | head -n 1) ;;
esac
if [ -z "$file" ] || [ ! -r "$file" ]; then
  echo "skip tq_serve: no model file for '$model' (models/$model*.gguf; scripts/get-model.sh installs it)"
  exit 77
fi
if [ ! -x "$tq" ]; then
  echo "FAIL tq_serve: no executable at $tq"
  exit 1
fi
exec "$py" "$root/tests/test_serve.py" "$tq" "$model"
