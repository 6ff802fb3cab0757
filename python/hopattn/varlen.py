"""hopattn.attention_varlen: variable-length batches packed FlashAttention-style, for NumPy
arrays and PyTorch tensors.

Python checks what only it can see (the lengths of the metadata arrays, their dtype and memory
space); the library checks the rest and, on the CPU backend, the prefix sums themselves. Torch
tensors go through the custom operators of _torch_ops.py, as hopattn.attention's do.
"""

import ctypes

from ._ctypes_api import default_varlen
from ._errors import InvalidArgumentError, raise_on_error
from ._frontend import (PACKED_K, PACKED_Q, as_flag, as_int, as_softmax_scale, backward_library,
                        check_qkv, frontend_for, torch_ops_for)
from ._lib import library

__all__ = ["attention_varlen"]


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     causal=False, scale=None, return_lse=False, seqused_k=None):
    """softmax(q k^T * scale) v for a batch of sequences of different lengths; differentiable
    for torch tensors.

    q: (total_q, heads_q, head_dim); k, v: (total_k, heads_kv, head_dim), heads_q a multiple of
    heads_kv (GQA/MQA): the sequences' rows packed one after the other.
    cu_seqlens_q, cu_seqlens_k: int32, 1-D, batch + 1 prefix sums 0, ..., total; sequence b owns
        query rows cu_seqlens_q[b]:cu_seqlens_q[b + 1] and key rows
        cu_seqlens_k[b]:cu_seqlens_k[b + 1]. Zero-length sequences are allowed. Same kind and
        device as q: NumPy arrays for NumPy inputs, torch tensors on q's device for torch.
    max_seqlen_q, max_seqlen_k: ints >= every query / key length (on CUDA they size the grid;
        they are not checked against cu_seqlens there, which would need a device sync).
    seqused_k: None, or int32 1-D of batch entries: sequence b attends only to the first
        seqused_k[b] of its keys.

    causal: a bool. Per sequence, query i sees key j iff j <= i + seqlen_k - seqlen_q
        (bottom-right aligned); a row that sees no key gets zeros and LSE = -inf.
    scale: a positive finite float multiplying q k^T, or None for 1/sqrt(head_dim); normal in
        float32, as for hopattn.attention.
    return_lse: a bool: also return the float32 log-sum-exp of each score row, (heads_q, total_q);
        it carries no gradient.

    Backends, strides, host copies, autograd (the custom operators
    hopattn::attention_varlen_forward and hopattn::attention_varlen_backward; gradients flow to
    q, k and v) and errors as hopattn.attention (host metadata in another byte order, strided or
    misaligned is copied too). On CUDA, metadata that contradicts the tensors
    gives wrong results for the sequences it describes, never an access outside them.
    Returns o (total_q, heads_q, head_dim, q's dtype and device), or (o, lse).
    """
    causal = as_flag("causal", causal)
    return_lse = as_flag("return_lse", return_lse)
    max_seqlen_q = as_int("max_seqlen_q", max_seqlen_q)
    max_seqlen_k = as_int("max_seqlen_k", max_seqlen_k)
    torch_ops = torch_ops_for(q, k, v)
    if torch_ops is not None:
        out, lse = torch_ops.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k,
                                              max_seqlen_q, max_seqlen_k, causal,
                                              torch_ops.scale_argument(scale))
    else:
        out, lse = forward(frontend_for(q), q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k,
                           max_seqlen_q, max_seqlen_k, causal, as_softmax_scale(scale),
                           return_lse)
    return (out, lse) if return_lse else out


