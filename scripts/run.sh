#!/usr/bin/env bash
# THE main-job command: installs what is missing, builds hopattn-bench and runs it. With no
# arguments it benchmarks and checks the default problem on the best available backend
# (SM90 on a Hopper GPU, else the CPU); arguments go to hopattn-bench (see --help).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${HOPATTN_BUILD_DIR:-$REPO/build}"

bash "$REPO/scripts/setup.sh"
bash "$REPO/scripts/build.sh" --target hopattn-bench

bench="$(find "$BUILD_DIR" -type f -name hopattn-bench -perm -u+x -print -quit)"
if [[ -z "$bench" ]]; then
  echo "[run] hopattn-bench not found under $BUILD_DIR" >&2
  exit 1
fi
exec "$bench" "$@"
