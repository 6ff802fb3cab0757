"""Host inputs the ABI cannot read as they are (issue 10, defect 4): non-native byte order,
element-misaligned buffers and negative strides are copied on the host, and the library only
ever sees native, aligned, non-negative-stride memory; a scale that is not a normal float32 is
refused. Torch CPU cases skip when torch is not installed."""

import re
import sys

import numpy as np
import pytest

import hopattn
from conftest import ATOL, cu_seqlens, dtype_params, random_qkv
from hopattn._lib import library
from numpy_reference import attention_reference, attention_varlen_reference

NATIVE = "<" if sys.byteorder == "little" else ">"
FOREIGN = ">" if sys.byteorder == "little" else "<"


@pytest.fixture
def seen_by_library(monkeypatch):
    """The hopattn_tensor structs of every hopattn_forward(_varlen) call, as the library got them
    (q, k, v, o), plus the varlen metadata addresses."""
    lib = library()
    seen = []
    for name in ("hopattn_forward", "hopattn_forward_varlen"):
        real = getattr(lib, name)

        def spy(*args, _real=real):
            tensors = [a._obj for a in args[:4]]
            seen.append({"tensors": [(t.data, t.dtype, t.batch_stride, t.seq_stride,
                                      t.head_stride) for t in tensors],
                         "varlen": args[5]._obj if len(args) == 7 else None})
            return _real(*args)

        monkeypatch.setattr(lib, name, spy)
    return seen


ELEMENT_BYTES = {0: 4, 1: 2, 2: 2}  # hopattn_dtype -> bytes


def assert_readable(call):
    """Every tensor the library got is element-aligned with non-negative strides."""
    for data, dtype, *strides in call["tensors"]:
        assert data % ELEMENT_BYTES[dtype] == 0, f"address {data:#x} is misaligned"
        assert all(s >= 0 for s in strides), strides


def check(out, lse, q, k, v, causal=False, scale=None):
    native = [x.astype(x.dtype.newbyteorder("=")) for x in (q, k, v)]
    ref_o, ref_lse = attention_reference(*native, causal, scale)
    assert out.dtype.isnative and out.dtype == native[0].dtype and out.shape == q.shape
    np.testing.assert_allclose(out.astype(np.float64), ref_o, rtol=0,
                               atol=ATOL[native[0].dtype.name])
    if lse is not None:
        finite = np.isfinite(ref_lse)
        np.testing.assert_allclose(lse[finite], ref_lse[finite], rtol=1e-5, atol=1e-4)


def misaligned(array, offset=1):
    """A copy of array in a buffer that starts `offset` bytes past an aligned address."""
    raw = np.zeros(array.nbytes + 16, dtype=np.uint8)
    start = (-raw.ctypes.data) % 16 + offset
    view = np.frombuffer(raw.data, dtype=array.dtype, count=array.size,
                         offset=start).reshape(array.shape)
    view[...] = array
    return view


# --- byte order ---

@pytest.mark.parametrize("dtype", ["f4", "f2"])
@pytest.mark.parametrize("which", ["q", "k", "v", "all"])
def test_foreign_byte_order_is_copied_to_native(rng, seen_by_library, dtype, which):
    q, k, v = random_qkv(rng, 2, 21, 33, 4, 2, 64, np.dtype(NATIVE + dtype))
    args = {"q": q, "k": k, "v": v}
    for name in (("q", "k", "v") if which == "all" else (which,)):
        args[name] = args[name].astype(FOREIGN + dtype)
    before = {n: a.copy() for n, a in args.items()}
    out, lse = hopattn.attention(**args, causal=True, return_lse=True)
    check(out, lse, q, k, v, causal=True)
    assert out.dtype.byteorder in ("=", "|", NATIVE)
    assert_readable(seen_by_library[-1])
    for n, a in args.items():  # the caller's arrays are read, not converted in place
        assert a.dtype == before[n].dtype
        np.testing.assert_array_equal(a, before[n])


def test_foreign_byte_order_bhsd(rng):
    q, k, v = (x.astype(FOREIGN + "f4").swapaxes(1, 2)
               for x in random_qkv(rng, 1, 17, 17, 2, 2, 32, np.float32))
    out = hopattn.attention(q, k, v, layout="bhsd")
    assert out.dtype.isnative
    ref = attention_reference(*(x.swapaxes(1, 2).astype(np.float32) for x in (q, k, v)))[0]
    np.testing.assert_allclose(out.swapaxes(1, 2), ref, rtol=0, atol=ATOL["float32"])


