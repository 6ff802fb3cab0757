"""hopattn.attention for NumPy arrays and PyTorch tensors.

The binding only describes the caller's memory to the C library (see _frontend.py); shapes,
dtypes, head counts and the backend's limits are checked there, in one place, and its message
(which names the offending argument) is raised as HopattnError.
"""

import ctypes

from ._errors import HopattnError, InvalidArgumentError, raise_on_error
from ._frontend import FIXED, frontend_for
from ._lib import library

__all__ = ["attention", "HopattnError", "InvalidArgumentError"]


def attention(q, k, v, causal=False, scale=None, return_lse=False):
    """softmax(q k^T * scale) v, forward only.

    q: (batch, seqlen_q, heads_q, head_dim); k, v: (batch, seqlen_k, heads_kv, head_dim) with
    heads_q a multiple of heads_kv (GQA/MQA). NumPy arrays (float32, float16, ml_dtypes
    bfloat16) and CPU torch tensors run on the CPU backend; CUDA torch tensors run on the
    Hopper backend on torch.cuda.current_stream(). Any strides work as long as head_dim is
    unit-stride; host data that is not gets copied, CUDA data raises ValueError.

    causal: query i sees key j iff j <= i + seqlen_k - seqlen_q (bottom-right aligned);
        a row that sees no key gets zeros and LSE = -inf.
    scale: multiplies q k^T; None means 1/sqrt(head_dim).
    return_lse: also return the float32 log-sum-exp of each score row, (batch, heads_q,
        seqlen_q).

    Returns o (same dtype and device as q, contiguous), or (o, lse).
    Raises HopattnError (InvalidArgumentError, a ValueError, for a malformed call) with the
    library's message, which names the argument at fault.
    """
    fe = frontend_for(q)
    (q, tq), (k, tk), (v, tv) = (fe.input(n, x, FIXED) for n, x in (("q", q), ("k", k), ("v", v)))
    out = fe.empty(q.shape, like=q)
    lse = fe.empty_float32((tq.batch, tq.heads, tq.seqlen)) if return_lse else None
    to = fe.tensor("o", out, FIXED)
    with fe.options(causal, scale) as options:
        status = library().hopattn_forward(
            ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv), ctypes.byref(to),
            None if lse is None else fe.address(lse), ctypes.byref(options))
    raise_on_error(status)
    return (out, lse) if return_lse else out
