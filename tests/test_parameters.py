"""Operation parameters in words: every parameter input of every operation is named once, in its
declaration (``OperationRegistration.parameters``); failures, reproducer graphs and report rows
name them ("stride 2x2, padding SAME, fused activation RELU1"), not by position; an unsupported
test says what was unsupported (operation, operand type, feature level), and a run's unsupported
tests are one summary line."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nnapi_ref import ops
from nnapi_ref.hal import Model, Operand, Operation, Subgraph
from nnapi_ref.types import SCALAR_TYPES, Lifetime, OperandCode as T, OperationCode
from nnts.reports.results import unsupported_line, unsupported_reasons
from nnts.runners.graph import to_dot
from nnts.runners.parameters import describe_model, unsupported_operations

ROOT = Path(__file__).resolve().parents[1]


def test_every_scalar_input_of_every_signature_has_its_nnapi_name():
    unnamed = []
    for code, declaration in sorted(ops.load_all().items()):
        for signature in declaration.signatures:
            types = list(signature.inputs)
            names = declaration.parameter_names(types)
            unnamed += [f"{code.name} input {k} ({t.name}) at level {signature.level}"
                        for k, t in enumerate(types) if t in SCALAR_TYPES and k not in names]
    assert not unnamed, "\n".join(unnamed[:20])


@pytest.mark.parametrize("code", [c for c, d in sorted(ops.load_all().items()) if d.window_inputs])
def test_window_parameter_names_agree_with_the_window_inputs(code):
    """The names sit where the generators find the activation, layout, dilation and multiplier."""
    declaration = ops.get(code)
    for signature in declaration.signatures:
        names = declaration.parameter_names(signature.inputs)
        probe = declaration.window_inputs[0].layout
        explicit = len(signature.inputs) > probe and signature.inputs[probe] == T.INT32
        where = declaration.window_inputs[explicit]
        assert names[where.activation] == "fused activation"
        if where.layout < len(signature.inputs):
            assert names[where.layout] == "layout"
        if where.dilation is not None and where.dilation < len(signature.inputs):
            assert names[where.dilation] == "dilation width"
        if where.multiplier is not None:
            assert names[where.multiplier] == "depth multiplier"
        assert ("padding left" in names.values()) == explicit


def scalar(kind: T, value) -> Operand:
    dtype = {T.INT32: np.int32, T.BOOL: np.bool_, T.FLOAT32: np.float32}[kind]
    return Operand(kind, (), lifetime=Lifetime.CONSTANT_COPY, value=np.array(value, dtype))


def conv_model() -> Model:
    """CONV_2D, implicit padding SAME, stride 2x2, RELU1, NHWC."""
    tensor = lambda dims, life: Operand(T.TENSOR_FLOAT32, dims, lifetime=life)  # noqa: E731
    operands = [tensor((1, 4, 4, 1), Lifetime.SUBGRAPH_INPUT),
                Operand(T.TENSOR_FLOAT32, (1, 2, 2, 1), lifetime=Lifetime.CONSTANT_COPY,
                        value=np.ones((1, 2, 2, 1), np.float32)),
                Operand(T.TENSOR_FLOAT32, (1,), lifetime=Lifetime.CONSTANT_COPY, value=np.zeros(1, np.float32)),
                scalar(T.INT32, 1), scalar(T.INT32, 2), scalar(T.INT32, 2), scalar(T.INT32, 2), scalar(T.BOOL, False),
                tensor((1, 2, 2, 1), Lifetime.SUBGRAPH_OUTPUT)]
    operation = Operation(OperationCode.CONV_2D, list(range(8)), [8])
    return Model(Subgraph(operands, [operation], [0], [8]), [])


def test_an_operation_is_described_by_its_parameters_names():
    said = "CONV_2D (padding SAME, stride 2\u00d72, fused activation RELU1, layout NHWC)"
    assert describe_model(conv_model()) == said


def test_the_graph_labels_parameters_by_name_not_by_position():
    dot = to_dot(conv_model(), "conv")
    assert "padding SAME" in dot and "stride 2\u00d72" in dot and "fused activation RELU1" in dot
    assert "in3:" not in dot and "in6:" not in dot
    assert 'label="in0"' in dot  # the data input, which has no parameter name, keeps its position


def test_an_unsupported_operation_says_its_operand_type_and_feature_level():
    assert unsupported_operations(conv_model(), [False]) == "CONV_2D on TENSOR_FLOAT32, feature level 29"


def test_unsupported_tests_are_explained_by_what_the_driver_ran():
    def record(op, dtype, status, part="CTS generated"):
        return {"op": op, "dtype": dtype, "status": status, "part": part, "message": None}
    tests = [record("ADD", "TENSOR_FLOAT32", "passed"), record("ADD", "TENSOR_FLOAT32", "unsupported"),
             record("ADD", "TENSOR_INT32", "unsupported"), record("CONV_2D", "TENSOR_FLOAT32", "unsupported"),
             record("CONV_2D", "TENSOR_FLOAT32", "passed", "VTS model and request validation"),
             record(None, "-", "unsupported", "execution sequences")]
    assert unsupported_reasons(tests) == [
        ("ADD", "TENSOR_FLOAT32", 1, "form"), ("ADD", "TENSOR_INT32", 1, "operand type"),
        ("CONV_2D", "TENSOR_FLOAT32", 1, "operation"), ("execution sequences", "any type", 1, "operation")]
    assert unsupported_line(tests) == ("4 tests skipped as unsupported: 2 operations it ran in no test (2 tests), "
                                       "1 operation unsupported on some operand types (1 test), "
                                       "1 operation unsupported in some forms (1 test)")


def run_suite(tmp_path, driver, *args, pythonpath=""):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=pythonpath)
    env.pop("NNTS_DRIVER", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
                           str(ROOT / "cts" / "test_generated.py"), "--driver", driver, "--variants", "sync",
                           "--no-shared-vectors", "--report", str(tmp_path / "out.json"), *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    return done.stdout + done.stderr, json.loads((tmp_path / "out.json").read_text())


def test_a_failure_and_its_report_row_name_the_parameters(tmp_path):
    output, data = run_suite(tmp_path, "nnapi_ref.drivers.broken:dilated_depthwise_multiplier",
                             "-k", "depthwise_conv_2d_float32_dilation_multiplier")
    said = ("DEPTHWISE_CONV_2D (padding 0 on each side, stride 1\u00d71, depth multiplier 2, fused activation NONE, "
            "layout NHWC, dilation 2\u00d72)")
    assert f"operations: {said}" in output
    assert [t["parameters"] for t in data["failures"]] == [said]


def test_a_partial_driver_s_unsupported_tests_are_one_line_with_reasons(tmp_path):
    output, data = run_suite(tmp_path, "toy_driver:make_device", "-k", "ADD or CONV_2D",
                             pythonpath=str(ROOT / "examples" / "python_driver"))
    lines = [line for line in output.splitlines() if "unsupported" in line and line.startswith("nnts:")]
    assert len(lines) == 1, output[-3000:]
    assert "operations it ran in no test" in lines[0] and "unsupported on some operand types" in lines[0]
    skipped = {t["message"] for t in data["tests"] if t["status"] == "unsupported" and t["op"] == "CONV_2D"}
    assert "unsupported: CONV_2D on TENSOR_FLOAT32, feature level 27" in skipped


def test_a_replayed_failure_names_the_parameters(tmp_path):
    corpus = ROOT / "cts" / "corpus" / "convolution.json"
    done = subprocess.run([sys.executable, "-m", "nnts", "vectors", "run", str(corpus),
                           "--filter", "depthwise_conv_2d_float32_dilation_multiplier$", "--mode", "sync", "-j", "1",
                           "--driver", "nnapi_ref.drivers.broken:dilated_depthwise_multiplier"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "operations: DEPTHWISE_CONV_2D (padding 0 on each side, stride 1\u00d71, depth multiplier 2" in done.stdout
