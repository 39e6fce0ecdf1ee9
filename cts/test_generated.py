"""CTS generated tests: every test model of the project's corpus (``cts/corpus``) and of
``--vectors``, through the runtime API, in each execution mode (sync, async, burst, fenced), and
again with its output dimensions left unspecified (``dynamic``; not for models with IF, WHILE or
RANK), with every input and output in device memory (``device_memory``), through the compilation
cache (``cached``), and, for quant8 models, as their signed-quant8 twin (``signed``).

A failure names the operation, the data type and the worst element, and saves the model as a
test-vector file with the one command that replays it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from nnapi_ref import vectors
from nnapi_ref import ops
from nnapi_ref.harness import MODES, outputs_fully_specified, run_test, supports_dynamic_outputs
from nnapi_ref.types import OperandCode, OperationCode, type_name

CORPUS = Path(__file__).parent / "corpus"
VARIANTS = MODES + ("dynamic", "device_memory", "cached", "signed")


@dataclass
class Case:
    test: vectors.TestModel
    variant: str
    operation: str
    dtype: str
    path: Path

    @property
    def id(self) -> str:
        return f"{self.operation}-{self.dtype}-{self.test.name}-{self.variant}"


def describe(test: vectors.TestModel) -> tuple[str, str]:
    """The operation a test model is about, and its data type. ADD only counts when it is the
    only operation (the corpus adds ADDs to feed inputs through internal operands)."""
    sgs = [test.model.main] + test.model.referenced
    operations = [op for sg in sgs for op in sg.operations]
    main_ops = [op for op in test.model.main.operations if op.type != OperationCode.ADD] or \
        [op for op in operations if op.type != OperationCode.ADD] or operations
    op = main_ops[0]
    sg = next(sg for sg in sgs if op in sg.operations)
    tensor = next((sg.operands[k].type for k in op.inputs if sg.operands[k].type not in
                   (OperandCode.INT32, OperandCode.FLOAT32, OperandCode.BOOL, OperandCode.FLOAT16,
                    OperandCode.SUBGRAPH)), sg.operands[op.inputs[0]].type if op.inputs else OperandCode.TENSOR_FLOAT32)
    dtype = type_name(tensor)
    if test.is_relaxed and tensor == OperandCode.TENSOR_FLOAT32:
        dtype = "TENSOR_FLOAT32_RELAXED"
    return OperationCode(op.type).name, dtype


def accepted_by_signatures(test: vectors.TestModel) -> bool:
    """Every operation accepts its operand types at some feature level (NNAPI's signatures)."""
    registry = ops.load_all()
    for sg in [test.model.main] + test.model.referenced:
        for op in sg.operations:
            impl = registry.get(op.type)
            if impl is None or impl.match([sg.operands[k].type for k in op.inputs],
                                          [sg.operands[k].type for k in op.outputs]) is None:
                return False
    return True


def applicable(test: vectors.TestModel, variant: str) -> vectors.TestModel | None:
    """The test model a variant runs, or None when the variant does not apply to it."""
    if variant == "dynamic" and not supports_dynamic_outputs(test.model):
        return None
    if variant == "fenced" and not outputs_fully_specified(test.model):
        return None
    if variant == "signed":
        twin = vectors.signed_twin(test)
        return twin if twin is not None and accepted_by_signatures(twin) else None
    return test


_cases_cache: dict[tuple, list[Case]] = {}


def collect_cases(config) -> list[Case]:
    from conftest import vector_paths
    paths = [CORPUS] + vector_paths(config)
    key = tuple(str(p) for p in paths)
    if key not in _cases_cache:
        level = config.getoption("feature_level")
        cases = []
        for path in vectors.find_files(paths):
            for test in vectors.load_file(path):
                if level is not None and (test.min_feature_level or 0) > level:
                    continue
                for variant in (MODES if test.expect_failure else VARIANTS):
                    case_test = applicable(test, variant)
                    if case_test is not None:
                        cases.append(Case(case_test, variant, *describe(case_test), path))
        _cases_cache[key] = cases
    return _cases_cache[key]


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    from conftest import load_expected_failures
    expected = load_expected_failures(metafunc.config)
    params = []
    for case in collect_cases(metafunc.config):
        marks = [getattr(pytest.mark, f"op_{case.operation}"), getattr(pytest.mark, f"dtype_{case.dtype}")
                 if case.dtype != "TENSOR_FLOAT32_RELAXED" else pytest.mark.dtype_TENSOR_FLOAT32]
        reason = expected.get(case.id, expected.get(case.test.name))
        if reason is not None:
            marks.append(pytest.mark.xfail(reason=reason or "listed in --expected-failures", strict=False))
        params.append(pytest.param(case, id=case.id, marks=marks))
    metafunc.parametrize("case", params)


def save_reproducer(case: Case, folder: str) -> Path:
    """The failing model as a one-test vector file."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    path = out / (re.sub(r"[^A-Za-z0-9_.-]", "_", case.test.name) + ".json")
    vectors.write_file(path, [case.test], source=f"reproducer of {case.path}")
    return path


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("compilation-cache"))


def test_generated(case: Case, devices, request, driver_spec, cache_dir):
    mode = case.variant if case.variant in MODES else "sync"
    result = run_test(case.test, devices, mode, dynamic_outputs=case.variant == "dynamic",
                      device_memory=case.variant == "device_memory",
                      cache_dir=cache_dir if case.variant == "cached" else None)
    if result.status == "skip":
        pytest.skip(f"{result.message} ({case.operation} {case.dtype})")
    if result.status != "pass":
        path = save_reproducer(case, request.config.getoption("reproducers"))
        replay = f"nnts vectors run {path} --driver {driver_spec} --mode {mode}" + {
            "dynamic": " --dynamic", "device_memory": " --device-memory", "cached": " --cache-dir out/cache"}.get(
            case.variant, "")
        pytest.fail(f"{case.operation} {case.dtype} ({case.variant}), test model {case.test.name} from "
                    f"{case.path}: {result.message}\nreproducer: {path}\nreplay: {replay}", pytrace=False)
