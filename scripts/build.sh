#!/usr/bin/env bash
# Configures and builds hopattn in build/ (or $HOPATTN_BUILD_DIR) with Ninja and all cores.
# The CUDA backend is on whenever nvcc exists: the sm_90a kernels compile without a GPU.
# Arguments are passed to `cmake --build` (e.g. --target hopattn-bench).
# Expects scripts/setup.sh to have run.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${HOPATTN_BUILD_DIR:-$REPO/build}"

cmake_args=(-S "$REPO" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release)
nvcc="$(command -v nvcc || true)"
[[ -n "$nvcc" || ! -x /usr/local/cuda/bin/nvcc ]] || nvcc=/usr/local/cuda/bin/nvcc
if [[ -n "$nvcc" ]]; then
  cmake_args+=(-DHOPATTN_ENABLE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc")
else
  echo "[build] nvcc not found: building without the SM90 backend" >&2
  cmake_args+=(-DHOPATTN_ENABLE_CUDA=OFF)
fi

cmake "${cmake_args[@]}"
cmake --build "$BUILD_DIR" --parallel "$(nproc)" "$@"
