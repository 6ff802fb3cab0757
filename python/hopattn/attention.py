"""hopattn.attention for NumPy arrays and PyTorch tensors.

The binding only describes the caller's memory to the C library (see _frontend.py); shapes,
head counts and the backend's limits are checked there, in one place, and its message (which
names the offending argument) is raised as HopattnError.
"""

import ctypes

from ._errors import HopattnError, InvalidArgumentError, InvalidTypeError, raise_on_error
from ._frontend import as_flag, as_softmax_scale, check_qkv, frontend_for, layout_of
from ._lib import library

__all__ = ["attention", "HopattnError", "InvalidArgumentError", "InvalidTypeError"]


def attention(q, k, v, causal=False, scale=None, return_lse=False, layout="bshd"):
    """softmax(q k^T * scale) v, forward only.

    layout="bshd" (the default): q is (batch, seqlen_q, heads_q, head_dim) and k, v are
    (batch, seqlen_k, heads_kv, head_dim), FlashAttention's layout. layout="bhsd": q is
    (batch, heads_q, seqlen_q, head_dim) and k, v (batch, heads_kv, seqlen_k, head_dim), the
    layout of torch.nn.functional.scaled_dot_product_attention; no copy is made. heads_q must be
    a multiple of heads_kv (GQA/MQA).

    NumPy arrays (float32, float16, ml_dtypes bfloat16) and CPU torch tensors run on the CPU
    backend; CUDA torch tensors run on the Hopper backend on torch.cuda.current_stream(). Host
    data is read in place where it can be and otherwise copied first: a head_dim that is not
    unit-stride, negative strides, non-native byte order (">f4") and buffers not aligned to the
    element size (np.frombuffer(..., offset=1)); o is always in native byte order. CUDA tensors
    are never copied behind the caller's back: a head_dim that is not unit-stride raises
    InvalidArgumentError.

    causal: a bool. Query i sees key j iff j <= i + seqlen_k - seqlen_q (bottom-right aligned);
        a row that sees no key gets zeros and LSE = -inf.
    scale: a positive finite float multiplying q k^T, or None for 1/sqrt(head_dim). The library
        scales in float32, so it must be a normal float32 there (about 1.18e-38 to 3.4e38): a
        value that would be 0, subnormal or inf in float32 raises InvalidArgumentError.
    return_lse: a bool: also return the float32 log-sum-exp of each score row, (batch, heads_q,
        seqlen_q) in either layout.

    Returns o (q's dtype, device and layout, contiguous), or (o, lse).
    Raises InvalidArgumentError (a ValueError) for a malformed call, its subclass
    InvalidTypeError (also a TypeError) for an argument of the wrong type or dtype, and
    HopattnError for a call the backend cannot run; each message names the argument at fault.
    """
    causal = as_flag("causal", causal)
    return_lse = as_flag("return_lse", return_lse)
    softmax_scale = as_softmax_scale(scale)
    layout = layout_of(layout)
    fe = frontend_for(q)
    (q, tq), (k, tk), (v, tv) = (fe.input(n, x, layout) for n, x in (("q", q), ("k", k), ("v", v)))
    check_qkv(q, k, v)
    out = fe.empty(q.shape, like=q)
    lse = fe.empty_float32((tq.batch, tq.heads, tq.seqlen)) if return_lse else None
    to = fe.tensor("o", out, layout)
    with fe.options(causal, softmax_scale) as options:
        status = library().hopattn_forward(
            ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv), ctypes.byref(to),
            None if lse is None else fe.address(lse), ctypes.byref(options))
    raise_on_error(status)
    return (out, lse) if return_lse else out
