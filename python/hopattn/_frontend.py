"""Describes the caller's NumPy arrays or PyTorch tensors to the C ABI, for every operation.

A frontend is picked by the type of q; every other argument must be of the same kind, in the same
memory space. It describes memory, allocates outputs and checks what only Python can see: the
types of the arguments, the caller's layout of the axes, and the dtypes by their Python names.
Sizes, head counts, strides and the backends' limits are checked by the library, in one place,
and its message (which names the argument at fault) is raised as HopattnError.
"""

import contextlib
import math
import numbers
import operator
import reprlib
import sys

import numpy as np

from ._ctypes_api import (Backend, DType, Status, Tensor, default_backward_options,
                          default_forward_options, default_quantize_options, has_backward)
from ._errors import HopattnError, InvalidArgumentError, InvalidTypeError
from ._lib import find_library, library


class Layout:
    """How the axes of a caller's tensor map onto the ABI's (batch, seqlen, heads, head_dim).

    name is attention()'s spelling ("bshd", "bhsd"; "packed" for varlen); dims names the caller's
    axes in order; abi_axes gives, for each of the ABI's seqlen, heads and head_dim, the caller's
    axis that holds it, and for batch the axis or None: a packed layout (FlashAttention's varlen)
    is the ABI's (1, total, heads, head_dim).
    """

    def __init__(self, name, dims, abi_axes, described_as, other_rank_hint):
        self.name = name
        self.dims = dims
        self.abi_axes = abi_axes
        self.described_as = described_as
        self.other_rank_hint = other_rank_hint

    def to_abi(self, name, shape, strides):
        """(shape, strides) in the ABI's order, after checking rank and sizes in these names."""
        shape, strides = tuple(shape), tuple(strides)
        if len(shape) != len(self.dims):
            other_rank = 3 if len(self.dims) == 4 else 4
            hint = self.other_rank_hint if len(shape) == other_rank else ""
            raise InvalidArgumentError(
                f"{name}: expected {len(self.dims)} dimensions ({', '.join(self.dims)})"
                f"{self.described_as}, got shape {shape}{hint}")
        # Checked here, not only by the library: an empty torch tensor has no data pointer, and
        # the library would report that first.
        if 0 in shape:
            dim = self.dims[shape.index(0)]
            raise InvalidArgumentError(f"{name}: {dim} is 0 (shape {shape}); every dimension "
                                       "must be > 0")
        # Spelt out rather than looped: every call of every operation passes here several times.
        batch_axis, seq_axis, heads_axis, dim_axis = self.abi_axes
        if batch_axis is None:
            # A batch of one: its batch_stride is never stepped, so the packed extent will do.
            return ((1, shape[seq_axis], shape[heads_axis], shape[dim_axis]),
                    (shape[0] * strides[0], strides[seq_axis], strides[heads_axis], strides[dim_axis]))
        return ((shape[batch_axis], shape[seq_axis], shape[heads_axis], shape[dim_axis]),
                (strides[batch_axis], strides[seq_axis], strides[heads_axis], strides[dim_axis]))


_TO_VARLEN = "; a packed variable-length batch goes to hopattn.attention_varlen"
_TO_FIXED = "; a (batch, seqlen, heads, head_dim) batch goes to hopattn.attention"

# attention(layout=...): the ABI's own order, and PyTorch SDPA's (batch, heads, seqlen, head_dim).
LAYOUTS = {
    "bshd": Layout("bshd", ("batch", "seqlen", "heads", "head_dim"), (0, 1, 2, 3),
                   " for layout='bshd'", _TO_VARLEN),
    "bhsd": Layout("bhsd", ("batch", "heads", "seqlen", "head_dim"), (0, 2, 1, 3),
                   " for layout='bhsd'", _TO_VARLEN),
}
FIXED = LAYOUTS["bshd"]
PACKED_Q = Layout("packed", ("total_q", "heads", "head_dim"), (None, 0, 1, 2), "", _TO_FIXED)
PACKED_K = Layout("packed", ("total_k", "heads", "head_dim"), (None, 0, 1, 2), "", _TO_FIXED)

_NUMPY_DTYPES = {"float32": DType.FLOAT32, "float16": DType.FLOAT16, "bfloat16": DType.BFLOAT16}
# NumpyFrontend.dtype's answers by dtype object: a dtype's name is slow to make (microseconds, and
# every call asks several times).
_numpy_dtype_of = {}
_TORCH_DTYPES = {"torch.float32": DType.FLOAT32, "torch.float16": DType.FLOAT16,
                 "torch.bfloat16": DType.BFLOAT16}
