"""ctypes mirrors of the types in include/hopattn/hopattn.h.

Kept field for field in the header's order (tests/python/test_abi_layout.py compiles the header
and compares every size and offset); C enums are passed as int, which is their size on every ABI
the library is built for.
"""

import ctypes
import enum


class Status(enum.IntEnum):
    OK = 0
    INVALID_ARGUMENT = 1
    UNSUPPORTED = 2
    BACKEND_UNAVAILABLE = 3
    CUDA = 4
    INTERNAL = 5


class DType(enum.IntEnum):
    FLOAT32 = 0
    BFLOAT16 = 1
    FLOAT16 = 2
    FLOAT8_E4M3 = 3  # hopattn_quantize_fp8's output, hopattn_forward_fp8's input


class Fp8Scaling(enum.IntEnum):
    TENSOR = 0
    HEAD = 1
    BLOCK = 2


class Fp8Layout(enum.IntEnum):
    ROWS = 0
    V_TRANSPOSED = 1  # V as the SM90 FP8 kernel reads it; hopattn/_fp8_layout.py describes it


class Backend(enum.IntEnum):
    AUTO = 0
    CPU = 1
    SM90 = 2


class Tensor(ctypes.Structure):
    """hopattn_tensor: (batch, seqlen, heads, head_dim), strides in elements."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("batch", ctypes.c_int64),
        ("seqlen", ctypes.c_int64),
        ("heads", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("batch_stride", ctypes.c_int64),
        ("seq_stride", ctypes.c_int64),
        ("head_stride", ctypes.c_int64),
    ]


class ForwardOptions(ctypes.Structure):
    """hopattn_forward_options. Build it with default_forward_options()."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("causal", ctypes.c_int),
        ("softmax_scale", ctypes.c_float),
        ("backend", ctypes.c_int),
        ("cuda_stream", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
        ("fp8_v_layout", ctypes.c_int),  # hopattn_forward_fp8 only
    ]


class BackwardOptions(ctypes.Structure):
    """hopattn_backward_options. Build it with default_backward_options()."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("causal", ctypes.c_int),
        ("softmax_scale", ctypes.c_float),
        ("backend", ctypes.c_int),
        ("cuda_stream", ctypes.c_void_p),
        ("deterministic", ctypes.c_int),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
    ]


class Varlen(ctypes.Structure):
    """hopattn_varlen: a packed variable-length batch. Build it with default_varlen()."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("batch", ctypes.c_int64),
        ("cu_seqlens_q", ctypes.c_void_p),  # const int32_t*
        ("cu_seqlens_k", ctypes.c_void_p),  # const int32_t*
        ("seqused_k", ctypes.c_void_p),     # const int32_t*, or NULL
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_k", ctypes.c_int64),
    ]


