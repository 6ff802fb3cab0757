"""hopattn.forward_fp8_varlen and hopattn.attention_fp8_varlen on NumPy arrays and CPU tensors (the
CPU backend): the output against float64 variable-length attention of the dequantised packed
inputs (with and without seqused_k), attention_fp8_varlen the same call as quantize_fp8 of the
packed tensors then forward_fp8_varlen, and the argument checks in Python's names."""

import numpy as np
import pytest

import hopattn
from numpy_reference import attention_varlen_reference
from test_fp8_forward import decode, dequantise  # noqa: F401 (decode is a fixture)

# Five sequences: one without queries, one of a single query row; 128-row scale blocks of the
# packed tensors straddle them.
CU_Q = np.array([0, 0, 37, 237, 238, 330], np.int32)
CU_K = np.array([0, 5, 69, 199, 260, 289], np.int32)
MAX_Q, MAX_K = 200, 130


def packed_inputs(seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype)
            for s in ((CU_Q[-1], 4, 64), (CU_K[-1], 2, 64), (CU_K[-1], 2, 64))]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scaling", ["block", "head", "tensor"])
def test_forward_fp8_varlen_is_varlen_attention_of_the_dequantised_inputs(decode, causal, scaling):
    q, k, v = packed_inputs(11)
    # The packed tensors quantised as batches of one: the scales forward_fp8_varlen takes.
    (qc, qs), (kc, ks) = (hopattn.quantize_fp8(x[None], scaling=scaling, seed=4) for x in (q, k))
    vc, vs = hopattn.quantize_fp8(v[None], scaling="head", hadamard=False)
    o, lse = hopattn.forward_fp8_varlen(qc[0], qs, kc[0], ks, vc[0], vs, CU_Q, CU_K, MAX_Q, MAX_K,
                                        causal=causal, return_lse=True)
    assert o.shape == q.shape and lse.shape == (4, CU_Q[-1]) and lse.dtype == np.float32
    ref_o, ref_lse = attention_varlen_reference(
        dequantise(decode, qc, qs)[0], dequantise(decode, kc, ks)[0], dequantise(decode, vc, vs)[0],
        CU_Q, CU_K, causal)
    np.testing.assert_allclose(o.astype(np.float64), ref_o, rtol=0, atol=1e-2)
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-5, atol=1e-4)


def test_forward_fp8_varlen_seqused_k_limits_each_sequences_keys(decode):
    q, k, v = packed_inputs(15)
    seqused = np.array([3, 0, 130, 61, 2], np.int32)  # of key lengths 5, 64, 130, 61, 29
    (qc, qs), (kc, ks) = (hopattn.quantize_fp8(x[None], seed=4) for x in (q, k))
    vc, vs = hopattn.quantize_fp8(v[None], scaling="head", hadamard=False)
    for causal in (False, True):
        o, lse = hopattn.forward_fp8_varlen(qc[0], qs, kc[0], ks, vc[0], vs, CU_Q, CU_K, MAX_Q,
                                            MAX_K, causal=causal, return_lse=True,
                                            seqused_k=seqused)
        ref_o, ref_lse = attention_varlen_reference(
            dequantise(decode, qc, qs)[0], dequantise(decode, kc, ks)[0],
            dequantise(decode, vc, vs)[0], CU_Q, CU_K, causal, seqused_k=seqused)
        np.testing.assert_allclose(o.astype(np.float64), ref_o, rtol=0, atol=1e-2)
        np.testing.assert_allclose(lse, ref_lse, rtol=1e-5, atol=1e-4)
    # attention_fp8_varlen passes it through: the sequence with no used key gets O = 0.
    o = hopattn.attention_fp8_varlen(q.astype(np.float16), k.astype(np.float16),
                                     v.astype(np.float16), CU_Q, CU_K, MAX_Q, MAX_K,
                                     seqused_k=seqused)
    assert not o[CU_Q[1]:CU_Q[2]].any() and o[CU_Q[2]:CU_Q[3]].any()


