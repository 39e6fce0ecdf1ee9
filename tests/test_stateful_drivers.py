"""The execution-sequence tests (``vts/test_sequences.py``, ``cts/test_sequences.py``) catch the
broken drivers that carry state wrongly from one execution to the next, each with a message
naming the sequence step, and nothing before them does: with each driver, in one subprocess, the
sequences run together with a sample of the rest of the suite (generated CTS and VTS tests of
ADD, MUL, CONV_2D, WHILE and LSTM models, multi-operation ones among them, in every variant; the
CTS API and runtime tests, concurrency and OUTPUT_INSUFFICIENT_SIZE included; VTS memory domains),
and only sequence tests fail.

A correct driver whose bursts cache pool mappings by token (as the HAL allows) passes the
sequences, through the runtime too: the runtime names each memory by one token for a burst's life.
"""
from __future__ import annotations

import re

import pytest

from . import support

SEQUENCES = ("vts/test_sequences.py", "cts/test_sequences.py")
SAMPLE = ("cts/test_generated.py", "vts/test_generated.py", "cts/test_runtime.py", "cts/test_api.py",
          "vts/test_memory_domain.py")
SAMPLE_SELECTION = "test_sequences or not test_generated or ADD or MUL or CONV_2D or WHILE or LSTM"


def run_with_sample(driver: str, tmp_path) -> tuple[str, list[str]]:
    """The sequences and the sample against ``driver``: it must fail, only in sequence tests."""
    code, output, failed = support.run_suite(f"nnapi_ref.drivers.broken:{driver}", SEQUENCES + SAMPLE,
                                             SAMPLE_SELECTION, "--reproducers", str(tmp_path))
    assert code == 1 and failed, output[-3000:]
    assert [f for f in failed if f.split("::")[0] not in SEQUENCES] == [], "caught before the sequences"
    assert int(re.search(r"(\d+) passed", output).group(1)) > 300, output[-3000:]  # the sample ran and passed
    return output, failed


@pytest.mark.parametrize("driver", ["reference", "nnapi_ref.drivers.variants:TokenCachingDevice"])
def test_correct_drivers_pass_the_sequences(driver):
    code, output, failed = support.run_suite(driver, SEQUENCES, "test_sequences")
    assert code == 0 and not failed, output[-3000:]
    assert re.search(r"\d+ passed", output)


def test_burst_caching_pool_contents_is_caught(tmp_path):
    output, failed = run_with_sample("burst_caches_pool", tmp_path)
    assert all(f.endswith("[burst]") for f in failed), failed  # only through a burst kept for a sequence
    assert "vts/test_sequences.py::test_pool_rewritten_between_executions[burst]" in failed
    assert "cts/test_sequences.py::test_memory_rewritten_between_executions[burst]" in failed
    assert "AssertionError: step 2: new inputs written into the same pool: output 0: 4 of 4 elements outside " \
           "tolerance" in output
    assert "AssertionError: step 2: new inputs written into the same memory: output 0:" in output
    assert "AssertionError: step 2: inputs in pool 1, output in pool 0: output 0:" in output


def test_shared_scratch_is_caught(tmp_path):
    output, failed = run_with_sample("shared_scratch", tmp_path)
    concurrent = {f"{path}::test_concurrent_executions[{mode}]" for path in SEQUENCES
                  for mode in ("sync", "async", "burst", "fenced")}
    assert set(failed) <= concurrent, failed  # one execution at a time is right
    assert {f.split("::")[0] for f in failed} == set(SEQUENCES), failed  # both VTS and CTS catch it
    assert re.search(r"AssertionError: thread \d, execution \d: output 0: \d of 4 elements outside tolerance", output)


def test_keeping_the_first_output_shape_is_caught(tmp_path):
    output, failed = run_with_sample("keeps_first_shape", tmp_path)
    assert sorted(failed) == sorted(f"{path}::{test}[{mode}]" for path in SEQUENCES
                                    for test in ("test_input_shapes_change", "test_output_shapes_change_with_data")
                                    for mode in ("sync", "async", "burst")), failed  # fenced reports no shapes
    assert "AssertionError: step 2: inputs of shape [3, 4]: output shapes [(2, 2)] reported, expected [(3, 4)]" \
        in output
    assert "AssertionError: step 2: inputs of shape [3, 4]: output dimensions [2, 2] reported, expected [3, 4]" \
        in output
    assert "AssertionError: step 2: scores keeping 4 of 4 boxes: output shapes [(2,), (2, 4), (2,), (2,)] " \
           "reported, expected [(4,), (4, 4), (4,), (4,)]" in output
    assert "AssertionError: step 2: scores keeping 4 of 4 boxes: output dimensions [(2,), (2, 4), (2,), (2,)] " \
           "reported, expected [(4,), (4, 4), (4,), (4,)]" in output
