"""hopattn.attention_varlen on NumPy arrays (the CPU backend) against the float64 reference,
sequence by sequence, and its argument checks."""

import numpy as np
import pytest

import hopattn
from conftest import ATOL, cu_seqlens, dtype_params
from numpy_reference import attention_varlen_reference

# Per sequence (seqlen_q, seqlen_k): equal, more keys than queries, more queries than keys (causal
# leaves leading rows empty), empty queries, empty keys (every row sees nothing), lengths that
# are no multiple of any tile.
LENGTHS = {
    "mixed": [(37, 37), (5, 80), (70, 33), (0, 12), (17, 17)],
    "empty-keys": [(9, 0), (1, 1), (64, 129)],
    "single": [(100, 61)],
}
# (heads_q, heads_kv, head_dim): MHA, GQA, MQA.
HEADS = [pytest.param((4, 4, 64), id="mha"), pytest.param((4, 2, 128), id="gqa"),
         pytest.param((3, 1, 32), id="mqa")]


def random_packed(rng, lengths, heads_q, heads_kv, head_dim, dtype):
    total_q, total_k = (sum(l[i] for l in lengths) for i in (0, 1))
    q = rng.standard_normal((total_q, heads_q, head_dim)).astype(dtype)
    k = rng.standard_normal((total_k, heads_kv, head_dim)).astype(dtype)
    v = rng.standard_normal((total_k, heads_kv, head_dim)).astype(dtype)
    cu_q, cu_k = cu_seqlens([l[0] for l in lengths]), cu_seqlens([l[1] for l in lengths])
    return q, k, v, cu_q, cu_k, max(l[0] for l in lengths), max(l[1] for l in lengths)


def check(out, lse, q, k, v, cu_q, cu_k, causal, scale=None, seqused_k=None):
    ref_o, ref_lse = attention_varlen_reference(q, k, v, cu_q, cu_k, causal, scale, seqused_k)
    assert out.dtype == q.dtype and out.shape == q.shape
    np.testing.assert_allclose(out.astype(np.float64), ref_o, rtol=0, atol=ATOL[q.dtype.name])
    if lse is not None:
        assert lse.dtype == np.float32 and lse.shape == (q.shape[1], q.shape[0])
        np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(ref_lse))
        finite = np.isfinite(ref_lse)
        np.testing.assert_allclose(lse[finite], ref_lse[finite], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", dtype_params())
@pytest.mark.parametrize("lengths", LENGTHS.values(), ids=LENGTHS.keys())
@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_matches_reference(rng, dtype, lengths, heads, causal):
    q, k, v, cu_q, cu_k, max_q, max_k = random_packed(rng, lengths, *heads, dtype)
    out, lse = hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal,
                                        return_lse=True)
    check(out, lse, q, k, v, cu_q, cu_k, causal)


def test_causal_is_bottom_right_per_sequence(rng):
    # Sequence 0: 6 queries, 2 keys, so its first 4 rows see no key; sequence 1: 3 queries over
    # 5 keys, so its first row sees 3 keys. Aligned to the whole packed tensor instead, both
    # would differ.
    q, k, v, cu_q, cu_k, max_q, max_k = random_packed(rng, [(6, 2), (3, 5)], 2, 2, 64,
                                                      np.float32)
    out, lse = hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True,
                                        return_lse=True)
    assert np.all(out[:4] == 0) and np.all(np.isneginf(lse[:, :4]))
    assert np.all(np.isfinite(lse[:, 4:]))
    check(out, lse, q, k, v, cu_q, cu_k, causal=True)


