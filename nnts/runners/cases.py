"""The test models the generated suites run (CTS, VTS): the project's corpus (``cts/corpus``),
``--vectors`` and ``../shared/vectors``, each as a case (one test, running the variants CTS runs
of it: ``nnts.runners.variants``) described by the operation and data type it is about, and the plugin
options that choose them. Shared by ``cts/test_generated.py``, the VTS modules and the pytest
plugin (``nnts.plugin``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nnapi_ref import ops, vectors
from nnapi_ref.types import OperandCode, OperationCode, type_name
from nnts.formats.paths import CORPUS, SHARED_VECTORS
from nnts.runners import vector_cache
from nnts.runners.model_runner import MODES, outputs_fully_specified, supports_dynamic_outputs

# What CTS runs of a test model (of a model that must fail: MODES), and of its signed twin.
MODEL_VARIANTS = MODES + ("dynamic", "device_memory", "hardware_buffer", "cached")
TWIN_VARIANTS = ("signed",)


@dataclass
class Case:
    test: vectors.TestModel
    variants: tuple[str, ...]  # those of MODEL_VARIANTS that apply to it, or TWIN_VARIANTS
    operation: str
    dtype: str
    path: Path

    @property
    def id(self) -> str:
        return f"{self.operation}-{self.dtype}-{self.test.name}"


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
LOAD_ERRORS: dict[str, str] = {}  # test-vector file -> why it could not be read (a failing test each)


def collect_cases(config) -> list[Case]:
    """A case of every test model, and of the signed twin of every quant8 one, once per process
    (under xdist: the same in every worker)."""
    paths = [CORPUS] + vector_paths(config)
    key = tuple(str(p) for p in paths)
    if key not in _cases_cache:
        level = config.getoption("feature_level")
        cases = []
        for path in vectors.find_files(paths):
            try:
                tests = vector_cache.load_file(path, config.nnts_settings.cache_dir)  # parsed once, not per run
            except vectors.FormatError as e:  # one bad file is one failing test, the others still run
                LOAD_ERRORS[str(path)] = str(e)
                continue
            for test in tests:
                if level is not None and (test.min_feature_level or 0) > level:
                    continue
                variants = tuple(v for v in (MODES if test.expect_failure else MODEL_VARIANTS)
                                 if applicable(test, v) is not None)
                cases.append(Case(test, variants, *describe(test), path))
                twin = None if test.expect_failure else applicable(test, "signed")
                if twin is not None:
                    cases.append(Case(twin, TWIN_VARIANTS, *describe(twin), path))
        _cases_cache[key] = cases
    return _cases_cache[key]


def model_cases(config) -> list[Case]:
    """The case of each test model, without the signed twins (what VTS runs its own variants of)."""
    return [c for c in collect_cases(config) if c.variants != TWIN_VARIANTS]


def vector_paths(config) -> list[Path]:
    """``--vectors`` and, unless ``--no-shared-vectors``, ``../shared/vectors`` when present."""
    paths = [Path(p) for p in config.getoption("vectors")]
    if not config.getoption("no_shared_vectors") and SHARED_VECTORS and SHARED_VECTORS.is_dir():
        paths.append(SHARED_VECTORS)
    return paths