def test_attention_fp8_varlen_quantises_the_packed_tensors(decode):
    q, k, v = packed_inputs(12, np.float16)
    o = hopattn.attention_fp8_varlen(q, k, v, CU_Q, CU_K, MAX_Q, MAX_K, causal=True, seed=9)
    (qc, qs), (kc, ks) = (hopattn.quantize_fp8(x[None], seed=9) for x in (q, k))
    vc, vs = hopattn.quantize_fp8(v[None], scaling="head", hadamard=False)
    by_hand = hopattn.forward_fp8_varlen(qc[0], qs, kc[0], ks, vc[0], vs, CU_Q, CU_K, MAX_Q, MAX_K,
                                         causal=True, out_dtype=np.float16)
    assert o.dtype == np.float16 and o.shape == q.shape
    np.testing.assert_array_equal(o, by_hand)
    # Close to float64 attention of the unquantised inputs (FP8's error, not a wrong sequence).
    ref_o, _ = attention_varlen_reference(q, k, v, CU_Q, CU_K, True)
    assert np.sqrt(np.mean((o.astype(np.float64) - ref_o) ** 2)) < 3e-2


def test_attention_fp8_varlen_on_cpu_tensors_equals_numpy():
    torch = pytest.importorskip("torch")
    q, k, v = packed_inputs(13)
    want = hopattn.attention_fp8_varlen(*(x.astype(np.float16) for x in (q, k, v)), CU_Q, CU_K,
                                        MAX_Q, MAX_K)
    got, lse = hopattn.attention_fp8_varlen(
        *(torch.from_numpy(x).to(torch.float16) for x in (q, k, v)), torch.from_numpy(CU_Q),
        torch.from_numpy(CU_K), MAX_Q, MAX_K, return_lse=True)
    assert got.dtype == torch.float16 and tuple(lse.shape) == (4, CU_Q[-1])
    np.testing.assert_array_equal(got.numpy(), want)


def test_varlen_fp8_arguments_in_python_names():
    q, k, v = packed_inputs(14, np.float16)
    with pytest.raises(hopattn.InvalidArgumentError, match=r"q: expected 3 dimensions"):
        hopattn.attention_fp8_varlen(q[None], k, v, CU_Q, CU_K, MAX_Q, MAX_K)
    with pytest.raises(hopattn.InvalidArgumentError, match=r"cu_seqlens_k: 5 entries"):
        hopattn.attention_fp8_varlen(q, k, v, CU_Q, CU_K[:-1], MAX_Q, MAX_K)
    with pytest.raises(hopattn.InvalidArgumentError, match=r"cu_seqlens_q"):
        bad = CU_Q.copy()
        bad[-1] -= 1  # no longer ends at q's rows: the library reads host metadata
        hopattn.attention_fp8_varlen(q, k, v, bad, CU_K, MAX_Q, MAX_K)
    qc, qs = hopattn.quantize_fp8(q[None])
    kc, ks = hopattn.quantize_fp8(k[None])
    vc, vs = hopattn.quantize_fp8(v[None], scaling="head", hadamard=False)
    with pytest.raises(hopattn.InvalidArgumentError, match=r"q_scales: shape"):
        hopattn.forward_fp8_varlen(qc[0], qs[0], kc[0], ks, vc[0], vs, CU_Q, CU_K, MAX_Q, MAX_K)
    with pytest.raises(hopattn.InvalidArgumentError, match=r"seqused_k: 4 entries"):
        hopattn.attention_fp8_varlen(q, k, v, CU_Q, CU_K, MAX_Q, MAX_K,
                                     seqused_k=np.zeros(4, np.int32))
    with pytest.raises(hopattn.InvalidArgumentError, match=r"seqused_k"):
        hopattn.forward_fp8_varlen(qc[0], qs, kc[0], ks, vc[0], vs, CU_Q, CU_K, MAX_Q, MAX_K,
                                   seqused_k=np.full(5, -1, np.int32))
    with pytest.raises(hopattn.InvalidTypeError, match=r"attention_fp8_varlen"):
        hopattn.attention_fp8_varlen(q.astype(np.float32), k.astype(np.float32),
                                     v.astype(np.float32), CU_Q, CU_K, MAX_Q, MAX_K)
