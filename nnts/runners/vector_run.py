"""``nnts vectors run``: test-vector files run against a driver in contained worker processes
(:mod:`nnts.runners.contained`), each test a result row in the suite's vocabulary
(:mod:`nnts.formats.results`), expected failures applied as pytest applies them (xfailed, xpassed),
the rows written as JSON and JUnit XML."""
from __future__ import annotations

import os
import re
import sys
import tempfile

from nnapi_ref import vectors
from nnapi_ref.errors import NnapiError
from nnts.formats import junit
from nnts.formats.expected_failures import ExpectedFailures
from nnts.formats.results import FAILS_RUN, STATUSES, driver_died
from nnts.runners import shard
from nnts.runners.contained import Progress
from nnts.runners.drivers import LoadedDrivers, runtime_devices
from nnts.runners.model_runner import ERROR, FAIL, PASS, SKIP, run_test
from nnts.runners.parameters import describe_model

# The model runner's words in the suite's vocabulary.
RUN_STATUS = {PASS: "passed", FAIL: "failed", SKIP: "skipped", ERROR: "error"}


def run_file(loaded: LoadedDrivers, path, start, progress_path, driver, isolate, settings, pattern, mode, dynamic,
             device_memory, hardware_buffer, cache_dir, part) -> list[dict]:
    """Worker: run the tests of one file from test ``start`` on, on the drivers ``loaded`` keeps
    for every file of this process; returns plain result dicts, and writes each to
    ``progress_path`` as it goes (nnts.runners.contained: a worker that dies keeps them, and the
    test it died in is named)."""
    progress = Progress(progress_path)
    try:
        devices = runtime_devices(driver, isolate, settings, loaded)
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
            seen = loaded.incidents.mark()
            r = run_test(test, devices, mode, dynamic_outputs=dynamic, device_memory=device_memory,
                         cache_dir=cache_dir, hardware_buffer=hardware_buffer)
            result = {"name": r.name, "source": str(path), "status": RUN_STATUS[r.status], "message": r.message}
            new = loaded.incidents.since(seen)
            died = driver_died(new)
            if died:
                result.update(status=died, message="\n".join(i.message for i in new))
            if result["status"] in FAILS_RUN:  # the model's operations and parameters, in words
                result["message"] += f"\noperations: {describe_model(test.model)}"
            progress.result(result)
            results.append(result)
        return results
    finally:
        progress.close()


def run_here(files: list[str], loaded: LoadedDrivers, job_args: tuple, report) -> list[dict]:
    """The files in this process, one after the other (``--trace``: uncontained, every span kept)."""
    results = []
    with tempfile.TemporaryDirectory(prefix="nnts-progress-") as folder:
        for i, path in enumerate(files):
            part = run_file(loaded, path, 0, os.path.join(folder, str(i)), *job_args)
            report(part)
            results += part
    return results


def write_junit(path: str, results: list[dict], elapsed: float) -> None:
    junit.write(path, "nnts-vectors", [junit.Case(r["source"], r["name"], r["status"], r["message"])
                                       for r in results], elapsed)


def apply_expected_failures(results: list[dict], known: ExpectedFailures, strict: bool = False) -> None:
    """Listed failures (by test name or glob) become xfailed, naming the file and the reason; listed
    tests that pass, xpassed, with a warning to remove them from the list (pytest's xfail, as ``nnts
    test`` has it), or failed when ``strict``."""
    path = known.path
    for r in results:
        entry = known.entry([r["name"]])
        if entry is None:
            continue
        reason = entry.reason or "no reason given"
        if r["status"] in ("failed", "error"):  # never a crash or a hang: those are the driver's, not known
            r["status"] = "xfailed"
            r["message"] = f"expected failure ({path}: {reason}): {r['message']}"
        elif r["status"] == "passed":
            r["status"] = "failed" if strict else "xpassed"
            r["message"] = f"listed as an expected failure ({path}: {reason}) but passed" + (
                " (--strict-expected-failures)" if strict else "")
            print(f"WARNING: {r['name']} is listed in {path} but passes now; remove it from the list", file=sys.stderr)


def counts(results: list[dict]) -> dict[str, int]:
    return {s: sum(r["status"] == s for r in results) for s in STATUSES}


def _visible(text: str) -> str:
    """Escape sequences (ESC, DEL, C1 controls) as ``\\xNN``; xml_text does the other controls."""
    return "".join(f"\\x{ord(c):02x}" if c in "\x1b\x7f" or "\x80" <= c <= "\x9f" else c for c in str(text))


def print_part(part: list[dict], verbose: bool, quiet: bool = False) -> None:
    if not part:
        return
    source = part[0]["source"]
    summary = ", ".join(f"{n} {s}" for s, n in counts(part).items() if n)
    if not quiet:
        print(f"{source}: {summary}", flush=True)
    for r in part:
        if r["status"] in FAILS_RUN or (verbose and r["status"] in ("skipped", "xfailed", "xpassed")):
            # A name or message from a file or a driver: control characters shown, never obeyed by the terminal.
            print(f"  {r['status'].upper()} {junit.xml_text(_visible(r['name']))}: "
                  f"{junit.xml_text(_visible(r['message'] or ''))}", flush=True)