def check_metadata(cu_seqlens_q, cu_seqlens_k, seqused_k):
    """The number of sequences, once the metadata's lengths agree (arrays or tensors whose kind,
    dtype and rank are checked)."""
    if len(cu_seqlens_q) == 0:
        raise InvalidArgumentError("cu_seqlens_q: empty; it must hold batch + 1 prefix sums, "
                                   "starting with 0")
    if len(cu_seqlens_q) == 1:
        raise InvalidArgumentError("cu_seqlens_q: 1 entry; it must hold batch + 1 prefix sums "
                                   "for a batch of at least one sequence, e.g. [0, total_q]")
    if len(cu_seqlens_k) != len(cu_seqlens_q):
        raise InvalidArgumentError(f"cu_seqlens_k: {len(cu_seqlens_k)} entries but cu_seqlens_q "
                                   f"has {len(cu_seqlens_q)}; both hold batch + 1 prefix sums")
    batch = len(cu_seqlens_q) - 1
    if seqused_k is not None and len(seqused_k) != batch:
        raise InvalidArgumentError(f"seqused_k: {len(seqused_k)} entries, but cu_seqlens_q "
                                   f"describes {batch} sequences; it must hold one count per "
                                   "sequence")
    return batch


def describe_varlen(fe, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k):
    """(the arrays to keep alive for the call, the hopattn_varlen describing them)."""
    cu_q, cu_q_ptr = fe.int32_vector("cu_seqlens_q", cu_seqlens_q)
    cu_k, cu_k_ptr = fe.int32_vector("cu_seqlens_k", cu_seqlens_k)
    used_k, used_k_ptr = (None, None) if seqused_k is None else fe.int32_vector("seqused_k",
                                                                                seqused_k)
    varlen = default_varlen(library())
    varlen.batch = check_metadata(cu_q, cu_k, used_k)
    varlen.cu_seqlens_q, varlen.cu_seqlens_k, varlen.seqused_k = cu_q_ptr, cu_k_ptr, used_k_ptr
    varlen.max_seqlen_q, varlen.max_seqlen_k = max_seqlen_q, max_seqlen_k
    return (cu_q, cu_k, used_k), varlen


def forward(fe, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
            causal, softmax_scale, return_lse):
    """(o, lse or None) of hopattn_forward_varlen; arguments as checked by attention_varlen()."""
    (q, tq), (k, tk), (v, tv) = (fe.input(n, x, layout) for n, x, layout in (
        ("q", q, PACKED_Q), ("k", k, PACKED_K), ("v", v, PACKED_K)))
    check_qkv(q, k, v)
    metadata, varlen = describe_varlen(fe, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                               max_seqlen_k)
    out = fe.empty_like(q)
    lse = fe.empty_float32((tq.heads, tq.seqlen)) if return_lse else None
    to = fe.tensor("o", out, PACKED_Q)
    with fe.options(causal, softmax_scale) as options:
        status = library().hopattn_forward_varlen(
            ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv), ctypes.byref(to),
            None if lse is None else fe.address(lse), ctypes.byref(varlen),
            ctypes.byref(options))
    raise_on_error(status)
    del metadata  # alive until here: the library read it
    return out, lse


def backward(fe, grad_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
             max_seqlen_k, causal, softmax_scale, deterministic):
    """(dq, dk, dv) of hopattn_backward_varlen, each contiguous in its input's shape."""
    lib = backward_library()
    (q, tq), (k, tk), (v, tv), (o, to), (grad_o, t_do) = (
        fe.input(n, x, layout) for n, x, layout in (
            ("q", q, PACKED_Q), ("k", k, PACKED_K), ("v", v, PACKED_K), ("o", o, PACKED_Q),
            ("grad_o", grad_o, PACKED_Q)))
    metadata, varlen = describe_varlen(fe, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                               max_seqlen_k)
    dq, dk, dv = (fe.empty_like(x) for x in (q, k, v))
    tdq, tdk, tdv = (fe.tensor(n, x, layout) for n, x, layout in (
        ("dq", dq, PACKED_Q), ("dk", dk, PACKED_K), ("dv", dv, PACKED_K)))
    with fe.backward_options(causal, softmax_scale, deterministic) as options:
        status = lib.hopattn_backward_varlen(
            ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv), ctypes.byref(to),
            ctypes.byref(t_do), fe.address(lse), ctypes.byref(tdq), ctypes.byref(tdk),
            ctypes.byref(tdv), ctypes.byref(varlen), ctypes.byref(options))
    raise_on_error(status)
    del metadata
    return dq, dk, dv
