"""What a driver in its own process costs: the same executions on the reference in process and
served remotely (``remote:nnts serve reference``), interleaved so that drift affects both alike.

    python -m nnts.mlts.bench_remote [--repeat N] [--megabytes M]

* small: one execution of a 4-element ADD, input and output from the caller's arrays (POINTER
  arguments: the remote client copies them through a staging region, as NNAPI's runtime does);
* large: an ADD of two M-MiB inputs, inputs and output in runtime shared memory
  (``Memory.create_shared``): the driver process maps them, nothing is copied;
* large copied: the same tensors from the caller's arrays, for comparison.

Prints the median microseconds per execution of each, in process and remote, and their ratio.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from nnapi_ref import Compilation, Execution, Memory
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.runtime.devices import Device
from nnts.generators.builders import add_model
from nnts.runners.drivers import load_driver
from nnts.runners.settings import entry_point


def executions(driver, n: int, shared: bool):
    """A function running one execution of an n-element ADD on ``driver``, and its output."""
    compilation = Compilation(add_model((n,), input_dims=(n,)), [Device(driver)])
    compilation.finish()
    a = np.arange(n, dtype=np.float32) % 97
    if shared:
        memories = [Memory.create_shared(a.nbytes) for _ in range(2)]
        memories[0].shared.buffer.view(np.float32)[:] = a
        out = memories[1].shared.buffer.view(np.float32)

        def run():
            execution = Execution(compilation)
            execution.set_input_from_memory(0, memories[0], 0, a.nbytes)
            execution.set_input_from_memory(1, memories[0], 0, a.nbytes)
            execution.set_output_from_memory(0, memories[1], 0, a.nbytes)
            execution.compute()
    else:
        out = np.zeros(n, np.float32)

        def run():
            execution = Execution(compilation)
            execution.set_input(0, a)
            execution.set_input(1, a)
            execution.set_output(0, out)
            execution.compute()
    return run, out, a + a


def measure(cases: dict[str, tuple], repeat: int) -> dict[str, float]:
    """Median microseconds of each case's run, the cases taking turns."""
    times = {name: [] for name in cases}
    for _ in range(repeat):
        for name, (run, _, _) in cases.items():
            start = time.perf_counter()
            run()
            times[name].append((time.perf_counter() - start) * 1e6)
    for name, (_, out, expected) in cases.items():
        assert np.array_equal(out, expected), f"{name}: wrong result"
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1000, help="executions of the small model per driver")
    parser.add_argument("--megabytes", type=int, default=64, help="size of each large tensor")
    args = parser.parse_args(argv)
    local = ReferenceDevice()
    remote = load_driver("remote:nnts serve reference", settings=entry_point(os.environ))
    n_large = args.megabytes * (1 << 20) // 4
    rows = [("small (4 elements)", 4, False, args.repeat),
            (f"large ({args.megabytes} MiB, shared memory)", n_large, True, max(args.repeat // 100, 5)),
            (f"large ({args.megabytes} MiB, copied)", n_large, False, max(args.repeat // 100, 5))]
    print(f"{'execution':36s} {'in process us':>14s} {'remote us':>12s} {'ratio':>7s} {'remote - local':>15s}")
    for label, n, shared, repeat in rows:
        cases = {"local": executions(local, n, shared), "remote": executions(remote, n, shared)}
        measure(cases, 3)  # warm up
        t = measure(cases, repeat)
        print(f"{label:36s} {t['local']:14.1f} {t['remote']:12.1f} {t['remote'] / t['local']:7.2f} "
              f"{t['remote'] - t['local']:15.1f}")
    remote.close()


if __name__ == "__main__":
    main()
