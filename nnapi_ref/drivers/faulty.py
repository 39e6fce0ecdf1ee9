"""Drivers that fail the way native drivers do: they crash, hang, leak or slow down. Served in a
process of their own (``remote:nnts serve nnapi_ref.drivers.faulty:<name>``) they test the
suite's containment (``tests/test_remote.py``) and the stress set (``nnts stress``); in process,
the first two would take the test run down with them.

=====================  ==========================================================================
``aborts_on_mul``      the process calls ``os.abort()`` when it executes a MUL operation
``hangs_on_mul``       executing a MUL operation never returns
``leaks``              keeps ``LEAK_PER_PREPARED_BYTES`` (1 MiB) per prepared model and
                       ``LEAK_PER_EXECUTION_BYTES`` (64 KiB) per execution, touched and never
                       freed: its memory grows with every model loaded and every execution
``slows_down``         executions take turns (one lock), and each first waits
                       ``SLOWDOWN_PER_EXECUTION_IN_FLIGHT_S`` (5 ms) for every other execution
                       in flight: as fast as the reference for one client, a fraction of it
                       under concurrent load
``serializes_executions`` one execution at a time in the whole driver, behind one lock taken
                       with a try-lock and a backoff: an execution finding the driver busy
                       sleeps ``SERIALIZE_BACKOFF_S`` (1 ms, doubling up to 16 ms) and tries
                       again. Right results, as fast as the reference for one client; concurrent
                       clients wait behind each other (a short execution behind a long one), and
                       the lock sits idle while they sleep
=====================  ==========================================================================
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np

from nnapi_ref.drivers.broken import BrokenDevice, _WrappedOperation
from nnapi_ref.drivers.reference import ReferencePreparedModel
from nnapi_ref.types import OperationCode

LEAK_PER_PREPARED_BYTES = 1 << 20
LEAK_PER_EXECUTION_BYTES = 64 << 10
SLOWDOWN_PER_EXECUTION_IN_FLIGHT_S = 0.005
SERIALIZE_BACKOFF_S = (0.001, 0.016)  # the first wait for the busy driver, and the longest


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


class _Leaking(ReferencePreparedModel):
    def __init__(self, prepared: ReferencePreparedModel, kept: list):
        super().__init__(prepared.device, prepared.model, prepared.plans)
        self.kept = kept

    def _run(self, request, measure, deadline_ns, loop_timeout_ns):
        self.kept.append(np.ones(LEAK_PER_EXECUTION_BYTES, np.uint8))  # ones, not zeros: the pages are touched
        return super()._run(request, measure, deadline_ns, loop_timeout_ns)


class Leaks(BrokenDevice):
    """Memory the driver keeps for each model and execution in a list nothing ever empties,
    as a native driver that forgets to free does: a released model leaves its share behind."""

    FAULT = "leaks"

    def __init__(self):
        super().__init__()
        self.kept: list[np.ndarray] = []

    def wrap_prepared(self, prepared):
        self.kept.append(np.ones(LEAK_PER_PREPARED_BYTES, np.uint8))
        return _Leaking(prepared, self.kept)


class _Contended(ReferencePreparedModel):
    def __init__(self, prepared: ReferencePreparedModel, device: "SlowsDown"):
        super().__init__(prepared.device, prepared.model, prepared.plans)
        self.slow = device

    def _run(self, request, measure, deadline_ns, loop_timeout_ns):
        slow = self.slow
        with slow.count_lock:
            slow.in_flight += 1
        try:
            with slow.turn:
                with slow.count_lock:
                    others = slow.in_flight - 1
                time.sleep(SLOWDOWN_PER_EXECUTION_IN_FLIGHT_S * others)
                return super()._run(request, measure, deadline_ns, loop_timeout_ns)
        finally:
            with slow.count_lock:
                slow.in_flight -= 1


class SlowsDown(BrokenDevice):
    """A driver whose executions contend for one lock and pay for the contention (a lock
    convoy): one client at a time runs at full speed, concurrent clients slow each other down."""

    FAULT = "slows_down"

    def __init__(self):
        super().__init__()
        self.turn = threading.Lock()
        self.count_lock = threading.Lock()
        self.in_flight = 0

    def wrap_prepared(self, prepared):
        return _Contended(prepared, self)


class _Serialized(ReferencePreparedModel):
    def __init__(self, prepared: ReferencePreparedModel, lock: threading.Lock):
        super().__init__(prepared.device, prepared.model, prepared.plans)
        self.lock = lock

    def _run(self, request, measure, deadline_ns, loop_timeout_ns):
        wait, longest = SERIALIZE_BACKOFF_S
        while not self.lock.acquire(blocking=False):
            time.sleep(wait)
            wait = min(2 * wait, longest)
        try:
            return super()._run(request, measure, deadline_ns, loop_timeout_ns)
        finally:
            self.lock.release()


class SerializesExecutions(BrokenDevice):
    """A driver guarding its one accelerator queue with a try-lock and a backoff: every
    execution of every model and client runs alone, the others sleeping and retrying."""

    FAULT = "serializes_executions"

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()

    def wrap_prepared(self, prepared):
        return _Serialized(prepared, self.lock)


aborts_on_mul = AbortsOnMul
hangs_on_mul = HangsOnMul
leaks = Leaks
slows_down = SlowsDown
serializes_executions = SerializesExecutions