# --- alignment ---

@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_element_misaligned_buffers_are_copied(rng, seen_by_library, dtype, which):
    q, k, v = random_qkv(rng, 2, 19, 40, 4, 2, 64, dtype)
    args = {"q": q, "k": k, "v": v}
    args[which] = misaligned(args[which])
    assert not args[which].flags.aligned
    out, lse = hopattn.attention(**args, return_lse=True)
    check(out, lse, q, k, v)
    assert_readable(seen_by_library[-1])


def test_misaligned_frombuffer_at_offset_1(seen_by_library):
    # The case: np.frombuffer(..., offset=1) of float32.
    values = np.linspace(-1, 1, 1 * 8 * 2 * 16, dtype=np.float32)
    q = np.frombuffer(b"\0" + values.tobytes(), dtype=np.float32, offset=1).reshape(1, 8, 2, 16)
    assert not q.flags.aligned
    out = hopattn.attention(q, q, q)
    check(out, None, q.copy(), q.copy(), q.copy())
    assert_readable(seen_by_library[-1])


# --- negative strides ---

NEGATIVE_VIEWS = {
    "seqlen": lambda x: x[:, ::-1],
    "heads": lambda x: x[:, :, ::-1],
    "head_dim": lambda x: x[..., ::-1],
    "batch": lambda x: x[::-1],
    "all": lambda x: x[::-1, ::-1, ::-1, ::-1],
}


@pytest.mark.parametrize("view", NEGATIVE_VIEWS)
def test_negative_stride_views_are_copied(rng, seen_by_library, view):
    q, k, v = (NEGATIVE_VIEWS[view](x) for x in random_qkv(rng, 2, 23, 31, 4, 2, 64, np.float32))
    assert any(s < 0 for s in q.strides)
    out, lse = hopattn.attention(q, k, v, causal=True, return_lse=True)
    check(out, lse, q, k, v, causal=True)
    assert_readable(seen_by_library[-1])


def test_negative_strides_bhsd(rng):
    q, k, v = (x[:, ::-1].swapaxes(1, 2) for x in random_qkv(rng, 1, 12, 12, 2, 2, 32, np.float16))
    out = hopattn.attention(q, k, v, layout="bhsd")
    ref = attention_reference(*(x.swapaxes(1, 2) for x in (q, k, v)))[0]
    np.testing.assert_allclose(out.swapaxes(1, 2).astype(np.float64), ref, rtol=0,
                               atol=ATOL["float16"])


# --- varlen: the tensors and the metadata ---

def test_varlen_odd_layouts_and_metadata_are_copied(rng, seen_by_library):
    lengths = [(5, 9), (0, 3), (11, 11)]
    total_q, total_k = sum(l[0] for l in lengths), sum(l[1] for l in lengths)
    q = rng.standard_normal((total_q, 2, 32)).astype(np.float32)
    k, v = (rng.standard_normal((total_k, 1, 32)).astype(np.float32) for _ in range(2))
    cu_q, cu_k = cu_seqlens([l[0] for l in lengths]), cu_seqlens([l[1] for l in lengths])
    out, lse = hopattn.attention_varlen(
        misaligned(q, 2), k.astype(FOREIGN + "f4"), v[::-1].copy()[::-1],
        cu_q.astype(FOREIGN + "i4"), misaligned(cu_k, 1), 11, 11, return_lse=True)
    ref_o, _ = attention_varlen_reference(q, k, v, cu_q, cu_k, False)
    np.testing.assert_allclose(out, ref_o, rtol=0, atol=ATOL["float32"])
    call = seen_by_library[-1]
    assert_readable(call)
    assert call["varlen"].cu_seqlens_q % 4 == 0 and call["varlen"].cu_seqlens_k % 4 == 0


def test_varlen_negative_strides_are_copied(rng):
    q = rng.standard_normal((9, 2, 32)).astype(np.float32)
    k = rng.standard_normal((9, 2, 32)).astype(np.float32)
    cu = cu_seqlens([4, 5])
    out = hopattn.attention_varlen(q[::-1], k[::-1], k[:, ::-1], cu, cu, 5, 5)
    ref_o, _ = attention_varlen_reference(q[::-1], k[::-1], k[:, ::-1], cu, cu, False)
    np.testing.assert_allclose(out, ref_o, rtol=0, atol=ATOL["float32"])


