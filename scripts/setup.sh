#!/usr/bin/env bash
# Installs what building and testing hopattn needs. Idempotent and quick on a re-run: each
# step checks first and does nothing when its result is already there.
#   - Debian packages (cmake, ninja, g++, GoogleTest, pkg-config, python3-venv), only those missing.
#   - A virtual environment at .venv/ with the pins of requirements-dev.txt. It is made with
#     --system-site-packages so that a PyTorch installed on the machine stays importable for
#     the tests, while the pinned packages inside .venv/ take precedence.
# The CUTLASS/CuTe headers of the SM90 backend are not installed here: CMake fetches the pinned
# version (cmake/HopattnCutlass.cmake) into .deps/cutlass/include when it configures that backend.
#
#   scripts/setup.sh              everything (scripts/test.sh)
#   scripts/setup.sh --build-only what building needs: the Debian packages, no .venv (scripts/run.sh)
# Environment: PYTHON (default python3) picks the interpreter the venv is made from.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="$REPO/.venv"
BUILD_ONLY=0
case "${1:-}" in
  --build-only) BUILD_ONLY=1 ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--build-only]" >&2; exit 2 ;;
esac

exec 1>&2  # all of it is diagnostics: `scripts/run.sh > out.txt` keeps only results
log() { printf '[setup] %s\n' "$*"; }

install_debian_packages() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v ninja >/dev/null || missing+=(ninja-build)
  command -v g++ >/dev/null || missing+=(g++)
  [[ -f /usr/include/gtest/gtest.h ]] || missing+=(libgtest-dev)
  command -v pkg-config >/dev/null || missing+=(pkg-config)  # the install test's consumer
  # The CI fuzzer (scripts/sanitize.sh): clang with libFuzzer and the sanitizer runtimes.
  if [[ "${CI:-}" == true || "${HOPATTN_SANITIZERS:-0}" == 1 ]]; then
    command -v clang++ >/dev/null || missing+=(clang)
  fi
  command -v "$PYTHON" >/dev/null || missing+=(python3)
  # Debian's python3 needs python3-venv for ensurepip; pyenv and other builds carry it.
  ((BUILD_ONLY)) || "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
  if ((${#missing[@]} == 0)); then
    log "Debian packages: all present"
    return
  fi
  log "Debian packages: installing ${missing[*]}"
  local sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

install_python_packages() {
  if [[ ! -x "$VENV/bin/python" ]]; then
    log "Python: creating $VENV from $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv --system-site-packages "$VENV"
  fi
  # The stamp holds the hash of the requirements that were installed; a change re-installs.
  local stamp="$VENV/.requirements.sha256" want
  want="$(sha256sum "$REPO/requirements-dev.txt" | cut -d' ' -f1)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    log "Python: pinned packages present in .venv/"
    return
  fi
  log "Python: installing requirements-dev.txt into .venv/"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REPO/requirements-dev.txt"
  echo "$want" >"$stamp"
}

install_debian_packages
if ((BUILD_ONLY == 0)); then
  install_python_packages
fi
log "done"