def test_equal_lengths_match_fixed_length_attention(rng):
    # The packed (total_q, heads, head_dim) output and (heads, total_q) LSE are the fixed-length
    # (batch, seqlen, heads, head_dim) and (batch, heads, seqlen) ones, rearranged.
    batch, seqlen, heads, head_dim = 3, 40, 4, 64
    q, k, v = (rng.standard_normal((batch, seqlen, heads, head_dim)).astype(np.float32)
               for _ in range(3))
    fixed_o, fixed_lse = hopattn.attention(q, k, v, causal=True, return_lse=True)
    cu = cu_seqlens([seqlen] * batch)
    out, lse = hopattn.attention_varlen(*(x.reshape(batch * seqlen, heads, head_dim)
                                          for x in (q, k, v)),
                                        cu, cu, seqlen, seqlen, causal=True, return_lse=True)
    np.testing.assert_array_equal(out, fixed_o.reshape(batch * seqlen, heads, head_dim))
    np.testing.assert_array_equal(lse, fixed_lse.transpose(1, 0, 2).reshape(heads, -1))


def test_seqused_k_limits_the_keys(rng):
    lengths = [(10, 30), (7, 7), (12, 20)]
    q, k, v, cu_q, cu_k, max_q, max_k = random_packed(rng, lengths, 4, 2, 64, np.float32)
    used = np.array([25, 0, 20], np.int32)
    for causal in (False, True):
        out, lse = hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal,
                                            return_lse=True, seqused_k=used)
        check(out, lse, q, k, v, cu_q, cu_k, causal, seqused_k=used)


@pytest.mark.parametrize("scale", [0.3, 2.5])
def test_custom_scale(rng, scale):
    q, k, v, cu_q, cu_k, max_q, max_k = random_packed(rng, LENGTHS["mixed"], 2, 2, 64,
                                                      np.float32)
    out, lse = hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale=scale,
                                        return_lse=True)
    check(out, lse, q, k, v, cu_q, cu_k, causal=False, scale=scale)


def test_returns_output_only_without_lse(rng):
    q, k, v, cu_q, cu_k, max_q, max_k = random_packed(rng, [(8, 8), (3, 9)], 2, 2, 64,
                                                      np.float32)
    out = hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k)
    assert isinstance(out, np.ndarray)
    check(out, None, q, k, v, cu_q, cu_k, causal=False)


def test_slices_of_packed_qkv_and_strided_metadata(rng):
    # q, k, v: views of one (total, 3, heads, head_dim) buffer; cu_seqlens: a strided view.
    lengths = [21, 4, 33]
    qkv = rng.standard_normal((sum(lengths), 3, 4, 64)).astype(np.float32)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    cu = np.repeat(cu_seqlens(lengths), 2)[::2]
    assert not q.flags.c_contiguous and not cu.flags.c_contiguous
    out, lse = hopattn.attention_varlen(q, k, v, cu, cu, max(lengths), max(lengths),
                                        causal=True, return_lse=True)
    check(out, lse, q, k, v, cu, cu, causal=True)


def test_max_seqlen_accepts_numpy_integers(rng):
    q, k, v, cu_q, cu_k, max_q, max_k = random_packed(rng, [(5, 6), (7, 3)], 2, 2, 64,
                                                      np.float32)
    out = hopattn.attention_varlen(q, k, v, cu_q, cu_k, np.int64(max_q), np.int32(max_k))
    check(out, None, q, k, v, cu_q, cu_k, causal=False)


# Argument checks: Python's own (what only it can see) and the library's, named either way.

def packed_inputs(lengths=((5, 6), (7, 3))):
    return random_packed(np.random.default_rng(0), list(lengths), 2, 2, 64, np.float32)


def test_int64_cu_seqlens_is_refused():
    q, k, v, cu_q, cu_k, max_q, max_k = packed_inputs()
    with pytest.raises(hopattn.InvalidTypeError, match="cu_seqlens_q: dtype int64 .*int32"):
        hopattn.attention_varlen(q, k, v, cu_q.astype(np.int64), cu_k, max_q, max_k)
    with pytest.raises(hopattn.InvalidTypeError, match="cu_seqlens_k: dtype int64 .*int32"):
        hopattn.attention_varlen(q, k, v, cu_q, cu_k.astype(np.int64), max_q, max_k)
    with pytest.raises(hopattn.InvalidTypeError, match="seqused_k: dtype int64 .*int32"):
        hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k,
                                 seqused_k=np.array([6, 3], np.int64))


