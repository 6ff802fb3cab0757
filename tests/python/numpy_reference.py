"""Attention in float64 NumPy, written from the definition, for the tests to compare against."""

import numpy as np


def causal_visible(seqlen_q: int, seqlen_k: int) -> np.ndarray:
    """(seqlen_q, seqlen_k) bool: query i sees key j iff j <= i + seqlen_k - seqlen_q."""
    i = np.arange(seqlen_q)[:, None]
    j = np.arange(seqlen_k)[None, :]
    return j <= i + (seqlen_k - seqlen_q)


def attention_reference(q, k, v, causal=False, scale=None):
    """(o, lse) in float64: o (b, sq, hq, d); lse (b, hq, sq), -inf and o = 0 for empty rows."""
    q, k, v = (np.asarray(x).astype(np.float64) for x in (q, k, v))
    heads_q, heads_kv = q.shape[2], k.shape[2]
    k = np.repeat(k, heads_q // heads_kv, axis=2)  # query head h reads kv head h // group
    v = np.repeat(v, heads_q // heads_kv, axis=2)
    scale = 1.0 / np.sqrt(q.shape[3]) if scale is None else scale
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if causal:
        s = np.where(causal_visible(q.shape[1], k.shape[1]), s, -np.inf)
    row_max = s.max(axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    p = np.exp(s - row_max)
    row_sum = p.sum(axis=-1, keepdims=True)
    p = p / np.where(row_sum > 0, row_sum, 1.0)
    o = np.einsum("bhqk,bkhd->bqhd", p, v)
    with np.errstate(divide="ignore"):
        lse = np.where(row_sum > 0, row_max + np.log(row_sum), -np.inf)[..., 0]
    return o, lse


def attention_varlen_reference(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, scale=None,
                               seqused_k=None):
    """(o, lse) in float64 for a packed variable-length batch, one sequence at a time through
    attention_reference: o (total_q, hq, d); lse (hq, total_q). Sequence b is query rows
    cu_seqlens_q[b]:cu_seqlens_q[b + 1] against the first seqused_k[b] (default: all) of key rows
    cu_seqlens_k[b]:cu_seqlens_k[b + 1]."""
    q, k, v = (np.asarray(x).astype(np.float64) for x in (q, k, v))
    o = np.zeros(q.shape)
    lse = np.full((q.shape[1], q.shape[0]), -np.inf)
    for b in range(len(cu_seqlens_q) - 1):
        q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        k0, k1 = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        if seqused_k is not None:
            k1 = k0 + int(seqused_k[b])
        if q1 == q0:
            continue
        if k1 == k0:  # no keys: every row sees none; o stays 0 and lse -inf
            continue
        o_b, lse_b = attention_reference(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], causal,
                                         scale)
        o[q0:q1], lse[:, q0:q1] = o_b[0], lse_b[0]
    return o, lse