# e4m3 codes (hopattn.quantize_fp8's output, hopattn.forward_fp8's input): their bits as uint8, or
# the OCP e4m3fn type itself (ml_dtypes' and torch's have the library's bit layout).
_NUMPY_CODES = ("uint8", "float8_e4m3fn")
_TORCH_CODES = ("torch.uint8", "torch.float8_e4m3fn")
_CODES_RULE = ("e4m3 codes, as hopattn.quantize_fp8 returns them (uint8 bit patterns or "
               "float8_e4m3fn)")
_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1
# The library scales in float32 and reads softmax_scale = 0 as "the default": a scale that is 0,
# inf or subnormal in float32 would silently become the default, overflow, or lose its precision.
_FLOAT32_MIN_NORMAL = float(np.finfo(np.float32).tiny)  # 2^-126
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_SCALE_RULE = ("scale must be a positive finite float, or None for 1/sqrt(head_dim); in float32 "
               f"it must be a normal number, {_FLOAT32_MIN_NORMAL:.8g} to {_FLOAT32_MAX:.8g}")


def type_name(value) -> str:
    """"numpy.ndarray", "torch.Tensor", "list": the name a Python user knows the type by."""
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _is_bool(value) -> bool:
    return isinstance(value, (bool, np.bool_))


def layout_of(layout) -> Layout:
    if not isinstance(layout, str):
        raise InvalidTypeError(f"layout must be the str 'bshd' or 'bhsd', got {type_name(layout)} "
                               f"{reprlib.repr(layout)}")
    found = LAYOUTS.get(layout)
    if found is None:
        raise InvalidArgumentError(
            f"layout is {reprlib.repr(layout)}; allowed: 'bshd' (batch, seqlen, heads, head_dim) "
            "and 'bhsd' (batch, heads, seqlen, head_dim), PyTorch SDPA's layout")
    return found


def as_flag(name, value) -> bool:
    """A bool (or NumPy bool); anything else, truthy or not, is refused."""
    if not _is_bool(value):
        raise InvalidTypeError(f"{name} must be a bool (True or False), got {type_name(value)} "
                               f"{reprlib.repr(value)}")
    return bool(value)


def as_int(name, value) -> int:
    """A Python int from an int-like (int, NumPy integer); bools and floats are refused."""
    if _is_bool(value):
        raise InvalidTypeError(f"{name}: expected an int, got {type_name(value)}")
    try:
        value = operator.index(value)
    except TypeError:
        raise InvalidTypeError(f"{name}: expected an int, got {type_name(value)}") from None
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise InvalidArgumentError(f"{name}: {value} does not fit in int64")
    return value


def _to_float32(value: float) -> float:
    """A positive finite value rounded to float32 (nearest, ties to even; inf past its range), as
    the C conversion to float does. Plain arithmetic rather than ctypes.c_float, which
    torch.compile cannot trace: attention() runs this inside a compiled model."""
    _, exponent = math.frexp(value)  # value = m * 2**exponent, 0.5 <= m < 1
    quantum = max(exponent - 24, -149)  # 24 significant bits; subnormals step by 2**-149
    rounded = math.ldexp(round(math.ldexp(value, -quantum)), quantum)
    return rounded if rounded < 2.0 ** 128 else math.inf


def check_scale_type(scale) -> None:
    """Python's scale is None or a real number (its value is as_softmax_scale's to check)."""
    if scale is not None and (_is_bool(scale) or not isinstance(scale, numbers.Real)):
        raise InvalidTypeError(f"{_SCALE_RULE}; got {type_name(scale)} {reprlib.repr(scale)}")


def as_softmax_scale(scale) -> float:
    """The ABI's softmax_scale (a float32; 0 means 1/sqrt(head_dim)) for Python's scale."""
    check_scale_type(scale)
    if scale is None:
        return 0.0
    try:
        value = float(scale)
    except OverflowError:  # an int past float64's range
        value = math.inf
    if not (math.isfinite(value) and value > 0):
        raise InvalidArgumentError(f"{_SCALE_RULE}; got {reprlib.repr(scale)}")
    as_float32 = _to_float32(value)
    # Past float32's range the ABI would see inf, or 0, which it reads as the default.
    if not (math.isfinite(as_float32) and as_float32 > 0):
        raise InvalidArgumentError(f"{_SCALE_RULE}; got {reprlib.repr(scale)}, which is "
                                   f"{as_float32} in float32, the precision the library uses")
    if as_float32 < _FLOAT32_MIN_NORMAL:
        raise InvalidArgumentError(f"{_SCALE_RULE}; got {reprlib.repr(scale)}, which is the "
                                   f"subnormal {as_float32:.8g} in float32, the precision the "
                                   "library uses")
    return value