def test_cu_seqlens_lengths_must_agree():
    q, k, v, cu_q, cu_k, max_q, max_k = packed_inputs()
    with pytest.raises(hopattn.InvalidArgumentError, match="cu_seqlens_k: 2 entries but cu_seqlens_q has 3"):
        hopattn.attention_varlen(q, k, v, cu_q, cu_k[:2], max_q, max_k)


def test_empty_cu_seqlens_is_refused():
    q, k, v, _, _, max_q, max_k = packed_inputs()
    empty = np.zeros(0, np.int32)
    with pytest.raises(hopattn.InvalidArgumentError, match="cu_seqlens_q: empty"):
        hopattn.attention_varlen(q, k, v, empty, empty, max_q, max_k)


def test_seqused_k_needs_one_entry_per_sequence():
    q, k, v, cu_q, cu_k, max_q, max_k = packed_inputs()
    with pytest.raises(hopattn.InvalidArgumentError, match="seqused_k: 3 entries.* 2 sequences"):
        hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k,
                                 seqused_k=np.array([1, 2, 3], np.int32))


def test_cu_seqlens_must_be_one_dimensional():
    q, k, v, cu_q, cu_k, max_q, max_k = packed_inputs()
    with pytest.raises(hopattn.InvalidArgumentError, match=r"cu_seqlens_q: expected 1 dimension, got shape \(1, 3\)"):
        hopattn.attention_varlen(q, k, v, cu_q[None], cu_k, max_q, max_k)


def test_cu_seqlens_must_be_an_array_like_q():
    q, k, v, cu_q, cu_k, max_q, max_k = packed_inputs()
    with pytest.raises(hopattn.InvalidTypeError, match="cu_seqlens_k: expected a numpy.ndarray like q, got list"):
        hopattn.attention_varlen(q, k, v, cu_q, cu_k.tolist(), max_q, max_k)


@pytest.mark.parametrize("bad", [3.0, True, "7", None])
def test_max_seqlen_must_be_an_int(bad):
    q, k, v, cu_q, cu_k, max_q, max_k = packed_inputs()
    with pytest.raises(hopattn.InvalidTypeError, match="max_seqlen_k: expected an int"):
        hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, bad)


def test_max_seqlen_must_fit_in_int64():
    q, k, v, cu_q, cu_k, max_q, max_k = packed_inputs()
    with pytest.raises(hopattn.InvalidArgumentError, match="max_seqlen_q: .* does not fit in int64"):
        hopattn.attention_varlen(q, k, v, cu_q, cu_k, 2 ** 64, max_k)


def test_packed_tensors_have_three_dimensions():
    q, k, v, cu_q, cu_k, max_q, max_k = packed_inputs()
    with pytest.raises(hopattn.InvalidArgumentError, match=r"k: expected 3 dimensions \(total_k, heads, head_dim\)"):
        hopattn.attention_varlen(q, k[None], v, cu_q, cu_k, max_q, max_k)


def test_zero_scale_is_refused():
    q, k, v, cu_q, cu_k, max_q, max_k = packed_inputs()
    with pytest.raises(hopattn.InvalidArgumentError, match="scale"):
        hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale=0.0)


def test_library_checks_the_prefix_sums():
    # The last prefix sum must be the tensor's row count: the CPU backend reads the metadata.
    q, k, v, cu_q, cu_k, max_q, max_k = packed_inputs()
    short = cu_q.copy()
    short[-1] -= 1
    with pytest.raises(hopattn.InvalidArgumentError, match="cu_seqlens_q") as err:
        hopattn.attention_varlen(q, k, v, short, cu_k, max_q, max_k)
    assert err.value.status == hopattn.Status.INVALID_ARGUMENT
    decreasing = np.array([0, 7, 6], np.int32)
    with pytest.raises(hopattn.InvalidArgumentError, match="cu_seqlens_k"):
        hopattn.attention_varlen(q, k, v, cu_q, decreasing, max_q, max_k)


