"""hopattn.attention for NumPy arrays and PyTorch tensors, and the library calls behind it.

The binding only describes the caller's memory to the C library (see _frontend.py); shapes,
head counts and the backend's limits are checked there, in one place, and its message (which
names the offending argument) is raised as HopattnError. NumPy arrays call forward() here;
torch tensors go through the custom operators of _torch_ops.py, whose implementations call
forward() and backward(), so that autograd and torch.compile see one operator each way.
"""

import ctypes

from ._errors import HopattnError, InvalidArgumentError, InvalidTypeError, raise_on_error
from ._frontend import (as_flag, as_softmax_scale, backward_library, check_qkv, frontend_for,
                        layout_of, torch_ops_for)
from ._lib import library

__all__ = ["attention", "HopattnError", "InvalidArgumentError", "InvalidTypeError"]


def attention(q, k, v, causal=False, scale=None, return_lse=False, layout="bshd"):
    """softmax(q k^T * scale) v; differentiable for torch tensors.

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

    Torch tensors go through the custom operators hopattn::attention_forward and
    hopattn::attention_backward: gradients flow to q, k and v (loss.backward(), torch.autograd),
    and torch.compile traces the call without a graph break. NumPy arrays are forward only.

    causal: a bool. Query i sees key j iff j <= i + seqlen_k - seqlen_q (bottom-right aligned);
        a row that sees no key gets zeros and LSE = -inf.
    scale: a positive finite float multiplying q k^T, or None for 1/sqrt(head_dim). The library
        scales in float32, so it must be a normal float32 there (about 1.18e-38 to 3.4e38): a
        value that would be 0, subnormal or inf in float32 raises InvalidArgumentError.
    return_lse: a bool: also return the float32 log-sum-exp of each score row, (batch, heads_q,
        seqlen_q) in either layout. It carries no gradient (torch: requires_grad is False).

    Returns o (q's dtype, device and layout, contiguous), or (o, lse).
    Raises InvalidArgumentError (a ValueError) for a malformed call, its subclass
    InvalidTypeError (also a TypeError) for an argument of the wrong type or dtype, and
    HopattnError for a call the backend cannot run; each message names the argument at fault.
    """
    causal = as_flag("causal", causal)
    return_lse = as_flag("return_lse", return_lse)
    torch_ops = torch_ops_for(q, k, v)
    if torch_ops is not None:
        out, lse = torch_ops.attention(q, k, v, causal, torch_ops.scale_argument(scale),
                                       layout_of(layout))
    else:
        out, lse = forward(frontend_for(q), q, k, v, causal, as_softmax_scale(scale),
                           layout_of(layout), return_lse)
    return (out, lse) if return_lse else out


def forward(fe, q, k, v, causal, softmax_scale, layout, return_lse):
    """(o, lse or None) of hopattn_forward on the frontend's arrays; arguments as checked by
    attention()."""
    (q, tq), (k, tk), (v, tv) = (fe.input(n, x, layout) for n, x in (("q", q), ("k", k), ("v", v)))
    check_qkv(q, k, v)
    out = fe.empty_like(q)
    lse = fe.empty_float32((tq.batch, tq.heads, tq.seqlen)) if return_lse else None
    to = fe.tensor("o", out, layout)
    with fe.options(causal, softmax_scale) as options:
        status = library().hopattn_forward(
            ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv), ctypes.byref(to),
            None if lse is None else fe.address(lse), ctypes.byref(options))
    raise_on_error(status)
    return out, lse


def backward(fe, grad_o, q, k, v, o, lse, causal, softmax_scale, layout, deterministic):
    """(dq, dk, dv) of hopattn_backward, each contiguous in its input's shape, for the forward
    (q, k, v) -> (o, lse) and the gradient grad_o of the loss with respect to o."""
    lib = backward_library()
    (q, tq), (k, tk), (v, tv), (o, to), (grad_o, t_do) = (
        fe.input(n, x, layout) for n, x in (("q", q), ("k", k), ("v", v), ("o", o),
                                            ("grad_o", grad_o)))
    dq, dk, dv = (fe.empty_like(x) for x in (q, k, v))
    tdq, tdk, tdv = (fe.tensor(n, x, layout) for n, x in (("dq", dq), ("dk", dk), ("dv", dv)))
    with fe.backward_options(causal, softmax_scale, deterministic) as options:
        status = lib.hopattn_backward(
            ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv), ctypes.byref(to),
            ctypes.byref(t_do), fe.address(lse), ctypes.byref(tdq), ctypes.byref(tdk),
            ctypes.byref(tdv), ctypes.byref(options))
    raise_on_error(status)
    return dq, dk, dv
