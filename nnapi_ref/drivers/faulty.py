"""Drivers that fail the way native drivers do: they crash, hang, leak or slow down. Served in a
process of their own (``remote:nnts serve nnapi_ref.drivers.faulty:<name>``) they test the
suite's containment (``tests/test_remote.py``) and the stress set (``nnts stress``); in process,
the first two would take the test run down with them.

=====================  ==========================================================================
``aborts_on_mul``      the process calls ``os.abort()`` when it executes a MUL operation
``hangs_on_mul``       executing a MUL operation never returns
=====================  ==========================================================================
"""
from __future__ import annotations

import os
import threading

from ..types import OperationCode
from .broken import BrokenDevice, _WrappedOperation


class AbortsOnMul(BrokenDevice):
    FAULT = "aborts_on_mul"

    def operation_fault(self, code, impl):
        if code != OperationCode.MUL:
            return impl

        def fault(call, outputs):
            os.abort()
        return _WrappedOperation(impl, fault)


class HangsOnMul(BrokenDevice):
    FAULT = "hangs_on_mul"

    def operation_fault(self, code, impl):
        if code != OperationCode.MUL:
            return impl

        def fault(call, outputs):
            threading.Event().wait()
        return _WrappedOperation(impl, fault)


aborts_on_mul = AbortsOnMul
hangs_on_mul = HangsOnMul
