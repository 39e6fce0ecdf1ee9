"""The suite's one result vocabulary: the statuses a test, a variant, a test-vector model, a
stress test or a benchmarked model ends with, which of them the reports list as failures and
which fail a run, and how they read in pytest's terms.

Every runner (``nnts test``, ``nnts vectors run``, ``nnts stress``, ``nnts bench``) reports in
these words, the reports and JUnit files count by them, and a run's exit status follows from them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from nnts.formats import jsonfile

STATUSES = ("passed", "failed", "crashed", "hung", "error", "xfailed", "xpassed", "unsupported", "skipped")
FAILING = ("failed", "crashed", "hung", "error", "xpassed")
# An expected failure that passes is listed (remove it from the list) but, as in pytest, fails no run.
FAILS_RUN = ("failed", "crashed", "hung", "error")
PYTEST_STATUS = {"passed": "passed", "failed": "failed", "crashed": "failed", "hung": "failed", "error": "error",
                 "xfailed": "xfailed", "xpassed": "xpassed", "unsupported": "skipped", "skipped": "skipped"}
# The words of files written before the vocabulary was one (conformance schema 1, nnts vectors run's
# rows, nnts bench's rows of schema 1: a model that ran, one the importer refused, one the driver
# failed), for the readers of those files.
EARLIER = {"pass": "passed", "fail": "failed", "crash": "crashed", "hang": "hung", "xfail": "xfailed",
           "xpass": "xpassed", "skip": "skipped", "ok": "passed", "import_error": "skipped",
           "driver_error": "failed"}


def earlier_status(word: str) -> str:
    """A status as a file written before may name it, in today's word."""
    return EARLIER.get(word, word)


def driver_died(incidents: Iterable) -> str | None:
    """The verdict of a test during which an out-of-process driver failed, whatever the test or the
    runtime (which may have fallen back to the CPU) made of it: hung when it did not answer
    (an incident of kind ``hang``), else crashed when it died or broke the protocol; None without
    incidents (``nnapi_ref.remote.client.Incident``)."""
    kinds = {i.kind for i in incidents}
    return None if not kinds else "hung" if "hang" in kinds else "crashed"


def pytest_outcome(statuses: list[str]) -> str:
    """pytest's outcome of a test from its variants' statuses: failed when any failed, xfailed
    when any failed as expected, skipped when all were, passed otherwise (``nnts.runners.variants.conclude``
    concludes so)."""
    if any(PYTEST_STATUS[s] == "failed" for s in statuses):
        return "failed"
    if "xfailed" in statuses:
        return "xfailed"
    return "skipped" if all(s in ("skipped", "unsupported") for s in statuses) else "passed"


def upgrade_v1(data: dict) -> dict:
    """Schema 1's figures under schema 2's status names (for ``nnts bench --include``)."""
    def statuses(counts):
        named = {earlier_status(k): v for k, v in counts.items()}
        return {s: named.get(s, 0) for s in STATUSES}
    return {"schema": data["schema"], "driver": data.get("driver"), "meta": {},
            "totals": statuses(data.get("totals", {})),
            "matrix": {op: {d: statuses(c) for d, c in per.items()} for op, per in data.get("matrix", {}).items()},
            "failures": [{"id": f.split(" ", 1)[-1] if f.startswith(("CRASH ", "HANG ")) else f,
                          "status": "crashed" if f.startswith("CRASH ") else "hung" if f.startswith("HANG ") else "failed",
                          "message": None, "replay": None} for f in data.get("failures", [])]}


def included(path: str) -> dict:
    """An --include file as {kind, title, ...} for the template: stress (a list of results with
    verdicts), conformance (reports/results.py's JSON, schema 2 or 1) or vectors (nnts vectors run --json).
    ValueError for anything else, or for one of them with fields of the wrong JSON types."""
    data = jsonfile.read(path, any)  # a JsonError (a ValueError) names what is wrong
    name = Path(path).name
    if isinstance(data, list) and all(isinstance(r, dict) and isinstance(r.get("verdict"), str) for r in data):
        counts = {v: sum(r["verdict"] == v for r in data) for v in dict.fromkeys(r["verdict"] for r in data)}
        return {"kind": "stress", "title": f"Stress tests ({name})", "rows": data, "counts": counts,
                "ok": all(r["verdict"] == "SUCCESS" for r in data)}
    if isinstance(data, dict) and str(data.get("schema", "")).startswith("nnts-conformance/"):
        if not isinstance(data.get("totals"), dict) or not isinstance(data.get("driver"), str):
            raise ValueError(f"{path}: a conformance JSON without 'driver' and 'totals'")
        if data["schema"] == "nnts-conformance/1":
            data = upgrade_v1(data)
        return {"kind": "conformance", "title": f"Conformance ({name}, driver {data['driver']})", "data": data,
                "ok": not any(data["totals"].get(o) for o in FAILING)}
    if isinstance(data, dict) and isinstance(data.get("results"), list) and "passed" in data:
        if not all(isinstance(r, dict) and isinstance(r.get("status"), str) for r in data["results"]):
            raise ValueError(f"{path}: a vectors JSON whose results are not objects with a status")
        bad = [r for r in data["results"] if earlier_status(r["status"]) in FAILS_RUN]  # files of any nnts
        return {"kind": "vectors", "title": f"Test vectors / fuzz reproducers ({name})", "data": data, "bad": bad,
                "ok": not bad}
    raise ValueError(f"{path}: not a stress, conformance or vectors JSON file")
