"""CTS generated tests: every test model of the project's corpus (``cts/corpus``) and of
``--vectors``, through the runtime API, in each execution mode (sync, async, burst, fenced), and
again with its output dimensions left unspecified (``dynamic``; not for models with IF, WHILE or
RANK), with every input and output in device memory (``device_memory``), through the compilation
cache (``cached``), and, for quant8 models, as their signed-quant8 twin (``signed``).

A failure names the operation, the data type and the worst element, and saves the model as a
test-vector file with the one command that replays it.
"""
from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path

import pytest

from nnapi_ref import vectors
from nnapi_ref.cases import Case, collect_cases, load_expected_failures
from nnapi_ref.harness import MODES, run_test
from nnts import ordering

def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    expected = load_expected_failures(metafunc.config)
    params = []
    for case in collect_cases(metafunc.config):
        marks = [_mark(f"op_{case.operation}"), _mark(f"dtype_{case.dtype}")
                 if case.dtype != "TENSOR_FLOAT32_RELAXED" else _mark("dtype_TENSOR_FLOAT32")]
        reason = expected.get(case.id, expected.get(case.test.name))
        if reason is not None:
            marks.append(pytest.mark.xfail(reason=reason or "listed in --expected-failures", strict=False))
        params.append(pytest.param(case, id=case.id, marks=marks))
    metafunc.parametrize("case", ordering.first_pass_params(metafunc, params))


@functools.lru_cache(maxsize=None)
def _mark(name: str):
    """``pytest.mark.<name>``, made once (each lookup checks the registered markers; 35k cases)."""
    return getattr(pytest.mark, name)


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
        replay = f"nnts vectors run {shlex.quote(str(path))} --driver {shlex.quote(driver_spec)} --mode {mode}" + {
            "dynamic": " --dynamic", "device_memory": " --device-memory", "cached": " --cache-dir out/cache"}.get(
            case.variant, "")
        pytest.fail(f"{case.operation} {case.dtype} ({case.variant}), test model {case.test.name} from "
                    f"{case.path}: {result.message}\nreproducer: {path}\nreplay: {replay}", pytrace=False)
