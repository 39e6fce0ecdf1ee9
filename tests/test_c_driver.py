"""The example drivers on the nnts-driver SDK, in C (examples/c_driver) and in C++
(examples/cpp_driver): built with the system compiler, served over the remote-driver protocol,
and held to the conformance suite on what they support (ADD and MUL on TENSOR_FLOAT32, the
example extension) while everything else comes out skipped as unsupported. A protocol-level
test checks that malformed messages get clean errors and never take the server down."""
from __future__ import annotations

import os
import random
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from nnapi_ref import hal
from nnapi_ref.remote import wire
from nnapi_ref.remote.wire import Msg, Reader, Writer
from nnapi_ref.types import Lifetime, OperandCode as T, OperationCode as Op
from nnts.mlts import stress

from . import native, support

ROOT = Path(__file__).resolve().parents[1]

# ADD and MUL in every dtype (only TENSOR_FLOAT32 and its relaxed variant are supported) and SUB
# on float32 (not supported at all): generated tests in every execution mode, VTS model and
# request validation on the ADD/MUL float32 models.
SELECTION = "op_ADD or op_MUL or (op_SUB and dtype_TENSOR_FLOAT32)"
SUPPORTED_IDS = ("ADD-TENSOR_FLOAT32", "MUL-TENSOR_FLOAT32")  # also matches ..._RELAXED
NO_DEVICE_MEMORY = "allocates no device memory"


NAMES = {"c": "nnts-example-c", "cpp": "nnts-example-cpp"}


@pytest.fixture(scope="module")
def sdk_build(tmp_path_factory) -> Path:
    if native.compilers() is None:
        pytest.skip(native.missing_compiler_reason())
    return tmp_path_factory.mktemp("sdk_drivers")


@pytest.fixture(scope="module")
def sdk_cache(tmp_path_factory) -> Path:
    return native.objects_folder(tmp_path_factory)


@pytest.fixture(scope="module")
def c_driver(sdk_build, sdk_cache) -> Path:
    return native.build(native.C_EXAMPLE, sdk_build, "nnts_example_driver", sdk_cache)


@pytest.fixture(scope="module")
def cpp_driver(sdk_build, sdk_cache) -> Path:
    return native.build(native.CPP_EXAMPLE, sdk_build, "example_driver", sdk_cache)


@pytest.fixture(params=["c", "cpp"])
def example(request) -> tuple[str, Path]:
    """Each example driver in turn: (its language, its binary)."""
    return request.param, request.getfixturevalue(f"{request.param}_driver")


def _env() -> dict:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("NNTS_DRIVER", None)
    return env