def check_qkv(q, k, v):
    """What the library would also refuse, said in the caller's terms: one dtype by its Python
    name, and v's shape in the caller's axis order."""
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise InvalidTypeError(f"{name}: dtype {x.dtype}, but q is {q.dtype}; q, k and v "
                                   "must share one dtype")
    if tuple(v.shape) != tuple(k.shape):
        raise InvalidArgumentError(f"v: shape {tuple(v.shape)}, but k has shape "
                                   f"{tuple(k.shape)}; v must have k's shape")


def _as_abi_layout(array):
    """array, or a host copy of it that the ABI can read: native byte order, element-aligned,
    head_dim (the last axis) unit-stride, every stride a non-negative multiple of the element
    size. A host copy is cheap next to the attention itself, so such arrays are copied, not
    refused; the result is always in native byte order."""
    if not array.dtype.isnative:  # ">f4" on a little-endian machine: the library reads bytes
        return array.astype(array.dtype.newbyteorder("="), order="C")
    itemsize = array.itemsize
    if (not array.flags.aligned  # np.frombuffer(..., offset=1): the library reads whole elements
            or (array.ndim > 0 and (array.strides[-1] != itemsize
                                    or any(s < 0 or s % itemsize for s in array.strides)))):
        return np.array(array, order="C", copy=True)  # a new buffer: aligned, even if contiguous
    return array


