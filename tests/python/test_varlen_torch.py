"""hopattn.attention_varlen on PyTorch tensors: CPU tensors on the CPU backend, CUDA on SM90.

torch is optional: these tests skip, saying why, where it is not importable.
"""

import numpy as np
import pytest

import hopattn
from conftest import ATOL, cu_seqlens, hopper_skip_reason
from numpy_reference import attention_varlen_reference

torch = pytest.importorskip("torch", reason="PyTorch is not installed; its bindings go untested")

TORCH_DTYPES = [pytest.param(torch.float32, id="float32"), pytest.param(torch.float16, id="float16"),
                pytest.param(torch.bfloat16, id="bfloat16")]
# (seqlen_q, seqlen_k) per sequence, zero lengths and q != k included.
LENGTHS = [(30, 45), (0, 7), (64, 17), (1, 1), (9, 0), (200, 130)]

requires_hopper = pytest.mark.skipif(hopper_skip_reason(torch) is not None,
                                     reason=str(hopper_skip_reason(torch)))


def as_float64(t):
    return t.detach().to("cpu", torch.float64).numpy()


def packed(lengths, heads_q, heads_kv, head_dim, dtype, device):
    gen = torch.Generator().manual_seed(7)
    total_q, total_k = (sum(l[i] for l in lengths) for i in (0, 1))
    q, k, v = (torch.randn(s, generator=gen).to(device, dtype) for s in (
        (total_q, heads_q, head_dim), (total_k, heads_kv, head_dim), (total_k, heads_kv, head_dim)))
    cu_q, cu_k = (torch.from_numpy(cu_seqlens([l[i] for l in lengths])).to(device) for i in (0, 1))
    return q, k, v, cu_q, cu_k, max(l[0] for l in lengths), max(l[1] for l in lengths)


def check(out, lse, q, k, v, cu_q, cu_k, causal, seqused_k=None):
    ref_o, ref_lse = attention_varlen_reference(
        as_float64(q), as_float64(k), as_float64(v), cu_q.cpu().numpy(), cu_k.cpu().numpy(),
        causal, seqused_k=None if seqused_k is None else seqused_k.cpu().numpy())
    assert out.dtype == q.dtype and out.device == q.device and out.shape == q.shape
    assert lse.dtype == torch.float32 and lse.device == q.device
    assert lse.shape == (q.shape[1], q.shape[0])
    atol = ATOL[str(q.dtype).removeprefix("torch.")]
    np.testing.assert_allclose(as_float64(out), ref_o, rtol=0, atol=atol)
    lse = as_float64(lse)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(ref_lse))
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(lse[finite], ref_lse[finite], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_cpu_tensors(dtype, causal):
    q, k, v, cu_q, cu_k, max_q, max_k = packed(LENGTHS, 4, 2, 64, dtype, "cpu")
    out, lse = hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal,
                                        return_lse=True)
    check(out, lse, q, k, v, cu_q, cu_k, causal)


def test_cpu_seqused_k():
    q, k, v, cu_q, cu_k, max_q, max_k = packed(LENGTHS, 2, 2, 64, torch.float32, "cpu")
    used = torch.tensor([40, 0, 17, 1, 0, 100], dtype=torch.int32)
    out, lse = hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True,
                                        return_lse=True, seqused_k=used)
    check(out, lse, q, k, v, cu_q, cu_k, True, seqused_k=used)


def test_cpu_int64_cu_seqlens_is_refused():
    q, k, v, cu_q, cu_k, max_q, max_k = packed(LENGTHS, 2, 2, 64, torch.float32, "cpu")
    with pytest.raises(hopattn.InvalidTypeError, match="cu_seqlens_q: dtype torch.int64 .*torch.int32"):
        hopattn.attention_varlen(q, k, v, cu_q.long(), cu_k, max_q, max_k)