def test_varlen_metadata_of_another_integer_type_is_still_refused():
    q = np.zeros((4, 1, 32), np.float32)
    with pytest.raises(hopattn.InvalidTypeError, match="cu_seqlens_q: dtype >i8"):
        hopattn.attention_varlen(q, q, q, np.array([0, 4], ">i8"), cu_seqlens([4]), 4, 4)


def test_unsupported_dtype_is_refused_before_any_copy():
    q = np.zeros((1, 4, 1, 32), ">f8")
    with pytest.raises(hopattn.InvalidTypeError, match="q: dtype >f8 is not supported"):
        hopattn.attention(q, q, q)


# --- scale: a positive normal float32 ---

FLOAT32_MIN_NORMAL = float(np.finfo(np.float32).tiny)


@pytest.mark.parametrize("scale", [1e-40, np.float32(1e-40), FLOAT32_MIN_NORMAL / 2, 1e-45])
def test_subnormal_scale_is_refused(scale):
    q = np.ones((1, 4, 1, 32), np.float32)
    with pytest.raises(hopattn.InvalidArgumentError,
                       match=r"scale must be .* normal number, 1.1754944e-38 to 3.4028235e\+38; "
                             r"got .*, which is the subnormal .* in float32") as err:
        hopattn.attention(q, q, q, scale=scale)
    assert "softmax_scale" not in str(err.value)


@pytest.mark.parametrize("scale", [1e-46, 1e-50])
def test_scale_that_is_zero_in_float32_is_refused(scale):
    # Before the check, 1e-46 became 0 in float32: the ABI's "default scale".
    q = np.ones((1, 4, 1, 32), np.float32)
    with pytest.raises(hopattn.InvalidArgumentError,
                       match=re.escape(f"got {scale!r}, which is 0.0 in float32")):
        hopattn.attention(q, q, q, scale=scale)


def test_scale_past_float32_is_refused():
    q = np.ones((1, 4, 1, 32), np.float32)
    with pytest.raises(hopattn.InvalidArgumentError, match="which is inf in float32"):
        hopattn.attention(q, q, q, scale=3.5e38)


@pytest.mark.parametrize("scale", [FLOAT32_MIN_NORMAL, np.float32(FLOAT32_MIN_NORMAL)])
def test_smallest_normal_scale_is_accepted(rng, scale):
    q, k, v = random_qkv(rng, 1, 6, 9, 2, 2, 32, np.float32)
    out = hopattn.attention(q, k, v, scale=scale)
    check(out, None, q, k, v, scale=float(scale))


def test_varlen_scale_is_checked_the_same_way():
    q = np.ones((4, 1, 32), np.float32)
    with pytest.raises(hopattn.InvalidArgumentError, match="subnormal"):
        hopattn.attention_varlen(q, q, q, cu_seqlens([4]), cu_seqlens([4]), 4, 4, scale=1e-40)


# --- torch CPU tensors ---

def test_torch_cpu_misaligned_tensor_is_copied(seen_by_library):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed; its bindings go untested")
    values = np.linspace(-1, 1, 1 * 8 * 2 * 16, dtype=np.float32)
    buffer = bytearray(b"\0" + values.tobytes())
    q = torch.frombuffer(buffer, dtype=torch.float32, offset=1).reshape(1, 8, 2, 16)
    assert q.data_ptr() % 4 != 0
    out = hopattn.attention(q, q, q)
    assert_readable(seen_by_library[-1])
    ref = attention_reference(values.reshape(1, 8, 2, 16), values.reshape(1, 8, 2, 16),
                              values.reshape(1, 8, 2, 16))[0]
    np.testing.assert_allclose(out.numpy(), ref, rtol=0, atol=ATOL["float32"])


def test_torch_cpu_flipped_tensor_works():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed; its bindings go untested")
    q = torch.randn(1, 10, 2, 32, generator=torch.Generator().manual_seed(3))
    flipped = q.flip(1)  # torch has no negative strides: flip copies; the result must match
    out = hopattn.attention(flipped, flipped, flipped)
    ref = attention_reference(*(flipped.numpy(),) * 3)[0]
    np.testing.assert_allclose(out.numpy(), ref, rtol=0, atol=ATOL["float32"])


def test_scale_check_is_the_same_for_torch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed; its bindings go untested")
    q = torch.ones(1, 4, 1, 32)
    with pytest.raises(hopattn.InvalidArgumentError, match="subnormal"):
        hopattn.attention(q, q, q, scale=1e-40)

