"""Describes the caller's NumPy arrays or PyTorch tensors to the C ABI, for every operation.

A frontend is picked by the type of q; every other argument must be of the same kind, in the same
memory space. It only describes memory and allocates outputs: shapes, dtypes, head counts and the
backend's limits are checked by the library, in one place, and its message (which names the
argument at fault) is raised as HopattnError.
"""

import contextlib
import ctypes
import operator
import sys

import numpy as np

from ._ctypes_api import Backend, DType, ForwardOptions, Tensor, default_forward_options
from ._lib import library

# Names of the dimensions of each tensor layout, for the rank check's message. A packed layout
# (FlashAttention's varlen) is the ABI's (1, total, heads, head_dim).
FIXED = ("batch", "seqlen", "heads", "head_dim")
PACKED_Q = ("total_q", "heads", "head_dim")
PACKED_K = ("total_k", "heads", "head_dim")

_NUMPY_DTYPES = {"float32": DType.FLOAT32, "float16": DType.FLOAT16, "bfloat16": DType.BFLOAT16}
_TORCH_DTYPES = {"torch.float32": DType.FLOAT32, "torch.float16": DType.FLOAT16,
                 "torch.bfloat16": DType.BFLOAT16}
_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def describe(name, data_ptr, dtype, shape, strides, layout) -> Tensor:
    if len(shape) != len(layout):
        raise ValueError(f"{name}: expected {len(layout)} dimensions ({', '.join(layout)}), "
                         f"got shape {tuple(shape)}")
    shape, strides = tuple(shape), tuple(strides)
    if len(layout) == 3:
        # A batch of one: its batch_stride is never stepped, so the packed extent will do.
        shape, strides = (1, *shape), (shape[0] * strides[0], *strides)
    return Tensor(data_ptr, dtype, *shape, *strides[:3])


