"""hopattn.attention for NumPy arrays and PyTorch tensors.

The binding only describes the caller's memory to the C library; shapes, dtypes, head
counts and the backend's limits are checked there, in one place, and its message (which
names the offending argument) is raised as HopattnError.
"""

import ctypes
import sys

import numpy as np

from ._ctypes_api import Backend, DType, ForwardOptions, Status, Tensor
from ._lib import library


class HopattnError(RuntimeError):
    """A failed library call: .status (a Status) and .message (the library's text)."""

    def __init__(self, status: int, message: str):
        self.status = Status(status)
        self.message = message
        super().__init__(f"{self.status.name}: {message}")


class InvalidArgumentError(HopattnError, ValueError):
    """The call was malformed (HOPATTN_ERROR_INVALID_ARGUMENT); also a ValueError."""


def _raise_on_error(status: int) -> None:
    if status == Status.OK:
        return
    message = library().hopattn_last_error().decode()
    cls = InvalidArgumentError if status == Status.INVALID_ARGUMENT else HopattnError
    raise cls(status, message)


_NUMPY_DTYPES = {"float32": DType.FLOAT32, "float16": DType.FLOAT16, "bfloat16": DType.BFLOAT16}
_TORCH_DTYPES = {"torch.float32": DType.FLOAT32, "torch.float16": DType.FLOAT16,
                 "torch.bfloat16": DType.BFLOAT16}


def _describe(name, data_ptr, dtype, shape, strides) -> Tensor:
    if len(shape) != 4:
        raise ValueError(f"{name}: expected 4 dimensions (batch, seqlen, heads, head_dim), "
                         f"got shape {tuple(shape)}")
    return Tensor(data_ptr, dtype, *shape, *strides[:3])


def _numpy_dtype(name, array) -> DType:
    # bfloat16 arrays come from ml_dtypes; matching the name needs no import of it.
    dtype = _NUMPY_DTYPES.get(array.dtype.name)
    if dtype is None:
        raise TypeError(f"{name}: dtype {array.dtype} is not supported; use float32, float16 "
                        "or bfloat16 (ml_dtypes)")
    return dtype


def _host_numpy(name, array):
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{name}: expected a numpy.ndarray or torch.Tensor, got "
                        f"{type(array).__name__}")
    # The ABI needs head_dim unit-stride and element-multiple strides; a host copy is cheap
    # next to the attention itself, so such views are copied rather than refused.
    if array.ndim == 4 and (array.strides[3] != array.itemsize
                            or any(s % array.itemsize for s in array.strides)):
        array = np.ascontiguousarray(array)
    return array


def _numpy_tensor(name, array) -> Tensor:
    strides = [s // array.itemsize for s in array.strides]
    return _describe(name, array.ctypes.data, _numpy_dtype(name, array), array.shape, strides)


def _options(causal, scale, backend, stream=None) -> ForwardOptions:
    if scale is not None and scale == 0:
        raise ValueError("scale: 0 is not allowed (the C ABI reads 0 as the default "
                         "1/sqrt(head_dim)); pass scale=None for the default")
    options = library().hopattn_default_forward_options()
    options.causal = 1 if causal else 0
    options.softmax_scale = 0.0 if scale is None else float(scale)
    options.backend = backend
    options.cuda_stream = stream
    return options


def _forward(q, k, v, o, lse_ptr, options) -> None:
    status = library().hopattn_forward(ctypes.byref(q), ctypes.byref(k), ctypes.byref(v),
                                       ctypes.byref(o), lse_ptr, ctypes.byref(options))
    _raise_on_error(status)


def _attention_numpy(q, k, v, causal, scale, return_lse):
    q, k, v = (_host_numpy(n, a) for n, a in (("q", q), ("k", k), ("v", v)))
    tq, tk, tv = _numpy_tensor("q", q), _numpy_tensor("k", k), _numpy_tensor("v", v)
    out = np.empty(q.shape, dtype=q.dtype)
    lse = np.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=np.float32) if return_lse else None
    _forward(tq, tk, tv, _numpy_tensor("o", out), None if lse is None else lse.ctypes.data,
             _options(causal, scale, Backend.CPU))
    return (out, lse) if return_lse else out


def _torch_tensor(name, t) -> Tensor:
    dtype = _TORCH_DTYPES.get(str(t.dtype))
    if dtype is None:
        raise TypeError(f"{name}: dtype {t.dtype} is not supported; use torch.float32, "
                        "torch.float16 or torch.bfloat16")
    return _describe(name, t.data_ptr(), dtype, t.shape, t.stride())


def _attention_torch(torch, q, k, v, causal, scale, return_lse):
    for name, t in (("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor like q, got {type(t).__name__}")
        if t.device != q.device:
            raise ValueError(f"{name}: on {t.device}, but q is on {q.device}")
    on_cuda = q.device.type == "cuda"
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"q: device {q.device} is not supported; use a CPU or CUDA tensor")
    if on_cuda:
        # A device copy would be a hidden allocation and launch on the caller's stream.
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.dim() == 4 and t.stride(3) != 1:
                raise ValueError(f"{name}: head_dim must be contiguous (stride 1) for CUDA "
                                 f"tensors, got stride {t.stride(3)}; call .contiguous() first")
    else:
        q, k, v = (t if t.dim() != 4 or t.stride(3) == 1 else t.contiguous() for t in (q, k, v))
    tq, tk, tv = _torch_tensor("q", q), _torch_tensor("k", k), _torch_tensor("v", v)
    with torch.no_grad():
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        lse = (torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32,
                           device=q.device) if return_lse else None)
    if on_cuda:
        with torch.cuda.device(q.device):
            options = _options(causal, scale, Backend.SM90,
                               torch.cuda.current_stream(q.device).cuda_stream)
            _forward(tq, tk, tv, _torch_tensor("o", out),
                     None if lse is None else lse.data_ptr(), options)
    else:
        _forward(tq, tk, tv, _torch_tensor("o", out), None if lse is None else lse.data_ptr(),
                 _options(causal, scale, Backend.CPU))
    return (out, lse) if return_lse else out


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
    torch = sys.modules.get("torch")  # a tensor can only exist if torch is already imported
    if torch is not None and isinstance(q, torch.Tensor):
        return _attention_torch(torch, q, k, v, causal, scale, return_lse)
    return _attention_numpy(q, k, v, causal, scale, return_lse)