class QuantizeOptions(ctypes.Structure):
    """hopattn_quantize_options. Build it with default_quantize_options()."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("scaling", ctypes.c_int),
        ("block_rows", ctypes.c_int64),
        ("hadamard", ctypes.c_int),
        ("seed", ctypes.c_uint64),
        ("backend", ctypes.c_int),
        ("cuda_stream", ctypes.c_void_p),
        ("layout", ctypes.c_int),  # of out
    ]


class Fp8Scales(ctypes.Structure):
    """hopattn_fp8_scales: the float32 scales of one e4m3 tensor and their layout (a fixed value
    type, like Tensor)."""

    _fields_ = [
        ("data", ctypes.c_void_p),  # const float*
        ("scaling", ctypes.c_int),
        ("block_rows", ctypes.c_int64),
    ]


# hopattn.h's defaults are inline C functions, so ctypes cannot call them: the struct is made
# here, with the mirror's size, and the library writes its defaults into it. struct_size says how
# much memory this mirror really holds, so that a library newer than the mirror writes and reads
# only what is there and defaults the rest.
def _init(lib: ctypes.CDLL, function: str, struct: type) -> ctypes.Structure:
    value = struct()
    status = getattr(lib, function)(ctypes.byref(value), ctypes.sizeof(struct))
    if status != Status.OK:
        raise RuntimeError(f"{function}: {Status(status).name}: "
                           f"{lib.hopattn_last_error().decode()}")
    return value


def default_forward_options(lib: ctypes.CDLL) -> ForwardOptions:
    return _init(lib, "hopattn_init_forward_options", ForwardOptions)


def default_varlen(lib: ctypes.CDLL) -> Varlen:
    return _init(lib, "hopattn_init_varlen", Varlen)


def default_backward_options(lib: ctypes.CDLL) -> BackwardOptions:
    return _init(lib, "hopattn_init_backward_options", BackwardOptions)


def default_quantize_options(lib: ctypes.CDLL) -> QuantizeOptions:
    return _init(lib, "hopattn_init_quantize_options", QuantizeOptions)


QUANTIZE_FUNCTIONS = ("hopattn_init_quantize_options", "hopattn_quantize_fp8")


def has_quantize(lib: ctypes.CDLL) -> bool:
    return all(hasattr(lib, name) for name in QUANTIZE_FUNCTIONS)


FP8_FORWARD_FUNCTIONS = ("hopattn_forward_fp8", "hopattn_forward_fp8_workspace_size")
# The variable-length FP8 forward came after the fixed-length one.
FP8_VARLEN_FUNCTIONS = ("hopattn_forward_fp8_varlen", "hopattn_forward_fp8_varlen_workspace_size")


def has_fp8_forward(lib: ctypes.CDLL) -> bool:
    return all(hasattr(lib, name) for name in FP8_FORWARD_FUNCTIONS)


def has_fp8_varlen(lib: ctypes.CDLL) -> bool:
    return all(hasattr(lib, name) for name in FP8_VARLEN_FUNCTIONS)


# The backward entry points came with ABI 0.1's second half; a library built before them loads
# (the forward works) and the backward says what is missing when it is called.
BACKWARD_FUNCTIONS = ("hopattn_init_backward_options", "hopattn_backward",
                      "hopattn_backward_varlen", "hopattn_backward_workspace_size")


def has_backward(lib: ctypes.CDLL) -> bool:
    return all(hasattr(lib, name) for name in BACKWARD_FUNCTIONS)


def declare(lib: ctypes.CDLL) -> None:
    """Gives each exported function its C signature, so ctypes converts arguments checked."""
    tensor_p = ctypes.POINTER(Tensor)
    lib.hopattn_init_forward_options.argtypes = [ctypes.POINTER(ForwardOptions), ctypes.c_size_t]
    lib.hopattn_init_forward_options.restype = ctypes.c_int
    lib.hopattn_init_varlen.argtypes = [ctypes.POINTER(Varlen), ctypes.c_size_t]
    lib.hopattn_init_varlen.restype = ctypes.c_int
    lib.hopattn_forward.argtypes = [
        tensor_p, tensor_p, tensor_p, tensor_p,
        ctypes.c_void_p,  # float* lse, or NULL
        ctypes.POINTER(ForwardOptions),
    ]
    lib.hopattn_forward.restype = ctypes.c_int
    lib.hopattn_forward_varlen.argtypes = [
        tensor_p, tensor_p, tensor_p, tensor_p,
        ctypes.c_void_p,  # float* lse, or NULL
        ctypes.POINTER(Varlen),
        ctypes.POINTER(ForwardOptions),
    ]
    lib.hopattn_forward_varlen.restype = ctypes.c_int
    lib.hopattn_forward_workspace_size.argtypes = [
        tensor_p, tensor_p, tensor_p,
        ctypes.POINTER(Varlen),  # NULL for the fixed-length forward
        ctypes.POINTER(ForwardOptions),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    lib.hopattn_forward_workspace_size.restype = ctypes.c_int
    if has_backward(lib):
        _declare_backward(lib)
    if has_quantize(lib):
        options_p = ctypes.POINTER(QuantizeOptions)
        lib.hopattn_init_quantize_options.argtypes = [options_p, ctypes.c_size_t]
        lib.hopattn_init_quantize_options.restype = ctypes.c_int
        lib.hopattn_quantize_fp8.argtypes = [tensor_p, tensor_p, ctypes.c_void_p, options_p]
        lib.hopattn_quantize_fp8.restype = ctypes.c_int
    if has_fp8_forward(lib):
        scales_p = ctypes.POINTER(Fp8Scales)
        lib.hopattn_forward_fp8.argtypes = [
            tensor_p, scales_p, tensor_p, scales_p, tensor_p, scales_p,  # q, k, v and scales
            tensor_p,
            ctypes.c_void_p,  # float* lse, or NULL
            ctypes.POINTER(ForwardOptions),
        ]
        lib.hopattn_forward_fp8.restype = ctypes.c_int
        lib.hopattn_forward_fp8_workspace_size.argtypes = [
            tensor_p, tensor_p, tensor_p,
            ctypes.c_int,  # hopattn_dtype o_dtype
            ctypes.POINTER(ForwardOptions),
            ctypes.POINTER(ctypes.c_size_t),
        ]
        lib.hopattn_forward_fp8_workspace_size.restype = ctypes.c_int
    if has_fp8_varlen(lib):
        scales_p = ctypes.POINTER(Fp8Scales)
        lib.hopattn_forward_fp8_varlen.argtypes = [
            tensor_p, scales_p, tensor_p, scales_p, tensor_p, scales_p,  # q, k, v and scales
            tensor_p,
            ctypes.c_void_p,  # float* lse, or NULL
            ctypes.POINTER(Varlen),
            ctypes.POINTER(ForwardOptions),
        ]
        lib.hopattn_forward_fp8_varlen.restype = ctypes.c_int
        lib.hopattn_forward_fp8_varlen_workspace_size.argtypes = [
            tensor_p, tensor_p, tensor_p,
            ctypes.c_int,  # hopattn_dtype o_dtype
            ctypes.POINTER(Varlen),
            ctypes.POINTER(ForwardOptions),
            ctypes.POINTER(ctypes.c_size_t),
        ]
        lib.hopattn_forward_fp8_varlen_workspace_size.restype = ctypes.c_int
    lib.hopattn_last_error.argtypes = []
    lib.hopattn_last_error.restype = ctypes.c_char_p
    lib.hopattn_status_name.argtypes = [ctypes.c_int]
    lib.hopattn_status_name.restype = ctypes.c_char_p
    lib.hopattn_version.argtypes = []
    lib.hopattn_version.restype = ctypes.c_char_p
    lib.hopattn_backend_available.argtypes = [ctypes.c_int]
    lib.hopattn_backend_available.restype = ctypes.c_int
    lib.hopattn_backend_supports.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64]
    lib.hopattn_backend_supports.restype = ctypes.c_int
    lib.hopattn_build_info.argtypes = []
    lib.hopattn_build_info.restype = ctypes.c_char_p


def _declare_backward(lib: ctypes.CDLL) -> None:
    tensor_p = ctypes.POINTER(Tensor)
    options_p = ctypes.POINTER(BackwardOptions)
    lib.hopattn_init_backward_options.argtypes = [options_p, ctypes.c_size_t]
    lib.hopattn_init_backward_options.restype = ctypes.c_int
    gradients = [
        tensor_p, tensor_p, tensor_p, tensor_p, tensor_p,  # q, k, v, o, d_o
        ctypes.c_void_p,                                   # const float* lse
        tensor_p, tensor_p, tensor_p,                      # dq, dk, dv
    ]
    lib.hopattn_backward.argtypes = [*gradients, options_p]
    lib.hopattn_backward.restype = ctypes.c_int
    lib.hopattn_backward_varlen.argtypes = [*gradients, ctypes.POINTER(Varlen), options_p]
    lib.hopattn_backward_varlen.restype = ctypes.c_int
    lib.hopattn_backward_workspace_size.argtypes = [
        tensor_p, tensor_p, tensor_p,
        ctypes.POINTER(Varlen),  # NULL for the fixed-length backward
        options_p,
        ctypes.POINTER(ctypes.c_size_t),
    ]
    lib.hopattn_backward_workspace_size.restype = ctypes.c_int
