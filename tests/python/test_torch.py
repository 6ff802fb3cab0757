"""hopattn.attention on PyTorch tensors: CPU tensors on the CPU backend, CUDA on SM90.

torch is optional: these tests skip, saying why, where it is not importable.
"""

import numpy as np
import pytest

import hopattn
from conftest import ATOL, hopper_skip_reason
from numpy_reference import attention_reference

torch = pytest.importorskip("torch", reason="PyTorch is not installed; its bindings go untested")

TORCH_DTYPES = [pytest.param(torch.float32, id="float32"), pytest.param(torch.float16, id="float16"),
                pytest.param(torch.bfloat16, id="bfloat16")]


def as_float64(t):
    return t.detach().to("cpu", torch.float64).numpy()


def check(out, lse, q, k, v, causal):
    ref_o, ref_lse = attention_reference(as_float64(q), as_float64(k), as_float64(v), causal)
    assert out.dtype == q.dtype and out.device == q.device and out.shape == q.shape
    atol = ATOL[str(q.dtype).removeprefix("torch.")]
    np.testing.assert_allclose(as_float64(out), ref_o, rtol=0, atol=atol)
    finite = np.isfinite(ref_lse)
    np.testing.assert_allclose(as_float64(lse)[finite], ref_lse[finite], rtol=1e-5, atol=1e-4)


def random_qkv(shape_q, shape_kv, dtype, device):
    gen = torch.Generator().manual_seed(7)
    return tuple(torch.randn(s, generator=gen).to(device, dtype) for s in (shape_q, shape_kv, shape_kv))


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_cpu_tensors(dtype, causal):
    q, k, v = random_qkv((2, 30, 4, 64), (2, 45, 2, 64), dtype, "cpu")
    out, lse = hopattn.attention(q, k, v, causal=causal, return_lse=True)
    assert lse.dtype == torch.float32 and lse.shape == (2, 4, 30)
    check(out, lse, q, k, v, causal)


def test_cpu_packed_qkv_view():
    qkv = torch.randn(1, 24, 3, 2, 64)
    q, k, v = qkv.unbind(2)
    out, lse = hopattn.attention(q, k, v, causal=True, return_lse=True)
    check(out, lse, q, k, v, causal=True)


def test_numpy_with_torch_is_refused():
    q, k, v = random_qkv((1, 8, 2, 64), (1, 8, 2, 64), torch.float32, "cpu")
    with pytest.raises(hopattn.InvalidTypeError,
                       match="^INVALID_ARGUMENT: k: expected a torch.Tensor like q, got numpy.ndarray$"):
        hopattn.attention(q, k.numpy(), v)
    with pytest.raises(hopattn.InvalidTypeError,
                       match="^INVALID_ARGUMENT: k: expected a numpy.ndarray like q, got torch.Tensor$"):
        hopattn.attention(q.numpy(), k, v.numpy())


def test_device_mismatch_is_refused():
    q, k, v = random_qkv((1, 8, 2, 64), (1, 8, 2, 64), torch.float32, "cpu")
    with pytest.raises(hopattn.InvalidArgumentError, match="v: on meta, but q is on cpu"):
        hopattn.attention(q, k, v.to("meta"))


def test_unsupported_dtype_is_a_type_error():
    q, k, v = random_qkv((1, 8, 2, 64), (1, 8, 2, 64), torch.float64, "cpu")
    with pytest.raises(hopattn.InvalidTypeError, match="q: dtype torch.float64 is not supported"):
        hopattn.attention(q, k, v)
    q, k, v = random_qkv((1, 8, 2, 64), (1, 8, 2, 64), torch.float32, "cpu")
    with pytest.raises(hopattn.InvalidTypeError,
                       match="k: dtype torch.float16, but q is torch.float32"):
        hopattn.attention(q, k.half(), v)


def test_empty_batch_says_what_numpy_says():
    # An empty tensor has no data pointer: the message must still be about the shape.
    q, k, v = random_qkv((0, 8, 2, 64), (0, 8, 2, 64), torch.float32, "cpu")
    messages = []
    for args in ((q, k, v), (q.numpy(), k.numpy(), v.numpy())):
        with pytest.raises(hopattn.InvalidArgumentError) as err:
            hopattn.attention(*args)
        messages.append(err.value.message)
    assert messages[0] == messages[1] == (
        "q: batch is 0 (shape (0, 8, 2, 64)); every dimension must be > 0")


def test_wrong_rank_is_an_invalid_argument_error():
    q, k, v = random_qkv((1, 8, 2, 64), (1, 8, 2, 64), torch.float32, "cpu")
    with pytest.raises(hopattn.InvalidArgumentError, match="q: expected 4 dimensions"):
        hopattn.attention(q[0], k, v)


def sdpa(q, k, v, causal):
    """torch.nn.functional.scaled_dot_product_attention, with the kv heads repeated for GQA."""
    group = q.shape[1] // k.shape[1]
    k, v = (x.repeat_interleave(group, dim=1) for x in (k, v))
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


# SDPA's causal mask is aligned top-left, ours bottom-right: they agree when seqlen_q == seqlen_k.
@pytest.mark.parametrize("causal, seqlen_q, seqlen_k",
                         [(False, 30, 45), (False, 16, 16), (True, 33, 33)])
@pytest.mark.parametrize("heads_q, heads_kv", [(4, 4), (4, 2)], ids=["mha", "gqa"])
def test_bhsd_matches_sdpa(causal, seqlen_q, seqlen_k, heads_q, heads_kv):
    q, k, v = random_qkv((2, heads_q, seqlen_q, 64), (2, heads_kv, seqlen_k, 64), torch.float32,
                         "cpu")
    out = hopattn.attention(q, k, v, causal=causal, layout="bhsd")
    assert out.shape == q.shape and out.is_contiguous()
    torch.testing.assert_close(out, sdpa(q, k, v, causal), rtol=0, atol=2e-5)


def test_bhsd_is_not_misread_when_heads_equal_seqlen():
    q, k, v = random_qkv((2, 8, 8, 64), (2, 8, 8, 64), torch.float32, "cpu")
    expected = sdpa(q, k, v, causal=False)
    torch.testing.assert_close(hopattn.attention(q, k, v, layout="bhsd"), expected, rtol=0,
                               atol=2e-5)
    assert (hopattn.attention(q, k, v) - expected).abs().max() > 0.1  # what bshd would read


requires_hopper = pytest.mark.skipif(hopper_skip_reason(torch) is not None,
                                     reason=str(hopper_skip_reason(torch)))


@requires_hopper
@pytest.mark.parametrize("dtype", TORCH_DTYPES[1:])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 96, 128, 192, 256])
def test_cuda_tensors(dtype, causal, head_dim):
    q, k, v = random_qkv((2, 300, 8, head_dim), (2, 257, 2, head_dim), dtype, "cuda")
    out, lse = hopattn.attention(q, k, v, causal=causal, return_lse=True)
    torch.cuda.synchronize()
    check(out, lse, q, k, v, causal)


@requires_hopper
def test_cuda_head_dim_must_be_contiguous():
    q = torch.randn(1, 16, 2, 128, device="cuda", dtype=torch.float16)[..., ::2]
    k = v = torch.randn(1, 16, 2, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(hopattn.InvalidArgumentError, match="q: head_dim must be contiguous"):
        hopattn.attention(q, k, v)
