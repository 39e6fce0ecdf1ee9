"""CTS generated tests: every test model of the project's corpus (``cts/corpus``) and of
``--vectors``, through the runtime API, in each execution mode (sync, async, burst, fenced), and
again with its output dimensions left unspecified (``dynamic``; not for models with IF, WHILE or
RANK), with every input and output in device memory (``device_memory``), in one BLOB hardware
buffer (``hardware_buffer``) and through the compilation cache (``cached``): one test per model, running these variants in turn
(``nnts.runners.variants``). Quant8 models also run as their signed-quant8 twin (``signed``), a test of
its own (its data type is another).

A failure names the operation, the data type, each failing variant and its worst element, and
saves the model as a test-vector file with the command that replays each failing variant.
"""
from __future__ import annotations

import dataclasses
import functools
import re
import shlex
from pathlib import Path

import pytest

from nnapi_ref import vectors
from nnts.runners import ordering, variants
from nnts.runners.cases import Case, collect_cases
from nnts.runners.model_runner import MODES, run_test


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    params = []
    for case in collect_cases(metafunc.config):
        chosen = variants.selected(metafunc.config, case.variants)
        if not chosen:
            continue
        if chosen != case.variants:
            case = dataclasses.replace(case, variants=chosen)
        marks = [_mark(f"op_{case.operation}"), _mark(f"dtype_{case.dtype}")
                 if case.dtype != "TENSOR_FLOAT32_RELAXED" else _mark("dtype_TENSOR_FLOAT32")]
        params.append(pytest.param(case, id=case.id, marks=marks))
    metafunc.parametrize("case", ordering.first_pass_params(metafunc, params))


@functools.lru_cache(maxsize=None)
def _mark(name: str):
    """``pytest.mark.<name>``, made once (each lookup checks the registered markers; 5,000 models)."""
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
    reproducer = []  # saved once, by the first variant that fails

    def run(variant: str) -> None:
        mode = variant if variant in MODES else "sync"
        result = run_test(case.test, devices, mode, dynamic_outputs=variant == "dynamic",
                          device_memory=variant == "device_memory", hardware_buffer=variant == "hardware_buffer",
                          cache_dir=cache_dir if variant == "cached" else None)
        if result.status == "skip":
            pytest.skip(result.message)
        if result.status != "pass":
            if not reproducer:
                reproducer.append(save_reproducer(case, request.config.getoption("reproducers")))
            path = reproducer[0]
            replay = f"nnts vectors run {shlex.quote(str(path))} --driver {shlex.quote(driver_spec)} --mode {mode}" + {
                "dynamic": " --dynamic", "device_memory": " --device-memory",
                "hardware_buffer": " --hardware-buffer", "cached": " --cache-dir out/cache"}.get(
                variant, "")
            pytest.fail(f"{result.message}\nreproducer: {path}\nreplay: {replay}")

    variants.run_all(request, case, case.path, run)