def as_int(name, value) -> int:
    """A Python int from an int-like (int, NumPy integer); bools and floats are refused."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}") from None
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{name}: {value} does not fit in int64")
    return value


def check_scale(scale) -> float:
    if scale is not None and scale == 0:
        raise ValueError("scale: 0 is not allowed (the C ABI reads 0 as the default "
                         "1/sqrt(head_dim)); pass scale=None for the default")
    return 0.0 if scale is None else float(scale)


class NumpyFrontend:
    """NumPy arrays (float32, float16, ml_dtypes bfloat16) on the CPU backend."""

    backend = Backend.CPU

    def array(self, name, array):
        if not isinstance(array, np.ndarray):
            expected = ("a numpy.ndarray or torch.Tensor" if name == "q"
                        else "a numpy.ndarray like q")
            raise TypeError(f"{name}: expected {expected}, got {type(array).__name__}")
        return array

    def input(self, name, array, layout):
        """(array to keep alive for the call, its Tensor)."""
        array = self.array(name, array)
        # The ABI needs head_dim unit-stride, non-negative element-multiple strides and native
        # byte order; a host copy is cheap next to the attention itself, so such arrays are
        # copied, not refused.
        if (array.ndim > 0 and (array.strides[-1] != array.itemsize
                                or any(s < 0 or s % array.itemsize for s in array.strides))):
            array = np.ascontiguousarray(array)
        if not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        return array, self.tensor(name, array, layout)

    def tensor(self, name, array, layout) -> Tensor:
        dtype = _NUMPY_DTYPES.get(array.dtype.name)  # bfloat16 from ml_dtypes: no import needed
        if dtype is None:
            raise TypeError(f"{name}: dtype {array.dtype} is not supported; use float32, float16 "
                            "or bfloat16 (ml_dtypes)")
        strides = [s // array.itemsize for s in array.strides]
        return describe(name, array.ctypes.data, dtype, array.shape, strides, layout)

    def int32_vector(self, name, array):
        """(array to keep alive for the call, its address): a 1-D int32 array such as cu_seqlens."""
        array = self.array(name, array)
        if array.dtype != np.int32:
            raise TypeError(f"{name}: dtype {array.dtype} is not supported; it must be int32 "
                            "(convert with .astype(numpy.int32))")
        if array.ndim != 1:
            raise ValueError(f"{name}: expected 1 dimension, got shape {array.shape}")
        array = np.ascontiguousarray(array)
        return array, array.ctypes.data

    def empty(self, shape, like):
        return np.empty(shape, dtype=like.dtype)

    def empty_float32(self, shape):
        return np.empty(shape, dtype=np.float32)

    def address(self, array):
        return array.ctypes.data

    @contextlib.contextmanager
    def options(self, causal, scale):
        """Options for a call made inside the block."""
        yield _options(causal, scale, self.backend)


class TorchFrontend:
    """PyTorch tensors: CPU tensors on the CPU backend, CUDA tensors on the SM90 backend on
    torch.cuda.current_stream()."""

    def __init__(self, torch, q):
        self.torch = torch
        self.device = q.device
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"q: device {q.device} is not supported; use a CPU or CUDA tensor")
        self.on_cuda = self.device.type == "cuda"
        self.backend = Backend.SM90 if self.on_cuda else Backend.CPU

    def array(self, name, t):
        if not isinstance(t, self.torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor like q, got {type(t).__name__}")
        if t.device != self.device:
            raise ValueError(f"{name}: on {t.device}, but q is on {self.device}")
        return t

    def input(self, name, t, layout):
        t = self.array(name, t)
        if t.dim() > 0 and t.stride(-1) != 1:
            if self.on_cuda:
                # A device copy would be a hidden allocation and launch on the caller's stream.
                raise ValueError(f"{name}: head_dim must be contiguous (stride 1) for CUDA "
                                 f"tensors, got stride {t.stride(-1)}; call .contiguous() first")
            t = t.contiguous()
        return t, self.tensor(name, t, layout)

    def tensor(self, name, t, layout) -> Tensor:
        dtype = _TORCH_DTYPES.get(str(t.dtype))
        if dtype is None:
            raise TypeError(f"{name}: dtype {t.dtype} is not supported; use torch.float32, "
                            "torch.float16 or torch.bfloat16")
        return describe(name, t.data_ptr(), dtype, t.shape, t.stride(), layout)

    def int32_vector(self, name, t):
        t = self.array(name, t)
        if t.dtype != self.torch.int32:
            raise TypeError(f"{name}: dtype {t.dtype} is not supported; it must be torch.int32 "
                            "(convert with .to(torch.int32))")
        if t.dim() != 1:
            raise ValueError(f"{name}: expected 1 dimension, got shape {tuple(t.shape)}")
        if t.numel() > 1 and t.stride(0) != 1:
            if self.on_cuda:
                raise ValueError(f"{name}: must be contiguous for CUDA tensors, got stride "
                                 f"{t.stride(0)}; call .contiguous() first")
            t = t.contiguous()
        return t, t.data_ptr()

    def empty(self, shape, like):
        with self.torch.no_grad():
            return self.torch.empty(shape, dtype=like.dtype, device=self.device)

    def empty_float32(self, shape):
        with self.torch.no_grad():
            return self.torch.empty(shape, dtype=self.torch.float32, device=self.device)

    def address(self, t):
        return t.data_ptr()

    @contextlib.contextmanager
    def options(self, causal, scale):
        if not self.on_cuda:
            yield _options(causal, scale, self.backend)
            return
        cuda = self.torch.cuda
        with cuda.device(self.device):
            stream = cuda.current_stream(self.device).cuda_stream
            yield _options(causal, scale, self.backend, stream)


def _options(causal, scale, backend, stream=None) -> ForwardOptions:
    options = default_forward_options(library())
    options.causal = 1 if causal else 0
    options.softmax_scale = check_scale(scale)
    options.backend = backend
    options.cuda_stream = stream
    return options


def frontend_for(q):
    torch = sys.modules.get("torch")  # a tensor can only exist if torch is already imported
    if torch is not None and isinstance(q, torch.Tensor):
        return TorchFrontend(torch, q)
    return NumpyFrontend()
