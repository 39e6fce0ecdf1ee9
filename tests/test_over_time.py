"""The over-time tests (``cts/test_over_time.py``) catch the broken drivers whose fault shows only
across calls, each in the test of its kind and with a message naming it, and nothing else there
fails; the reference driver, and ONNX Runtime and TensorFlow Lite where installed, pass them all.
Each fault is wrong by far (bytes past a region, a branch not taken, durations a thousand times
too small), so no assertion here depends on timing."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from . import support

MODULE = "cts/test_over_time.py"
MODES = ("sync", "async", "burst", "fenced")

# broken driver -> (the tests that must fail, a message every one of them gives)
CAUGHT = {
    "writes_past_output": (["test_output_regions_guarded[{mode}]"],
                           r"output 0 of execution 3 wrote 4 bytes past its region \(memory bytes \[84, 88\)\)"),
    "flushes_constant_memory": (["test_constant_memory_never_written[{mode}]"],
                                r"constant memory written by the driver in execution 1: 48 bytes changed"),
    "device_memory_per_model": (["test_memory_across_compilations[device_memory-{mode}]"],
                                (r"execution 5 \(the MUL model reading the device memory the chain model wrote in "
                                r"execution 4\): output 0: 4 of 4 elements outside tolerance")),
    "replays_first_path": (["test_control_flow_changes_between_executions[WHILE-{mode}]",
                            "test_control_flow_changes_between_executions[IF-{mode}]"],
                           (r"execution 2 \((WHILE from 0.0: 5 trips of its body|IF false: the else branch)\): "
                           r"output 0: \d of \d elements outside tolerance")),
    "timing_in_microseconds": (["test_timing_against_the_clock[{mode}]"],
                               (r"timeInDriver [\d.]+ (ns|µs) for an execution of [\d.]+ ms wall \(at most, in 3 "
                                r"executions of at least that: below 1/100 of it")),
    "one_program_slot": (["test_compilations_of_different_models_at_once[{mode}]"],
                         r"thread \d \([^)]+\), execution \d, other compilations executing and being prepared: "),
    "leaks_fence_fd": (["test_resources_per_execution_path[fenced]"],
                       r"fd count grew by 1 per fenced execution over 2,000 fenced executions \(\d+ -> [\d,]+\)"),
    "float16_accumulator": ([f"test_float16_near_its_range[{op}]" for op in ("L2_NORMALIZATION", "MEAN",
                                                                              "FULLY_CONNECTED")],
                            r"float16 near its range: \w+ of [^:]+: output 0: \d of \d elements outside tolerance"),
    "caches_by_graph": (["test_cache_keyed_by_content", "test_cache_keyed_by_content_across_processes"],
                        (r"cache by content: MUL by w\d \(token \d\)[^:]*: output 0: 4 of 4 elements outside "
                         r"tolerance")),
}


def _expected(tests: list[str]) -> list[str]:
    return sorted({f"{MODULE}::{t.format(mode=mode)}" for t in tests for mode in MODES})


@pytest.mark.parametrize("driver", sorted(CAUGHT))
def test_broken_driver_is_caught_by_the_test_of_its_kind(driver):
    tests, message = CAUGHT[driver]
    code, output, failed = support.run_suite(f"nnapi_ref.drivers.broken:{driver}", (MODULE,), "test_")
    assert code == 1, output[-3000:]
    assert sorted(failed) == _expected(tests), output[-3000:]
    assert len(re.findall(message, output)) >= len(failed), output[-3000:]


@pytest.mark.parametrize("driver", ["reference", "onnxruntime", "tflite"])
def test_correct_drivers_pass(driver):
    module = {"onnxruntime": "onnxruntime", "tflite": "ai_edge_litert"}.get(driver)
    if module is not None:
        pytest.importorskip(module, reason=f"{driver} is not installed")
    code, output, failed = support.run_suite(driver, (MODULE,), "test_", "-rs")
    assert code == 0 and not failed, output[-3000:]
    passed = int(re.search(r"(\d+) passed", output).group(1))
    assert passed >= (46 if driver == "reference" else 35), output[-3000:]  # the adapters: no IF, WHILE, float16


def test_quick_runs_every_kind():
    """``--quick`` (the first breadth-first pass) keeps at least one test of every over-time kind."""
    command = [sys.executable, "-m", "pytest", "cts", "--quick", "--collect-only", "-q", "-p", "no:randomly",
               "-p", "no:cacheprovider", "-p", "no:xdist", "--no-shared-vectors", "--driver", "reference"]
    done = subprocess.run(command, check=False, cwd=support.ROOT, capture_output=True, text=True, timeout=300)
    collected = {line.split("::")[1].split("[")[0] for line in done.stdout.splitlines()
                 if line.startswith(MODULE + "::")}
    kinds = {t.split("[")[0] for tests, _ in CAUGHT.values() for t in tests}
    kinds |= {"test_input_buffers_rewritten_in_place", "test_cache_keyed_by_content_across_processes"}
    assert kinds <= collected, (sorted(kinds - collected), done.stdout[-2000:])


def test_extension_read_in_another_layout_is_caught_beyond_rank_1():
    """``extension_column_major`` reads extension tensors of rank 2 and more column-major: the
    extension suite's tests of several ranks catch it, rank 1 passes, and so does every other
    extension test."""
    code, output, failed = support.run_suite("nnapi_ref.drivers.broken:extension_column_major,reference",
                                             ("cts/test_extensions.py",), "test_")
    assert code == 1, output[-3000:]
    assert sorted(failed) == sorted(f"cts/test_extensions.py::test_results_by_hand_in_several_ranks[{s}]"
                                    for s in ("2x3", "3x2", "1x2x3", "2x1x3x1")), output[-3000:]
    assert "AssertionError: TENSOR_QUANT64_ASYMM of shape [2, 3]: 4 of 6 elements wrong, first at [0, 1]: " \
           "expected -0.25, got 0 (not read in row-major order?)" in output
