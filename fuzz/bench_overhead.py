"""The per-model overhead every test pays, side by side with another checkout of nnts.

    python -m nnts.fuzz.bench_overhead [--baseline PYTHON] [--rounds N] [--fuzz-runs N]

For this checkout, and for the one whose virtual environment's ``PYTHON`` is given (a worktree of
an older commit), measures in alternating child processes (so that both see the same load):

* the runtime's build, compile and execute of a one-ADD model and of a three-ADD chain, in CPU
  microseconds (median of batches; CPU time: other processes on the machine do not inflate it);
* the fuzz model harness (``nnts fuzz --harness model``'s ``TestOneInput``) on a fixed set of
  inputs (each seed's, and seeded plain-loop mutations of them), under atheris' coverage
  instrumentation as ``nnts fuzz`` runs it: inputs per CPU second;
* ``nnts fuzz --harness model --runs N`` itself (``--fuzz-runs``, 0 to skip): inputs per CPU
  second of the whole command (start-up included), and libFuzzer's own exec/s (wall time);
* with ``--coverage-runs N``, how thorough that campaign is: round ``n`` runs ``nnts fuzz --harness
  model --seed n --runs N`` with a corpus folder, takes libFuzzer's final edges (cov) and features
  (ft), then replays the corpus it kept under a line tracer: the lines and line-to-line arcs of the
  runtime's model builder and validation (COVERED_FILES) the campaign reached. Unlike cov and ft,
  these do not depend on which modules a checkout instruments.

Prints one table of medians over the rounds, with the ratio this / baseline. Without
``--baseline`` only this checkout is measured. A child is this file run by the other
environment's Python (``-I``: it imports nothing of this checkout), so any commit with the same
public API can be measured.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

# What the model harness tests: the model builder and the validation behind finish() (paths in nnapi_ref).
COVERED_FILES = ("runtime/model.py", "validation.py", "ops/base.py", "extensions.py")
COVERAGE_ROWS = {"cov": "coverage campaign: libFuzzer's cov (edges)", "ft": "coverage campaign: libFuzzer's ft",
                 "lines": "coverage campaign: lines of COVERED_FILES", "arcs": "coverage campaign: arcs of COVERED_FILES"}
RUNTIME_ROWS = [("one ADD", "build"), ("one ADD", "compile"), ("one ADD", "execute"), ("one ADD", "total"),
                ("three ADDs", "total")]


# -- children (run by either checkout's Python) ------------------------------------------------
# Each child imports the nnts of the checkout whose Python runs it, inside the function that needs
# it: an older checkout lacks some of this one's modules, and the parent measures without them.

def _runtime(batches: int, per_batch: int = 20) -> dict:
    import numpy as np

    from nnapi_ref import Compilation, Execution, Model, OperandCode as T, OperandType, OperationCode

    def build(operations: int) -> Model:
        model = Model()
        t = OperandType(T.TENSOR_FLOAT32, [4])
        x = model.add_operand(t)
        fuse = model.add_operand(OperandType(T.INT32))
        model.set_operand_value(fuse, np.int32(0))
        current = x
        for _ in range(operations):
            out = model.add_operand(t)
            model.add_operation(OperationCode.ADD, [current, x, fuse], [out])
            current = out
        model.identify_inputs_and_outputs([x], [current])
        model.finish()
        return model

    def measure(operations: int) -> dict:
        clock = time.process_time_ns
        x = np.arange(4, dtype=np.float32)
        out = np.zeros(4, np.float32)
        phases = {"build": [], "compile": [], "execute": [], "total": []}
        for _ in range(batches):
            spent = [0, 0, 0]
            for _ in range(per_batch):
                t0 = clock()
                model = build(operations)
                t1 = clock()
                compilation = Compilation(model)
                compilation.finish()
                t2 = clock()
                execution = Execution(compilation)
                execution.set_input(0, x)
                execution.set_output(0, out)
                execution.compute()
                t3 = clock()
                spent = [spent[0] + t1 - t0, spent[1] + t2 - t1, spent[2] + t3 - t2]
            for name, ns in zip(("build", "compile", "execute", "total"), spent + [sum(spent)]):
                phases[name].append(ns / per_batch / 1e3)
        assert np.array_equal(out, x * (operations + 1)), "wrong result"
        return {name: statistics.median(values) for name, values in phases.items()}

    measure(1)  # imports, caches
    return {"one ADD": measure(1), "three ADDs": measure(3)}


def _harness_inputs(seeds: list[bytes], count: int) -> list[bytes]:
    """Each seed's input, then plain-loop mutations of them (fuzz/engine.py: 1-4 bytes changed,
    inserted or cut), from a fixed random seed: the short inputs libFuzzer's corpus holds."""
    rng = random.Random(7)
    inputs = list(seeds)
    while len(inputs) < count:
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            at = rng.randint(0, len(data))
            op = rng.randrange(3)
            if op == 0 and data and at < len(data):
                data[at] = rng.randrange(256)
            elif op == 1:
                data[at:at] = rng.randbytes(rng.randint(1, 8))
            else:
                del data[at:at + rng.randint(1, 8)]
        inputs.append(bytes(data))
    return inputs


