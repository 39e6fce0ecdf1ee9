"""Drivers in their own process (nnapi_ref.remote): the reference served remotely computes what
numpy computes in every execution mode; tensors in shared memory are not copied; and a driver
that aborts, hangs, or speaks garbage ends in a clean DEAD_OBJECT with a CRASH or HANG verdict,
while the run carries on with a fresh process."""
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from nnapi_ref import hal
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.errors import NnapiError
from nnapi_ref.hal import ErrorStatus, HalError
from nnapi_ref.remote.client import IncidentLog, RemoteDevice
from nnapi_ref.remote.wire import Msg, Writer
from nnapi_ref.runtime import Compilation, Execution, Memory
from nnapi_ref.runtime.devices import Device, drivers_restored
from nnapi_ref.types import PreferenceCode, PriorityCode, ResultCode
from nnts import cli
from nnts.generators.builders import add_model, chain, chain_model, execute_chain
from nnts.runners.drivers import LoadedDrivers, load_driver, load_drivers, runtime_devices
from nnts.runners.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
HANG_BUDGET_S = 5.0  # --call-timeout where a hang is expected: a call that works meets it on a loaded machine
SERVE_REFERENCE = "remote:nnts serve reference"
A = np.array([[1, 2], [3, 4]], np.float32)
B = np.array([[0.5, -1], [2, 0.25]], np.float32)


@pytest.fixture(scope="module")
def remote():
    device = load_driver(SERVE_REFERENCE)
    yield device
    device.close()


def run_chain(device: hal.Device, mode: str = "sync", a=A, b=B) -> np.ndarray:
    compilation = Compilation(chain_model(), [Device(device)])
    compilation.finish()
    return execute_chain(compilation, a, b, mode)


@pytest.mark.parametrize("mode", ["sync", "async", "burst", "fenced"])
def test_remote_reference_computes_the_chain_in_every_mode(remote, mode):
    np.testing.assert_array_equal(run_chain(remote, mode), chain(A, B))


def test_remote_device_reports_what_the_driver_reports(remote):
    local = ReferenceDevice()
    assert (remote.get_name(), remote.get_version_string(), remote.get_type(), remote.get_feature_level()) == \
        (local.get_name(), local.get_version_string(), local.get_type(), local.get_feature_level())
    assert remote.get_capabilities() == local.get_capabilities()
    assert remote.get_number_of_cache_files_needed() == local.get_number_of_cache_files_needed()


def test_invalid_model_is_rejected_by_the_driver_with_its_message(remote):
    model = hal_chain_model()
    model.main.operations[0] = hal.Operation(-1, model.main.operations[0].inputs, model.main.operations[0].outputs)
    with pytest.raises(HalError) as e:
        remote.get_supported_operations(model)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT and "operation 0" in e.value.message


def test_tensors_in_shared_memory_travel_without_a_copy(remote, monkeypatch):
    """A 64 MiB input and its output in runtime shared memory: mapped by the driver, never staged."""
    n = 16 * 1024 * 1024
    a = np.arange(n, dtype=np.float32) % 251
    memory_a, memory_out = Memory.create_shared(a.nbytes), Memory.create_shared(a.nbytes)
    memory_a.shared.buffer.view(np.float32)[:] = a
    compilation = Compilation(add_model((n,), input_dims=(n,)), [Device(remote)])
    compilation.finish()
    connection = remote.live()
    monkeypatch.setattr(connection.arena, "take", lambda size: pytest.fail(f"staged {size} bytes: a copy"))
    execution = Execution(compilation)
    execution.set_input_from_memory(0, memory_a, 0, a.nbytes)
    execution.set_input_from_memory(1, memory_a, 0, a.nbytes)
    execution.set_output_from_memory(0, memory_out, 0, a.nbytes)
    execution.compute()
    np.testing.assert_array_equal(memory_out.shared.buffer.view(np.float32), a + a)


def test_isolate_serves_an_in_process_driver_from_its_own_process():
    device, = load_drivers("reference", isolate=True)
    try:
        assert isinstance(device, RemoteDevice) and device.driver == "remote:nnts serve reference"
        np.testing.assert_array_equal(run_chain(device), chain(A, B))
    finally:
        device.close()


def test_a_driver_that_does_not_start_is_a_clean_error():
    with pytest.raises(NnapiError) as e:
        load_driver("remote:nnts serve nosuch.module:make")
    assert e.value.code == ResultCode.UNAVAILABLE_DEVICE
    assert "nosuch" in e.value.message and "exited with code" in e.value.message


# -- a server that misbehaves after a correct HELLO ----------------------------------------------
# (tests/test_bad_input_remote.py uses its "silent" and "stderr" modes)

