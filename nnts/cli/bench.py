"""``nnts bench``: a driver's latency and accuracy on real models against TFLite (mlts/bench.py),
as JSON and a self-contained HTML report."""
from __future__ import annotations

import sys

from nnts.cli.common import add_driver_options, add_trace_option
from nnts.formats import files, junit
from nnts.formats.files import UsageError
from nnts.formats.results import FAILS_RUN, included
from nnts.mlts import bench
from nnts.mlts.tflite_baseline import tflite_interpreter_class
from nnts.reports.bench import write_report
from nnts.runners.drivers import runtime_devices


def register(sub) -> None:
    p = sub.add_parser("bench", help="latency and accuracy of a driver on real models against TFLite")
    add_driver_options(p)
    p.add_argument("--models", nargs="+", metavar="GLOB|FILE",
                   help=".tflite files, folders or globs, or 'seeded' for the seeded set (default: ../shared/models "
                        "beside a clone, else the seeded set)")
    p.add_argument("--baseline", choices=("tflite", "none"), default="tflite",
                   help="run each model on TensorFlow Lite too and compare accuracy and latency (default), or not")
    p.add_argument("--warmup", type=int, default=3, help="untimed inferences before the timed runs (default 3)")
    p.add_argument("--runs", type=int, default=50, help="timed inferences per model (default 50)")
    p.add_argument("--max-time", type=float, default=20.0,
                   help="seconds of timed runs per model before stopping early (default 20)")
    p.add_argument("--json", help="write the results as JSON (a record per model: its status, latencies and accuracy)")
    p.add_argument("--html", help="write a self-contained HTML report")
    p.add_argument("--junitxml", dest="junit", help="write each model's status as JUnit XML to this file")
    p.add_argument("--include", nargs="+", metavar="FILE",
                   help="conformance, stress or vectors JSON of the same driver, shown in the HTML report")
    add_trace_option(p)
    p.set_defaults(func=run, check_args=check, creates_folders=True)


def check(args) -> None:
    files.positive("--max-time", args.max_time)
    files.positive("--runs", args.runs)
    files.positive("--warmup", args.warmup, allow_zero=True)
    for path in args.include or ():
        files.input_file("--include", path)
        try:
            included(path)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            raise UsageError(f"--include {path}: not a stress, conformance or vectors JSON file "
                             f"({type(e).__name__}: {e})") from None


def run(args) -> int:
    """1 when a model fails on the driver or its accuracy criteria (or none could be imported), else 0."""
    runtime_devices(args.driver, args.isolate, args.settings)
    try:
        models = bench.resolve_models(args.models)
    except (FileNotFoundError, RuntimeError) as e:
        print(f"nnts bench: {e}", file=sys.stderr)
        return 2
    if args.baseline == "tflite" and tflite_interpreter_class()[0] is None:
        print("nnts bench: ai_edge_litert is not installed: no TFLite baseline (pip install ai-edge-litert)",
              file=sys.stderr)
    progress = bench.Progress(len(models))
    try:
        results = bench.run(models, args.driver, bench.Settings(args.warmup, args.runs, args.max_time, args.baseline),
                            progress)
    finally:
        progress.close()
    bench.print_table(results)
    if args.json:
        bench.write_json(args.json, results)
        print(f"nnts bench: results written to {args.json}", file=sys.stderr)
    if args.html:
        write_report(args.html, results, args.include or [])
        print(f"nnts bench: report written to {args.html}", file=sys.stderr)
    rows = results["models"]
    if args.junit:
        junit.write(args.junit, "nnts-bench", [junit.Case(r["path"], r["model"], r["status"], bench.summary_line(r))
                                               for r in rows])
    if rows and all(r["status"] in ("skipped", "error") for r in rows):
        imported = sum(bool(r.get("operations")) for r in rows)
        print(f"nnts bench: none of the {len(rows)} model(s) " + ("could be imported" if not imported else
              "ran on the driver (the CPU fallback ran them)"), file=sys.stderr)
        return 1
    return 1 if any(r["status"] in FAILS_RUN for r in rows) else 0
