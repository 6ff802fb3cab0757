"""hopattn.quantize_fp8, hopattn.forward_fp8 and hopattn.attention_fp8 on PyTorch tensors: CPU
tensors on the CPU backend give exactly what NumPy arrays give; CUDA tensors on the Hopper backend
(skipped without one) give the CPU backend's codes and scales bit for bit, and attention within
FP8's accuracy, on the current stream.

torch is optional: these tests skip, saying why, where it is not importable.
"""

import numpy as np
import pytest

import hopattn
from conftest import hopper_skip_reason
from numpy_reference import attention_reference

torch = pytest.importorskip("torch", reason="PyTorch is not installed; its bindings go untested")

requires_hopper = pytest.mark.skipif(hopper_skip_reason(torch) is not None,
                                     reason=str(hopper_skip_reason(torch)))


def outliers(shape, dtype, device="cpu", seed=0):
    """N(0,1) with 0.1% of the entries times 10 (the FlashAttention-3 paper's test)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    x = torch.where(torch.rand(shape, generator=gen, dtype=torch.float64) < 1e-3, x * 10, x)
    return x.to(device, dtype)


def as_float64(t):
    return t.detach().to("cpu", torch.float64).numpy()


def bits(t):
    """A tensor's bytes as a NumPy uint8/uint16 array, for bitwise comparisons."""
    t = t.detach().cpu().contiguous()
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()]
    return t.view(view).numpy()


def rmse(got, want):
    return float(np.sqrt(np.mean((as_float64(got) - want) ** 2)))


@pytest.mark.parametrize("scaling", ["tensor", "head", "block"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16],
                         ids=["float32", "float16", "bfloat16"])
def test_quantize_cpu_tensors_like_numpy(scaling, dtype):
    x = outliers((2, 200, 3, 64), dtype)
    codes, scales = hopattn.quantize_fp8(x, scaling=scaling, block_rows=64, seed=5)
    assert codes.dtype == torch.float8_e4m3fn and codes.shape == x.shape
    assert scales.dtype == torch.float32 and scales.device == x.device
    assert scales.shape == {"tensor": (), "head": (2, 3), "block": (2, 3, 4)}[scaling]
    # NumPy's bfloat16 needs ml_dtypes: bfloat16 values in float32 quantise to the same codes.
    as_numpy = x.float().numpy() if dtype == torch.bfloat16 else x.numpy()
    np_codes, np_scales = hopattn.quantize_fp8(as_numpy, scaling=scaling, block_rows=64, seed=5)
    np.testing.assert_array_equal(bits(codes), np_codes)
    np.testing.assert_array_equal(scales.numpy(), np_scales)


def test_quantize_strided_and_requires_grad_cpu_tensors():
    qkv = torch.randn(1, 40, 3, 2, 32, requires_grad=True)
    q = qkv[:, :, 0]  # a strided view of a packed buffer
    codes, scales = hopattn.quantize_fp8(q, scaling="head")
    assert not codes.requires_grad and not scales.requires_grad
    np_codes, np_scales = hopattn.quantize_fp8(q.detach().contiguous().numpy(), scaling="head")
    np.testing.assert_array_equal(bits(codes), np_codes)
    np.testing.assert_array_equal(scales.numpy(), np_scales)