def test_library_checks_max_seqlen():
    q, k, v, cu_q, cu_k, max_q, max_k = packed_inputs()
    with pytest.raises(hopattn.InvalidArgumentError, match="max_seqlen_q"):
        hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q - 1, max_k)


def test_library_messages_use_the_python_names():
    # The library says varlen->cu_seqlens_q; Python callers pass cu_seqlens_q.
    q, k, v, cu_q, cu_k, max_q, max_k = packed_inputs()
    with pytest.raises(hopattn.InvalidArgumentError,
                       match=r"^INVALID_ARGUMENT: cu_seqlens_q\[0\] is 1; it must be 0$") as err:
        hopattn.attention_varlen(q, k, v, cu_q + 1, cu_k, max_q, max_k)
    assert "varlen->" not in err.value.message
    with pytest.raises(hopattn.InvalidArgumentError,
                       match=r"^INVALID_ARGUMENT: max_seqlen_k is 0; "):
        hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, 0)


def test_one_entry_cu_seqlens_is_refused():
    q, k, v, _, _, max_q, max_k = packed_inputs()
    one = np.zeros(1, np.int32)
    with pytest.raises(hopattn.InvalidArgumentError, match="cu_seqlens_q: 1 entry; it must hold "
                                                           r"batch \+ 1 prefix sums"):
        hopattn.attention_varlen(q, k, v, one, one, max_q, max_k)


def test_flags_and_scale_are_checked_as_in_attention():
    q, k, v, cu_q, cu_k, max_q, max_k = packed_inputs()
    with pytest.raises(hopattn.InvalidTypeError, match="causal must be a bool"):
        hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal="yes")
    with pytest.raises(hopattn.InvalidTypeError, match="return_lse must be a bool"):
        hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, return_lse=1)
    with pytest.raises(hopattn.InvalidArgumentError,
                       match=r"scale must be a positive finite float, or None for "
                             r"1/sqrt\(head_dim\); .*; got -1"):
        hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale=-1)


def test_dtypes_must_agree():
    q, k, v, cu_q, cu_k, max_q, max_k = packed_inputs()
    with pytest.raises(hopattn.InvalidTypeError, match="k: dtype float16, but q is float32"):
        hopattn.attention_varlen(q, k.astype(np.float16), v, cu_q, cu_k, max_q, max_k)


def test_empty_packed_tensor_is_named():
    q, k, v, _, cu_k, max_q, max_k = packed_inputs()
    with pytest.raises(hopattn.InvalidArgumentError,
                       match=r"q: total_q is 0 \(shape \(0, 2, 64\)\); every dimension must be > 0"):
        hopattn.attention_varlen(q[:0], k, v, np.zeros(3, np.int32), cu_k, max_q, max_k)


def test_fixed_length_batch_is_pointed_to_attention():
    q, k, v, cu_q, cu_k, max_q, max_k = packed_inputs()
    with pytest.raises(hopattn.InvalidArgumentError,
                       match="a \\(batch, seqlen, heads, head_dim\\) batch goes to hopattn.attention"):
        hopattn.attention_varlen(q[None], k, v, cu_q, cu_k, max_q, max_k)


def test_library_checks_heads():
    q, k, v, cu_q, cu_k, max_q, max_k = packed_inputs()
    with pytest.raises(hopattn.InvalidArgumentError, match="heads"):
        hopattn.attention_varlen(q[:, :1], k, v, cu_q, cu_k, max_q, max_k)


def test_reversed_and_byte_swapped_views_are_copied(rng):
    q, k, v, cu_q, cu_k, max_q, max_k = random_packed(rng, [(6, 9), (4, 4)], 2, 2, 64,
                                                      np.float32)
    q = q[::-1]  # negative seq stride
    k = k.astype(k.dtype.newbyteorder())  # non-native byte order, same values
    out = hopattn.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k)
    check(out, None, q, k, v, cu_q, cu_k, causal=False)
