#!/usr/bin/env bash
# THE main-job command: installs what building needs, builds hopattn-bench and runs it. With no
# arguments it benchmarks and checks the default problem on the best available backend
# (SM90 on a Hopper GPU, else the CPU); arguments go to hopattn-bench (see --help).
#
#   scripts/run.sh [--cpu-only] [hopattn-bench arguments]
#
# --cpu-only or HOPATTN_CPU_ONLY=1 builds without the SM90 backend (no kernel compilation).
# Only hopattn-bench writes to stdout: setup and build speak on stderr, so
# `scripts/run.sh > out.txt` holds the results alone. The Python .venv is not needed here.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${HOPATTN_BUILD_DIR:-$REPO/build}"
if [[ "${1:-}" == "--cpu-only" ]]; then
  export HOPATTN_CPU_ONLY=1
  shift
fi

bash "$REPO/scripts/setup.sh" --build-only
bash "$REPO/scripts/build.sh" --target hopattn-bench

bench="$BUILD_DIR/tools/hopattn-bench"
if [[ ! -x "$bench" ]]; then
  echo "[run] hopattn-bench not found in $BUILD_DIR/tools" >&2
  exit 1
fi
exec "$bench" "$@"
