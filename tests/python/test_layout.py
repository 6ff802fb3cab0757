"""attention(layout="bhsd"): PyTorch SDPA's (batch, heads, seqlen, head_dim) read as such, never
as (batch, seqlen, heads, head_dim), and the output returned in the same layout."""

import numpy as np
import pytest

import hopattn
from conftest import ATOL, dtype_params, random_qkv
from numpy_reference import attention_reference


def to_bhsd(x):
    return np.ascontiguousarray(x.swapaxes(1, 2))


@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [
    pytest.param((2, 37, 37, 4, 4, 64), id="square"),
    pytest.param((1, 19, 80, 4, 2, 128), id="sq<sk-gqa"),
    pytest.param((2, 70, 33, 3, 1, 64), id="sq>sk-mqa"),
])
def test_bhsd_equals_bshd_on_transposed_inputs(rng, dtype, causal, shape):
    q, k, v = random_qkv(rng, *shape, dtype)
    o_bshd, lse_bshd = hopattn.attention(q, k, v, causal=causal, return_lse=True)
    o_bhsd, lse_bhsd = hopattn.attention(to_bhsd(q), to_bhsd(k), to_bhsd(v), causal=causal,
                                         return_lse=True, layout="bhsd")
    batch, seqlen_q, _, heads_q, _, head_dim = shape
    assert o_bhsd.shape == (batch, heads_q, seqlen_q, head_dim) and o_bhsd.dtype == q.dtype
    assert o_bhsd.flags.c_contiguous
    # The same kernel on the same values: only the strides differ.
    np.testing.assert_array_equal(o_bhsd, to_bhsd(o_bshd))
    np.testing.assert_array_equal(lse_bhsd, lse_bshd)
    ref_o, _ = attention_reference(q, k, v, causal)
    np.testing.assert_allclose(o_bhsd.swapaxes(1, 2).astype(np.float64), ref_o, rtol=0,
                               atol=ATOL[q.dtype.name])


def test_bhsd_is_not_misread_when_heads_equal_seqlen(rng):
    # (2, 8, 8, 64) fits both layouts: only the argument tells them apart.
    q, k, v = (rng.standard_normal((2, 8, 8, 64)).astype(np.float32) for _ in range(3))
    out = hopattn.attention(q, k, v, layout="bhsd")
    ref_o, _ = attention_reference(q.swapaxes(1, 2), k.swapaxes(1, 2), v.swapaxes(1, 2))
    np.testing.assert_allclose(out.swapaxes(1, 2), ref_o, rtol=0, atol=ATOL["float32"])
    misread = hopattn.attention(q, k, v)  # layout="bshd"
    assert np.abs(misread - out).max() > 0.1


def test_bhsd_views_are_not_copied_into_the_other_order(rng):
    # A bshd buffer seen as bhsd through swapaxes: strided, passed as it is.
    q, k, v = random_qkv(rng, 1, 24, 30, 4, 2, 64, np.float32)
    out = hopattn.attention(q.swapaxes(1, 2), k.swapaxes(1, 2), v.swapaxes(1, 2), causal=True,
                            layout="bhsd")
    np.testing.assert_array_equal(out, to_bhsd(hopattn.attention(q, k, v, causal=True)))


def test_bshd_is_the_default(rng):
    q, k, v = random_qkv(rng, 1, 8, 8, 2, 2, 64, np.float32)
    np.testing.assert_array_equal(hopattn.attention(q, k, v),
                                  hopattn.attention(q, k, v, layout="bshd"))


def test_bhsd_errors_name_the_dimensions(rng):
    q, k, v = random_qkv(rng, 1, 8, 8, 6, 4, 64, np.float32)
    with pytest.raises(hopattn.InvalidArgumentError, match=r"q.heads \(6\) must be a multiple of "
                                                           r"k.heads \(4\)"):
        hopattn.attention(to_bhsd(q), to_bhsd(k), to_bhsd(v), layout="bhsd")
    with pytest.raises(hopattn.InvalidArgumentError, match=r"k: seqlen is 0 \(shape \(1, 4, 0, 64\)\)"):
        hopattn.attention(to_bhsd(q), to_bhsd(k)[:, :, :0], to_bhsd(v), layout="bhsd")
