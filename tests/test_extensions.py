"""Vendor extensions in nnapi_ref: the type encoding, the checks the runtime and drivers share, the
example extension's driver (hand-computed results, partitioned beside the reference), and the
three broken extension drivers, each caught by the VTS test that names its fault."""
from __future__ import annotations

import numpy as np
import pytest

from nnapi_ref import (Compilation, Execution, Model, NnapiError, OperandCode as T, OperationCode, ResultCode,
                       extensions as ext, hal, using_drivers)
from nnapi_ref.drivers.example_extension import (DEQUANTIZE64, EXTENSION_NAME, TENSOR_QUANT64_ASYMM,
                                                 ExampleExtensionDevice, dequantize64, quant64_params)
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.hal import ExtensionNameAndPrefix, ExtensionOperandTypeInformation as Info

from . import support

pytestmark = pytest.mark.extension

Q = np.array([2**40 + 3, 2**40 - 1, 2**40, 2**40 + 2**20], np.int64)
# (Q - 2**40) * 0.25 + 1, by hand
EXPECTED = np.array([1.75, 0.75, 1.0, 262145.0], np.float32)


def test_type_encoding():
    code = ext.encode(3, 7)
    assert code == 3 * 65536 + 7 and ext.is_extension_type(code) and not ext.is_extension_type(7)
    assert (ext.prefix_of(code), ext.within_extension(code)) == (3, 7)


def test_extension_problems():
    good = hal.Extension("com.example.good", (Info(0, True, 8), Info(1, False, 4)))
    assert ext.extension_problems([good]) == []
    bad = [hal.Extension("nodot", ()), hal.Extension("com.example.x", (Info(0, True, 0), Info(0, True, 4))), good,
           good]
    problems = " | ".join(ext.extension_problems(bad))
    for expected in ("not a reverse domain name", "byte size 0 is not positive", "declared twice", "listed twice"):
        assert expected in problems


@pytest.mark.parametrize("entries, message", [
    ([("a.b", 0)], "outside 1-65535"), ([("a.b", 1), ("c.d", 1)], "given twice"),
    ([("a.b", 1), ("a.b", 2)], "two prefixes"), ([("", 1)], "empty extension name")])
def test_prefix_map_is_a_bijection(entries, message):
    model = hal.Model(hal.Subgraph([], [], (), ()), extension_name_to_prefix=[ExtensionNameAndPrefix(n, p)
                                                                              for n, p in entries])
    with pytest.raises(NnapiError, match=message):
        ext.prefix_map(model)


def test_dequantize64_is_exact_beyond_float_precision():
    # 2**60 + 1 and 2**60 differ by 1, which float64 alone would lose (53-bit mantissa).
    out = dequantize64(np.array([2**60 + 1], np.int64), 0.5, 2**60)
    assert out.tolist() == [0.5]


def mixed_model(constant_input: bool = False) -> Model:
    """DEQUANTIZE64 (zero point 2**40, scale 0.25) then ADD 1: one extension, one built-in operation."""
    model = Model()
    q64 = model.get_extension_operand_type(EXTENSION_NAME, TENSOR_QUANT64_ASYMM)
    source = model.add_operand(q64, [4])
    model.set_operand_extension_data(source, quant64_params(0.25, 2**40))
    if constant_input:
        model.set_operand_value(source, Q)
    f = model.add_operand(T.TENSOR_FLOAT32, [4])
    one = model.add_operand(T.TENSOR_FLOAT32, [4])
    model.set_operand_value(one, np.ones(4, np.float32))
    act = model.add_operand(T.INT32)
    model.set_operand_value(act, 0)
    out = model.add_operand(T.TENSOR_FLOAT32, [4])
    model.add_operation(model.get_extension_operation_type(EXTENSION_NAME, DEQUANTIZE64), [source], [f])
    model.add_operation(OperationCode.ADD, [f, one, act], [out])
    model.identify_inputs_and_outputs([] if constant_input else [source], [out])
    model.finish()
    return model


