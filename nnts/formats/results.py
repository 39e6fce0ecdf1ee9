"""The suite's one result vocabulary: the statuses a test, a variant, a test-vector model or a
stress test ends with, which of them fail a run, and how they read in pytest's terms.

Every runner (``nnts test``, ``nnts vectors run``, ``nnts stress``, ``nnts bench``) reports in
these words, the reports and JUnit files count by them, and a run's exit status follows from them.
"""
from __future__ import annotations

STATUSES = ("passed", "failed", "crashed", "hung", "error", "xfailed", "xpassed", "unsupported", "skipped")
FAILING = ("failed", "crashed", "hung", "error", "xpassed")
PYTEST_STATUS = {"passed": "passed", "failed": "failed", "crashed": "failed", "hung": "failed", "error": "error",
                 "xfailed": "xfailed", "xpassed": "xpassed", "unsupported": "skipped", "skipped": "skipped"}


def pytest_outcome(statuses: list[str]) -> str:
    """pytest's outcome of a test from its variants' statuses: failed when any failed, xfailed
    when any failed as expected, skipped when all were, passed otherwise (``nnts.runners.variants.conclude``
    concludes so)."""
    if any(PYTEST_STATUS[s] == "failed" for s in statuses):
        return "failed"
    if "xfailed" in statuses:
        return "xfailed"
    return "skipped" if all(s in ("skipped", "unsupported") for s in statuses) else "passed"
