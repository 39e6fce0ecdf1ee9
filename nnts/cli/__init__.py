"""The ``nnts`` command line: ``nnts devices``, ``nnts ops``, ``nnts vectors run``, ``nnts fuzz``."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from xml.sax.saxutils import escape, quoteattr

from nnts.formats import files as usage
from nnapi_ref.errors import NnapiError
from nnts.formats.files import UsageError

DEFAULT_DRIVER = os.environ.get("NNTS_DRIVER", "reference")
STATUSES = ("pass", "fail", "skip", "error", "crash", "hang")


_LOADED: dict[tuple, list] = {}


def _devices(spec: str, isolate: bool = False):
    """The runtime's devices for a driver string, loaded once per process (a remote driver is a
    process of its own: one per worker, not one per file)."""
    from nnts.runners.drivers import load_drivers
    from nnapi_ref.runtime import set_drivers, get_devices
    key = (spec, isolate, os.getpid())
    if key not in _LOADED:
        _LOADED[key] = load_drivers(spec, isolate)
    set_drivers(_LOADED[key])
    return get_devices()


def cmd_devices(args) -> int:
    from nnapi_ref.types import OperandCode
    for device in _devices(args.driver, args.isolate):
        caps = device.capabilities
        print(f"{device.name}: type {device.type.name}, feature level {device.feature_level}, "
              f"version {device.version!r}")
        print(f"  cache files: {device.driver.get_number_of_cache_files_needed()}")
        for extension in device.extensions:
            types = ", ".join(f"{i.type} ({'tensor' if i.is_tensor else 'scalar'}, {i.byte_size} bytes)"
                              for i in extension.operand_types)
            print(f"  extension {extension.name}: operand types {types or 'none'}")
        relaxed = caps.relaxed_float32_to_float16_performance_tensor
        print(f"  relaxed float32->float16 tensor: exec {relaxed.exec_time:g}, power {relaxed.power_usage:g}")
        print(f"  IF: exec {caps.if_performance.exec_time:g}; WHILE: exec {caps.while_performance.exec_time:g}")
        for code, info in caps.operand_performance:
            name = OperandCode(code).name if code != 15 else "SUBGRAPH"
            print(f"  {name:32s} exec {info.exec_time:g}, power {info.power_usage:g}")
    return 0


def cmd_serve(args) -> int:
    """Serve one driver over the remote-driver protocol (docs/remote-protocol.md)."""
    from nnts.runners.drivers import load_driver
    from threadpoolctl import threadpool_limits
    from nnapi_ref.remote.server import serve_socket, serve_stdio
    # numpy's BLAS on the given threads: each served driver defaulting to one thread per core
    # oversubscribed the machine (MobileNet served: p50 992 ms against 116 ms on one thread).
    with threadpool_limits(limits=args.blas_threads):
        device = load_driver(args.driver)
        if args.socket:
            try:
                serve_socket(device, args.socket)
            except KeyboardInterrupt:
                pass
            except ValueError as e:  # the path changed since it was checked
                raise UsageError(str(e)) from None
        else:
            serve_stdio(device)
    return 0


def cmd_stress(args) -> int:
    """The MLTS crash and stress tests (mlts/stress.py), each against the driver in its own process."""
    from nnts.mlts import stress
    return stress.main(args.driver, args.tests, args.duration, args.call_timeout, args.json, args.junit)


def cmd_bench(args) -> int:
    """A driver's latency and accuracy on real models against TFLite (mlts/bench.py)."""
    from nnts.mlts import bench
    _devices(args.driver, args.isolate)
    return bench.main(args.driver, args.models, args.baseline, args.warmup, args.runs, args.max_time, args.json,
                      args.html, args.include)


def cmd_gate(args) -> int:
    """The CI gate on bench results (mlts/bench_gate.py)."""
    from nnts.mlts import bench_gate
    return bench_gate.main(args.results, args.baseline, args.thresholds)


