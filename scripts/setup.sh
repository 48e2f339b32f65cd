#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine: installs the build tools and libraries (libmicrohttpd and
# jansson for tq serve), fetches the models (Gemma 3 270M, SmolLM2 135M) into a local virtual
# environment with the `openai` client (tq serve's tests), builds everything, then runs the main
# job.
# usage: scripts/setup.sh [--no-run]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
need=()
# gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user-static: the aarch64 build of the
# library and its NEON kernel tests under emulation (make test-arm).
for pkg in build-essential cmake clang-14 libclang-rt-14-dev python3 python3-venv pkg-config libpcre2-dev \
  libmicrohttpd-dev libjansson-dev curl gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  echo "setup: installing ${need[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
fi
models=$(scripts/get-model.sh)
echo "$models" | sed 's/^/setup: model: /'
venv=${TQ_VENV:-$root/.venv}
if ! "$venv/bin/python" -c 'import openai' 2>/dev/null; then
  echo "setup: installing the openai client into $venv (tq serve's tests)"
  "$venv/bin/pip" install --quiet --disable-pip-version-check openai
fi
make build
if [ "${1:-}" != "--no-run" ]; then
  build/tq run
fi
