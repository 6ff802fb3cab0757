#!/usr/bin/env bash
# THE test command: installs what is missing, builds, then runs every test: the C++ tests
# through ctest and the Python tests through pytest against the library just built. Both
# suites run even if the first fails; the exit status is non-zero if either failed.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${HOPATTN_BUILD_DIR:-$REPO/build}"
PY="$REPO/.venv/bin/python"

bash "$REPO/scripts/setup.sh"
bash "$REPO/scripts/build.sh"

ctest_status=0
(cd "$BUILD_DIR" && ctest --output-on-failure --parallel "$(nproc)") || ctest_status=$?

# An editable install: the tests import the package from python/ as a user would after
# `pip install -e python/`. Skipped when .venv already has it from this checkout.
if ! "$PY" -c "import hopattn, sys; sys.exit(not hopattn.__file__.startswith('$REPO/python/'))" \
    2>/dev/null; then
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
    -e "$REPO/python"
fi
# The library of this build, not whichever build-*/ was touched last.
lib="$(find "$BUILD_DIR" -name libhopattn.so -print -quit)"
if [[ -z "$lib" ]]; then
  echo "[test] libhopattn.so not found under $BUILD_DIR" >&2
  exit 1
fi
pytest_status=0
HOPATTN_LIBRARY="$lib" "$PY" -m pytest "$REPO/tests/python" -q -rs -p no:cacheprovider \
  || pytest_status=$?

echo "[test] ctest exit $ctest_status, pytest exit $pytest_status" >&2
((ctest_status == 0 && pytest_status == 0))