def cmd_fuzz(args) -> int:
    """Coverage-guided fuzzing of a harness (fuzz/harnesses.py) in a child process, or a replay."""
    from nnts.fuzz import engine
    if args.replay:
        if not os.path.isfile(args.replay):
            print(f"nnts: no such file: {args.replay}", file=sys.stderr)
            return 2
        return engine.replay(args.replay, args.harness, args.driver, args.vectors)
    if not args.harness:
        print("nnts: fuzz needs --harness NAME or --replay FILE", file=sys.stderr)
        return 2
    missing = [p for p in args.vectors or () if not os.path.exists(p)]
    if missing:
        print(f"nnts: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.vectors:
        _check_seed_vectors(args.vectors)
    _devices(args.driver or DEFAULT_DRIVER)  # a bad --driver: one line here, not a child's traceback
    return engine.run(args.harness, args.driver or DEFAULT_DRIVER, args.runs, args.max_time, args.corpus, args.seed,
                      args.artifacts, args.vectors, args.timeout, args.rss_limit)


def _check_seed_vectors(paths: list[str]) -> None:
    """``--vectors`` must give the fuzzer seeds: a file that is not test vectors is a usage error
    (the child would skip it without a word and fuzz from nothing)."""
    from nnapi_ref import vectors
    files = list(vectors.find_files(paths))
    if not files:
        raise UsageError(f"--vectors {' '.join(paths)}: no .json test-vector files there")
    for path in files:
        try:
            vectors.load_file(path)
        except NnapiError as e:
            raise UsageError(f"--vectors: {e.message}") from None


def cmd_ops(args) -> int:
    from nnapi_ref import ops
    from nnapi_ref.types import OperationCode, type_name
    registry = ops.load_all()
    missing = [code.name for code in OperationCode if code not in registry]
    for code in OperationCode:
        impl = registry.get(code)
        if impl is None:
            continue
        by_level: dict[int, set[str]] = {}
        for sig in impl.signatures:
            # The data type: the first input whose type an output has (EMBEDDING_LOOKUP's values, not its indexes).
            main = next((t for t in sig.inputs if t in sig.outputs), sig.inputs[0] if sig.inputs else None)
            by_level.setdefault(sig.level, set()).add(type_name(main) if main is not None else "-")
        levels = "; ".join(f"{level}: {', '.join(sorted(types))}" for level, types in sorted(by_level.items()))
        print(f"{code.value:4d} {code.name:32s} {levels}")
    print(f"{len(registry)} of {len(OperationCode)} operations implemented" +
          (f"; missing: {', '.join(missing)}" if missing else ""))
    return 0


def _run_file(path, start, progress_path, driver, isolate, pattern, mode, dynamic, device_memory,
              cache_dir, part) -> list[dict]:
    """Worker: run the tests of one file from test ``start`` on; returns plain result dicts, and
    writes each to ``progress_path`` as it goes (nnts.runners.contained: a worker that dies keeps
    them, and the test it died in is named)."""
    from nnapi_ref import vectors
    from nnts.runners.contained import Progress
    from nnts.runners import shard
    from nnts.runners.model_runner import run_test
    from nnapi_ref.remote.client import incidents
    progress = Progress(progress_path)
    try:
        devices = _devices(driver, isolate)
        regex = re.compile(pattern) if pattern else None
        results = []
        try:
            tests = vectors.load_file(path)
        except NnapiError as e:
            return [{"name": os.path.basename(path), "source": str(path), "status": "error", "message": str(e)}]
        selected = [(index, test) for index, test in enumerate(tests) if index >= start
                    and (not regex or regex.search(test.name)) and shard.selects(part, test.name)]
        progress.plan([(index, test.name) for index, test in selected])
        for index, test in selected:
            progress.start(index, test.name)
            seen = len(incidents())
            r = run_test(test, devices, mode, dynamic_outputs=dynamic, device_memory=device_memory,
                         cache_dir=cache_dir)
            result = {"name": r.name, "source": str(path), "status": r.status, "message": r.message}
            new = incidents()[seen:]
            if new:  # the driver process died or hung: that is the verdict, whatever the runtime made of it
                result.update(status="hang" if any(i.kind == "hang" for i in new) else "crash",
                              message="\n".join(i.message for i in new))
            progress.result(result)
            results.append(result)
        return results
    finally:
        progress.close()


def _run_here(files: list[str], job_args: tuple, report) -> list[dict]:
    """The files in this process, one after the other (``--trace``: uncontained, every span kept)."""
    import tempfile
    results = []
    with tempfile.TemporaryDirectory(prefix="nnts-progress-") as folder:
        for i, path in enumerate(files):
            part = _run_file(path, 0, os.path.join(folder, str(i)), *job_args)
            report(part)
            results += part
    return results


def write_junit(path: str, results: list[dict], elapsed: float) -> None:
    counts = {s: sum(r["status"] == s for r in results) for s in STATUSES}
    failures = counts["fail"] + counts["crash"] + counts["hang"]
    lines = ['<?xml version="1.0" encoding="utf-8"?>',
             f'<testsuites><testsuite name="nnts-vectors" tests="{len(results)}" failures="{failures}" '
             f'errors="{counts["error"]}" skipped="{counts["skip"]}" time="{elapsed:.3f}">']
    for r in results:
        head = f'<testcase classname={quoteattr(r["source"])} name={quoteattr(r["name"])}'
        if r["status"] == "pass":
            lines.append(head + "/>")
        else:
            tag = {"fail": "failure", "crash": "failure", "hang": "failure", "error": "error",
                   "skip": "skipped"}[r["status"]]
            lines.append(f'{head}><{tag} message={quoteattr(r["message"][:500])}>{escape(r["message"])}</{tag}></testcase>')
    lines.append("</testsuite></testsuites>")
    usage.write_atomic(path, "\n".join(lines) + "\n")


def cmd_vectors_run(args) -> int:
    from nnts.runners.contained import run_contained
    from nnapi_ref.vectors import find_files
    if not args.paths:
        from nnts.formats.paths import CORPUS
        args.paths = [str(CORPUS)]
    start = time.monotonic()
    missing = [p for p in args.paths if not os.path.exists(p)]
    if missing:
        print(f"nnts vectors run: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    files = [str(p) for p in find_files(args.paths)]
    known = load_known_failures(args.known_failures) if args.known_failures else None  # bad: one line, now
    _devices(args.driver, args.isolate)
    jobs = args.jobs or os.cpu_count() or 1
    job_args = (args.driver, args.isolate, args.filter, args.mode, args.dynamic, args.device_memory, args.cache_dir,
                args.shard)
    reported: list[list[dict]] = []

    def report(part):
        reported.append(part)
        _report(part, args.verbose, args.quiet)

    interrupted = False
    try:
        if getattr(args, "trace", None):  # a worker process's spans would not reach the trace: run here
            results = _run_here(files, job_args, report)
        else:
            results = run_contained(_run_file, job_args, files, jobs, report)
    except KeyboardInterrupt:  # Ctrl-C: write what is done
        interrupted = True
        results = [r for part in reported for r in part]
    n_known = _apply_known_failures(results, args.known_failures, known) if known is not None else 0
    elapsed = time.monotonic() - start
    counts = {s: sum(r["status"] == s for r in results) for s in STATUSES}
    if args.json:
        usage.write_atomic(args.json, json.dumps(
            {"passed": counts["pass"], "failed": counts["fail"], "skipped": counts["skip"],
             "errors": counts["error"], "crashed": counts["crash"], "hung": counts["hang"],
             "interrupted": interrupted, "results": results}, indent=1))
    if args.junit:
        write_junit(args.junit, results, elapsed)
    if interrupted:
        print(f"nnts vectors run: interrupted after {len(results)} results", file=sys.stderr)
        return 130
    if not results:
        print("nnts: no test models found", file=sys.stderr)
        return 5
    extra = "".join(f", {counts[s]} {word}" for s, word in (("error", "errors"), ("crash", "crashed"),
                                                              ("hang", "hung")) if counts[s])
    if n_known:
        print(f"({n_known} of the skipped are known failures listed in {args.known_failures})")
    print(f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped{extra} in {elapsed:.1f}s")
    return 1 if any(counts[s] for s in ("fail", "error", "crash", "hang")) else 0


def load_known_failures(path: str) -> dict[str, str]:
    """Test names (one per line, '#' starts a comment giving the reason) expected to fail."""
    known = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                name, _, reason = line.partition("#")
                if name.strip():
                    known[name.strip()] = reason.strip()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--expected-failures {path}: cannot read it: {e}") from None
    return known


def _apply_known_failures(results: list[dict], path: str, known: dict[str, str]) -> int:
    """Report listed failures as skips naming the file; warn about listed tests that pass."""
    count = 0
    for r in results:
        if r["name"] not in known:
            continue
        if r["status"] in ("fail", "error"):  # never a crash or a hang: those are the driver's, not known
            r["status"] = "skip"
            r["message"] = f"known failure ({path}: {known[r['name']] or 'no reason given'}): {r['message']}"
            count += 1
        elif r["status"] == "pass":
            print(f"WARNING: {r['name']} is listed in {path} but passes now; remove it from the list", file=sys.stderr)
    return count


def _report(part: list[dict], verbose: bool, quiet: bool = False) -> None:
    if not part:
        return
    source = part[0]["source"]
    counts = {s: sum(r["status"] == s for r in part) for s in STATUSES}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    if not quiet:
        print(f"{source}: {summary}", flush=True)
    for r in part:
        if r["status"] in ("fail", "error", "crash", "hang") or (verbose and r["status"] == "skip"):
            print(f"  {r['status'].upper()} {r['name']}: {r['message']}", flush=True)


def cmd_vectors_import_aosp(args) -> int:
    from nnts.formats.aosp import differences, import_checkout
    if not os.path.isdir(args.checkout):
        print(f"nnts vectors import-aosp: {args.checkout}: no such folder", file=sys.stderr)
        return 2
    if args.check and not os.path.isdir(args.check):
        print(f"nnts vectors import-aosp: --check {args.check}: no such folder", file=sys.stderr)
        return 2
    try:
        files, models, problems = import_checkout(args.checkout, args.out, args.versions)
    except FileNotFoundError as e:
        print(f"nnts vectors import-aosp: {e}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"PROBLEM {problem}")
    print(f"nnts vectors import-aosp: {models} test models in {files} files written to {args.out}"
          + (f", {len(problems)} problem(s)" if problems else ""))
    status = 1 if problems else 0
    if args.check:
        compared, found = differences(args.out, args.check, args.versions)
        for line in found:
            print(f"DIFFERS {line}")
        print(f"nnts vectors import-aosp: {compared} test models of {args.check} compared, {len(found)} differ")
        status = status or (1 if found else 0)
    return status


def _expected_failures(value: str) -> str:
    from nnts.runners.cases import expected_failures_file
    return expected_failures_file(value)


def _shard(text: str) -> tuple[int, int]:
    from nnts.runners.shard import parse
    try:
        return parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_driver_options(parser: argparse.ArgumentParser) -> None:
    """``--driver``, ``--isolate`` and ``--call-timeout``, the same for every command that runs a driver."""
    parser.add_argument("--driver", default=DEFAULT_DRIVER,
                        help="reference, module.path:factory, remote:COMMAND or socket:PATH (comma-separated)")
    parser.add_argument("--isolate", action="store_true",
                        help="serve in-process drivers from a process of their own (contains crashes)")
    parser.add_argument("--call-timeout", type=float,
                        help="seconds a remote driver may take per call before it is declared hung (default 60)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "test":  # pytest's options pass through untouched
        from nnts.cli.suite import main as run_suites
        return run_suites(argv[1:])
    parser = argparse.ArgumentParser(prog="nnts", description="NNAPI conformance and benchmarking suite")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("test", help="run the conformance suites (CTS and VTS) against a driver through pytest "
                                "(nnts test --help)")
    p = sub.add_parser("devices", help="list the devices and their capabilities")
    add_driver_options(p)
    p.set_defaults(func=cmd_devices)
    p = sub.add_parser("serve", help="serve a driver to remote clients (remote:nnts serve DRIVER, socket:PATH)")
    p.add_argument("driver", help="reference, or module.path:factory")
    p.add_argument("--socket", help="listen on this Unix socket instead of speaking on stdin/stdout")
    p.add_argument("--blas-threads", type=int, default=1, metavar="N",
                   help="threads of numpy's BLAS in the server (default 1, as nnts bench runs the driver "
                        "in process: several served drivers at BLAS's default oversubscribe the CPUs)")
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("stress", help="MLTS crash and stress tests, the driver in its own process (always isolated)")
    add_driver_options(p)
    p.add_argument("--tests", help="comma-separated test names (default: all of mlts/stress.py's TESTS)")
    p.add_argument("--duration", type=float,
                   help="seconds of each timed test: load/unload, soak, multi-process, random graphs, "
                        "degradation (default 3)")
    p.add_argument("--json", help="write the results as JSON to this file")
    p.add_argument("--junitxml", dest="junit", help="write the results as JUnit XML to this file")
    p.set_defaults(func=cmd_stress)
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
    p.add_argument("--json", help="write the results as JSON (schema in mlts/bench.py)")
    p.add_argument("--html", help="write a self-contained HTML report")
    p.add_argument("--include", nargs="+", metavar="FILE",
                   help="conformance, stress or vectors JSON of the same driver, shown in the HTML report")
    p.set_defaults(func=cmd_bench)
    p = sub.add_parser("gate", help="exit non-zero when bench results miss accuracy criteria or regress")
    p.add_argument("results", help="nnts bench --json output")
    p.add_argument("--baseline", help="earlier results to compare latency medians with")
    p.add_argument("--thresholds", help="TOML thresholds file (format in mlts/bench_gate.py)")
    p.set_defaults(func=cmd_gate)
    p = sub.add_parser("report", help="conformance reports: merge the JSON of shards or runs into one report")
    from nnts.reports.results import add_report_arguments
    add_report_arguments(p)
    p = sub.add_parser("fuzz", help="coverage-guided fuzzing (atheris) of a harness against a driver, or a replay")
    add_driver_options(p)
    p.set_defaults(driver=None)  # --replay takes the driver from the artifact unless one is given
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
    p.add_argument("--replay", metavar="FILE", help="run one artifact again and show its traceback")
    p.set_defaults(func=cmd_fuzz)
    p = sub.add_parser("ops", help="list the operations the reference implements, per feature level and type")
    p.set_defaults(func=cmd_ops)
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
    r.add_argument("--cache-dir", help="compile through the compilation cache in this folder (save, then reload)")
    r.add_argument("--json", help="write results as JSON to this file")
    r.add_argument("--junitxml", dest="junit", help="write results as JUnit XML to this file")
    r.add_argument("-j", "--jobs", type=int, default=0, help="worker processes (default: one per core)")
    r.add_argument("--expected-failures", dest="known_failures", type=_expected_failures,
                   help="file of test names expected to fail (reported as skips), or a published list: "
                        "onnxruntime, tflite, tflite-ref")
    r.add_argument("--shard", type=_shard, metavar="K/N",
                   help="run only the K-th of N deterministic parts of the tests (the N parts are the whole run)")
    r.add_argument("-v", "--verbose", action="store_true", help="also print skipped tests")
    r.add_argument("-q", "--quiet", action="store_true", help="print only failures and the summary")
    r.set_defaults(func=cmd_vectors_run)
    from nnts.cli import trace as trace_cli
    trace_cli.register(sub)
    for command in (sub.choices["stress"], sub.choices["bench"], sub.choices["fuzz"], r):
        trace_cli.add_trace_option(command)
    r = vsub.add_parser("import-aosp", help="the NNAPI test specs of an AOSP checkout as test-vector files "
                                            "(runs the checkout's own test generator)")
    r.add_argument("checkout", help="frameworks/ml (up to Android 11), packages/modules/NeuralNetworks, or an "
                                    "AOSP tree holding them")
    r.add_argument("--out", required=True, help="folder for the vector files (one folder per spec version)")
    r.add_argument("--versions", nargs="+", metavar="V", help="only these spec folders (e.g. V1_3 AIDL_V3)")
    r.add_argument("--check", metavar="DIR", help="then compare every test model of the vector files under DIR "
                                                  "with the imported one of the same name (exit 1 on a difference)")
    r.set_defaults(func=cmd_vectors_import_aosp)
    args = parser.parse_args(argv)
    command = f"vectors {args.vectors_command}" if args.command == "vectors" else args.command
    try:
        check_arguments(args)
    except UsageError as e:
        print(f"nnts {command}: {e}", file=sys.stderr)
        return 2
    if trace_cli.apply(args) is not None:
        return 2
    if getattr(args, "call_timeout", None):
        os.environ["NNTS_CALL_TIMEOUT"] = str(args.call_timeout)  # worker processes inherit it
    from nnapi_ref.runtime.devices import drivers_restored
    try:
        with drivers_restored():
            return args.func(args)
    except NnapiError as e:  # a bad driver string, a driver that does not start: one line, not a traceback
        print(f"nnts: {e}", file=sys.stderr)
        return 2
    except UsageError as e:  # found once the run's inputs were read (a socket path's folder)
        print(f"nnts {command}: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `nnts ops | head`: the reader left; end quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail again
        return 141
    except KeyboardInterrupt:
        print(f"nnts {command}: interrupted", file=sys.stderr)
        return 130


def check_arguments(args) -> None:
    """The arguments that can be checked before the run (paths, files, numbers), so that a typo
    is one line at once rather than a traceback or lost results at the end."""
    if hasattr(args, "call_timeout"):
        usage.positive("--call-timeout", args.call_timeout)
    if getattr(args, "driver", None) is not None and not args.driver.strip():
        raise UsageError("--driver: an empty driver string")
    for option, flag in (("json", "--json"), ("junit", "--junitxml"), ("html", "--html")):  # bench makes folders
        value = getattr(args, option, None)
        if isinstance(value, str):  # (nnts trace summary --json is a switch, not a path)
            usage.output_path(flag, value, creates_folder=args.command == "bench")
    if args.command == "stress":
        usage.positive("--duration", args.duration)
    elif args.command == "bench":
        usage.positive("--max-time", args.max_time)
        usage.positive("--runs", args.runs)
        usage.positive("--warmup", args.warmup, allow_zero=True)
        from nnts.reports.bench import included
        for path in args.include or ():
            usage.input_file("--include", path)
            try:
                included(path)
            except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
                raise UsageError(f"--include {path}: not a stress, conformance or vectors JSON file "
                                 f"({type(e).__name__}: {e})") from None
    elif args.command == "gate":
        usage.input_file("results", args.results)
        usage.input_file("--baseline", args.baseline)
        usage.input_file("--thresholds", args.thresholds)
    elif args.command == "fuzz":
        usage.positive("--max-time", args.max_time)
        usage.positive("--runs", args.runs)
        usage.positive("--timeout", args.timeout)
        usage.positive("--rss-limit", args.rss_limit)
        usage.folder("--corpus", args.corpus)
        usage.folder("--artifacts", args.artifacts)
        usage.input_file("--replay", args.replay, text=False)
    elif args.command == "serve":
        usage.positive("--blas-threads", args.blas_threads)
        if args.socket is not None:
            from nnapi_ref.remote.server import check_socket_path
            try:
                check_socket_path(args.socket)
            except ValueError as e:
                raise UsageError(str(e)) from None
    elif args.command == "vectors" and args.vectors_command == "run":
        usage.regex("--filter", args.filter)
        usage.folder("--cache-dir", args.cache_dir)
        usage.input_file("--expected-failures", args.known_failures)
        if args.jobs < 0:
            raise UsageError(f"--jobs {args.jobs}: must be 0 (one per core) or more")