def _harness(count: int) -> dict:
    import atheris

    from nnts.fuzz import engine

    # As this checkout's nnts fuzz instruments it (older checkouts: a list, or all of nnapi_ref)
    excluded = engine.not_instrumented("model") if hasattr(engine, "not_instrumented") else \
        getattr(engine, "NOT_RUN_BY", {}).get("model", [])
    with atheris.instrument_imports(include=["nnapi_ref"], exclude=excluded):
        harness = engine.load("model", "reference", None)
    inputs = _harness_inputs(harness.seed_inputs(), count)
    for data in inputs[:200]:
        harness(data)
    rates = []
    for _ in range(3):
        t0 = time.process_time()
        for data in inputs:
            harness(data)
        rates.append(len(inputs) / (time.process_time() - t0))
    return {"exec per CPU s": statistics.median(rates)}


def _coverage(corpus: str) -> dict:
    """The lines and arcs of COVERED_FILES that the model harness runs on the inputs in ``corpus``
    and its seed inputs (not instrumented: traced with sys.settrace)."""
    import nnapi_ref
    from nnts.fuzz import engine
    harness = engine.load("model", "reference", None)
    inputs = list(harness.seed_inputs())
    for name in sorted(os.listdir(corpus)):
        with open(os.path.join(corpus, name), "rb") as f:
            inputs.append(f.read())
    root = os.path.dirname(os.path.abspath(nnapi_ref.__file__))
    targets = {os.path.join(root, name) for name in COVERED_FILES}
    arcs: set[tuple] = set()

    def on_call(frame, event, arg):
        filename = frame.f_code.co_filename
        if filename not in targets:
            return None
        last = -frame.f_code.co_firstlineno  # the arc into a function starts at minus its first line

        def on_line(frame, event, arg):
            nonlocal last
            if event == "line":
                arcs.add((filename, last, frame.f_lineno))
                last = frame.f_lineno
            elif event == "return":
                arcs.add((filename, last, -frame.f_code.co_firstlineno))
            return on_line
        return on_line
    sys.settrace(on_call)
    try:
        for data in inputs:
            try:
                harness(data)
            except Exception:  # a finding: its lines count too
                pass
    finally:
        sys.settrace(None)
    lines = {(filename, line) for filename, _, line in arcs if line > 0}
    return {"inputs": len(inputs), "lines": len(lines), "arcs": len(arcs)}


def _child(argv) -> None:
    kind, amount = argv[0], argv[1]
    sys.stderr = open(os.devnull, "w")  # atheris' "Instrumenting" lines
    if kind == "coverage":
        result = _coverage(amount)
    else:
        result = _runtime(int(amount)) if kind == "runtime" else _harness(int(amount))
    print(json.dumps(result))


# -- the parent ------------------------------------------------------------------------------------

class MeasurementFailed(Exception):
    """A child measurement did not finish: said in one line, not a traceback."""


