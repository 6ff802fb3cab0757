"""hopattn: fused attention through the library's C ABI (see include/hopattn/hopattn.h)."""

from ._ctypes_api import Backend, DType, Status
from ._lib import library
from ._errors import HopattnError, InvalidArgumentError
from .attention import attention
from .varlen import attention_varlen

__all__ = ["attention", "attention_varlen", "HopattnError", "InvalidArgumentError", "Status",
           "DType", "Backend", "version", "build_info", "backend_available"]


def version() -> str:
    """The library's "MAJOR.MINOR.PATCH"."""
    return library().hopattn_version().decode()


def build_info() -> str:
    """One line per backend: what the loaded library contains and supports."""
    return library().hopattn_build_info().decode()


def backend_available(name: str) -> bool:
    """Whether the backend ("cpu" or "sm90") is built in and, for sm90, a Hopper GPU is visible."""
    backends = {"cpu": Backend.CPU, "sm90": Backend.SM90}
    backend = backends.get(str(name).lower())
    if backend is None:
        raise ValueError(f"name: unknown backend {name!r}; allowed: {', '.join(backends)}")
    return bool(library().hopattn_backend_available(backend))
