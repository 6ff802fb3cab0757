"""hopattn.attention on NumPy arrays (the CPU backend) against the float64 reference."""

import numpy as np
import pytest

import hopattn
from conftest import ATOL, dtype_params, random_qkv
from numpy_reference import attention_reference

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim): square, more keys than queries,
# more queries than keys (causal leaves leading rows empty), GQA and MQA, odd lengths that
# are no multiple of any tile.
SHAPES = [
    pytest.param((2, 37, 37, 4, 4, 64), id="square"),
    pytest.param((1, 19, 80, 4, 2, 128), id="sq<sk-gqa"),
    pytest.param((2, 70, 33, 3, 1, 64), id="sq>sk-mqa"),
]


def check(out, lse, q, k, v, causal, scale=None):
    ref_o, ref_lse = attention_reference(q, k, v, causal, scale)
    assert out.dtype == q.dtype and out.shape == q.shape
    np.testing.assert_allclose(out.astype(np.float64), ref_o, rtol=0, atol=ATOL[q.dtype.name])
    if lse is not None:
        assert lse.dtype == np.float32 and lse.shape == ref_lse.shape
        np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(ref_lse))
        finite = np.isfinite(ref_lse)
        np.testing.assert_allclose(lse[finite], ref_lse[finite], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_matches_reference(rng, dtype, shape, causal):
    q, k, v = random_qkv(rng, *shape, dtype)
    out, lse = hopattn.attention(q, k, v, causal=causal, return_lse=True)
    check(out, lse, q, k, v, causal)


def test_returns_output_only_without_lse(rng):
    q, k, v = random_qkv(rng, 1, 8, 8, 2, 2, 64, np.float32)
    out = hopattn.attention(q, k, v)
    assert isinstance(out, np.ndarray)
    check(out, None, q, k, v, causal=False)


def test_causal_rows_without_keys_are_zero_with_neg_inf_lse(rng):
    q, k, v = random_qkv(rng, 1, 12, 5, 2, 2, 64, np.float32)
    out, lse = hopattn.attention(q, k, v, causal=True, return_lse=True)
    # seqlen_q - seqlen_k = 7 leading rows see no key.
    assert np.all(out[:, :7] == 0)
    assert np.all(np.isneginf(lse[:, :, :7]))
    check(out, lse, q, k, v, causal=True)


@pytest.mark.parametrize("scale", [0.3, 1.0, 2.5])
def test_custom_scale(rng, scale):
    q, k, v = random_qkv(rng, 1, 16, 24, 2, 2, 64, np.float32)
    out, lse = hopattn.attention(q, k, v, scale=scale, return_lse=True)
    check(out, lse, q, k, v, causal=False, scale=scale)


def test_slices_of_packed_qkv(rng):
    # One (batch, seqlen, 3, heads, head_dim) buffer: q, k and v are strided views of it.
    qkv = rng.standard_normal((2, 33, 3, 4, 64)).astype(np.float32)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    assert not q.flags.c_contiguous
    out, lse = hopattn.attention(q, k, v, causal=True, return_lse=True)
    check(out, lse, q, k, v, causal=True)


def test_heads_major_storage(rng):
    # Stored (batch, heads, seqlen, head_dim), viewed as (batch, seqlen, heads, head_dim).
    q, k, v = (rng.standard_normal((2, 4, 40, 64)).astype(np.float16).swapaxes(1, 2)
               for _ in range(3))
    out = hopattn.attention(q, k, v)
    check(out, None, q, k, v, causal=False)


def test_head_dim_not_unit_stride_is_copied(rng):
    wide = rng.standard_normal((1, 20, 2, 128)).astype(np.float32)
    q = wide[..., ::2]
    k, v = (rng.standard_normal((1, 20, 2, 64)).astype(np.float32) for _ in range(2))
    out = hopattn.attention(q, k, v)
    check(out, None, q, k, v, causal=False)
