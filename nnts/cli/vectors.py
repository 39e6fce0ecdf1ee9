"""``nnts vectors run`` (test-vector files against a driver, contained: :mod:`nnts.runners.vector_run`)
and ``nnts vectors import-aosp`` (an AOSP checkout's test specs as test-vector files)."""
from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import time

from nnapi_ref.vectors import find_files
from nnts.cli.common import add_driver_options, add_trace_option, shard_option
from nnts.formats import expected_failures, files
from nnts.formats.aosp import GENERATOR_TIMEOUT_S, differences, import_checkout, unknown_versions
from nnts.formats.expected_failures import expected_failures_file
from nnts.formats.files import UsageError
from nnts.formats.paths import CORPUS
from nnts.formats.results import FAILS_RUN
from nnts.runners import contained, vector_run
from nnts.runners.drivers import LoadedDrivers, runtime_devices


def register(sub) -> None:
    p = sub.add_parser("vectors", help="test vectors")
    vsub = p.add_subparsers(dest="vectors_command", required=True)
    r = vsub.add_parser("run", help="run test-vector files or folders against a driver")
    r.add_argument("paths", nargs="*", metavar="PATH",
                   help="test-vector files or folders (default: the project corpus installed with nnts)")
    add_driver_options(r)
    r.add_argument("--filter", help="only tests whose name matches this regular expression")
    r.add_argument("--mode", choices=("sync", "async", "burst", "fenced"), default="sync",
                   help="the execution path each test runs through (default sync)")
    r.add_argument("--dynamic", action="store_true", help="leave output dimensions unspecified")
    r.add_argument("--device-memory", action="store_true",
                   help="put inputs and outputs in memory from descriptors (memory domains)")
    r.add_argument("--hardware-buffer", action="store_true",
                   help="put inputs and outputs in one hardware buffer of format BLOB (AHardwareBuffer)")
    r.add_argument("--cache-dir", help="compile through the compilation cache in this folder (save, then reload)")
    r.add_argument("--json", help="write results as JSON to this file")
    r.add_argument("--junitxml", dest="junit", help="write results as JUnit XML to this file")
    r.add_argument("-j", "--jobs", type=int, default=0, help="worker processes (default: one per core)")
    r.add_argument("--inline", action="store_true",
                   help="run in this process, uncontained, for a debugger to stop in the driver (python -m pdb -m "
                        "nnts vectors run FILE --inline); a crash of the driver ends the run")
    r.add_argument("--expected-failures", dest="known_failures", type=expected_failures_file,
                   help="file of test names expected to fail, one a line with the reason after '#', '*' for "
                        "any characters (reported as xfailed, or xpassed when they pass), or a published list: "
                        "onnxruntime, tflite, tflite-ref")
    r.add_argument("--strict-expected-failures", action="store_true",
                   help="an expected failure that passes fails the run")
    r.add_argument("--shard", type=shard_option, metavar="K/N",
                   help="run only the K-th of N deterministic parts of the tests (the N parts are the whole run)")
    r.add_argument("-v", "--verbose", action="store_true", help="also print skipped tests")
    r.add_argument("-q", "--quiet", action="store_true", help="print only failures and the summary")
    add_trace_option(r)
    r.set_defaults(func=run, check_args=check_run)
    i = vsub.add_parser("import-aosp", help="the NNAPI test specs of an AOSP checkout as test-vector files "
                                            "(runs the checkout's own test generator)")
    i.add_argument("checkout", help="frameworks/ml (up to Android 11), packages/modules/NeuralNetworks, or an "
                                    "AOSP tree holding them")
    i.add_argument("--out", required=True, help="folder for the vector files (one folder per spec version)")
    i.add_argument("--versions", nargs="+", metavar="V", help="only these spec folders (e.g. V1_3 AIDL_V3)")
    i.add_argument("--timeout", type=float, default=GENERATOR_TIMEOUT_S, metavar="S",
                   help=f"seconds the generator may run over one version folder (default {GENERATOR_TIMEOUT_S})")
    i.add_argument("--check", metavar="DIR", help="then compare every test model of the vector files under DIR "
                                                  "with the imported one of the same name (exit 1 on a difference)")
    i.set_defaults(func=import_aosp)


def check_run(args) -> None:
    files.regex("--filter", args.filter)
    files.folder("--cache-dir", args.cache_dir)
    files.input_file("--expected-failures", args.known_failures)
    if args.jobs < 0:
        raise UsageError(f"--jobs {args.jobs}: must be 0 (one per core) or more")