def test_forward_fp8_cpu_tensors_like_numpy():
    q, k, v = (outliers(s, torch.bfloat16, seed=i)
               for i, s in enumerate(((2, 100, 4, 64), (2, 130, 2, 64), (2, 130, 2, 64))))
    (qc, qs), (kc, ks) = (hopattn.quantize_fp8(x, seed=3) for x in (q, k))
    vc, vs = hopattn.quantize_fp8(v, scaling="head", hadamard=False)
    o, lse = hopattn.forward_fp8(qc, qs, kc, ks, vc, vs, causal=True, return_lse=True)
    assert o.dtype == torch.bfloat16 and o.shape == q.shape and lse.shape == (2, 4, 100)
    # uint8 codes are the same bits.
    o8 = hopattn.forward_fp8(qc.view(torch.uint8), qs, kc.view(torch.uint8), ks,
                             vc.view(torch.uint8), vs, causal=True)
    np.testing.assert_array_equal(bits(o), bits(o8))
    np_o, np_lse = hopattn.forward_fp8(*(x.numpy() if x.dtype == torch.float32 else bits(x)
                                         for x in (qc, qs, kc, ks, vc, vs)),
                                       causal=True, out_dtype="float16", return_lse=True)
    o16 = hopattn.forward_fp8(qc, qs, kc, ks, vc, vs, causal=True, out_dtype=torch.float16)
    np.testing.assert_array_equal(bits(o16), np_o.view(np.int16))
    np.testing.assert_array_equal(lse.numpy(), np_lse)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_attention_fp8_cpu_tensors_accuracy(dtype):
    q, k, v = (outliers((1, 512, 4, 128), dtype, seed=i) for i in range(3))
    ref, _ = attention_reference(as_float64(q), as_float64(k), as_float64(v))
    o = hopattn.attention_fp8(q, k, v)
    assert o.dtype == dtype and o.shape == q.shape and o.device == q.device
    block = rmse(o, ref)
    tensor_plain = rmse(hopattn.attention_fp8(q, k, v, quantization="tensor", hadamard=False), ref)
    assert block < 9.1e-3, block
    assert tensor_plain > 1.3 * block, (tensor_plain, block)


def test_attention_fp8_is_not_differentiable():
    q = torch.randn(1, 16, 2, 64, dtype=torch.bfloat16, requires_grad=True)
    o, lse = hopattn.attention_fp8(q, q, q, return_lse=True)
    assert not o.requires_grad and not lse.requires_grad


def test_errors_name_the_python_argument():
    q = torch.randn(1, 16, 2, 64, dtype=torch.bfloat16)
    codes, scales = hopattn.quantize_fp8(q)
    with pytest.raises(hopattn.InvalidTypeError,
                       match="k: expected a torch.Tensor like q, got numpy.ndarray"):
        hopattn.attention_fp8(q, q.float().numpy(), q)
    with pytest.raises(hopattn.InvalidTypeError,
                       match="k_scales: expected a torch.Tensor like q, got numpy.ndarray"):
        hopattn.forward_fp8(codes, scales, codes, scales.numpy(), codes, scales)
    with pytest.raises(hopattn.InvalidTypeError,
                       match="q: dtype torch.bfloat16 is not e4m3 codes"):
        hopattn.forward_fp8(q, scales, codes, scales, codes, scales)
    with pytest.raises(hopattn.InvalidTypeError,
                       match="v_scales: dtype torch.float64 is not supported; it must be "
                             "torch.float32"):
        hopattn.forward_fp8(codes, scales, codes, scales, codes, scales.double())
    with pytest.raises(hopattn.InvalidArgumentError, match="v: on meta, but q is on cpu"):
        hopattn.forward_fp8(codes, scales, codes, scales, codes.to("meta"), scales)
    with pytest.raises(hopattn.InvalidTypeError, match="x: dtype torch.float64 is not supported"):
        hopattn.quantize_fp8(q.double())
    with pytest.raises(hopattn.InvalidTypeError,
                       match="q: dtype torch.float32 is not supported by attention_fp8"):
        hopattn.attention_fp8(q.float(), q.float(), q.float())