@pytest.mark.parametrize("constant_input", [False, True])
def test_mixed_model_partitions_over_the_example_driver_and_the_reference(constant_input):
    with using_drivers([ReferenceDevice(), ExampleExtensionDevice()]):
        model = mixed_model(constant_input)
        compilation = Compilation(model)
        compilation.finish()
        assert [(s.device.name, s.operations) for s in compilation.plan.steps] == \
            [("nnts-example-extension", [0]), ("nnapi-reference", [1])]
        execution = Execution(compilation)
        if not constant_input:
            execution.set_input(0, Q)
        out = np.zeros(4, np.float32)
        execution.set_output(0, out)
        execution.compute()
        np.testing.assert_array_equal(out, EXPECTED)


def test_no_cpu_fallback_for_an_extension_operation():
    with using_drivers([ReferenceDevice(), ExampleExtensionDevice()]):
        model = mixed_model()
    with using_drivers([ReferenceDevice()]):
        with pytest.raises(NnapiError, match="no device supports operation 0") as e:
            Compilation(model).finish()
        assert e.value.code == ResultCode.BAD_DATA


def test_reference_reports_extension_operations_unsupported():
    with using_drivers([ReferenceDevice(), ExampleExtensionDevice()]):
        model = mixed_model()
    assert ReferenceDevice().get_supported_operations(model.hal_model) == [False, True]
    assert ExampleExtensionDevice().get_supported_operations(model.hal_model) == [True, True]  # wraps the reference


def test_step_models_carry_the_prefixes_and_data():
    from nnapi_ref.hal import step_model
    with using_drivers([ReferenceDevice(), ExampleExtensionDevice()]):
        hal_model = mixed_model().hal_model
    step, _, _ = step_model(hal_model, [0])
    assert step.extension_name_to_prefix == hal_model.extension_name_to_prefix
    assert step.main.operands[0].extension_data == quant64_params(0.25, 2**40)


# -- the broken extension drivers ---------------------------------------------------------------

FAULTS = {
    "ignores_extension_prefix": "test_unsupported_extension_operation_is_not_a_builtin",
    "crashes_on_extension_data": "test_execution_paths",
    "accepts_unsupported_extension": "test_unsupported_extension_rejected",
}
SELECTION = " or ".join(dict.fromkeys(FAULTS.values()))


def test_example_driver_passes_the_extension_tests():
    """The control: the selection the broken drivers fail passes on the example driver."""
    code, output, failed = support.run_suite("nnapi_ref.drivers.example_extension:make_device",
                                             ("vts/test_extensions.py",), SELECTION)
    assert code == 0 and not failed, output[-3000:]


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_broken_extension_driver_is_caught(fault):
    code, output, failed = support.run_suite(f"nnapi_ref.drivers.broken:{fault}", ("vts/test_extensions.py",),
                                             SELECTION)
    assert code == 1, output[-3000:]
    assert any(FAULTS[fault] in name for name in failed), f"{FAULTS[fault]} did not fail: {failed}\n{output[-3000:]}"


# -- remote protocol version 2 ------------------------------------------------------------------

OLD_SERVER = """
import os, sys
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.remote import wire
header = os.read(0, 16)
length, msg, call_id = wire.HEADER.unpack(header)
os.read(0, length - 12)
w = wire.Writer(); w.u32(1); wire.write_device_info(w, ReferenceDevice())
os.write(1, w.finish(wire.Msg.DEVICE_INFO, call_id))
os.read(0, 1)
"""


def test_a_version_1_server_is_refused(tmp_path):
    import sys

    from nnts.runners.drivers import load_driver
    script = tmp_path / "old_server.py"
    script.write_text(OLD_SERVER)
    with pytest.raises(Exception) as e:
        load_driver(f"remote:{sys.executable} {script}")
    from nnapi_ref.remote import wire
    assert "protocol version 1" in str(e.value) and f"client {wire.OLDEST_VERSION} to" in str(e.value), str(e.value)


def test_a_version_1_client_is_refused():
    import subprocess
    import sys

    from nnapi_ref.remote import wire
    w = wire.Writer()
    w.parts.append(wire.MAGIC)
    w.u32(1)
    done = subprocess.run([sys.executable, "-m", "nnts", "serve", "reference"],
                          input=w.finish(wire.Msg.HELLO, 7), capture_output=True, timeout=60, cwd=support.ROOT)
    length, msg, call_id = wire.HEADER.unpack(done.stdout[:16])
    assert (msg, call_id) == (wire.Msg.ERROR, 7), done.stderr[-2000:]
    error = wire.read_error(wire.Reader(done.stdout[16:4 + length]))
    assert error.status == hal.ErrorStatus.DEVICE_UNAVAILABLE
    assert "protocol version 1 not supported (this server speaks 2" in error.message


