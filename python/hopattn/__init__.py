"""hopattn: fused attention through the library's C ABI (see include/hopattn/hopattn.h)."""

from ._ctypes_api import Backend, DType, Status
from ._errors import HopattnError, InvalidArgumentError, InvalidTypeError
from ._frontend import type_name as _type_name
from ._lib import library
from ._version import __version__
from .attention import attention
from .fp8 import attention_fp8, attention_fp8_varlen, forward_fp8, forward_fp8_varlen
from .quantize import quantize_fp8
from .varlen import attention_varlen

__all__ = ["attention", "attention_varlen", "attention_fp8", "attention_fp8_varlen", "forward_fp8",
           "forward_fp8_varlen", "quantize_fp8",
           "HopattnError", "InvalidArgumentError", "InvalidTypeError", "Status", "DType", "Backend",
           "version", "build_info", "backend_available", "__version__"]

_BACKENDS = {"cpu": Backend.CPU, "sm90": Backend.SM90}


def version() -> str:
    """The loaded library's "MAJOR.MINOR.PATCH" (the package's is hopattn.__version__)."""
    return library().hopattn_version().decode()


def build_info() -> str:
    """One line per backend: what the loaded library contains and supports."""
    return library().hopattn_build_info().decode()


def backend_available(name: str) -> bool:
    """Whether the backend ("cpu" or "sm90") is built in and, for sm90, a Hopper GPU is visible."""
    if not isinstance(name, str):
        raise InvalidTypeError(f"name must be a str, one of {', '.join(_BACKENDS)}; got "
                               f"{_type_name(name)}")
    backend = _BACKENDS.get(name.lower())
    if backend is None:
        raise InvalidArgumentError(f"name: unknown backend {name!r}; allowed: "
                                   f"{', '.join(_BACKENDS)}")
    return bool(library().hopattn_backend_available(backend))
