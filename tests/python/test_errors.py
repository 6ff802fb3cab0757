"""Malformed calls raise with the name of the argument at fault."""

import ctypes

import numpy as np
import pytest

import hopattn
from hopattn._ctypes_api import (Backend, DType, ForwardOptions, Status, Tensor, Varlen,
                                 default_forward_options, default_varlen)
from hopattn._lib import library


def qkv(q_shape, kv_shape, dtype=np.float32):
    return (np.zeros(q_shape, dtype), np.zeros(kv_shape, dtype), np.zeros(kv_shape, dtype))


def test_head_dim_mismatch_names_head_dim():
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 128))
    with pytest.raises(hopattn.InvalidArgumentError, match="head_dim") as err:
        hopattn.attention(q, k, v)
    assert err.value.status == hopattn.Status.INVALID_ARGUMENT
    assert isinstance(err.value, ValueError) and isinstance(err.value, hopattn.HopattnError)


def test_heads_not_divisible_names_heads():
    q, k, v = qkv((1, 8, 6, 64), (1, 8, 4, 64))
    with pytest.raises(hopattn.InvalidArgumentError, match="heads"):
        hopattn.attention(q, k, v)


def test_batch_mismatch_names_batch():
    q, k, v = qkv((2, 8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(hopattn.InvalidArgumentError, match="batch"):
        hopattn.attention(q, k, v)


def test_dtype_mismatch_names_dtype():
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(hopattn.InvalidArgumentError, match="dtype"):
        hopattn.attention(q, k.astype(np.float16), v)


def test_unsupported_numpy_dtype():
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64), np.float64)
    with pytest.raises(TypeError, match="q: dtype float64"):
        hopattn.attention(q, k, v)


def test_wrong_rank():
    q, k, v = qkv((8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(ValueError, match="q: expected 4 dimensions"):
        hopattn.attention(q, k, v)


def test_not_an_array():
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(TypeError, match="v: expected a numpy.ndarray"):
        hopattn.attention(q, k, [[1.0]])


def test_zero_scale_is_refused():
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(ValueError, match="scale"):
        hopattn.attention(q, k, v, scale=0.0)


def test_negative_scale_is_refused_by_the_library():
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(hopattn.InvalidArgumentError, match="softmax_scale"):
        hopattn.attention(q, k, v, scale=-1.0)


def test_unknown_backend_name():
    with pytest.raises(ValueError, match="allowed: cpu, sm90"):
        hopattn.backend_available("tpu")


@pytest.mark.skipif(hopattn.backend_available("sm90"), reason="a Hopper GPU is visible here")
def test_sm90_unavailable_is_reported():
    # Through the raw ABI, since attention() picks SM90 only for CUDA tensors.
    x = np.zeros((1, 8, 2, 64), np.float16)
    t = Tensor(x.ctypes.data, DType.FLOAT16, 1, 8, 2, 64, 8 * 2 * 64, 2 * 64, 64)
    o = Tensor(np.empty_like(x).ctypes.data, DType.FLOAT16, 1, 8, 2, 64, 8 * 2 * 64, 2 * 64, 64)
    options = default_forward_options(library())
    options.backend = Backend.SM90
    status = library().hopattn_forward(ctypes.byref(t), ctypes.byref(t), ctypes.byref(t),
                                       ctypes.byref(o), None, ctypes.byref(options))
    assert status == Status.BACKEND_UNAVAILABLE
    assert library().hopattn_last_error().decode()


def test_default_options_mirror_the_header():
    options = default_forward_options(library())
    assert isinstance(options, ForwardOptions)
    assert options.struct_size == ctypes.sizeof(ForwardOptions)
    assert (options.causal, options.softmax_scale, options.backend, options.cuda_stream,
            options.workspace, options.workspace_bytes) == (0, 0.0, Backend.AUTO, None, None, 0)


def test_default_varlen_mirrors_the_header():
    varlen = default_varlen(library())
    assert isinstance(varlen, Varlen)
    assert varlen.struct_size == ctypes.sizeof(Varlen)
    assert (varlen.batch, varlen.cu_seqlens_q, varlen.cu_seqlens_k, varlen.seqused_k,
            varlen.max_seqlen_q, varlen.max_seqlen_k) == (0, None, None, None, 0, 0)


# The first hopattn.h with struct_size already had every field the mirrors have, so any size
# below the mirror's is below the first version's.
@pytest.mark.parametrize("function, struct, argument", [
    ("hopattn_init_forward_options", ForwardOptions, "options"),
    ("hopattn_init_varlen", Varlen, "varlen"),
])
def test_init_refuses_a_struct_size_below_the_first_version(function, struct, argument):
    init = getattr(library(), function)
    value = struct(struct_size=12345)
    for size in (0, ctypes.sizeof(ctypes.c_size_t), ctypes.sizeof(struct) - 1):
        assert init(ctypes.byref(value), size) == Status.INVALID_ARGUMENT
        assert f"struct_size is {size};" in library().hopattn_last_error().decode()
        assert value.struct_size == 12345, "a refused init writes nothing"
    assert init(None, ctypes.sizeof(struct)) == Status.INVALID_ARGUMENT
    assert library().hopattn_last_error().decode().startswith(f"{argument} is NULL")


@pytest.mark.parametrize("function, struct", [
    ("hopattn_init_forward_options", ForwardOptions),
    ("hopattn_init_varlen", Varlen),
])
def test_init_writes_nothing_past_struct_size(function, struct):
    size = ctypes.sizeof(struct)
    memory = (ctypes.c_ubyte * (size + 64))(*([0xA5] * (size + 64)))
    status = getattr(library(), function)(ctypes.cast(memory, ctypes.POINTER(struct)), size)
    assert status == Status.OK
    assert bytes(memory[size:]) == b"\xa5" * 64
    assert struct.from_buffer(memory).struct_size == size