MISBEHAVING_SERVER = textwrap.dedent("""
    import os, struct, sys, time
    from nnapi_ref.drivers.reference import ReferenceDevice
    from nnapi_ref.remote import wire
    mode = sys.argv[1]
    out = os.dup(1); os.dup2(2, 1)
    def read(n):
        data = b""
        while len(data) < n:
            chunk = os.read(0, n - len(data))
            if not chunk:
                sys.exit(0)
            data += chunk
        return data
    def request():
        length, msg, call_id = wire.HEADER.unpack(read(16))
        return msg, call_id, read(length - 12)
    msg, call_id, _ = request()
    w = wire.Writer(); w.u32(wire.VERSION); wire.write_device_info(w, ReferenceDevice())
    os.write(out, w.finish(wire.Msg.DEVICE_INFO, call_id))
    while True:
        msg, call_id, _ = request()
        if msg in wire.NO_REPLY:
            continue
        if mode == "garbage":
            os.write(out, bytes(range(7, 250)) * 3)
        elif mode == "oversized":
            os.write(out, struct.pack("<IIQ", 0xFFFFFFF0, wire.Msg.SUPPORTED, call_id))
        elif mode == "unknown_call":
            os.write(out, wire.Writer().finish(wire.Msg.SUPPORTED, call_id + 1000))
        elif mode == "wrong_reply":
            w = wire.Writer(); w.u64(1)
            os.write(out, w.finish(wire.Msg.PREPARED, call_id))
        elif mode == "truncated":
            w = wire.Writer(); w.u32(1000); w.u8(1)
            os.write(out, w.finish(wire.Msg.SUPPORTED, call_id))
        elif mode == "exit":
            print("driver: giving up", file=sys.stderr, flush=True)
            sys.exit(3)
        elif mode == "abort":
            os.abort()
        elif mode == "silent":
            time.sleep(600)
        elif mode == "stderr":  # one 20 MB line
            sys.stderr.write("x" * (20 << 20) + " the end\\n")
            sys.stderr.flush()
            sys.exit(3)
""")

EXPECTED_MESSAGE = {
    "garbage": "broke the protocol", "oversized": "reply length 4294967280 out of range",
    "unknown_call": "not in flight", "wrong_reply": "to a GET_SUPPORTED_OPERATIONS call",
    "truncated": "malformed reply", "exit": "exited with code 3; last stderr: driver: giving up",
    "abort": "killed by SIGABRT",
}


@pytest.mark.parametrize("mode", sorted(EXPECTED_MESSAGE))
def test_a_misbehaving_server_gives_dead_object_and_a_crash_verdict(tmp_path, mode):
    script = tmp_path / "server.py"
    script.write_text(MISBEHAVING_SERVER)
    device = load_driver(f"remote:{sys.executable} {script} {mode}")
    hal_model = hal_chain_model()
    before = device.incidents.mark()
    first = device.connection
    with pytest.raises(HalError) as e:
        device.get_supported_operations(hal_model)
    assert e.value.status == ErrorStatus.DEAD_OBJECT
    assert EXPECTED_MESSAGE[mode] in e.value.message, e.value.message
    assert e.value.message.startswith("CRASH")
    new = device.incidents.since(before)
    assert [i.kind for i in new] == ["crash"] and new[0].message == e.value.message
    assert first.transport.proc.poll() is not None  # killed, or exited on its own
    with pytest.raises(HalError):  # the next call gets a fresh process, which misbehaves again
        device.get_supported_operations(hal_model)
    assert device.restarts == 1 and device.connection is not first
    device.close()


def test_a_call_that_does_not_return_is_a_hang_and_the_process_is_killed():
    device = load_driver("remote:nnts serve nnapi_ref.drivers.faulty:hangs_on_mul")
    device.live().call_timeout_s = HANG_BUDGET_S
    before = device.incidents.mark()
    with pytest.raises(NnapiError) as e:
        run_chain(device)
    assert e.value.code == ResultCode.OP_FAILED or e.value.code == ResultCode.DEAD_OBJECT
    new = device.incidents.since(before)
    assert [i.kind for i in new] == ["hang"], new
    assert f"did not return from execute_synchronously within {HANG_BUDGET_S:g} s" in new[0].message
    assert device.connection.transport.proc.poll() == -9
    device.close()


