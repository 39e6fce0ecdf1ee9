"""TensorFlow Lite's interpreter tried on a model in a process of its own, before the suite runs
it in process: a malformed file (NaN quantization scales, say) can crash the interpreter with a
segmentation fault, which in process would take ``nnts bench`` or ``mlts.import_coverage`` down
with every row already measured. A crash here is one row's reason instead.

    python -m nnts.mlts.tflite_probe MODEL.tflite   (exit 0: no crash; TFLite may still refuse it)
"""
from __future__ import annotations

import signal
import subprocess
import sys

import numpy as np

from nnapi_ref import budget
from nnts.mlts.tflite_baseline import tflite_interpreter_class

PROBE_TIMEOUT_S = 120


def crash_reason(path) -> str | None:
    """Why TFLite's interpreter cannot be run on ``path`` in process (it crashed or hung loading,
    allocating or invoking it once on zeros, with its default or its reference kernels), or None."""
    try:
        done = subprocess.run([sys.executable, "-m", "nnts.mlts.tflite_probe", str(path), str(budget.limit())],
                              capture_output=True,
                              text=True, errors="replace", timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"TFLite's interpreter did not finish loading and running it in {PROBE_TIMEOUT_S} s"
    if done.returncode == 0:
        return None
    if done.returncode < 0:
        try:
            how = f"killed by {signal.Signals(-done.returncode).name}"
        except ValueError:
            how = f"killed by signal {-done.returncode}"
    else:
        how = f"exit status {done.returncode}"
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("INFO:")]
    last = (lines or [""])[-1][:300]
    return f"TFLite's interpreter crashed on it ({how})" + (f": {last}" if last else "")


def _probe(path: str) -> None:

    interpreter_cls, resolver = tflite_interpreter_class()
    if interpreter_cls is None:
        return
    for kwargs in ({}, {"experimental_op_resolver_type": resolver.BUILTIN_REF}):
        try:
            it = interpreter_cls(model_path=path, num_threads=1, **kwargs)
            it.allocate_tensors()
            details = it.get_input_details()
            if any(np.prod(d["shape"], dtype=np.float64) * np.dtype(d["dtype"]).itemsize > budget.limit()
                   for d in details):
                return  # the importer refuses it; zeros of that size would only exhaust memory
            for d in details:
                it.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
            it.invoke()
        except (ValueError, RuntimeError):  # a refusal: the caller sees it in process, cleanly
            pass


if __name__ == "__main__":
    budget.set_limit(int(sys.argv[2]))  # its caller's
    _probe(sys.argv[1])
