"""Malformed calls raise hopattn.InvalidArgumentError (InvalidTypeError for a wrong type or dtype)
with the Python name of the argument at fault."""

import ctypes
import pickle
import re

import numpy as np
import pytest

import hopattn
from hopattn._ctypes_api import (Backend, DType, ForwardOptions, Fp8Layout, Status, Tensor, Varlen,
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
    with pytest.raises(hopattn.InvalidTypeError, match="q: dtype float64 is not supported") as err:
        hopattn.attention(q, k, v)
    # One exception, catchable as each of the three.
    assert isinstance(err.value, hopattn.InvalidArgumentError)
    assert isinstance(err.value, TypeError) and isinstance(err.value, ValueError)
    assert err.value.status == hopattn.Status.INVALID_ARGUMENT


def test_dtype_mismatch_uses_the_numpy_names():
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(hopattn.InvalidTypeError,
                       match="v: dtype float16, but q is float32; q, k and v must share one dtype"):
        hopattn.attention(q, k, v.astype(np.float16))


def test_v_shape_is_named_in_the_callers_order():
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(hopattn.InvalidArgumentError,
                       match=r"v: shape \(1, 8, 2, 64\), but k has shape \(1, 2, 8, 64\)"):
        hopattn.attention(q, np.zeros((1, 2, 8, 64), np.float32), v, layout="bhsd")


def test_wrong_rank():
    q, k, v = qkv((8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(hopattn.InvalidArgumentError,
                       match=r"q: expected 4 dimensions \(batch, seqlen, heads, head_dim\) for "
                             r"layout='bshd', got shape \(8, 2, 64\); a packed variable-length "
                             "batch goes to hopattn.attention_varlen"):
        hopattn.attention(q, k, v)


def test_wrong_rank_names_the_bhsd_dimensions():
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(hopattn.InvalidArgumentError,
                       match=r"k: expected 4 dimensions \(batch, heads, seqlen, head_dim\) for "
                             r"layout='bhsd', got shape \(1, 8, 2, 64, 1\)$"):
        hopattn.attention(q, k[..., None], v, layout="bhsd")


@pytest.mark.parametrize("argument, dim", [(0, "batch"), (1, "seqlen"), (2, "heads"),
                                           (3, "head_dim")])
def test_empty_dimension_is_named(argument, dim):
    shape = [1, 8, 2, 64]
    shape[argument] = 0
    q, k, v = qkv(tuple(shape), (1, 8, 2, 64))
    with pytest.raises(hopattn.InvalidArgumentError,
                       match=rf"q: {dim} is 0 \(shape {re.escape(str(tuple(shape)))}\); every "
                             "dimension must be > 0"):
        hopattn.attention(q, k, v)


def test_not_an_array():
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(hopattn.InvalidTypeError, match="v: expected a numpy.ndarray like q, got list"):
        hopattn.attention(q, k, [[1.0]])
    with pytest.raises(hopattn.InvalidTypeError,
                       match="q: expected a numpy.ndarray or torch.Tensor, got list"):
        hopattn.attention([[1.0]], k, v)


def test_zero_scale_is_refused():
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(hopattn.InvalidArgumentError, match="scale"):
        hopattn.attention(q, k, v, scale=0.0)


SCALE_RULE = re.escape("scale must be a positive finite float, or None for 1/sqrt(head_dim)")


@pytest.mark.parametrize("scale", [-1, -1.0, 0, 0.0, float("nan"), float("inf"), -float("inf"),
                                   10 ** 400, 1e39, 1e-50, np.float32(-2)])
def test_bad_scale_is_refused_in_python_terms(scale):
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(hopattn.InvalidArgumentError, match=SCALE_RULE) as err:
        hopattn.attention(q, k, v, scale=scale)
    assert not isinstance(err.value, TypeError)
    # Neither the C field nor the C convention of 0 for the default.
    assert "softmax_scale" not in str(err.value) and "or 0" not in str(err.value)


def test_scale_below_float32_says_so():
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(hopattn.InvalidArgumentError, match=r"got 1e-50, which is 0.0 in float32"):
        hopattn.attention(q, k, v, scale=1e-50)


@pytest.mark.parametrize("scale", ["0.1", True, [0.1], 1j])
def test_scale_of_the_wrong_type(scale):
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(hopattn.InvalidTypeError, match=SCALE_RULE):
        hopattn.attention(q, k, v, scale=scale)


@pytest.mark.parametrize("scale", [1, 0.125, np.float32(0.125), np.float64(2.0), np.int64(3)])
def test_scale_accepts_real_numbers(scale):
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64))
    hopattn.attention(q, k, v, scale=scale)


@pytest.mark.parametrize("flag", ["causal", "return_lse"])
@pytest.mark.parametrize("value", ["no", "False", 0, 1, None, 1.0, [True]])
def test_flags_must_be_bools(flag, value):
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(hopattn.InvalidTypeError, match=f"{flag} must be a bool \\(True or False\\), got "):
        hopattn.attention(q, k, v, **{flag: value})


def test_causal_no_is_not_taken_as_true():
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(hopattn.InvalidTypeError, match="causal must be a bool .*got str 'no'"):
        hopattn.attention(q, k, v, causal="no")


def test_numpy_bools_are_bools():
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64))
    out, lse = hopattn.attention(q, k, v, causal=np.bool_(True), return_lse=np.bool_(True))
    assert lse.shape == (1, 2, 8)


