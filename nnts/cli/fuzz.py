"""``nnts fuzz``: coverage-guided fuzzing of a harness (fuzz/harnesses.py) in a child process, or
the replay of one artifact."""
from __future__ import annotations

import os
import sys

from nnapi_ref import vectors
from nnapi_ref.errors import NnapiError
from nnts.cli.common import add_driver_options, add_trace_option, default_driver
from nnts.formats import files
from nnts.formats.files import UsageError
from nnts.fuzz import engine
from nnts.runners.drivers import runtime_devices


def register(sub) -> None:
    p = sub.add_parser("fuzz", help="coverage-guided fuzzing (atheris) of a harness against a driver, or a replay")
    add_driver_options(p)
    p.add_argument("--harness", choices=("model", "execute", "request", "vectors", "remote",
                                         "tflite", "gate", "include", "sidecar"),
                   help="what the fuzzer mutates: model (models built through the NDK calls), execute (models run "
                        "on the driver), request (requests to a prepared model), vectors (test-vector files), "
                        "remote (remote-driver protocol messages); the suite's own inputs: tflite (the .tflite "
                        "importer), gate (nnts gate's files), include (nnts bench --include files), sidecar "
                        "(fuzz artifacts' sidecars)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--max-time", type=float, help="seconds to fuzz (default 60 unless --runs is given)")
    budget.add_argument("--runs", type=int, help="number of inputs to run")
    p.add_argument("--corpus", help="corpus folder, kept between campaigns (default: a temporary one)")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument("--artifacts", default="out/fuzz", help="folder for findings (default out/fuzz)")
    p.add_argument("--vectors", action="append",
                   help="test-vector file or folder seeding the corpus (default cts/corpus and ../shared/vectors)")
    p.add_argument("--timeout", type=int, default=10, help="seconds one input may run (default 10)")
    p.add_argument("--rss-limit", type=int, default=2048, help="MiB one input may allocate (default 2048)")
    p.add_argument("--replay", metavar="FILE",
                   help="run one artifact again and show its traceback, on --driver and --vectors as given here "
                        "(an artifact's sidecar may come from anyone: its driver and vectors are only shown)")
    add_trace_option(p)
    p.set_defaults(func=run, check_args=check)


def check(args) -> None:
    files.positive("--max-time", args.max_time)
    files.positive("--runs", args.runs)
    files.positive("--timeout", args.timeout)
    files.positive("--rss-limit", args.rss_limit)
    files.folder("--corpus", args.corpus)
    files.folder("--artifacts", args.artifacts)
    files.input_file("--replay", args.replay, text=False)


def run(args) -> int:
    if args.replay:
        if not os.path.isfile(args.replay):
            print(f"nnts: no such file: {args.replay}", file=sys.stderr)
            return 2
        return engine.replay(args.replay, args.harness, args.driver or default_driver(), args.vectors, args.settings)
    if not args.harness:
        print("nnts: fuzz needs --harness NAME or --replay FILE", file=sys.stderr)
        return 2
    missing = [p for p in args.vectors or () if not os.path.exists(p)]
    if missing:
        print(f"nnts: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.vectors:
        _check_seed_vectors(args.vectors)
    driver = args.driver or default_driver()
    runtime_devices(driver, settings=args.settings)  # a bad --driver: one line here, not a child's traceback
    return engine.run(args.harness, driver, args.runs, args.max_time, args.corpus, args.seed,
                      args.artifacts, args.vectors, args.timeout, args.rss_limit)


def _check_seed_vectors(paths: list[str]) -> None:
    """``--vectors`` must give the fuzzer seeds: a file that is not test vectors is a usage error
    (the child would skip it without a word and fuzz from nothing)."""
    found = list(vectors.find_files(paths))
    if not found:
        raise UsageError(f"--vectors {' '.join(paths)}: no .json test-vector files there")
    for path in found:
        try:
            vectors.load_file(path)
        except NnapiError as e:
            raise UsageError(f"--vectors: {e.message}") from None