def run(args) -> int:
    if not args.paths:
        args.paths = [str(CORPUS)]
    start = time.monotonic()
    missing = [p for p in args.paths if not os.path.exists(p)]
    if missing:
        print(f"nnts vectors run: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    found = [str(p) for p in find_files(args.paths)]
    if args.inline:
        faulthandler.enable(file=2)  # a driver that crashes this process: the stack where it died
    known = expected_failures.load(args.known_failures) if args.known_failures else None  # bad: one line, now
    loaded = LoadedDrivers()  # this process's; each worker process loads its own
    runtime_devices(args.driver, args.isolate, args.settings, loaded)
    jobs = args.jobs or os.cpu_count() or 1
    job_args = (args.driver, args.isolate, args.settings, args.filter, args.mode, args.dynamic, args.device_memory,
                args.hardware_buffer, args.cache_dir, args.shard)
    reported: list[list[dict]] = []

    def report(part):
        if known is not None:
            vector_run.apply_expected_failures(part, known, args.strict_expected_failures)
        reported.append(part)
        vector_run.print_part(part, args.verbose, args.quiet)

    interrupted = False
    # SIGTERM (a CI timeout, docker stop) as Ctrl-C: what is done is written.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        if args.inline or getattr(args, "trace", None):  # (a worker process's spans would not reach the trace)
            results = vector_run.run_here(found, loaded, job_args, report)
        else:
            results = contained.run_contained(vector_run.run_file, LoadedDrivers, job_args, found, jobs, report,
                                              contained.test_budget_s(args.settings.call_timeout_s))
    except KeyboardInterrupt:  # Ctrl-C: write what is done
        interrupted = True
        results = [r for part in reported for r in part]
    elapsed = time.monotonic() - start
    if known is not None and not interrupted and not args.filter and not args.shard:
        for line in expected_failures.stale_lines(args.known_failures, known.stale()):
            print(f"WARNING: stale expected failure (it matches no test): {line}", file=sys.stderr)
    counts = vector_run.counts(results)
    if args.json:
        files.write_atomic(args.json, json.dumps(
            {"passed": counts["passed"], "failed": counts["failed"], "skipped": counts["skipped"],
             "xfailed": counts["xfailed"], "xpassed": counts["xpassed"], "errors": counts["error"],
             "crashed": counts["crashed"], "hung": counts["hung"], "interrupted": interrupted, "results": results},
            indent=1))
    if args.junit:
        vector_run.write_junit(args.junit, results, elapsed)
    if interrupted:
        print(f"nnts vectors run: interrupted after {len(results)} results", file=sys.stderr)
        return 130
    if not results:
        print("nnts: no test models found", file=sys.stderr)
        return 5
    extra = "".join(f", {counts[s]} {word}" for s, word in (("xfailed", "xfailed"), ("xpassed", "xpassed"),
                                                              ("error", "errors"), ("crashed", "crashed"),
                                                              ("hung", "hung")) if counts[s])
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped{extra} in {elapsed:.1f}s")
    return 1 if any(counts[s] for s in FAILS_RUN) else 0


def import_aosp(args) -> int:
    if not os.path.isdir(args.checkout):
        print(f"nnts vectors import-aosp: {args.checkout}: no such folder", file=sys.stderr)
        return 2
    if args.check and not os.path.isdir(args.check):
        print(f"nnts vectors import-aosp: --check {args.check}: no such folder", file=sys.stderr)
        return 2
    if not (args.timeout > 0 and args.timeout < float("inf")):
        print(f"nnts vectors import-aosp: --timeout {args.timeout}: must be a finite number > 0", file=sys.stderr)
        return 2
    try:
        unknown = unknown_versions(args.checkout, args.versions)
        if unknown:
            print(f"nnts vectors import-aosp: --versions {' '.join(unknown)}: no such spec folder in {args.checkout}",
                  file=sys.stderr)
            return 2
        os.makedirs(args.out, exist_ok=True)
        written, models, problems = import_checkout(args.checkout, args.out, args.versions, timeout_s=args.timeout)
    except FileNotFoundError as e:
        print(f"nnts vectors import-aosp: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"nnts vectors import-aosp: {e.filename or args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"PROBLEM {problem}")
    print(f"nnts vectors import-aosp: {models} test models in {written} files written to {args.out}"
          + (f", {len(problems)} problem(s)" if problems else ""))
    status = 1 if problems else 0
    if args.check:
        compared, found = differences(args.out, args.check, args.versions)
        for line in found:
            print(f"DIFFERS {line}")
        print(f"nnts vectors import-aosp: {compared} test models of {args.check} compared, {len(found)} differ")
        status = status or (1 if found else 0)
    return status