def test_incidents_go_to_the_log_the_device_was_loaded_with_not_to_another_devices():
    log = IncidentLog()
    crashing = load_driver("remote:nnts serve nnapi_ref.drivers.faulty:aborts_on_mul", incidents=log)
    healthy = load_driver(SERVE_REFERENCE)
    mark = log.mark()
    with pytest.raises(NnapiError):
        run_chain(crashing)
    np.testing.assert_array_equal(run_chain(healthy), chain(A, B))
    assert [i.kind for i in log.since(mark)] == ["crash"] and crashing.incidents is log
    assert healthy.incidents.since() == [] and log.since(log.mark()) == []
    crashing.close()
    healthy.close()


def test_loaded_drivers_load_a_driver_string_once_and_log_its_incidents():
    loaded = LoadedDrivers()
    with drivers_restored():
        first = runtime_devices(SERVE_REFERENCE, settings=Settings(), loaded=loaded)
        again = runtime_devices(SERVE_REFERENCE, settings=Settings(), loaded=loaded)
    assert [d.driver for d in again] == [d.driver for d in first]  # the same driver process, reused
    driver = loaded.get(SERVE_REFERENCE, False, Settings())[0]
    assert driver.incidents is loaded.incidents and driver.restarts == 0
    other = LoadedDrivers().get(SERVE_REFERENCE, False, Settings())[0]
    assert other is not driver  # another run's cache loads its own
    driver.close()
    other.close()


def test_malformed_requests_get_invalid_argument_from_the_server(remote):
    connection = remote.live()
    w = Writer()
    w.u32(5)  # a model of five operands, then nothing
    with pytest.raises(HalError) as e:
        connection.call(Msg.PREPARE_MODEL, w, "prepare_model")
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT and "malformed message" in e.value.message
    w = Writer()
    w.u64(987654)
    with pytest.raises(HalError) as e:
        connection.call(Msg.EXECUTE_SYNC, w, "execute")
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT and "handle 987654 is unknown" in e.value.message
    np.testing.assert_array_equal(run_chain(remote), chain(A, B))  # the server is still fine


def test_socket_server_serves_several_clients_and_its_death_is_dead_object(tmp_path):
    path = str(tmp_path / "driver.sock")
    server = subprocess.Popen([sys.executable, "-m", "nnts", "serve", "reference", "--socket", path],
                              stderr=subprocess.PIPE, cwd=ROOT)
    try:
        for _ in range(200):
            if os.path.exists(path):
                break
            time.sleep(0.05)
        first, second = load_driver(f"socket:{path}"), load_driver(f"socket:{path}")
        np.testing.assert_array_equal(run_chain(first), chain(A, B))
        np.testing.assert_array_equal(run_chain(second, "async", A, A), chain(A, A))
        prepared = first.prepare_model(hal_chain_model(), PreferenceCode.FAST_SINGLE_ANSWER,
                                       PriorityCode.MEDIUM, None, (), (), None)
        server.kill()
        server.wait()
        with pytest.raises(HalError) as e:
            prepared.configure_execution_burst()
        assert e.value.status == ErrorStatus.DEAD_OBJECT and "socket:" in e.value.message
    finally:
        server.kill()


def hal_chain_model() -> hal.Model:
    """The chain model as a driver receives it."""
    compilation = Compilation(chain_model(), [Device(ReferenceDevice())])
    compilation.finish()
    return compilation.plan.steps[0].model


# -- the pytest plugin: CRASH and HANG per test, the run completes ------------------------------

SELECTION = "nnts_add_quant8_relu or nnts_mul_broadcast_float32"


def pytest_run(tmp_path, driver: str, selection: str, *args) -> tuple[int, str, dict[str, tuple[str, str]]]:
    """Run the generated CTS tests in a subprocess; return the exit code, the output and
    {test id: (outcome, message)} from its JUnit XML."""
    junit = tmp_path / "junit.xml"
    command = [sys.executable, "-m", "pytest", "cts/test_generated.py", "-q", "-p", "no:cacheprovider",
               "--no-shared-vectors", "--driver", driver, "-k", selection, "--junitxml", str(junit), *args]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("NNTS_DRIVER", None)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    results = {}
    for case in ET.parse(junit).iter("testcase"):
        failure = case.find("failure")
        name = case.get("name")
        results[name] = ("failed", failure.get("message", "") + (failure.text or "")) if failure is not None \
            else ("skipped", "") if case.find("skipped") is not None else ("passed", "")
    return done.returncode, done.stdout + done.stderr, results