class NumpyFrontend:
    """NumPy arrays (float32, float16, ml_dtypes bfloat16; e4m3 codes as uint8 or ml_dtypes
    float8_e4m3fn) on the CPU backend. `first` names the argument that picked the frontend (q, or
    quantize_fp8's x)."""

    backend = Backend.CPU

    def __init__(self, first="q"):
        self.first = first

    def array(self, name, array):
        if not isinstance(array, np.ndarray):
            expected = ("a numpy.ndarray or torch.Tensor" if name == self.first
                        else f"a numpy.ndarray like {self.first}")
            raise InvalidTypeError(f"{name}: expected {expected}, got {type_name(array)}")
        return array

    def input(self, name, array, layout):
        """(array to keep alive for the call, its Tensor)."""
        array = self.array(name, array)
        self.dtype(name, array)  # refused before any copy is made
        array = _as_abi_layout(array)
        return array, self.tensor(name, array, layout)

    def dtype(self, name, array) -> DType:
        dtype = _numpy_dtype_of.get(array.dtype)
        if dtype is None:
            dtype = _NUMPY_DTYPES.get(array.dtype.name)  # bfloat16 from ml_dtypes: no import needed
            if dtype is None:
                raise InvalidTypeError(f"{name}: dtype {array.dtype} is not supported; use "
                                       "float32, float16 or bfloat16 (ml_dtypes)")
            _numpy_dtype_of[array.dtype] = dtype
        return dtype

    def tensor(self, name, array, layout) -> Tensor:
        dtype = self.dtype(name, array)
        strides = [s // array.itemsize for s in array.strides]
        shape, strides = layout.to_abi(name, array.shape, strides)
        return Tensor(array.ctypes.data, dtype, *shape, *strides[:3])

    def codes(self, name, array, layout):
        """(array to keep alive for the call, its Tensor) of e4m3 codes, read in place where the
        ABI can read them, as input() does."""
        array = self.array(name, array)
        if array.dtype.name not in _NUMPY_CODES:
            raise InvalidTypeError(f"{name}: dtype {array.dtype} is not {_CODES_RULE}")
        array = _as_abi_layout(array)
        strides = [s // array.itemsize for s in array.strides]
        shape, strides = layout.to_abi(name, array.shape, strides)
        return array, Tensor(array.ctypes.data, DType.FLOAT8_E4M3, *shape, *strides[:3])

    def codes_in_c_order(self, name, array):
        """(array to keep alive for the call, its address): e4m3 codes in C order, such as a V in
        the "v_transposed" layout; copied when not C-contiguous."""
        array = self.array(name, array)
        if array.dtype.name not in _NUMPY_CODES:
            raise InvalidTypeError(f"{name}: dtype {array.dtype} is not {_CODES_RULE}")
        array = np.ascontiguousarray(array)
        return array, array.ctypes.data

    def float32_array(self, name, array):
        """(array to keep alive for the call, its address): float32 values in C order, such as FP8
        scales; copied when the library could not read them in place."""
        array = self.array(name, array)
        if array.dtype.newbyteorder("=") != np.float32:
            raise InvalidTypeError(f"{name}: dtype {array.dtype} is not supported; it must be "
                                   "float32")
        if not (array.dtype.isnative and array.flags.c_contiguous and array.flags.aligned):
            array = np.array(array, dtype=np.float32, order="C", copy=True)
        return array, array.ctypes.data

    def empty_codes(self, shape):
        return np.empty(shape, dtype=np.uint8)

    def empty_dtype(self, name, shape, dtype: DType):
        """An output of the library's dtype (float16 or bfloat16, which needs ml_dtypes)."""
        if dtype == DType.FLOAT16:
            return np.empty(shape, dtype=np.float16)
        try:
            import ml_dtypes
        except ImportError:
            raise InvalidTypeError(f"{name}: bfloat16 NumPy arrays need the ml_dtypes package, "
                                   "which is not installed; install it or ask for float16")
        return np.empty(shape, dtype=ml_dtypes.bfloat16)

    @contextlib.contextmanager
    def quantize_options(self):
        """Quantisation options for a call made inside the block, on this frontend's backend."""
        options = default_quantize_options(library())
        options.backend = self.backend
        yield options

    def int32_vector(self, name, array):
        """(array to keep alive for the call, its address): a 1-D int32 array such as cu_seqlens."""
        array = self.array(name, array)
        if array.dtype.newbyteorder("=") != np.int32:
            raise InvalidTypeError(f"{name}: dtype {array.dtype} is not supported; it must be "
                                   "int32 (convert with .astype(numpy.int32))")
        if array.ndim != 1:
            raise InvalidArgumentError(f"{name}: expected 1 dimension, got shape {array.shape}")
        array = _as_abi_layout(array)
        return array, array.ctypes.data

    def empty_like(self, array):
        """A new C-order array of array's shape and dtype."""
        return np.empty(array.shape, dtype=array.dtype)

    def empty_float32(self, shape):
        return np.empty(shape, dtype=np.float32)

    def address(self, array):
        return array.ctypes.data

    @contextlib.contextmanager
    def options(self, causal, softmax_scale):
        """Options for a call made inside the block (NumPy is forward only)."""
        yield _options(default_forward_options, causal, softmax_scale, self.backend)


class TorchFrontend:
    """PyTorch tensors: CPU tensors on the CPU backend, CUDA tensors on the SM90 backend on
    torch.cuda.current_stream().

    check() and check_int32_vector() read only a tensor's metadata (type, device, dtype, shape,
    strides), so they also run on the fake tensors of torch.compile's tracing and in the custom
    operators' fake implementations (_torch_ops.py); input(), tensor() and int32_vector() read
    data pointers, in the operators' real implementations only.
    """

    def __init__(self, torch, q, first="q"):
        self.torch = torch
        self.first = first  # the argument that picked the frontend: q, or quantize_fp8's x
        self.device = q.device
        if self.device.type not in ("cpu", "cuda"):
            raise InvalidArgumentError(f"{first}: device {q.device} is not supported; use a CPU "
                                       "or CUDA tensor")
        self.on_cuda = self.device.type == "cuda"
        self.backend = Backend.SM90 if self.on_cuda else Backend.CPU

    def array(self, name, t):
        if not isinstance(t, self.torch.Tensor):
            raise InvalidTypeError(f"{name}: expected a torch.Tensor like {self.first}, got "
                                   f"{type_name(t)}")
        if t.device != self.device:
            raise InvalidArgumentError(f"{name}: on {t.device}, but {self.first} is on "
                                       f"{self.device}")
        return t

    def check(self, name, t, layout):
        """What input() would refuse, from metadata alone: the ABI (shape, strides)."""
        return self._checked(name, t, layout)[1:]

    def _checked(self, name, t, layout):
        """check()'s work: (DType, shape, strides), the last two in the ABI's order."""
        self.array(name, t)
        strides = t.stride()
        if self.on_cuda and strides and strides[-1] != 1 and t.numel() > 0:
            # A device copy would be a hidden allocation and launch on the caller's stream.
            raise InvalidArgumentError(
                f"{name}: head_dim must be contiguous (stride 1) for CUDA tensors, got stride "
                f"{strides[-1]}; call .contiguous() first")
        dtype = self.dtype(name, t)
        return (dtype, *layout.to_abi(name, t.shape, strides))

    def input(self, name, t, layout):
        # Torch has neither byte orders nor negative strides; what the ABI cannot read is a
        # head_dim that is not unit-stride, or (torch.frombuffer at an odd offset) an address
        # that is no multiple of the element size. Host tensors are copied, as NumPy arrays are.
        dtype, shape, strides = self._checked(name, t, layout)
        copied = False
        if strides[3] != 1 and t.numel() > 0:
            t = t.contiguous()  # host memory only: check() refused it on CUDA
            copied = True
        if not self.on_cuda and t.data_ptr() % t.element_size():
            t = t.clone(memory_format=self.torch.contiguous_format)  # a new, aligned buffer
            copied = True
        if copied:
            shape, strides = layout.to_abi(name, t.shape, t.stride())
        return t, Tensor(t.data_ptr(), dtype, *shape, *strides[:3])

    def dtype(self, name, t) -> DType:
        dtype = _TORCH_DTYPES.get(str(t.dtype))
        if dtype is None:
            raise InvalidTypeError(f"{name}: dtype {t.dtype} is not supported; use "
                                   "torch.float32, torch.float16 or torch.bfloat16")
        return dtype

    def tensor(self, name, t, layout) -> Tensor:
        dtype = self.dtype(name, t)
        shape, strides = layout.to_abi(name, t.shape, t.stride())
        return Tensor(t.data_ptr(), dtype, *shape, *strides[:3])

    def codes(self, name, t, layout):
        """(tensor to keep alive for the call, its Tensor) of e4m3 codes; host tensors whose
        head_dim is not unit-stride are copied, CUDA ones refused, as input() does."""
        self.array(name, t)
        if str(t.dtype) not in _TORCH_CODES:
            raise InvalidTypeError(f"{name}: dtype {t.dtype} is not {_CODES_RULE}")
        if t.dim() > 0 and t.stride(-1) != 1 and t.numel() > 0:
            if self.on_cuda:
                raise InvalidArgumentError(
                    f"{name}: head_dim must be contiguous (stride 1) for CUDA tensors, got stride "
                    f"{t.stride(-1)}; call .contiguous() first")
            t = t.contiguous()
        shape, strides = layout.to_abi(name, t.shape, t.stride())
        return t, Tensor(t.data_ptr(), DType.FLOAT8_E4M3, *shape, *strides[:3])

    def codes_in_c_order(self, name, t):
        """(tensor to keep alive for the call, its address): e4m3 codes in C order (a V in the
        "v_transposed" layout); host tensors copied when not contiguous, CUDA ones refused."""
        self.array(name, t)
        if str(t.dtype) not in _TORCH_CODES:
            raise InvalidTypeError(f"{name}: dtype {t.dtype} is not {_CODES_RULE}")
        t = self._in_c_order(name, t)
        return t, t.data_ptr()

    def float32_array(self, name, t):
        """(tensor to keep alive for the call, its address): float32 values in C order (FP8
        scales); host tensors copied when not contiguous, CUDA ones refused."""
        self.array(name, t)
        if t.dtype != self.torch.float32:
            raise InvalidTypeError(f"{name}: dtype {t.dtype} is not supported; it must be "
                                   "torch.float32")
        t = self._in_c_order(name, t)
        return t, t.data_ptr()

    def _in_c_order(self, name, t):
        """t, or for a host tensor that is not contiguous a contiguous copy; CUDA ones are refused
        (a device copy would be a hidden allocation and launch on the caller's stream)."""
        if not t.is_contiguous():
            if self.on_cuda:
                raise InvalidArgumentError(f"{name}: must be contiguous for CUDA tensors; call "
                                           ".contiguous() first")
            t = t.contiguous()
        return t

    # The outputs are new tensors outside autograd (torch.empty records nothing), made with the
    # fewest calls into torch: each costs microseconds of the call's host time.
    def empty_codes(self, shape):
        return self.torch.empty(shape, dtype=self.torch.float8_e4m3fn, device=self.device)

    def empty_dtype(self, name, shape, dtype: DType):
        torch_dtype = self.torch.float16 if dtype == DType.FLOAT16 else self.torch.bfloat16
        return self.torch.empty(shape, dtype=torch_dtype, device=self.device)

    @contextlib.contextmanager
    def quantize_options(self):
        with self._stream() as stream:
            options = default_quantize_options(library())
            options.backend = self.backend
            options.cuda_stream = stream
            yield options

    def check_int32_vector(self, name, t):
        """What int32_vector() would refuse, from metadata alone."""
        self.array(name, t)
        if t.dtype != self.torch.int32:
            raise InvalidTypeError(f"{name}: dtype {t.dtype} is not supported; it must be "
                                   "torch.int32 (convert with .to(torch.int32))")
        if t.dim() != 1:
            raise InvalidArgumentError(f"{name}: expected 1 dimension, got shape "
                                       f"{tuple(t.shape)}")
        if self.on_cuda and t.numel() > 1 and t.stride(0) != 1:
            raise InvalidArgumentError(f"{name}: must be contiguous for CUDA tensors, got "
                                       f"stride {t.stride(0)}; call .contiguous() first")

    def int32_vector(self, name, t):
        self.check_int32_vector(name, t)
        if t.numel() > 1 and t.stride(0) != 1:
            t = t.contiguous()  # host memory only: check_int32_vector() refused it on CUDA
        return t, t.data_ptr()

    def empty_like(self, t):
        """A new contiguous tensor of t's shape, dtype and device."""
        return self.torch.empty_like(t, memory_format=self.torch.contiguous_format)

    def empty_float32(self, shape):
        return self.torch.empty(shape, dtype=self.torch.float32, device=self.device)

    def address(self, t):
        return t.data_ptr()

    @contextlib.contextmanager
    def _stream(self):
        """The caller's current CUDA stream (None on the host), with q's device current."""
        if not self.on_cuda:
            yield None
            return
        cuda = self.torch.cuda
        with cuda.device(self.device):
            yield cuda.current_stream(self.device).cuda_stream

    @contextlib.contextmanager
    def options(self, causal, softmax_scale):
        with self._stream() as stream:
            yield _options(default_forward_options, causal, softmax_scale, self.backend, stream)

    @contextlib.contextmanager
    def backward_options(self, causal, softmax_scale, deterministic=False):
        with self._stream() as stream:
            options = _options(default_backward_options, causal, softmax_scale, self.backend,
                               stream)
            options.deterministic = 1 if deterministic else 0
            yield options


def _options(default, causal, softmax_scale, backend, stream=None):
    """A ForwardOptions or BackwardOptions, made by default (its default_*_options), with causal
    and softmax_scale as checked by as_flag and as_softmax_scale."""
    options = default(library())
    options.causal = 1 if causal else 0
    options.softmax_scale = softmax_scale
    options.backend = backend
    options.cuda_stream = stream
    return options


def backward_library():
    """library(), once it is known to export the backward pass."""
    lib = library()
    if not has_backward(lib):
        raise HopattnError(Status.UNSUPPORTED, f"the loaded library ({find_library()}, version "
                           f"{lib.hopattn_version().decode()}) has no backward pass "
                           "(hopattn_backward is missing): rebuild or reinstall it")
    return lib


def torch_ops_for(*tensors):
    """hopattn._torch_ops (the autograd-aware custom operators) when the call's torch tensors
    need them, else None (then frontend_for(q) runs the call). They are needed where autograd
    records the call, under torch.compile, and for tensor subclasses (fake tensors); a plain eager
    call that records nothing goes straight to the library, since the operator's dispatch costs
    tens of microseconds per call. A tensor can only exist if torch is already imported, so NumPy
    callers never import it."""
    torch = sys.modules.get("torch")
    # torch.library.custom_op came with PyTorch 2.4; before it, torch tensors run forward only.
    if (torch is None or not isinstance(tensors[0], torch.Tensor)
            or not hasattr(torch.library, "custom_op")):
        return None
    # Anything that is not a plain tensor (a NumPy array among them, which the checks then refuse
    # naming it) takes the operators' path.
    plain = all(type(t) is torch.Tensor for t in tensors)
    recorded = torch.is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in tensors)
    if not recorded and plain and not torch.compiler.is_compiling():
        return None
    from . import _torch_ops
    return _torch_ops


def frontend_for(q, first="q"):
    """The frontend of q's kind; `first` is q's name in the caller's messages."""
    torch = sys.modules.get("torch")  # a tensor can only exist if torch is already imported
    if torch is not None and isinstance(q, torch.Tensor):
        return TorchFrontend(torch, q, first)
    return NumpyFrontend(first)