# -- test vectors ---------------------------------------------------------------------------------

def test_vectors_carry_extensions_and_run(tmp_path):
    from nnapi_ref import vectors
    from nnts.runners.model_runner import run_test
    with using_drivers([ReferenceDevice(), ExampleExtensionDevice()]) as devices:
        model = mixed_model().hal_model
        test = vectors.TestModel("example_dequantize64_add", model, [Q], [EXPECTED], [False],
                                 source="tests/test_extensions.py", output_dims=[(4,)])
        path = tmp_path / "extension.json"
        vectors.write_file(path, [test])
        doc = __import__("json").loads(path.read_text())
        assert doc["format"] == vectors.FORMAT_EXTENSIONS
        prefix = model.extension_name_to_prefix[0].prefix
        assert doc["tests"][0]["extensions"] == [{"name": EXTENSION_NAME, "prefix": prefix}]
        source = doc["tests"][0]["main"]["operands"][0]
        assert source["type"] == {"extension": EXTENSION_NAME, "type": TENSOR_QUANT64_ASYMM, "byte_size": 8}
        assert source["extension_data"] == quant64_params(0.25, 2**40).hex()
        loaded, = vectors.load_file(path)
        assert loaded.model.extension_name_to_prefix == model.extension_name_to_prefix
        assert loaded.model.main.operands[0].extension_data == quant64_params(0.25, 2**40)
        assert loaded.inputs[0].tobytes() == Q.tobytes()
        result = run_test(loaded, devices)
        assert result.status == "pass", result.message
        reference_only = [d for d in devices if d.name == "nnapi-reference"]
        result = run_test(loaded, reference_only)
        assert result.status == "skip" and f"no device supports extension {EXTENSION_NAME}" in result.message, \
            result.message


def test_files_without_extensions_stay_version_1(tmp_path):
    from nnapi_ref import vectors
    from nnts.generators.builders import chain_model
    model = chain_model().hal_model
    a = np.ones((2, 2), np.float32)
    test = vectors.TestModel("plain", model, [a, a], [np.full(4, 3, np.float32)], [False], output_dims=[(2, 2)])
    path = tmp_path / "plain.json"
    vectors.write_file(path, [test])
    doc = __import__("json").loads(path.read_text())
    assert doc["format"] == vectors.FORMAT and "extensions" not in doc["tests"][0]
    assert len(vectors.load_file(path)) == 1


def test_if_bodies_and_their_model_number_an_extension_alike():
    """IF branches using the extension (a constant dequantized, plus the input): one prefix
    mapping for the model and its bodies, whatever extension the model took first."""
    with using_drivers([ReferenceDevice(), ExampleExtensionDevice()]):
        def branch(scale):
            body = Model()
            q64 = body.get_extension_operand_type(EXTENSION_NAME, TENSOR_QUANT64_ASYMM)
            x = body.add_operand(T.TENSOR_FLOAT32, [4])
            source = body.add_operand(q64, [4])
            body.set_operand_value(source, Q)
            body.set_operand_extension_data(source, quant64_params(scale, 2**40))
            t = body.add_operand(T.TENSOR_FLOAT32, [4])
            act = body.add_operand(T.INT32)
            body.set_operand_value(act, 0)
            out = body.add_operand(T.TENSOR_FLOAT32, [4])
            body.add_operation(body.get_extension_operation_type(EXTENSION_NAME, DEQUANTIZE64), [source], [t])
            body.add_operation(OperationCode.ADD, [t, x, act], [out])
            body.identify_inputs_and_outputs([x], [out])
            body.finish()
            return body
        model = Model()
        other = model.get_extension_operand_type("com.example.other", 1)  # this model's first extension
        cond = model.add_operand(T.TENSOR_BOOL8, [1])
        then_, else_ = model.add_operand(T.SUBGRAPH), model.add_operand(T.SUBGRAPH)
        model.set_operand_value_from_model(then_, branch(0.25))
        model.set_operand_value_from_model(else_, branch(0.5))
        x = model.add_operand(T.TENSOR_FLOAT32, [4])
        out = model.add_operand(T.TENSOR_FLOAT32, [4])
        model.add_operation(OperationCode.IF, [cond, then_, else_, x], [out])
        model.identify_inputs_and_outputs([cond, x], [out])
        model.finish()
        hal_model = model.hal_model
        names = {e.prefix: e.name for e in hal_model.extension_name_to_prefix}
        assert set(names.values()) == {"com.example.other", EXTENSION_NAME} and other >> 16 in names
        for sg in hal_model.referenced:
            dequantize = next(op for op in sg.operations if ext.is_extension_type(op.type))
            assert names[ext.prefix_of(dequantize.type)] == EXTENSION_NAME
            assert names[ext.prefix_of(sg.operands[dequantize.inputs[0]].type)] == EXTENSION_NAME
        assert ReferenceDevice().get_supported_operations(hal_model) == [False]


