"""The conformance report: an operation x data-type matrix of pass / fail / unsupported counts."""
from __future__ import annotations

import collections
import datetime
import json
from pathlib import Path

import jinja2

OUTCOMES = ("pass", "fail", "crash", "hang", "unsupported", "xfail", "xpass", "skip")
FAILED = ("fail", "crash", "hang")  # a crash or hang of the driver (out of process) fails the test


def summarize(rows):
    """{operation: {dtype: Counter(outcome)}} and the totals, from (op, dtype, outcome, id) rows."""
    matrix: dict[str, dict[str, collections.Counter]] = collections.defaultdict(lambda: collections.defaultdict(
        collections.Counter))
    totals = collections.Counter()
    failures = []
    for op, dtype, outcome, nodeid in rows:
        matrix[op][dtype][outcome] += 1
        totals[outcome] += 1
        if outcome in FAILED:
            failures.append(nodeid if outcome == "fail" else f"{outcome.upper()} {nodeid}")
    return matrix, totals, failures


def cell_class(counts: collections.Counter) -> str:
    if any(counts[o] for o in FAILED) or counts["xpass"]:
        return "fail"
    if counts["pass"] and not counts["unsupported"]:
        return "pass"
    if counts["pass"]:
        return "partial"
    return "unsupported" if counts["unsupported"] else "other"


def to_json(rows, driver: str) -> dict:
    """The report's figures as JSON (``nnts bench --include`` shows them): schema
    ``nnts-conformance/1``, the driver, totals per outcome, {operation: {data type: {outcome: n}}}
    with every outcome of OUTCOMES, and the failed test ids."""
    matrix, totals, failures = summarize(rows)
    return {"schema": "nnts-conformance/1", "driver": driver,
            "generated": datetime.datetime.now().isoformat(timespec="seconds"),
            "totals": {o: totals[o] for o in OUTCOMES},
            "matrix": {op: {dtype: {o: c[o] for o in OUTCOMES} for dtype, c in sorted(per.items())}
                       for op, per in sorted(matrix.items())},
            "failures": failures}


def write_report(path: str, rows, driver: str) -> None:
    """HTML, or the JSON of :func:`to_json` when ``path`` ends in .json (``--report out/conformance.json``)."""
    if path.endswith(".json"):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(to_json(rows, driver), indent=1) + "\n", encoding="utf-8")
        return
    matrix, totals, failures = summarize(rows)
    dtypes = sorted({dtype for per_op in matrix.values() for dtype in per_op})
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
                             autoescape=jinja2.select_autoescape(["html"]))
    page = env.get_template("conformance.html.j2").render(
        driver=driver, generated=datetime.datetime.now().isoformat(timespec="seconds"), matrix=dict(sorted(matrix.items())),
        dtypes=dtypes, summary=", ".join(f"{totals[o]} {o}" for o in OUTCOMES if totals[o]), failures=failures,
        cell_class=cell_class)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(page, encoding="utf-8")