@requires_hopper
@pytest.mark.parametrize("scaling", ["tensor", "head", "block"])
def test_cuda_quantisation_equals_the_cpu_bit_for_bit(scaling):
    x = outliers((2, 300, 4, 128), torch.bfloat16)
    x[0, 5, 1, 3] = float("nan")
    x[1, 200, 2, 7] = float("inf")
    cpu_codes, cpu_scales = hopattn.quantize_fp8(x, scaling=scaling, seed=9)
    codes, scales = hopattn.quantize_fp8(x.cuda(), scaling=scaling, seed=9)
    torch.cuda.synchronize()
    assert codes.device.type == "cuda" and scales.device.type == "cuda"
    np.testing.assert_array_equal(bits(codes), bits(cpu_codes))
    np.testing.assert_array_equal(bits(scales), bits(cpu_scales))


@requires_hopper
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_cuda_attention_fp8_accuracy(head_dim, causal):
    q, k, v = (outliers((2, 1024, 8, head_dim), torch.bfloat16, "cuda", seed=i) for i in range(3))
    o = hopattn.attention_fp8(q, k, v, causal=causal)
    tensor_plain = hopattn.attention_fp8(q, k, v, causal=causal, quantization="tensor",
                                         hadamard=False)
    torch.cuda.synchronize()
    ref, _ = attention_reference(as_float64(q), as_float64(k), as_float64(v), causal)
    # The kernel rounds P to e4m3 as well: a little above the CPU's error. At head_dim 64 the
    # rotation spreads an outlier over half as many channels, so the blocks' amaxes and the
    # quantisation error are larger (measured on the H200: 1.37e-2 / 1.44e-2 full / causal at 64,
    # under 1.2e-2 at 128 and 256; the kernel's own error against the dequantised inputs is the same
    # at every head_dim, tests/gpu/test_sm90_fp8_forward.cpp).
    assert rmse(o, ref) < (2e-2 if head_dim == 64 else 1.2e-2)
    assert rmse(tensor_plain, ref) > 1.2 * rmse(o, ref)
    cpu = hopattn.attention_fp8(q.cpu(), k.cpu(), v.cpu(), causal=causal)
    assert rmse(o, as_float64(cpu)) < 1e-2


@requires_hopper
def test_cuda_runs_on_the_current_stream():
    q, k, v = (outliers((1, 512, 4, 128), torch.float16, "cuda", seed=i) for i in range(3))
    expected = hopattn.attention_fp8(q, k, v)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        got = hopattn.attention_fp8(q, k, v)
    stream.synchronize()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(bits(got), bits(expected))


@requires_hopper
def test_cuda_refuses_block_v_scales_naming_v_scaling():
    x = torch.randn(1, 256, 2, 128, device="cuda", dtype=torch.bfloat16)
    codes, scales = hopattn.quantize_fp8(x)
    with pytest.raises(hopattn.HopattnError, match="v_scaling is HOPATTN_FP8_SCALE_BLOCK") as err:
        hopattn.forward_fp8(codes, scales, codes, scales, codes, scales)
    assert err.value.status == hopattn.Status.UNSUPPORTED


@requires_hopper
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_cuda_attention_fp8_varlen_matches_each_sequence_on_the_cpu(causal):
    # Sequences that start off every 128-row scale block of the packed tensors, one without keys.
    cu = torch.tensor([0, 129, 400, 400, 700, 1033], dtype=torch.int32)
    q, k, v = (outliers((1033, 4, 128), torch.bfloat16, seed=20 + i) for i in range(3))
    o = hopattn.attention_fp8_varlen(q.cuda(), k.cuda(), v.cuda(), cu.cuda(), cu.cuda(), 333, 333,
                                     causal=causal, seed=5)
    # The same packed codes and scales on the CPU backend.
    want = hopattn.attention_fp8_varlen(q, k, v, cu, cu, 333, 333, causal=causal, seed=5)
    torch.cuda.synchronize()
    assert o.device.type == "cuda" and o.shape == q.shape and bool(torch.isfinite(o).all())
    # The kernel's e4m3 P against the CPU's float32 P: tests/gpu/test_sm90_fp8_forward.cpp's bound.
    assert rmse(o, as_float64(want)) < 0.06 * float(np.sqrt(np.mean(as_float64(want) ** 2)))