def test_a_driver_that_aborts_in_one_operation_crashes_exactly_the_tests_that_reach_it(tmp_path):
    report = tmp_path / "conformance.html"
    code, output, results = pytest_run(tmp_path, "remote:nnts serve nnapi_ref.drivers.faulty:aborts_on_mul",
                                       SELECTION, "--report", str(report))
    assert code == 1, output[-3000:]
    mul = {name: r for name, r in results.items() if "mul" in name}
    others = {name: r for name, r in results.items() if "mul" not in name}
    assert len(mul) == 1 and len(others) == 2, results  # a test per model (the quant8 one's signed twin too)
    for name, (outcome, message) in mul.items():
        assert outcome == "failed" and "CRASH" in message and "SIGABRT" in message, (name, message[:500])
    assert all(outcome == "passed" for outcome, _ in others.values()), others
    assert re.search(r"CRASH cts/test_generated.py::test_generated\[MUL", output)
    assert f"<b>{len(mul)}</b> crashed" in report.read_text()


def test_a_driver_that_hangs_in_one_operation_hangs_exactly_those_tests(tmp_path):
    code, output, results = pytest_run(tmp_path, "remote:nnts serve nnapi_ref.drivers.faulty:hangs_on_mul",
                                       SELECTION, "--call-timeout", str(HANG_BUDGET_S), "--variants", "sync,async")
    assert code == 1, output[-3000:]
    assert {name for name, r in results.items() if r[0] == "passed"} == \
        {name for name in results if "mul" not in name}
    hung = {name: message for name, (outcome, message) in results.items() if "mul" in name}
    assert len(hung) == 1, hung
    # each variant hung, each within the call timeout
    assert all(m.startswith("HANG") and f"execute_synchronously within {HANG_BUDGET_S:g} s" in m and
               f"asynchronous execution within {HANG_BUDGET_S:g} s" in m for m in hung.values()), hung


def test_vectors_run_gives_crash_statuses_and_carries_on(tmp_path):
    out = tmp_path / "results.json"
    status = cli.main(["vectors", "run", str(ROOT / "cts" / "corpus" / "arithmetic.json"), "-j", "1", "-q",
                       "--driver", "remote:nnts serve nnapi_ref.drivers.faulty:aborts_on_mul", "--json", str(out)])
    results = json.loads(out.read_text())
    assert status == 1 and results["crashed"] >= 1 and results["passed"] >= 1
    for r in results["results"]:
        assert (r["status"] == "crashed") == ("mul" in r["name"]), r
        if r["status"] == "crashed":
            assert "killed by SIGABRT" in r["message"]


