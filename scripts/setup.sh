#!/usr/bin/env bash
# Installs what building and testing hopattn needs. Idempotent and quick on a re-run: each
# step checks first and does nothing when its result is already there.
#   - Debian packages (cmake, ninja, g++, GoogleTest, python3-venv), only those missing.
#   - A virtual environment at .venv/ with the pins of requirements-dev.txt. It is made with
#     --system-site-packages so that a PyTorch installed on the machine stays importable for
#     the tests, while the pinned packages inside .venv/ take precedence.
#   - The CUTLASS/CuTe headers of nvidia-cutlass==$CUTLASS_VERSION in .deps/cutlass/include
#     (git-ignored), taken from the PyPI wheel, which ships them under
#     cutlass_library/source/include.
# Environment: PYTHON (default python3) picks the interpreter the venv is made from.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CUTLASS_VERSION="4.2.0.0"
PYTHON="${PYTHON:-python3}"
VENV="$REPO/.venv"

log() { printf '[setup] %s\n' "$*" >&2; }

install_debian_packages() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v ninja >/dev/null || missing+=(ninja-build)
  command -v g++ >/dev/null || missing+=(g++)
  [[ -f /usr/include/gtest/gtest.h ]] || missing+=(libgtest-dev)
  command -v "$PYTHON" >/dev/null || missing+=(python3)
  # Debian's python3 needs python3-venv for ensurepip; pyenv and other builds carry it.
  "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
  command -v unzip >/dev/null || missing+=(unzip)
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

cutlass_header_version() {
  local h="$REPO/.deps/cutlass/include/cutlass/version.h"
  [[ -f "$h" ]] || return 0
  awk '/#define CUTLASS_(MAJOR|MINOR|PATCH) /{v = v (v ? "." : "") $3} END {print v}' "$h"
}

install_cutlass_headers() {
  local dest="$REPO/.deps/cutlass/include"
  # The wheel's fourth version field is packaging only; the headers say MAJOR.MINOR.PATCH.
  if [[ "$(cutlass_header_version)" == "${CUTLASS_VERSION%.*}" ]]; then
    log "CUTLASS: headers ${CUTLASS_VERSION%.*} present in .deps/cutlass/include"
    return
  fi
  log "CUTLASS: fetching nvidia-cutlass==$CUTLASS_VERSION headers"
  local tmp
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' RETURN
  "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps \
    -d "$tmp" "nvidia-cutlass==$CUTLASS_VERSION"
  unzip -q "$tmp"/nvidia_cutlass-*.whl 'cutlass_library/source/include/*' -d "$tmp/x"
  rm -rf "$dest"
  mkdir -p "$(dirname "$dest")"
  cp -r "$tmp/x/cutlass_library/source/include" "$dest"
}

install_debian_packages
install_python_packages
install_cutlass_headers
log "done"
