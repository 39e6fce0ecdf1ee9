"""``nnts vectors run``: test-vector files run against a driver in contained worker processes
(:mod:`nnts.runners.contained`), each test a result row, expected failures applied, the rows
written as JSON and JUnit XML."""
from __future__ import annotations

import os
import re
import sys
import tempfile
from xml.sax.saxutils import escape, quoteattr

from nnapi_ref import vectors
from nnapi_ref.errors import NnapiError
from nnapi_ref.remote.client import incidents
from nnts.formats.files import write_atomic
from nnts.runners import shard
from nnts.runners.contained import Progress
from nnts.runners.drivers import runtime_devices
from nnts.runners.model_runner import run_test

STATUSES = ("pass", "fail", "skip", "error", "crash", "hang")


def run_file(path, start, progress_path, driver, isolate, settings, pattern, mode, dynamic, device_memory,
             cache_dir, part) -> list[dict]:
    """Worker: run the tests of one file from test ``start`` on; returns plain result dicts, and
    writes each to ``progress_path`` as it goes (nnts.runners.contained: a worker that dies keeps
    them, and the test it died in is named)."""
    progress = Progress(progress_path)
    try:
        devices = runtime_devices(driver, isolate, settings)
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


def run_here(files: list[str], job_args: tuple, report) -> list[dict]:
    """The files in this process, one after the other (``--trace``: uncontained, every span kept)."""
    results = []
    with tempfile.TemporaryDirectory(prefix="nnts-progress-") as folder:
        for i, path in enumerate(files):
            part = run_file(path, 0, os.path.join(folder, str(i)), *job_args)
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
    write_atomic(path, "\n".join(lines) + "\n")


def apply_known_failures(results: list[dict], path: str, known: dict[str, str]) -> int:
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


def print_part(part: list[dict], verbose: bool, quiet: bool = False) -> None:
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