def test_devices_lists_the_example_driver(example):
    language, binary = example
    done = subprocess.run([sys.executable, "-m", "nnts", "devices", "--driver",
                           f"remote:{shlex.quote(str(binary))}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{NAMES[language]}: type CPU, feature level 1000007" in done.stdout, done.stdout
    assert "cache files: (0, 0)" in done.stdout
    assert "TENSOR_FLOAT32" in done.stdout


def test_extension_tests_pass_on_the_example_extension(example, tmp_path):
    """Each example driver implements org.nnts.example (docs/extensions.md): CTS and VTS extension tests
    pass with the reference beside it, none skipped but the optional device memory."""
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pytest", "cts/test_extensions.py", "vts/test_extensions.py", "-q", "-p",
               "no:cacheprovider", "--no-shared-vectors", "--driver",
               f"remote:{shlex.quote(str(example[1]))},reference", "--report", str(report)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=_env())
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    outcomes = support.report_outcomes(report)
    skipped = [n for n, (outcome, _) in outcomes.items() if outcome == "skipped"]
    assert all("test_device_memory" in n for n in skipped), skipped
    assert sum(outcome == "passed" for outcome, _ in outcomes.values()) >= 30


def test_conformance_suite_passes_on_add_and_mul(example, tmp_path):
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pytest", "cts", "vts", "-q", "-p", "no:cacheprovider", "--no-shared-vectors",
               "--reproducers", str(tmp_path / "reproducers"), "--driver", f"remote:{shlex.quote(str(example[1]))}",
               "-m", SELECTION, "--report", str(report)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=_env())
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    outcomes = support.report_outcomes(report)
    failed = [name for name, (outcome, _) in outcomes.items() if outcome == "failed"]
    assert not failed, failed

    supported = {n: o for n, o in outcomes.items() if any(s in n for s in SUPPORTED_IDS)}
    others = {n: o for n, o in outcomes.items() if n not in supported}
    # What the driver supports runs and passes, except device memory, which it declines.
    wrongly_skipped = [n for n, (outcome, why) in supported.items() if outcome == "skipped" and NO_DEVICE_MEMORY not in why]
    assert not wrongly_skipped, wrongly_skipped
    passed = [n for n, (outcome, _) in supported.items() if outcome == "passed"]
    for kind in ("cts/test_generated.py", "vts/test_generated.py", "test_validate_model", "test_validate_request"):
        assert any(kind in n for n in passed), f"no {kind} test passed"
    for mode in ("sync", "async", "burst", "fenced", "dynamic", "cached"):
        assert any(n.endswith(f"-{mode}]") and n.startswith("cts/") for n in passed), f"no CTS {mode} test passed"
    assert len([n for n in passed if "test_validate_model" in n]) >= 30, passed
    # Everything else is reported unsupported: skipped, and counted as such per operation.
    not_unsupported = [n for n, (outcome, why) in others.items() if outcome != "skipped" or "unsupported" not in why]
    assert not not_unsupported, not_unsupported
    assert any("[SUB-" in n for n in others) and any("QUANT8" in n for n in others)
    said = [line for line in output.splitlines() if "tests skipped as unsupported" in line]  # one line, by reason
    assert len(said) == 1, output[-2000:]
    assert "operation it ran in no test" in said[0] and "some operand types" in said[0], said


# ---- the protocol itself: malformed messages --------------------------------------------------

def _add_model(fuse_value: int = 0) -> hal.Model:
    def tensor(lifetime):
        return hal.Operand(T.TENSOR_FLOAT32, (2, 2), 0.0, 0, lifetime)
    fuse = hal.Operand(T.INT32, (), 0.0, 0, Lifetime.CONSTANT_COPY)
    fuse.value = np.array(fuse_value, np.int32)
    main = hal.Subgraph([tensor(Lifetime.SUBGRAPH_INPUT), tensor(Lifetime.SUBGRAPH_INPUT), fuse,
                         tensor(Lifetime.SUBGRAPH_OUTPUT)], [hal.Operation(Op.ADD, (0, 1, 2), (3,))], (0, 1), (3,))
    return hal.Model(main)


