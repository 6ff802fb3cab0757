"""The one error model of the package.

Every error hopattn raises for a call is a HopattnError (a RuntimeError) with .status and
.message. A malformed call, whether Python or the library finds it, is an InvalidArgumentError
(also a ValueError); an argument of the wrong type or dtype is its subclass InvalidTypeError
(also a TypeError), so `except ValueError` and `except TypeError` keep working as in NumPy and
PyTorch. Messages use the Python argument names: `scale`, `cu_seqlens_q`, never the C fields.
"""

from ._ctypes_api import Status
from ._lib import library


class HopattnError(RuntimeError):
    """A failed call: .status (a Status) and .message (the text, naming the argument at fault)."""

    def __init__(self, status: int, message: str):
        self.status = Status(status)
        self.message = message
        super().__init__(f"{self.status.name}: {message}")

    def __reduce__(self):
        return HopattnError, (int(self.status), self.message)


class InvalidArgumentError(HopattnError, ValueError):
    """A malformed call (status INVALID_ARGUMENT); also a ValueError."""

    def __init__(self, message: str):
        super().__init__(Status.INVALID_ARGUMENT, message)

    def __reduce__(self):
        return type(self), (self.message,)


class InvalidTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong type or dtype (a list for q, float64, causal="no"); also a
    TypeError."""


# The library names some arguments by their C spelling; a Python caller passes them as keyword
# arguments of their own (hopattn_varlen's fields are attention_varlen's parameters, the fields of
# hopattn_forward_fp8's hopattn_fp8_scales are forward_fp8's q_scales, q_scaling, q_block_rows,
# options->fp8_v_layout its v_layout).
_C_SPELLINGS = (("varlen->", ""), ("options->fp8_v_layout", "v_layout"),
                *((f"{x}_scales->data", f"{x}_scales") for x in "qkv"),
                *((f"{x}_scales->scaling", f"{x}_scaling") for x in "qkv"),
                *((f"{x}_scales->block_rows", f"{x}_block_rows") for x in "qkv"))


def python_message(message: str) -> str:
    for c_spelling, python_spelling in _C_SPELLINGS:
        message = message.replace(c_spelling, python_spelling)
    return message


def raise_on_error(status: int) -> None:
    if status == Status.OK:
        return
    message = python_message(library().hopattn_last_error().decode())
    if status == Status.INVALID_ARGUMENT:
        raise InvalidArgumentError(message)
    raise HopattnError(status, message)