def _run_child(python: str, kind: str, amount) -> dict:
    done = subprocess.run([python, "-I", os.path.abspath(__file__), "--child", kind, str(amount)],
                          capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        raise MeasurementFailed(f"the {kind} measurement under {python} ended with exit code {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _has_atheris(python: str) -> bool:
    """Whether ``python`` can import atheris (nnts[fuzz]), which the harness measurements need."""
    return subprocess.run([python, "-I", "-c", "import atheris"], capture_output=True).returncode == 0


def _fuzz(python: str, runs: int, seed: int = 1, corpus: str | None = None) -> dict:
    """``nnts fuzz --harness model --runs N`` of the environment of ``python`` (keeping what it
    adds to the corpus in ``corpus`` when given)."""
    nnts = os.path.join(os.path.dirname(python), "nnts")
    with tempfile.TemporaryDirectory(prefix="nnts-bench-overhead-") as scratch:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run([nnts, "fuzz", "--harness", "model", "--seed", str(seed), "--runs", str(runs),
                              "--artifacts", os.path.join(scratch, "artifacts")] + ["--corpus", corpus] * bool(corpus),
                             capture_output=True, text=True, cwd=scratch).stdout
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    m = re.search(r"(\d+) executions in \d+ s \((\d+) exec/s\), coverage: cov (\d+), ft (\d+)", out)
    if m is None:
        raise RuntimeError(f"nnts fuzz of {python} printed no summary:\n{out[-2000:]}")
    return {"exec per CPU s": int(m.group(1)) / cpu, "libFuzzer exec/s": int(m.group(2)),
            "cov": int(m.group(3)), "ft": int(m.group(4))}


def _campaign_coverage(python: str, runs: int, seed: int) -> dict:
    """How much of COVERED_FILES a ``--runs`` campaign of seed ``seed`` reached, and libFuzzer's figures."""
    with tempfile.TemporaryDirectory(prefix="nnts-bench-coverage-") as corpus:
        fuzzed = _fuzz(python, runs, seed, corpus)
        traced = _run_child(python, "coverage", corpus)
    return {"cov": fuzzed["cov"], "ft": fuzzed["ft"], "lines": traced["lines"], "arcs": traced["arcs"]}


def _rows(results: list[dict]) -> dict[str, list[float]]:
    rows: dict[str, list[float]] = {}
    for r in results:
        for model, phase in RUNTIME_ROWS:
            rows.setdefault(f"{model} {phase} (CPU us)", []).append(r["runtime"][model][phase])
        rows.setdefault("model harness, fixed inputs (exec/CPU s)", []).append(r["harness"]["exec per CPU s"])
        if "fuzz" in r:
            rows.setdefault("nnts fuzz --harness model (exec/CPU s)", []).append(r["fuzz"]["exec per CPU s"])
            rows.setdefault("nnts fuzz, libFuzzer's exec/s (wall)", []).append(r["fuzz"]["libFuzzer exec/s"])
        if "coverage" in r:
            for name, row in COVERAGE_ROWS.items():
                rows.setdefault(row, []).append(r["coverage"][name])
    return rows


def main(argv=None) -> int:
    if argv is None and sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="PYTHON", help="the Python of another checkout's virtual environment")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument("--batches", type=int, default=30, help="runtime batches of 20 models per round (default 30)")
    parser.add_argument("--inputs", type=int, default=1500, help="harness inputs per round (default 1500)")
    parser.add_argument("--fuzz-runs", type=int, default=20000,
                        help="nnts fuzz --runs per round (default 20000; 0: not measured)")
    parser.add_argument("--coverage-runs", type=int, default=0,
                        help="runs of round n's coverage campaign (nnts fuzz --seed n; default 0: not measured)")
    args = parser.parse_args(argv)
    for name in ("rounds", "batches", "inputs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.fuzz_runs < 0 or args.coverage_runs < 0:
        parser.error("--fuzz-runs and --coverage-runs must not be negative")
    if args.baseline and not os.access(args.baseline, os.X_OK):
        parser.error(f"--baseline {args.baseline}: not an executable Python")
    trees = [("this", sys.executable)] + ([("baseline", args.baseline)] if args.baseline else [])
    for _, python in trees:
        if not _has_atheris(python):
            print(f"bench_overhead: atheris is not installed for {python} (pip install 'nnts[fuzz]'): "
                  "the fuzz harness measurements need it", file=sys.stderr)
            return 2
    results: dict[str, list[dict]] = {name: [] for name, _ in trees}
    try:
        for n in range(args.rounds):
            for name, python in (trees if n % 2 == 0 else trees[::-1]):
                r = {"runtime": _run_child(python, "runtime", args.batches),
                     "harness": _run_child(python, "harness", args.inputs)}
                if args.fuzz_runs:
                    r["fuzz"] = _fuzz(python, args.fuzz_runs)
                if args.coverage_runs:
                    r["coverage"] = _campaign_coverage(python, args.coverage_runs, n + 1)
                results[name].append(r)
                print(f"round {n + 1}/{args.rounds}: {name} measured", file=sys.stderr, flush=True)
    except (MeasurementFailed, RuntimeError) as e:
        print(f"bench_overhead: {e}", file=sys.stderr)
        return 1
    this = _rows(results["this"])
    base = _rows(results["baseline"]) if args.baseline else {}
    print(f"{'medians of ' + str(args.rounds) + ' rounds':44s} {'baseline':>10s} {'this':>10s} {'this/base':>10s}")
    for row, values in this.items():
        mine = statistics.median(values)
        if row in base:
            theirs = statistics.median(base[row])
            print(f"{row:44s} {theirs:10.1f} {mine:10.1f} {mine / theirs:10.2f}")
        else:
            print(f"{row:44s} {'':10s} {mine:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