def test_unknown_layout():
    q, k, v = qkv((1, 8, 2, 64), (1, 8, 2, 64))
    with pytest.raises(hopattn.InvalidArgumentError,
                       match="layout is 'sbhd'; allowed: 'bshd' .* and 'bhsd'") as err:
        hopattn.attention(q, k, v, layout="sbhd")
    assert not isinstance(err.value, TypeError)
    with pytest.raises(hopattn.InvalidTypeError, match="layout must be the str 'bshd' or 'bhsd'"):
        hopattn.attention(q, k, v, layout=None)


def test_library_errors_are_invalid_argument_errors():
    q, k, v = qkv((1, 8, 6, 64), (1, 8, 4, 64))
    with pytest.raises(hopattn.InvalidArgumentError) as err:
        hopattn.attention(q, k, v)
    assert err.value.message.startswith("q.heads (6) must be a multiple of k.heads (4)")
    assert str(err.value) == "INVALID_ARGUMENT: " + err.value.message


@pytest.mark.parametrize("error", [
    hopattn.InvalidArgumentError("q: batch is 0"),
    hopattn.InvalidTypeError("causal must be a bool"),
    hopattn.HopattnError(hopattn.Status.UNSUPPORTED, "head_dim 100"),
])
def test_errors_pickle(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert (copy.status, copy.message, str(copy)) == (error.status, error.message, str(error))


def test_unknown_backend_name():
    with pytest.raises(hopattn.InvalidArgumentError, match="allowed: cpu, sm90"):
        hopattn.backend_available("tpu")
    with pytest.raises(hopattn.InvalidTypeError, match="name must be a str"):
        hopattn.backend_available(1)


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
            options.workspace, options.workspace_bytes, options.fp8_v_layout) == (
                0, 0.0, Backend.AUTO, None, None, 0, Fp8Layout.ROWS)


def test_default_varlen_mirrors_the_header():
    varlen = default_varlen(library())
    assert isinstance(varlen, Varlen)
    assert varlen.struct_size == ctypes.sizeof(Varlen)
    assert (varlen.batch, varlen.cu_seqlens_q, varlen.cu_seqlens_k, varlen.seqused_k,
            varlen.max_seqlen_q, varlen.max_seqlen_k) == (0, None, None, None, 0, 0)


# The first hopattn.h with struct_size: hopattn_forward_options up to workspace_bytes (it gained
# fp8_v_layout later), hopattn_varlen whole.
@pytest.mark.parametrize("function, struct, first_size, argument", [
    ("hopattn_init_forward_options", ForwardOptions, ForwardOptions.fp8_v_layout.offset, "options"),
    ("hopattn_init_varlen", Varlen, ctypes.sizeof(Varlen), "varlen"),
])
def test_init_refuses_a_struct_size_below_the_first_version(function, struct, first_size,
                                                            argument):
    init = getattr(library(), function)
    value = struct(struct_size=12345)
    for size in (0, ctypes.sizeof(ctypes.c_size_t), first_size - 1):
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
