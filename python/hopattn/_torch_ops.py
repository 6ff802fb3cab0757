"""hopattn's PyTorch operators: attention that autograd differentiates and torch.compile traces.

Imported only when a torch tensor reaches hopattn.attention or hopattn.attention_varlen (so
`import hopattn` never imports torch). Four custom operators, each with a fake (meta)
implementation that gives its outputs' exact shapes, dtypes and strides from metadata alone:

    hopattn::attention_forward(q, k, v, causal, scale, layout) -> (o, lse)
    hopattn::attention_backward(grad_o, q, k, v, o, lse, causal, scale, layout) -> (dq, dk, dv)
    hopattn::attention_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k,
        max_seqlen_q, max_seqlen_k, causal, scale) -> (o, lse)
    hopattn::attention_varlen_backward(grad_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k,
        seqused_k, max_seqlen_q, max_seqlen_k, causal, scale) -> (dq, dk, dv)

scale is Python's (a float, or None for 1/sqrt(head_dim)); layout is "bshd" or "bhsd". Each forward
always computes the LSE, which its backward reads; the LSE is marked non-differentiable. Outputs
and gradients are new contiguous tensors in their input's shape. The real implementations are
attention.py's and varlen.py's forward() and backward(), on q's device: CPU tensors on the CPU
backend, CUDA tensors on SM90 on torch.cuda.current_stream(), the stream autograd also runs the
backward on. With torch.use_deterministic_algorithms(True) the backward asks the library for
bitwise-reproducible gradients.

attention() and attention_varlen() below check the arguments from their metadata alone before
calling an operator, so that a malformed call raises hopattn's error (naming the Python argument)
rather than the dispatcher's, also under torch.compile, whose tracing runs those checks on fake
tensors and records only the operator. The one value checked later is a scale that
torch.compile made symbolic (a float input under dynamic shapes): the operator checks it when
it runs, with the same message.
"""

from typing import Optional, Tuple

import torch

from ._frontend import (LAYOUTS, PACKED_K, PACKED_Q, TorchFrontend, as_softmax_scale, check_qkv,
                        check_scale_type)
from .attention import backward as _backward, forward as _forward
from .varlen import (backward as _backward_varlen, check_metadata,
                     forward as _forward_varlen)

Tensor = torch.Tensor


def scale_argument(scale):
    """Python's scale as the operators take it (None or a float). Checked whole here, unless
    torch.compile is tracing, where it may be symbolic: then its type here and its value by the
    operator, when it runs."""
    if torch.compiler.is_compiling():
        check_scale_type(scale)
        return scale
    softmax_scale = as_softmax_scale(scale)
    return softmax_scale if softmax_scale else None


def _check_fixed(q, k, v, layout):
    """The ABI shape of q, after every check that metadata allows; raises hopattn's errors."""
    fe = TorchFrontend(torch, q)
    (abi_q, _), _, _ = (fe.check(n, x, layout) for n, x in (("q", q), ("k", k), ("v", v)))
    check_qkv(q, k, v)
    return abi_q


def _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k):
    fe = TorchFrontend(torch, q)
    for name, x, layout in (("q", q, PACKED_Q), ("k", k, PACKED_K), ("v", v, PACKED_K)):
        fe.check(name, x, layout)
    check_qkv(q, k, v)
    fe.check_int32_vector("cu_seqlens_q", cu_seqlens_q)
    fe.check_int32_vector("cu_seqlens_k", cu_seqlens_k)
    if seqused_k is not None:
        fe.check_int32_vector("seqused_k", seqused_k)
    check_metadata(cu_seqlens_q, cu_seqlens_k, seqused_k)


def _new_like(x, dtype=None, shape=None):
    """A new contiguous tensor, as the real implementations allocate (TorchFrontend.empty)."""
    return torch.empty(x.shape if shape is None else shape, dtype=dtype or x.dtype,
                       device=x.device)


# --- fixed-length batches -----------------------------------------------------------------------

@torch.library.custom_op("hopattn::attention_forward", mutates_args=())
def attention_forward(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: Optional[float],
                      layout: str) -> Tuple[Tensor, Tensor]:
    return _forward(TorchFrontend(torch, q), q, k, v, causal, as_softmax_scale(scale),
                    LAYOUTS[layout], return_lse=True)


