"""Runtime overhead: what building, compiling and executing a tiny model costs, apart from the
arithmetic (a 4-element ADD computes in about a microsecond).

    python -m nnts.mlts.bench_runtime [--repeat N]

Prints CPU microseconds per phase (median of N) for a one-ADD model and a three-operation chain:
CPU time, so that other work on the machine does not inflate it. ``python -m
nnts.fuzz.bench_overhead --baseline PYTHON`` measures the same side by side with another checkout.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from nnapi_ref import Compilation, Execution, OperandCode as T, OperandType
from nnts.generators.builders import repeated_add_model


def measure(operations: int, repeat: int) -> dict[str, float]:
    x = np.arange(4, dtype=np.float32)
    out = np.zeros(4, np.float32)
    phases: dict[str, list[float]] = {"build": [], "compile": [], "execute": [], "total": []}
    for _ in range(repeat):
        t0 = time.process_time()
        model = repeated_add_model(OperandType(T.TENSOR_FLOAT32, [4]), operations)
        t1 = time.process_time()
        compilation = Compilation(model)
        compilation.finish()
        t2 = time.process_time()
        execution = Execution(compilation)
        execution.set_input(0, x)
        execution.set_output(0, out)
        execution.compute()
        t3 = time.process_time()
        for name, value in (("build", t1 - t0), ("compile", t2 - t1), ("execute", t3 - t2), ("total", t3 - t0)):
            phases[name].append(value * 1e6)
    expected = x * (operations + 1)
    assert np.array_equal(out, expected), "wrong result"
    return {name: statistics.median(values) for name, values in phases.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args(argv)
    measure(1, 50)  # warm up imports and caches
    print(f"{'model':24s} {'build':>9s} {'compile':>9s} {'execute':>9s} {'total':>9s}   (CPU microseconds, median)")
    for operations in (1, 3):
        r = measure(operations, args.repeat)
        print(f"{operations} ADD operation(s){'':7s} {r['build']:9.1f} {r['compile']:9.1f} {r['execute']:9.1f} "
              f"{r['total']:9.1f}")


if __name__ == "__main__":
    main()
