"""ctypes mirrors of the types in include/hopattn/hopattn.h.

Kept field for field in the header's order; C enums are passed as int, which is their size
on every ABI the library is built for.
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
    """hopattn_forward_options."""

    _fields_ = [
        ("causal", ctypes.c_int),
        ("softmax_scale", ctypes.c_float),
        ("backend", ctypes.c_int),
        ("cuda_stream", ctypes.c_void_p),
    ]


def declare(lib: ctypes.CDLL) -> None:
    """Gives each exported function its C signature, so ctypes converts arguments checked."""
    lib.hopattn_default_forward_options.argtypes = []
    lib.hopattn_default_forward_options.restype = ForwardOptions
    lib.hopattn_forward.argtypes = [
        ctypes.POINTER(Tensor),
        ctypes.POINTER(Tensor),
        ctypes.POINTER(Tensor),
        ctypes.POINTER(Tensor),
        ctypes.c_void_p,  # float* lse, or NULL
        ctypes.POINTER(ForwardOptions),
    ]
    lib.hopattn_forward.restype = ctypes.c_int
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
