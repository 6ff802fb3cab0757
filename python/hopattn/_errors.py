"""The exceptions a failed library call raises, carrying the library's own message."""

from ._ctypes_api import Status
from ._lib import library


class HopattnError(RuntimeError):
    """A failed library call: .status (a Status) and .message (the library's text)."""

    def __init__(self, status: int, message: str):
        self.status = Status(status)
        self.message = message
        super().__init__(f"{self.status.name}: {message}")


class InvalidArgumentError(HopattnError, ValueError):
    """The call was malformed (HOPATTN_ERROR_INVALID_ARGUMENT); also a ValueError."""


def raise_on_error(status: int) -> None:
    if status == Status.OK:
        return
    message = library().hopattn_last_error().decode()
    cls = InvalidArgumentError if status == Status.INVALID_ARGUMENT else HopattnError
    raise cls(status, message)