class _Server:
    """A driver on a pipe, one request and one reply at a time."""

    def __init__(self, binary: Path):
        self.proc = subprocess.Popen([str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        self.watchdog = threading.Timer(120, self.proc.kill)  # a hung server fails the test, not the run
        self.watchdog.start()
        self.ids = 0

    def send(self, msg: int, body: bytes) -> None:
        self.ids += 1
        self.proc.stdin.write(wire.HEADER.pack(12 + len(body), msg, self.ids) + body)
        self.proc.stdin.flush()

    def reply(self) -> tuple[int, bytes]:
        header = self.proc.stdout.read(wire.HEADER.size)
        assert len(header) == wire.HEADER.size, f"the server closed the stream (exit {self.proc.poll()})"
        length, msg, call_id = wire.HEADER.unpack(header)
        assert call_id == self.ids and 12 <= length <= 12 + wire.MAX_REPLY
        return msg, self.proc.stdout.read(length - 12)

    def call(self, msg: int, body: bytes) -> tuple[int, bytes]:
        self.send(msg, body)
        return self.reply()

    def close(self) -> int:
        self.proc.stdin.close()
        code = self.proc.wait(timeout=30)
        self.watchdog.cancel()
        return code


def _error_status(body: bytes) -> int:
    return wire.read_error(Reader(body)).status


def test_malformed_messages_get_invalid_argument_and_the_server_survives(example):
    language, binary = example
    server = _Server(binary)
    try:
        msg, body = server.call(Msg.HELLO, b"NNTX" + (1).to_bytes(4, "little"))
        assert msg == Msg.ERROR and _error_status(body) == hal.ErrorStatus.INVALID_ARGUMENT
        for other in (wire.OLDEST_VERSION - 1, wire.VERSION + 1):  # version 1 came before extensions
            msg, body = server.call(Msg.HELLO, b"NNTS" + other.to_bytes(4, "little"))
            assert msg == Msg.ERROR and _error_status(body) == hal.ErrorStatus.DEVICE_UNAVAILABLE, other
        msg, body = server.call(Msg.HELLO, b"NNTS" + wire.VERSION.to_bytes(4, "little"))
        assert msg == Msg.DEVICE_INFO
        r = Reader(body)
        assert r.u32() == wire.VERSION and wire.read_device_info(r)["name"] == NAMES[language]
        r.end()
        msg, body = server.call(77, b"")
        assert msg == Msg.ERROR and _error_status(body) == hal.ErrorStatus.INVALID_ARGUMENT
        msg, body = server.call(Msg.EXECUTE_SYNC, (12345).to_bytes(8, "little"))  # unknown handle, truncated
        assert msg == Msg.ERROR and _error_status(body) == hal.ErrorStatus.INVALID_ARGUMENT

        w = Writer()
        wire.write_model(w, _add_model(), None)
        valid = b"".join(w.parts)
        msg, body = server.call(Msg.GET_SUPPORTED_OPERATIONS, valid)
        assert (msg, body) == (Msg.SUPPORTED, b"\x01\x00\x00\x00\x01")
        # Every truncation, and trailing bytes, are malformed.
        for cut in list(range(len(valid))) + [len(valid) + 1]:
            broken = valid[:cut] if cut <= len(valid) else valid + b"\x00"
            msg, body = server.call(Msg.GET_SUPPORTED_OPERATIONS, broken)
            assert msg == Msg.ERROR and _error_status(body) == hal.ErrorStatus.INVALID_ARGUMENT, cut
        # An invalid fused activation is refused at preparation, not at execution.
        w = Writer()
        wire.write_model(w, _add_model(fuse_value=4), None)
        for part in (b"\x01\x00\x00\x00", b"\x64\x00\x00\x00", b"\x00", b"\x00\x00\x00\x00", b"\x00\x00\x00\x00",
                     b"\x00"):  # preference, priority, deadline, no cache files, no token
            w.parts.append(part)
        msg, body = server.call(Msg.PREPARE_MODEL, b"".join(w.parts))
        assert msg == Msg.ERROR and _error_status(body) == hal.ErrorStatus.INVALID_ARGUMENT
        # Random corruption: any answer but a crash, a hang or a malformed reply.
        rng = random.Random(10)
        for _ in range(400):
            broken = bytearray(valid)
            for _ in range(rng.randint(1, 4)):
                broken[rng.randrange(len(broken))] = rng.randrange(256)
            msg, body = server.call(Msg.GET_SUPPORTED_OPERATIONS, bytes(broken))
            if msg == Msg.ERROR:
                wire.read_error(Reader(body))
            else:
                assert msg == Msg.SUPPORTED
        msg, body = server.call(Msg.GET_SUPPORTED_OPERATIONS, valid)
        assert msg == Msg.SUPPORTED
        # Messages without a reply are ignored when malformed; the stream stays in step.
        server.send(Msg.REGION_ADD, b"\x01")
        server.send(Msg.RELEASE, b"")
        msg, body = server.call(Msg.GET_SUPPORTED_OPERATIONS, valid)
        assert msg == Msg.SUPPORTED
    finally:
        code = server.close()
    assert code == 0, f"the server exited with {code}"


def test_stress_set_on_a_stdio_only_driver(c_driver):
    """The multi-client tests give each client process a C driver of its own, which must exit when
    its client is killed; random graphs are made of the operations and types it supports only."""
    names = ["client_killed_during_execution", "random_graphs"]
    results = stress.run_tests(f"remote:{shlex.quote(str(c_driver))}", names, 1.0)
    assert {r.name: r.verdict for r in results} == {name: "SUCCESS" for name in names}, [r.message for r in results]
    graphs = results[1].metrics
    assert graphs["supported_operations"] == 2 and graphs["skipped"] == 0 and graphs["passed"] >= stress.MIN_RANDOM_GRAPHS


def test_the_example_driver_adds_its_spans_to_the_clients_trace(example, tmp_path):
    """TRACE_START / TRACE_COLLECT (docs/remote-protocol.md section 8): the driver's prepare and
    execute spans (nnts_trace_span, nnts::traceSpan) and the SDK's own span of each request land
    in the trace as a process of their own, inside the client's calls."""
    import json

    import numpy as np

    from nnapi_ref import trace
    from nnapi_ref.runtime import Compilation, Device, Execution
    from nnts.generators.builders import chain, chain_model
    from nnts.runners.drivers import load_driver
    path = tmp_path / "trace.json"
    trace.reset()
    trace.start(str(path))
    device = load_driver(f"remote:{shlex.quote(str(example[1]))}")
    try:
        compilation = Compilation(chain_model(), [Device(device)])
        compilation.finish()
        execution = Execution(compilation)
        a, b = np.ones((2, 2), np.float32), np.full((2, 2), 2, np.float32)
        execution.set_input(0, a)
        execution.set_input(1, b)
        out = np.zeros((2, 2), np.float32)
        execution.set_output(0, out)
        execution.compute()
        np.testing.assert_array_equal(out, chain(a, b))
        trace.stop()
    finally:
        device.close()
        trace.reset()
    spans = {e["name"]: e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"}
    execute, prepare = spans["[NN_LD_PE]example execute"], spans["[NN_LD_PC]example prepareModel"]
    call, served = spans["[NN_LI_PCO]EXECUTE_SYNC"], spans["[NN_LI_PCO]serve EXECUTE_SYNC"]
    assert execute["pid"] == prepare["pid"] == served["pid"] != call["pid"]
    for inner, outer in ((execute, call), (execute, served), (served, call)):
        assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"], (inner, outer)


def test_a_driver_served_on_a_socket_serves_one_client_after_another(c_driver, tmp_path):
    """--socket PATH: a socket of the owner's only; each client gets a fresh connection's state."""
    path = tmp_path / "driver.sock"
    server = subprocess.Popen([str(c_driver), "--socket", str(path)], stderr=subprocess.PIPE)
    try:
        for _ in range(100):
            if path.exists():
                break
            threading.Event().wait(0.05)
        assert path.exists() and (path.stat().st_mode & 0o077) == 0
        for _ in range(2):
            done = subprocess.run([sys.executable, "-m", "nnts", "devices", "--driver", f"socket:{path}"], cwd=ROOT,
                                  capture_output=True, text=True, timeout=60, env=_env())
            assert done.returncode == 0 and "nnts-example-c" in done.stdout, done.stdout + done.stderr
    finally:
        server.kill()
        server.wait()
    (tmp_path / "not-a-socket").write_text("keep me")
    done = subprocess.run([str(c_driver), "--socket", str(tmp_path / "not-a-socket")], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode != 0 and "not a socket" in done.stderr
    assert (tmp_path / "not-a-socket").read_text() == "keep me"
    done = subprocess.run([str(c_driver), "--frobnicate"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "unknown argument --frobnicate" in done.stderr and "Traceback" not in done.stderr


CRASHING_DRIVER = r'''
#include <stdlib.h>
#include "nnts/driver.h"
static int32_t supported(void *c, const nnts_model *m, bool *s, nnts_error *e) { (void)c, (void)m, (void)s, (void)e; abort(); }
static int32_t prepare(void *c, const nnts_model *m, const nnts_prepare_options *o, void **p, nnts_error *e)
{ (void)c, (void)m, (void)o, (void)p; return nnts_fail(e, NNTS_GENERAL_FAILURE, "no"); }
static int32_t execute(void *c, void *p, const nnts_request *q, const nnts_execution_options *o, nnts_output_shape *s,
                       nnts_timing *t, nnts_error *e) { (void)c, (void)p, (void)q, (void)o, (void)s, (void)t; return nnts_fail(e, 2, "no"); }
int main(int argc, char **argv)
{
    nnts_driver d = {.abi_version = NNTS_DRIVER_ABI_VERSION, .info = {.name = "crashy", .feature_level = 1000007,
                     .type = 2}, .get_supported_operations = supported, .prepare_model = prepare, .execute = execute};
    return nnts_serve(&d, argc, argv);
}
'''


def test_a_driver_that_dies_leaves_one_line_naming_the_message(sdk_build, sdk_cache, tmp_path):
    source = tmp_path / "crashy.c"
    source.write_text(CRASHING_DRIVER)
    binary = native.build(source, sdk_build, "crashy", sdk_cache)
    w = Writer()
    wire.write_model(w, _add_model(), None)
    body = b"".join(w.parts)
    frames = (wire.HEADER.pack(20, Msg.HELLO, 1) + b"NNTS" + wire.VERSION.to_bytes(4, "little") +
              wire.HEADER.pack(12 + len(body), Msg.GET_SUPPORTED_OPERATIONS, 2) + body)
    done = subprocess.run([str(binary)], input=frames, capture_output=True, timeout=60)
    assert done.returncode < 0 or done.returncode > 128, done.returncode
    assert b"nnts-driver: crashy died of SIGABRT while handling GET_SUPPORTED_OPERATIONS" in done.stderr, done.stderr
    _, msg, call_id = wire.HEADER.unpack(done.stdout[:wire.HEADER.size])
    assert (msg, call_id) == (Msg.DEVICE_INFO, 1)


def test_the_cmake_package_and_pkg_config_file_build_the_cpp_example(tmp_path):
    """find_package(nnts-driver) with `nnts sdk --cmake-dir`, and pkg-config with `--pkg-config-dir`."""
    import shutil
    if native.compilers() is None:
        pytest.skip(native.missing_compiler_reason())
    sdk = subprocess.run([sys.executable, "-m", "nnts", "sdk", "--cmake-dir", "--pkg-config-dir"], capture_output=True,
                         text=True, timeout=60, env=_env())
    assert sdk.returncode == 0, sdk.stderr
    cmake_dir, pc_dir = sdk.stdout.split()
    if shutil.which("pkg-config"):
        env = dict(_env(), PKG_CONFIG_PATH=pc_dir)
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "nnts-driver"], capture_output=True, text=True,
                               env=env, timeout=30)
        sources = subprocess.run(["pkg-config", "--variable=sources", "nnts-driver"], capture_output=True, text=True,
                                 env=env, timeout=30)
        assert flags.returncode == 0 and "-pthread" in flags.stdout, flags.stderr
        include = flags.stdout.split()[0][2:]
        assert (Path(include) / "nnts" / "driver.hpp").is_file()
        assert all(Path(s).is_file() for s in sources.stdout.split()) and len(sources.stdout.split()) == 3
    if not shutil.which("cmake"):
        pytest.skip("no cmake on PATH: the CMake package is not built")
    (tmp_path / "CMakeLists.txt").write_text(f"""cmake_minimum_required(VERSION 3.16)
project(acme CXX)
find_package(nnts-driver 1.0 CONFIG REQUIRED PATHS "{cmake_dir}" NO_DEFAULT_PATH)
add_executable(example_driver "{native.CPP_EXAMPLE}")
target_compile_options(example_driver PRIVATE -Wall -Wextra -Werror)
target_link_libraries(example_driver PRIVATE nnts::driver)
""")
    build = tmp_path / "build"
    for command in (["cmake", "-S", str(tmp_path), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"],
                    ["cmake", "--build", str(build), "-j", "2"]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    done = subprocess.run([sys.executable, "-m", "nnts", "devices", "--driver", f"remote:{build / 'example_driver'}"],
                          capture_output=True, text=True, timeout=60, env=_env())
    assert done.returncode == 0 and "nnts-example-cpp" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("version", [wire.VERSION, wire.OLDEST_VERSION])
def test_hardware_buffers_reach_the_driver_with_their_description(example, version, monkeypatch):
    """BLOB buffers are shared memory to both examples; an image format reaches the driver's
    acceptsHardwareBuffer: the C++ example takes packed images, the C example keeps the SDK's
    default and refuses them. A client of the older protocol is served too (the client then
    refuses image formats itself)."""
    from nnapi_ref import (AHardwareBuffer, Compilation, Execution, HardwareBufferDesc, HardwareBufferFormat, Memory,
                           NnapiError, ResultCode)
    from nnapi_ref.runtime.devices import Device
    from nnts.generators.builders import add_model
    from nnts.runners.drivers import load_driver

    monkeypatch.setattr(wire, "VERSION", version)
    language, binary = example
    device = load_driver(f"remote:{shlex.quote(str(binary))}")
    try:
        assert device.connection.version == version
        compilation = Compilation(add_model(), [Device(device)])
        compilation.finish()
        a, b = np.array([1.5, -2.0], np.float32), np.array([0.25, 4.0], np.float32)
        for desc, offset in ((HardwareBufferDesc(64), 32), (HardwareBufferDesc(2, 1, 1, HardwareBufferFormat.R8G8B8A8_UNORM), 0)):
            buffer = AHardwareBuffer.allocate(desc)
            buffer.data[offset:offset + 8] = a.view(np.uint8)
            execution = Execution(compilation)
            execution.set_input_from_memory(0, Memory.from_ahardware_buffer(buffer), offset, 8 if desc.is_blob else 0)
            execution.set_input(1, b.copy())
            out = np.zeros(2, np.float32)
            execution.set_output(0, out)
            if desc.is_blob or (language == "cpp" and version >= wire.HARDWARE_BUFFER_POOL_VERSION):
                execution.compute()
                np.testing.assert_array_equal(out, a + b)
                continue
            with pytest.raises(NnapiError) as e:
                execution.compute()
            assert e.value.code == ResultCode.OP_FAILED
            expected = "hardware buffer of format 1" if version >= wire.HARDWARE_BUFFER_POOL_VERSION else "protocol version"
            assert expected in e.value.message, e.value.message
    finally:
        device.close()


def test_the_remote_fuzz_harness_runs_against_an_sdk_driver_process(c_driver, sdk_build, sdk_cache, tmp_path):
    """`nnts fuzz --harness remote --driver remote:SDK_DRIVER` feeds its frames to the driver's own
    server (a process per input): the example survives them, and a driver that dies is a finding."""
    from nnts.fuzz import harnesses, targets
    from nnts.runners.drivers import load_driver

    rng = random.Random(1)
    corpus = [str(ROOT / "cts" / "corpus")]
    device = load_driver(f"remote:{shlex.quote(str(c_driver))}")
    try:
        harness = targets.make("remote", device, corpus)
        seeds = harness.seed_inputs()
        for _ in range(60):
            harness(rng.choice(seeds) + rng.randbytes(rng.randrange(0, 48)))  # raises on a finding
    finally:
        device.close()
    source = tmp_path / "crashy_prepare.c"  # the crashing driver, crashing in prepare too
    source.write_text(CRASHING_DRIVER.replace('return nnts_fail(e, NNTS_GENERAL_FAILURE, "no"); }', "(void)e; abort(); }", 1))
    crashy = load_driver(f"remote:{shlex.quote(str(native.build(source, sdk_build, 'crashy_prepare', sdk_cache)))}")
    try:
        harness = targets.make("remote", crashy, corpus)
        with pytest.raises(harnesses.Finding, match="SIGABRT"):
            for data in harness.seed_inputs()[:40]:
                harness.checked(data)
    finally:
        crashy.close()
