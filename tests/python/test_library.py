"""Loading the library and the informational entry points."""

import re

import pytest

import hopattn
from hopattn import _lib


def test_version_is_semver():
    assert re.fullmatch(r"\d+\.\d+\.\d+", hopattn.version())


def test_build_info_names_each_backend():
    info = hopattn.build_info().lower()
    assert "cpu" in info and "sm90" in info


def test_cpu_backend_available():
    assert hopattn.backend_available("cpu")
    assert hopattn.backend_available("CPU")


def test_missing_library_path_is_named(monkeypatch, tmp_path):
    missing = tmp_path / "nope.so"
    monkeypatch.setenv("HOPATTN_LIBRARY", str(missing))
    with pytest.raises(OSError, match="HOPATTN_LIBRARY=.*nope.so"):
        _lib.find_library()