def test_remote_and_in_process_drivers_partition_one_model(tmp_path, monkeypatch):
    (tmp_path / "adder.py").write_text("from nnapi_ref.drivers.variants import SubsetDevice\n"
                                       "from nnapi_ref.types import OperationCode\n"
                                       "def make():\n    return SubsetDevice('adder', [OperationCode.ADD], 0.5)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    drivers = load_drivers("remote:nnts serve adder:make,reference")
    try:
        compilation = Compilation(chain_model(), [Device(d) for d in drivers])
        compilation.finish()
        assert [step.device.name for step in compilation.plan.steps] == ["adder", "nnapi-reference", "adder"]
        np.testing.assert_array_equal(execute_chain(compilation, A, B), chain(A, B))
    finally:
        drivers[0].close()


@pytest.mark.parametrize("option, threads", [("", 1), (" --blas-threads 2", 2)])
def test_served_driver_holds_blas_to_the_threads_asked(tmp_path, monkeypatch, option, threads):
    # The factory names its device after the BLAS threads it finds: the server's limit is in force.
    (tmp_path / "blasprobe.py").write_text(
        "from threadpoolctl import threadpool_info\n"
        "from nnapi_ref.drivers.variants import SubsetDevice\n"
        "from nnapi_ref.types import OperationCode\n"
        "def make():\n"
        "    counts = sorted({i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'})\n"
        "    return SubsetDevice('blas-' + '-'.join(map(str, counts)), [OperationCode.ADD], 0.5)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    device = load_driver(f"remote:nnts serve blasprobe:make{option}")
    try:
        assert device.get_name() == f"blas-{threads}"
    finally:
        device.close()


def test_killing_a_driver_process_leaves_its_reply_pipe_open_until_the_reader_stops():
    """kill() closed the reply pipe's read end while the connection's reader thread could be
    between its check of the pipe and its read; the next driver process's pipe took the freed
    number and the old reader took that driver's first reply (a start hung for 120 s in CI, under
    load). The pipe is now closed by the reader as it stops, and the request pipe is closed once
    no write is in it."""
    from nnapi_ref.remote.client import ProcessTransport
    transport = ProcessTransport(f"{sys.executable} -c 'import time; time.sleep(60)'")
    transport.kill()
    assert transport.proc.stdin.closed and not transport.proc.stdout.closed
    assert transport.read(12) == b""  # the killed process's pipe ends: its reader stops there
    transport.close_reader()
    assert transport.proc.stdout.closed


@pytest.mark.parametrize("served", ["stdio", "socket"])
def test_a_closed_connection_is_released_by_its_reader_thread(served, tmp_path):
    if served == "stdio":
        device = load_driver("remote:nnts serve reference")
    else:
        path = str(tmp_path / "s.sock")
        server = subprocess.Popen([sys.executable, "-m", "nnts", "serve", "reference", "--socket", path],
                                  stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.02)
        device = load_driver(f"socket:{path}")
    try:
        connection = device.live()
        assert device.get_name() == "nnapi-reference"
        device.close()
        connection._reader.join(30)
        assert not connection._reader.is_alive()
        transport = connection.transport
        assert (transport.proc.stdout.closed if served == "stdio" else transport.sock.fileno() == -1)
    finally:
        if served == "socket":
            server.kill()
            server.wait()


def test_driver_processes_started_used_and_closed_in_a_row_all_start():
    """The loop that found the reply-pipe race above, with the CPUs kept busy as a loaded CI
    machine's are: before the fix, 10 of 60 starts hung until the prepare timeout on a 2-core
    machine (23 and 28 of 150 while CI ran beside it; none on an idle one), so 30 starts all
    answering was about a 1-in-250 chance there."""
    settings = Settings(prepare_timeout_s=10)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(min(os.cpu_count() or 2, 4))]
    try:
        for i in range(30):
            device = load_driver("remote:nnts serve reference", settings=settings)
            try:
                assert device.get_name() == "nnapi-reference", i
            finally:
                device.close()
    finally:
        for process in busy:
            process.kill()
            process.wait()


def test_a_socket_server_closes_a_connection_only_once_no_reply_is_being_written():
    """A call can still be running when its client goes: its reply must go into the closed
    socket, never into the next client's connection, which may take the freed number."""
    import threading

    from nnapi_ref.remote.server import Session
    writing, release, events = threading.Event(), threading.Event(), []

    def write(frame):
        writing.set()
        release.wait(10)
        events.append("written")
    session = Session(ReferenceDevice(), lambda n: b"", write)
    sender = threading.Thread(target=session._send, args=(Writer(), Msg.OK, 1))
    sender.start()
    writing.wait(10)
    closer = threading.Thread(target=session.when_no_reply_is_written, args=(lambda: events.append("closed"),))
    closer.start()
    closer.join(0.2)
    assert events == [] and closer.is_alive()  # waits for the write
    release.set()
    sender.join(10)
    closer.join(10)
    assert events == ["written", "closed"]


def test_a_driver_process_stderr_reader_never_reads_a_descriptor_number_reused_after_it():
    """A transport's stderr is closed when the transport is collected, while its reader may run
    on; the next driver process's pipes then take the freed numbers. Reading the number, the old
    reader took the new process's replies (a start hung for 120 s, about one in seven in a loop)."""
    from nnapi_ref.remote.client import ProcessTransport
    chatty = "import sys, time\nfor _ in range(60): sys.stderr.write('x\\n'); sys.stderr.flush(); time.sleep(0.05)"
    transport = ProcessTransport(f"{sys.executable} -c {shlex.quote(chatty)}")
    number = transport.proc.stderr.fileno()
    read_end, write_end = os.pipe()
    try:
        transport.proc.stderr.close()  # as collecting the transport does
        os.dup2(read_end, number)  # the next pipe made takes the freed number
        os.write(write_end, b"a reply for the next connection")
        time.sleep(0.5)  # the chatty process wrote about ten lines meanwhile
        os.set_blocking(number, False)
        assert os.read(number, 100) == b"a reply for the next connection"
    finally:
        transport.kill()
        for fd in (number, read_end, write_end):
            os.close(fd)


def test_concurrent_calls_on_one_connection_reach_the_driver_together(tmp_path):
    """The server's reading thread runs each call itself; a call still running passes the reading
    on, so that two executions from two client threads are in the driver at once (each waits for
    the other here: served one after the other, both would fail)."""
    import socket
    import threading

    from nnapi_ref.remote import client, server
    both_inside = threading.Barrier(2, timeout=20)

    class Meeting(ReferenceDevice):
        def prepare_model(self, *args):
            prepared = super().prepare_model(*args)
            execute = prepared.execute_synchronously

            def meet(*a):
                both_inside.wait()
                return execute(*a)
            prepared.execute_synchronously = meet
            return prepared

    path = str(tmp_path / "s.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def serve_one():
        conn, _ = listener.accept()
        server._serve_connection(Meeting(), conn)
    serving = threading.Thread(target=serve_one, daemon=True)
    serving.start()
    device = client.attach_socket(path)
    try:
        compilation = Compilation(chain_model(), [Device(device)])
        compilation.finish()
        results = [None, None]

        def run(i):
            results[i] = execute_chain(compilation, A + i, B, "sync")
        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for i in range(2):
            np.testing.assert_array_equal(results[i], chain(A + i, B))
    finally:
        device.close()
        listener.close()
        serving.join(10)


def test_request_encodings_are_the_protocols_fields_byte_for_byte():
    """Arguments, region references, execution options and timings are packed by precompiled
    structs, a message at a time: the bytes are still the fields of docs/remote-protocol.md one
    after the other (what any version 2 peer writes and reads), and malformed ones still fail
    as such."""
    import struct

    from nnapi_ref.remote import wire
    from nnapi_ref.remote.wire import EncodeError, ProtocolError, Reader

    def encoded(write, *args) -> bytes:
        w = Writer()
        write(w, *args)
        return b"".join(w.parts)

    pointer = hal.RequestArgument(hal.ArgumentLifetime.POINTER, 0, 0, 16, dimensions=(2, 2))
    field_by_field = (struct.pack("<i", 2) + struct.pack("<I", 0) + struct.pack("<I", 0) + struct.pack("<I", 16)
                      + struct.pack("<I", 2) + struct.pack("<II", 2, 2) + b"\x01" + struct.pack("<QQQ", 7, 64, 16))
    assert encoded(wire.write_argument, pointer, (7, 64, 16)) == field_by_field
    pool = hal.RequestArgument(hal.ArgumentLifetime.POOL, 1, 32, 8)
    assert encoded(wire.write_argument, pool, None) == struct.pack("<iIIII", 0, 1, 32, 8, 0) + b"\x00"
    assert encoded(wire.write_region_ref, (1, 2, 3)) == struct.pack("<QQQ", 1, 2, 3)
    assert encoded(wire.write_execution_options, True, None, 5) == b"\x01" + b"\x00" + struct.pack("<Q", 5)
    assert encoded(wire.write_execution_options, False, -4, 5) == b"\x00\x01" + struct.pack("<qQ", -4, 5)
    assert encoded(wire.write_timing, hal.Timing(3, -1)) == struct.pack("<qq", 3, -1)

    read = wire.read_argument(Reader(field_by_field), lambda ref: ref)
    assert (read.lifetime, read.pool_index, read.offset, read.length, read.dimensions, read.pointer) == \
        (hal.ArgumentLifetime.POINTER, 0, 0, 16, (2, 2), (7, 64, 16))
    assert wire.read_timing(Reader(struct.pack("<qq", 3, -1))) == hal.Timing(3, -1)
    for cut in (3, 19, 27, len(field_by_field) - 1):
        with pytest.raises(ProtocolError):
            wire.read_argument(Reader(field_by_field[:cut]), lambda ref: ref)
    with pytest.raises(ProtocolError):  # a dimension count beyond the message
        wire.read_argument(Reader(struct.pack("<iIIII", 0, 0, 0, 0, 1 << 30) + b"\x00"), lambda ref: ref)
    for bad in (hal.RequestArgument(hal.ArgumentLifetime.POOL, -1, 0, 4),
                hal.RequestArgument(hal.ArgumentLifetime.POOL, 0, 0, 4, dimensions=(-2,))):
        with pytest.raises(EncodeError):
            encoded(wire.write_argument, bad, None)


# -- the supported operations of a model, asked once per driver process ---------------------------

def _supported_queries(monkeypatch, device) -> list:
    """The GET_SUPPORTED_OPERATIONS calls sent to ``device``'s driver process from now on."""
    asked = []
    connection = device.live()
    call = connection.call

    def counting(msg, *args, **kwargs):
        if msg == Msg.GET_SUPPORTED_OPERATIONS:
            asked.append(msg)
        return call(msg, *args, **kwargs)
    monkeypatch.setattr(connection, "call", counting)
    return asked


def _plus_constant_model(n: int):
    """out = a + c, c a float32 constant of ``n`` elements (in shared memory from 1,025 on)."""
    from nnapi_ref.runtime import Model, OperandType
    from nnapi_ref.types import OperandCode, OperationCode
    model = Model()
    t = OperandType(OperandCode.TENSOR_FLOAT32, [n])
    a, c = model.add_operand(t), model.add_operand(t)
    fuse = model.add_operand(OperandType(OperandCode.INT32))
    out = model.add_operand(t)
    model.set_operand_value(c, np.ones(n, np.float32))
    model.set_operand_value(fuse, np.int32(0))
    model.add_operation(OperationCode.ADD, [a, c, fuse], [out])
    model.identify_inputs_and_outputs([a], [out])
    model.finish()
    return model


def test_a_models_supported_operations_are_asked_once_per_driver_process(monkeypatch):
    """The runtime asks at getSupportedOperationsForDevices and again when it partitions, and the
    suite builds the same model once per variant: a model sent byte for byte as one asked about
    before gets the driver's first answer. A model with a constant in shared memory (whose bytes
    could change) is asked about every time, and a restarted driver is asked again."""
    device = load_driver(SERVE_REFERENCE)
    try:
        asked = _supported_queries(monkeypatch, device)
        devices = [Device(device)]
        for _ in range(3):
            model = chain_model()
            assert model.get_supported_operations_for_devices(devices) == [True, True, True]
            Compilation(model, devices).finish()
        assert len(asked) == 1
        for n in (1024, 1025):
            before = len(asked)
            for _ in range(2):
                model = _plus_constant_model(n)
                assert model.get_supported_operations_for_devices(devices) == [True]
                Compilation(model, devices).finish()
            assert len(asked) - before == (1 if n == 1024 else 4), n
        device.live().fail("crash", "CRASH: killed by the test")
        asked = _supported_queries(monkeypatch, device)
        assert chain_model().get_supported_operations_for_devices(devices) == [True, True, True]
        assert len(asked) == 1
    finally:
        device.close()


def test_a_driver_failing_the_supported_operations_query_is_asked_each_time(tmp_path, monkeypatch):
    """Errors and answers of the wrong length are not kept: each query reaches the driver, and
    the runtime sees the failure each time, as in process."""
    (tmp_path / "miscounts.py").write_text(
        "from nnapi_ref.drivers.reference import ReferenceDevice\n"
        "class Miscounts(ReferenceDevice):\n"
        "    def get_supported_operations(self, model):\n"
        "        return super().get_supported_operations(model) + [True]\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    miscounts, reference = load_drivers(["remote:nnts serve miscounts:Miscounts", SERVE_REFERENCE])
    try:
        asked = _supported_queries(monkeypatch, miscounts)
        for _ in range(2):
            with pytest.raises(NnapiError) as e:
                chain_model().get_supported_operations_for_devices([Device(miscounts)])
            assert e.value.code == ResultCode.OP_FAILED and "returned 4 flags for 3 operations" in e.value.message
        assert len(asked) == 2

        asked = _supported_queries(monkeypatch, reference)
        invalid = hal_chain_model()
        invalid.main.operations[0] = hal.Operation(-1, invalid.main.operations[0].inputs,
                                                   invalid.main.operations[0].outputs)
        for _ in range(2):
            with pytest.raises(HalError) as e:
                reference.get_supported_operations(invalid)
            assert e.value.status == ErrorStatus.INVALID_ARGUMENT
        assert len(asked) == 2
    finally:
        miscounts.close()
        reference.close()


# -- many independent calls, sent together -----------------------------------------------------------

def _invalid_chain_model() -> hal.Model:
    model = hal_chain_model()
    model.main.operations[0] = hal.Operation(-1, model.main.operations[0].inputs, model.main.operations[0].outputs)
    return model


def _writes(monkeypatch, device) -> list:
    """The writes of requests to ``device``'s driver process from now on."""
    writes = []
    transport = device.live().transport
    send = transport.send

    def counting(data):
        writes.append(len(data))
        return send(data)
    monkeypatch.setattr(transport, "send", counting)
    return writes


def _outcome(result):
    """What a call came to, comparable between drivers: the flags, a prepared model, or the error's status."""
    if isinstance(result, HalError):
        return result.status
    return "prepared" if isinstance(result, hal.PreparedModel) else list(result)


def test_models_checked_together_are_answered_as_one_by_one_in_one_write(monkeypatch):
    """VTS's invalid models go to a driver process together: the answers are those the calls get
    one by one (values, and errors with their status), in order, for one write of requests; a
    prepared model among them works; more than TOGETHER_BYTES or TOGETHER_CALLS go in several writes."""
    device, other = load_driver(SERVE_REFERENCE), load_driver(SERVE_REFERENCE)  # nothing asked of either yet
    try:
        valid, invalid = hal_chain_model(), _invalid_chain_model()
        medium = PriorityCode.MEDIUM
        calls = [(valid,), (invalid,), (invalid, PreferenceCode.FAST_SINGLE_ANSWER, medium), (valid, 99, medium),
                 (valid, PreferenceCode.SUSTAINED_SPEED, medium), (valid,)]
        one_by_one = []
        for model, *settings in calls:
            try:
                one_by_one.append(other.prepare_model(model, *settings, None, (), (), None) if settings else
                                  other.get_supported_operations(model))
            except HalError as e:
                one_by_one.append(e)
        writes = _writes(monkeypatch, device)
        together = device.check_models(calls)
        assert len(writes) == 1 and writes[0] > 6 * 12  # six requests, each a 12-byte header and more
        assert [_outcome(r) for r in together] == [_outcome(r) for r in one_by_one] == [
            [True, True, True], ErrorStatus.INVALID_ARGUMENT, ErrorStatus.INVALID_ARGUMENT,
            ErrorStatus.INVALID_ARGUMENT, "prepared", [True, True, True]]
        assert together[1].message == one_by_one[1].message
        out = np.zeros_like(A)
        pointer = hal.ArgumentLifetime.POINTER
        request = hal.Request([hal.RequestArgument(pointer, 0, 0, a.nbytes, a) for a in (A, B)],
                              [hal.RequestArgument(pointer, 0, 0, out.nbytes, out)], [])
        together[4].execute_synchronously(request, False, None, 2_000_000_000)
        np.testing.assert_allclose(out, chain(A, B))

        monkeypatch.setattr(device.live(), "TOGETHER_BYTES", 1024)
        many = [(_invalid_chain_model(), PreferenceCode.FAST_SINGLE_ANSWER, medium) for _ in range(12)]
        writes.clear()
        assert [_outcome(r) for r in device.check_models(many)] == [ErrorStatus.INVALID_ARGUMENT] * 12
        assert 3 <= len(writes) <= 12 and max(writes) <= 1024 + 512, writes

        monkeypatch.setattr(device.live(), "TOGETHER_BYTES", 1 << 15)
        monkeypatch.setattr(device, "TOGETHER_CALLS", 5)  # what lives at once: a batch's models
        writes.clear()
        assert [_outcome(r) for r in device.check_models(many)] == [ErrorStatus.INVALID_ARGUMENT] * 12
        assert len(writes) == 3, writes
    finally:
        device.close()
        other.close()


STOPS_PREPARING_ONE_OPERATION = """
import os, time
from nnapi_ref.drivers.reference import ReferenceDevice
class Aborts(ReferenceDevice):
    def prepare_model(self, model, *args):
        if len(model.main.operations) == 1:
            os.abort()
        return super().prepare_model(model, *args)
class Hangs(ReferenceDevice):
    def prepare_model(self, model, *args):
        if len(model.main.operations) == 1:
            time.sleep(600)
        return super().prepare_model(model, *args)
"""


@pytest.mark.parametrize("stop", ["Aborts", "Hangs"])
def test_a_driver_that_dies_in_a_batch_fails_the_calls_after_it_once(tmp_path, monkeypatch, stop):
    """A crash or hang in the middle of calls sent together is one incident: that call gets
    DEAD_OBJECT with the verdict, each other call its answer or (in flight when the driver died)
    the same DEAD_OBJECT, and the next call gets a fresh process. (The server runs a call still
    running after 5 ms beside the next ones, so calls before and after may be answered or not.)"""
    (tmp_path / "stops.py").write_text(STOPS_PREPARING_ONE_OPERATION)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    device = load_driver(f"remote:nnts serve stops:{stop}")
    try:
        device.live().prepare_timeout_s = HANG_BUDGET_S
        before = device.incidents.mark()
        one = add_model((4,), input_dims=(4,)).hal_model
        fast = PreferenceCode.FAST_SINGLE_ANSWER
        results = device.check_models([(hal_chain_model(),), (hal_chain_model(), fast, PriorityCode.MEDIUM),
                                       (one, fast, PriorityCode.MEDIUM), (hal_chain_model(),)])
        incidents = device.incidents.since(before)
        verdict = "CRASH" if stop == "Aborts" else "HANG"
        assert [i.kind for i in incidents] == [verdict.lower()]
        stopped = results[2]
        assert isinstance(stopped, HalError) and stopped.status == ErrorStatus.DEAD_OBJECT
        assert stopped.message.startswith(verdict) and stopped.message == incidents[0].message
        if stop == "Hangs":
            assert f"did not return from prepare_model within {HANG_BUDGET_S:g} s" in stopped.message
        for result, answer in zip([results[0], results[1], results[3]], [[True, True, True], "prepared",
                                                                         [True, True, True]]):
            assert _outcome(result) == answer or (_outcome(result) == ErrorStatus.DEAD_OBJECT and
                                                  result.message == stopped.message), result
        assert device.get_supported_operations(hal_chain_model()) == [True, True, True]
        assert device.restarts == 1
    finally:
        device.close()