@attention_forward.register_fake
def _(q, k, v, causal, scale, layout):
    batch, seqlen, heads, _ = _check_fixed(q, k, v, LAYOUTS[layout])
    return _new_like(q), _new_like(q, torch.float32, (batch, heads, seqlen))


@torch.library.custom_op("hopattn::attention_backward", mutates_args=())
def attention_backward(grad_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor,
                       causal: bool, scale: Optional[float],
                       layout: str) -> Tuple[Tensor, Tensor, Tensor]:
    return _backward(TorchFrontend(torch, q), grad_o, q, k, v, o, lse, causal,
                     as_softmax_scale(scale), LAYOUTS[layout],
                     torch.are_deterministic_algorithms_enabled())


@attention_backward.register_fake
def _(grad_o, q, k, v, o, lse, causal, scale, layout):
    return _new_like(q), _new_like(k), _new_like(v)


def _setup_fixed(ctx, inputs, output):
    q, k, v, causal, scale, layout = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.arguments = (causal, scale, layout)
    ctx.mark_non_differentiable(lse)


def _backward_fixed(ctx, grad_o, grad_lse):
    q, k, v, o, lse = ctx.saved_tensors
    # grad_o is whatever autograd made (an expanded scalar's gradient has zero strides, which
    # SM90 refuses); a contiguous copy is cheap next to the backward and usually not needed.
    dq, dk, dv = attention_backward(grad_o.contiguous(), q, k, v, o, lse, *ctx.arguments)
    return dq, dk, dv, None, None, None


attention_forward.register_autograd(_backward_fixed, setup_context=_setup_fixed)


def attention(q, k, v, causal, scale, layout):
    """hopattn.attention's torch path: (o, lse), arguments as that function and scale_argument()
    checked them."""
    _check_fixed(q, k, v, layout)
    return attention_forward(q, k, v, causal, scale, layout.name)


# --- variable-length batches --------------------------------------------------------------------

@torch.library.custom_op("hopattn::attention_varlen_forward", mutates_args=())
def attention_varlen_forward(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor,
                             cu_seqlens_k: Tensor, seqused_k: Optional[Tensor], max_seqlen_q: int,
                             max_seqlen_k: int, causal: bool,
                             scale: Optional[float]) -> Tuple[Tensor, Tensor]:
    return _forward_varlen(TorchFrontend(torch, q), q, k, v, cu_seqlens_q, cu_seqlens_k,
                           seqused_k, max_seqlen_q, max_seqlen_k, causal,
                           as_softmax_scale(scale), return_lse=True)


@attention_varlen_forward.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, causal,
      scale):
    _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k)
    total_q, heads, _ = q.shape
    return _new_like(q), _new_like(q, torch.float32, (heads, total_q))


@torch.library.custom_op("hopattn::attention_varlen_backward", mutates_args=())
def attention_varlen_backward(grad_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor,
                              lse: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                              seqused_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
                              causal: bool,
                              scale: Optional[float]) -> Tuple[Tensor, Tensor, Tensor]:
    return _backward_varlen(TorchFrontend(torch, q), grad_o, q, k, v, o, lse, cu_seqlens_q,
                            cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, causal,
                            as_softmax_scale(scale), torch.are_deterministic_algorithms_enabled())


@attention_varlen_backward.register_fake
def _(grad_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
      max_seqlen_k, causal, scale):
    return _new_like(q), _new_like(k), _new_like(v)


def _setup_varlen(ctx, inputs, output):
    q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, *arguments = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k)
    ctx.arguments = tuple(arguments)  # max_seqlen_q, max_seqlen_k, causal, scale
    ctx.mark_non_differentiable(lse)


def _backward_varlen_autograd(ctx, grad_o, grad_lse):
    q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k = ctx.saved_tensors
    dq, dk, dv = attention_varlen_backward(grad_o.contiguous(), q, k, v, o, lse, cu_seqlens_q,
                                           cu_seqlens_k, seqused_k, *ctx.arguments)
    return dq, dk, dv, None, None, None, None, None, None, None


attention_varlen_forward.register_autograd(_backward_varlen_autograd,
                                           setup_context=_setup_varlen)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                     causal, scale):
    """hopattn.attention_varlen's torch path: (o, lse), arguments as that function and
    scale_argument() checked them."""
    _check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k)
    return attention_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k,
                                    max_seqlen_q, max_seqlen_k, causal, scale)
