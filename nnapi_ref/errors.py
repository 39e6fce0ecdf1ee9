"""The one exception type of the NNAPI programming model: it carries a ResultCode."""
from __future__ import annotations

from nnapi_ref.types import ResultCode

_RESULT_CODES = {int(c): c for c in ResultCode}
_NAMES = {c: c.name for c in ResultCode}


class NnapiError(Exception):
    """Raised by every NDK-style call that does not return ANEURALNETWORKS_NO_ERROR.

    ``code`` is the :class:`ResultCode` the NDK would return; the message names what is wrong.
    """

    def __init__(self, code: ResultCode, message: str):
        code = _RESULT_CODES.get(code) or ResultCode(code)  # a dict lookup: fuzzers raise thousands a second
        super().__init__(f"{_NAMES[code]}: {message}")
        self.code = code
        self.message = message
        self.output_shapes: list = []  # with OUTPUT_INSUFFICIENT_SIZE: the shapes a driver reported


class HostResourceError(Exception):
    """The host ran out of a resource the suite itself needs (shared memory for a remote driver's
    tensors): the run's environment failed, not the driver; reported as such, never as the
    driver's failure."""


def bad_data(message: str) -> NnapiError:
    return NnapiError(ResultCode.BAD_DATA, message)


def check(condition: bool, message: str, code: ResultCode = ResultCode.BAD_DATA) -> None:
    """Raise NnapiError(code) with ``message`` unless ``condition`` holds."""
    if not condition:
        raise NnapiError(code, message)
