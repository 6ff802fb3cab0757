"""Finds and loads libhopattn.so once per process."""

import ctypes
import functools
import os
from pathlib import Path

from . import _ctypes_api

_LIB_NAME = "libhopattn.so"
_PACKAGE_DIR = Path(__file__).resolve().parent
# python/hopattn/ -> the repository root, for an editable install next to a build folder.
_REPO_ROOT = _PACKAGE_DIR.parent.parent


def _in_repository() -> bool:
    """Whether the package runs from python/ of a source checkout (an editable install)."""
    return (_REPO_ROOT / "include" / "hopattn" / "hopattn.h").is_file()


def _repo_build_candidates():
    if not _in_repository():
        return []
    build_dirs = [_REPO_ROOT / "build", *sorted(_REPO_ROOT.glob("build-*"))]
    found = [p for d in build_dirs if d.is_dir() for p in d.rglob(_LIB_NAME)]
    # Of several builds, the one built last is the one the developer is working on.
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def find_library() -> Path:
    """The library to load: $HOPATTN_LIBRARY, then the wheel's hopattn/lib/, then (in a source
    checkout) the repository's build dirs."""
    env = os.environ.get("HOPATTN_LIBRARY")
    if env:
        path = Path(env)
        if not path.is_file():
            raise OSError(f"HOPATTN_LIBRARY={env} does not name a file")
        return path
    bundled = sorted(_PACKAGE_DIR.joinpath("lib").glob(_LIB_NAME + "*"))
    if bundled:
        return bundled[0]
    built = _repo_build_candidates()
    if built:
        return built[0]
    if _in_repository():
        raise OSError(
            f"{_LIB_NAME} not found. Looked in $HOPATTN_LIBRARY (unset), {_PACKAGE_DIR / 'lib'}, "
            f"and {_REPO_ROOT}/build*/. Build the library (bash scripts/test.sh, or "
            "cmake -S . -B build -G Ninja && cmake --build build), install the wheel "
            "(pip install . in the repository), or set HOPATTN_LIBRARY to its path.")
    raise OSError(
        f"{_LIB_NAME} not found: this hopattn install has none in {_PACKAGE_DIR / 'lib'} and "
        "$HOPATTN_LIBRARY is unset. Install the wheel built from the repository root "
        "(pip install .), which bundles the library, or set HOPATTN_LIBRARY to its path.")


@functools.lru_cache(maxsize=None)
def library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(find_library()))
    _ctypes_api.declare(lib)
    return lib
