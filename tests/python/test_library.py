"""Loading the library and the informational entry points."""

import ctypes
import re

import numpy as np
import pytest

import hopattn
from hopattn import _lib
from hopattn._ctypes_api import Backend, DType, Tensor, default_forward_options, default_varlen


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


def test_workspace_size_query():
    # Through the raw ABI (the bindings pass no workspace: the library allocates what it needs).
    lib = _lib.library()
    x = np.zeros((1, 8, 2, 64), np.float32)
    t = Tensor(x.ctypes.data, DType.FLOAT32, 1, 8, 2, 64, 8 * 2 * 64, 2 * 64, 64)
    options = default_forward_options(lib)
    options.backend = Backend.CPU
    size = ctypes.c_size_t(12345)
    assert lib.hopattn_forward_workspace_size(ctypes.byref(t), ctypes.byref(t), ctypes.byref(t),
                                              None, ctypes.byref(options),
                                              ctypes.byref(size)) == hopattn.Status.OK
    assert size.value != 12345
    cu = np.array([0, 3, 8], np.int32)
    varlen = default_varlen(lib)
    varlen.batch, varlen.cu_seqlens_q, varlen.cu_seqlens_k = 2, cu.ctypes.data, cu.ctypes.data
    varlen.max_seqlen_q = varlen.max_seqlen_k = 5
    size.value = 12345
    assert lib.hopattn_forward_workspace_size(ctypes.byref(t), ctypes.byref(t), ctypes.byref(t),
                                              ctypes.byref(varlen), ctypes.byref(options),
                                              ctypes.byref(size)) == hopattn.Status.OK
    assert size.value != 12345


def test_workspace_size_query_validates_like_the_call():
    lib = _lib.library()
    x = np.zeros((1, 8, 2, 64), np.float32)
    t = Tensor(x.ctypes.data, DType.FLOAT32, 1, 8, 2, 64, 8 * 2 * 64, 2 * 64, 64)
    bad = Tensor(x.ctypes.data, DType.FLOAT32, 1, 8, 2, 32, 8 * 2 * 64, 2 * 64, 64)
    size = ctypes.c_size_t()
    status = lib.hopattn_forward_workspace_size(ctypes.byref(t), ctypes.byref(bad), ctypes.byref(t),
                                                None, ctypes.byref(default_forward_options(lib)),
                                                ctypes.byref(size))
    assert status == hopattn.Status.INVALID_ARGUMENT
    assert "head_dim" in lib.hopattn_last_error().decode()
