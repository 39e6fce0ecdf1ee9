"""Bad input at the remote-driver client: the supported-operations query gets the call budget,
not the 120 s one to start and prepare; a driver's huge stderr is trimmed in the error message; a
full /dev/shm is the host's failure, not the driver's; and a call that finds the connection
being stopped reports the real cause, not the placeholder."""
import errno
import sys
import threading
import time

import pytest

from nnapi_ref import vectors
from nnapi_ref.hal import ErrorStatus, HalError
from nnapi_ref.remote import shm
from nnapi_ref.remote.client import STDERR_LINE_CHARS, STDERR_LINES
from nnapi_ref.remote.wire import Msg, Writer
from nnapi_ref.runtime import get_devices, set_drivers
from nnapi_ref.runtime.devices import drivers_restored
from nnts.runners.drivers import load_driver
from nnts.runners.model_runner import ERROR, run_test
from nnts.runners.settings import Settings

from .test_bad_input import ARITHMETIC
from .test_remote import MISBEHAVING_SERVER, hal_chain_model


def serve(tmp_path, mode: str, settings: Settings = Settings()):
    script = tmp_path / "server.py"
    script.write_text(MISBEHAVING_SERVER)  # modes "silent" (never answers) and "stderr" (a 20 MB line)
    return load_driver(f"remote:{sys.executable} {script} {mode}", settings=settings)


def test_supported_operations_gets_the_call_budget(tmp_path):
    device = serve(tmp_path, "silent", Settings(call_timeout_s=1))
    try:
        assert device.live().prepare_timeout_s >= 60
        with pytest.raises(HalError) as e:
            device.get_supported_operations(hal_chain_model())
        assert e.value.status == ErrorStatus.DEAD_OBJECT
        assert "did not return from get_supported_operations within 1 s" in e.value.message, e.value.message
    finally:
        device.close()


def test_a_huge_stderr_line_is_trimmed_in_the_message(tmp_path):
    device = serve(tmp_path, "stderr")
    try:
        with pytest.raises(HalError) as e:
            device.get_supported_operations(hal_chain_model())
    finally:
        device.close()
    message = e.value.message
    assert "exited with code 3" in message and "the end" in message, message[-500:]
    assert len(message) < STDERR_LINES * (STDERR_LINE_CHARS + 10) + 1000


def test_a_full_dev_shm_is_the_hosts_error_not_the_drivers(monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")
    device = load_driver("remote:nnts serve reference")
    try:
        with drivers_restored():
            set_drivers([device])
            monkeypatch.setattr(shm.os, "posix_fallocate", full)
            test = next(t for t in vectors.load_file(ARITHMETIC) if t.model.main.operations)
            result = run_test(test, get_devices(), "sync")
    finally:
        device.close()
    assert result.status == ERROR, result
    assert "host is out of shared memory" in result.message and "not the driver's" in result.message


def test_a_call_during_the_failure_path_reports_the_real_cause():
    device = load_driver("remote:nnts serve reference")
    connection = device.live()
    try:
        # fail() in progress on another thread: the connection is marked dead, the reason not yet set.
        with connection._lock:
            connection.dead = "placeholder: being stopped"

        def finish():
            time.sleep(0.2)
            connection.dead = "CRASH: the real cause (reply length out of range)"
            connection._stopped.set()
        threading.Thread(target=finish).start()
        with pytest.raises(HalError) as e:
            connection.call(Msg.GET_SUPPORTED_OPERATIONS, Writer(), "get_supported_operations")
        assert e.value.message == "CRASH: the real cause (reply length out of range)"
    finally:
        connection.transport.kill()
