"""The suite's one result vocabulary: the statuses a test, a variant, a test-vector model, a
stress test or a benchmarked model ends with, which of them the reports list as failures and
which fail a run, and how they read in pytest's terms.

Every runner (``nnts test``, ``nnts vectors run``, ``nnts stress``, ``nnts bench``) reports in
these words, the reports and JUnit files count by them, and a run's exit status follows from them.
"""
from __future__ import annotations

from typing import Iterable

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
