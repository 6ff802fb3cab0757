#!/usr/bin/env bash
# THE test command: installs what is missing, builds, then runs every test: the C++ tests
# (and the install, example and README checks) through ctest and the Python tests through
# pytest against the library just built. Both suites run even if the first fails; the exit
# status is non-zero if either failed.
#
#   scripts/test.sh [--cpu-only]     (or HOPATTN_CPU_ONLY=1: without the SM90 backend)
#
# With CI=true (.ci/run) or HOPATTN_SANITIZERS=1 it then runs scripts/sanitize.sh: the CPU suites
# under ASan + UBSan, the multi-threaded tests under TSan, and the C ABI fuzzer for 60 s
# (HOPATTN_FUZZ_SECONDS), each in its own CPU-only build folder; its status counts too.
#
# The output is a summary: ctest's lines for passing and skipped tests are left out (failures
# print in full, and Testing/Temporary/LastTest.log in the build folder has everything);
# HOPATTN_VERBOSE=1 shows all.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${HOPATTN_BUILD_DIR:-$REPO/build}"
PY="$REPO/.venv/bin/python"
if [[ "${1:-}" == "--cpu-only" ]]; then
  export HOPATTN_CPU_ONLY=1
  shift
fi
(($# == 0)) || { echo "usage: scripts/test.sh [--cpu-only]" >&2; exit 2; }

# CI's 2 cores compile one SM90 kernel per operation (each sm_90a instantiation costs minutes
# there; all of them took 23 of CI's 45 minutes at d5abe10); the GPU machine builds them all
# (scripts/device_check.sh tests).
if [[ "${CI:-}" == true ]]; then
  export HOPATTN_SM90_KERNELS="${HOPATTN_SM90_KERNELS:-representative}"
fi

bash "$REPO/scripts/setup.sh"
bash "$REPO/scripts/build.sh"

# ctest's per-test lines ("Start n: ...", "n/N Test #n: ... Passed" or "Skipped") are dropped;
# a failing test's line and output, the skipped tests' list and the summary stay.
echo "[test] ctest in $BUILD_DIR" >&2
ctest_status=0
ctest_filter='^ *(Start +[0-9]+: |[0-9]+/[0-9]+ Test +#[0-9]+: .*( Passed|\*\*\*Skipped) +[0-9.]+ sec$)'
[[ "${HOPATTN_VERBOSE:-0}" == 1 ]] && ctest_filter='^$^'
(cd "$BUILD_DIR" && ctest --output-on-failure --parallel "$(nproc)") |
  { grep -Ev "$ctest_filter" || true; } || ctest_status=$?

# An editable install: the tests import the package from python/ as a user would after
# `pip install -e python/`. Skipped when .venv already has it from this checkout.
if ! "$PY" -c "import hopattn, sys; sys.exit(not hopattn.__file__.startswith('$REPO/python/'))" \
    2>/dev/null; then
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
    -e "$REPO/python"
fi
# The library of this build, not whichever build-*/ was touched last.
lib="$BUILD_DIR/src/libhopattn.so"
if [[ ! -e "$lib" ]]; then
  echo "[test] libhopattn.so not found in $BUILD_DIR/src" >&2
  exit 1
fi
echo "[test] pytest tests/python" >&2
pytest_status=0
HOPATTN_LIBRARY="$lib" "$PY" -m pytest "$REPO/tests/python" -q -rs -p no:cacheprovider \
  || pytest_status=$?

sanitize_status=0
if [[ "${CI:-}" == true || "${HOPATTN_SANITIZERS:-0}" == 1 ]]; then
  echo "[test] sanitizers and fuzzer (scripts/sanitize.sh)" >&2
  bash "$REPO/scripts/sanitize.sh" || sanitize_status=$?
fi

echo "[test] ctest exit $ctest_status, pytest exit $pytest_status, sanitize exit $sanitize_status" >&2
((ctest_status == 0 && pytest_status == 0 && sanitize_status == 0))