@pytest.mark.parametrize("change, message", [
    (lambda t: t.pop("extensions"), "is not in the test's extensions"),
    (lambda t: t["main"]["operands"][0].__setitem__("data", "zz"), "not a hex string"),
    (lambda t: t["main"]["operands"][0].__setitem__("data", "00" * 7), "not whole elements of 8 bytes"),
    (lambda t: t["main"]["operands"][0]["type"].pop("byte_size"), "without the type's byte_size"),
    (lambda t: t["main"]["operations"][0]["type"].__setitem__("type", 70000), "outside 0-65535"),
    (lambda t: t["main"]["operands"][0].__setitem__("extension_data", 5), "not a hex string"),
])
def test_malformed_extension_vectors_are_format_errors(tmp_path, change, message):
    import json

    from nnapi_ref import vectors
    with using_drivers([ReferenceDevice(), ExampleExtensionDevice()]):
        model = mixed_model().hal_model
    test = vectors.TestModel("t", model, [Q], [EXPECTED], [False], output_dims=[(4,)])
    doc = {"format": vectors.FORMAT_EXTENSIONS, "tests": [vectors.test_to_json(test)]}
    change(doc["tests"][0])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(vectors.FormatError, match=message):
        vectors.load_file(path)


def test_devices_disagreeing_about_an_extension_disable_it():
    class Disagreeing(ExampleExtensionDevice):
        def get_supported_extensions(self):
            return [hal.Extension(EXTENSION_NAME, (Info(TENSOR_QUANT64_ASYMM, True, 4),))]
    with using_drivers([ExampleExtensionDevice(), Disagreeing("disagreeing")]):
        model = Model()
        q64 = model.get_extension_operand_type(EXTENSION_NAME, TENSOR_QUANT64_ASYMM)
        with pytest.raises(NnapiError, match="no device declares") as e:
            model.add_operand(q64, [4])
        assert e.value.code == ResultCode.BAD_DATA


PROBE = """
SECTIONS = []
def pytest_runtest_logreport(report):
    if report.when == "call":
        SECTIONS.append(dict(report.user_properties).get("nnts_section"))
def pytest_sessionfinish(session):
    print("SECTIONS", SECTIONS)
"""


def test_extension_tests_are_marked_for_their_own_report_section(tmp_path):
    """``-m extension`` selects them, and their reports carry nnts_section=extension."""
    import os
    import subprocess
    import sys
    (tmp_path / "nnts_probe.py").write_text(PROBE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("NNTS_DRIVER", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "cts/test_extensions.py", "cts/test_api.py", "-q", "-s",
                           "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "nnts_probe", "--no-shared-vectors",
                           "-m", "extension", "-k", "type_code", "--driver", "reference"],
                          cwd=support.ROOT, capture_output=True, text=True, timeout=120, env=env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-2000:]
    assert "SECTIONS ['extension', 'extension']" in output, output[-2000:]


def test_example_driver_alone_runs_a_mixed_model():
    """The example driver wraps the reference: DEQUANTIZE64 then ADD in one step on it."""
    with using_drivers([ExampleExtensionDevice()]) as devices:
        model = mixed_model()
        assert devices[0].driver.get_supported_operations(model.hal_model) == [True, True]
        compilation = Compilation(model, devices)
        compilation.finish()
        assert len(compilation.plan.steps) == 1 and compilation.plan.steps[0].device is devices[0]
        execution = Execution(compilation)
        execution.set_input(0, Q)
        out = np.zeros(4, np.float32)
        execution.set_output(0, out)
        execution.compute()
        np.testing.assert_array_equal(out, EXPECTED)
