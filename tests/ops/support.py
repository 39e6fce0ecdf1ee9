"""What the operation tests share: constant operands and the check that a call fails with a
given NNAPI result code."""
import pytest

from nnapi_ref.errors import NnapiError
from nnapi_ref.types import OperandCode, OperationCode, ResultCode
from nnts.generators.builders import Operand, run_operation, tensor


def const(t: OperandCode, value) -> Operand:
    """A constant operand (parameters known at compilation time)."""
    return tensor(t, value, as_input=False)


def assert_fails(result_code: ResultCode, fn, /, *args, **kwargs) -> None:
    with pytest.raises(NnapiError) as info:
        fn(*args, **kwargs)
    assert info.value.code == result_code, info.value


def assert_bad_data(fn, /, *args, **kwargs) -> None:
    assert_fails(ResultCode.BAD_DATA, fn, *args, **kwargs)


def assert_op_bad_data(code: OperationCode, inputs, outputs) -> None:
    """Running the one-operation model ``code`` on ``inputs`` gives BAD_DATA."""
    assert_bad_data(run_operation, code, inputs, outputs)
