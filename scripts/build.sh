#!/usr/bin/env bash
# Configures hopattn in build/ (or $HOPATTN_BUILD_DIR) when needed, and builds it with Ninja and all
# cores. Expects scripts/setup.sh to have run.
#
#   scripts/build.sh [--cpu-only] [cmake --build arguments, e.g. --target hopattn-bench]
#
# The SM90 backend is built whenever nvcc exists (the sm_90a kernels compile without a GPU), unless
#   --cpu-only or HOPATTN_CPU_ONLY=1   the CPU backend only (-DHOPATTN_ENABLE_CUDA=OFF): seconds
#                                      instead of minutes of kernel compilation;
#   HOPATTN_SM90_KERNELS=representative  one kernel per operation instead of all (a compile check).
# CMake configures only when the build folder has not been configured with these settings; after
# that Ninja re-runs it when a CMakeLists.txt changes. Everything goes to stderr, and cmake and
# ninja print only warnings and errors (HOPATTN_VERBOSE=1: all of it).
set -euo pipefail
exec 1>&2

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${HOPATTN_BUILD_DIR:-$REPO/build}"
if [[ "${1:-}" == "--cpu-only" ]]; then
  HOPATTN_CPU_ONLY=1
  shift
fi

cmake_args=(-S "$REPO" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release)
nvcc="$(command -v nvcc || true)"
[[ -n "$nvcc" || ! -x /usr/local/cuda/bin/nvcc ]] || nvcc=/usr/local/cuda/bin/nvcc
if [[ "${HOPATTN_CPU_ONLY:-0}" == 1 ]]; then
  echo "[build] CPU only (HOPATTN_CPU_ONLY=1): without the SM90 backend"
  cmake_args+=(-DHOPATTN_ENABLE_CUDA=OFF)
elif [[ -n "$nvcc" ]]; then
  cmake_args+=(-DHOPATTN_ENABLE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc"
               -DHOPATTN_SM90_KERNELS="${HOPATTN_SM90_KERNELS:-all}")
else
  echo "[build] nvcc not found: building without the SM90 backend"
  cmake_args+=(-DHOPATTN_ENABLE_CUDA=OFF)
fi

quiet=1
[[ "${HOPATTN_VERBOSE:-0}" == 1 ]] && quiet=0

# The settings this folder was configured with; a different set configures again.
stamp="$BUILD_DIR/.hopattn-configure-args"
if ! [[ -f "$BUILD_DIR/build.ninja" && -f "$stamp" && "$(cat "$stamp")" == "${cmake_args[*]}" ]]; then
  echo "[build] configuring $BUILD_DIR"
  rm -f "$stamp"
  if ((quiet)); then
    # STATUS messages and CMake's three closing lines would say nothing on success.
    cmake --log-level=WARNING "${cmake_args[@]}" |
      { grep -Ev '^-- (Configuring done|Generating done|Build files have been written to)' || true; }
  else
    cmake "${cmake_args[@]}"
  fi
  echo "${cmake_args[*]}" >"$stamp"
fi

build_args=(--build "$BUILD_DIR" --parallel "$(nproc)" "$@")
if ((quiet)); then
  echo "[build] building $BUILD_DIR${*:+ ($*)}"
  # ninja >= 1.11 --quiet: no progress lines, only what the compilers say.
  ninja_quiet=()
  printf '%s\n' 1.11 "$(ninja --version)" | sort -CV && ninja_quiet=(-- --quiet)
  cmake "${build_args[@]}" "${ninja_quiet[@]}" | { grep -v '^ninja: no work to do\.$' || true; }
else
  cmake "${build_args[@]}"
fi