def test_cu_seqlens_must_be_a_tensor_like_q():
    q, k, v, cu_q, cu_k, max_q, max_k = packed(LENGTHS, 2, 2, 64, torch.float32, "cpu")
    with pytest.raises(hopattn.InvalidTypeError, match="cu_seqlens_k: expected a torch.Tensor like q"):
        hopattn.attention_varlen(q, k, v, cu_q, cu_k.numpy(), max_q, max_k)
    with pytest.raises(hopattn.InvalidTypeError, match="cu_seqlens_q: expected a numpy.ndarray like q"):
        hopattn.attention_varlen(q.numpy(), k.numpy(), v.numpy(), cu_q, cu_k.numpy(), max_q,
                                 max_k)


def test_cu_seqlens_on_another_device_is_refused():
    # The meta device stands in for a GPU: the check compares devices, not memory.
    q, k, v, cu_q, cu_k, max_q, max_k = packed(LENGTHS, 2, 2, 64, torch.float32, "cpu")
    with pytest.raises(hopattn.InvalidArgumentError, match="cu_seqlens_k: on meta, but q is on cpu"):
        hopattn.attention_varlen(q, k, v, cu_q, cu_k.to("meta"), max_q, max_k)


@requires_hopper
@pytest.mark.parametrize("dtype", TORCH_DTYPES[1:])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("heads", [(8, 8), (8, 2)], ids=["mha", "gqa"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_cuda_tensors(dtype, causal, heads, head_dim):
    q, k, v, cu_q, cu_k, max_q, max_k = packed(LENGTHS, *heads, head_dim, dtype, "cuda")
    out, lse = hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal,
                                        return_lse=True)
    torch.cuda.synchronize()
    check(out, lse, q, k, v, cu_q, cu_k, causal)


@requires_hopper
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_cuda_scores_of_1e8_in_one_sequence(causal):
    # The last sequence's scores reach ~1e8, beyond the fused exponent's range: the kernel computes
    # its rows again from the packed tensors (exact_rows.cuh), the other sequences' rows stay as they are.
    q, k, v, cu_q, cu_k, max_q, max_k = packed(LENGTHS, 4, 2, 128, torch.bfloat16, "cuda")
    q[int(cu_q[-2]):] *= 3e3
    k[int(cu_k[-2]):] *= 3e3
    out, lse = hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal, return_lse=True)
    torch.cuda.synchronize()
    last = lse[:, int(cu_q[-2]):]
    assert float(last[last.isfinite()].abs().max()) > 1e6  # the scores are that large
    check(out, lse, q, k, v, cu_q, cu_k, causal)


@requires_hopper
def test_cuda_seqused_k():
    q, k, v, cu_q, cu_k, max_q, max_k = packed(LENGTHS, 4, 2, 128, torch.bfloat16, "cuda")
    used = torch.tensor([40, 0, 17, 1, 0, 100], dtype=torch.int32, device="cuda")
    out, lse = hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True,
                                        return_lse=True, seqused_k=used)
    torch.cuda.synchronize()
    check(out, lse, q, k, v, cu_q, cu_k, True, seqused_k=used)


@requires_hopper
def test_cuda_runs_on_the_current_stream():
    q, k, v, cu_q, cu_k, max_q, max_k = packed(LENGTHS, 4, 4, 128, torch.float16, "cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out, lse = hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, return_lse=True)
    stream.synchronize()
    check(out, lse, q, k, v, cu_q, cu_k, False)


@requires_hopper
def test_cuda_cu_seqlens_on_the_host_is_refused():
    q, k, v, cu_q, cu_k, max_q, max_k = packed(LENGTHS, 2, 2, 128, torch.float16, "cuda")
    with pytest.raises(hopattn.InvalidArgumentError, match="cu_seqlens_q: on cpu, but q is on cuda"):
        hopattn.attention_varlen(q, k, v, cu_q.cpu(), cu_k, max_q, max_k)


@requires_hopper
def test_cuda_int64_cu_seqlens_is_refused():
    q, k, v, cu_q, cu_k, max_q, max_k = packed(LENGTHS, 2, 2, 128, torch.float16, "cuda")
    with pytest.raises(hopattn.InvalidTypeError, match="cu_seqlens_k: dtype torch.int64"):
        hopattn.attention_varlen(q, k, v, cu_q, cu_k.long(), max_q, max_k)
