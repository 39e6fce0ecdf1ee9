"""The conformance page (``--report out/conformance.html``): the run's facts, totals equal to
pytest's by status and by part of the suite, the operation x data-type support matrix of the tests
that compute values, results per execution path, validation, unsupported operations, every failure
with its message and replay command, and the comparison with an earlier run. One self-contained
file, readable without JavaScript (a small script adds the operation filter and "failing only").
The figures come from reports/results.py, which also writes the JSON (``.json`` paths)."""
from __future__ import annotations

import base64
import collections
import sys
from pathlib import Path

import jinja2

from nnts.formats.results import FAILING, STATUSES
from nnts.reports import results
from nnts.runners.graph import picture_beside

# Short column names for the matrix (the full name is in each header's title and the legend).
DTYPE_ABBREVIATIONS = {
    "TENSOR_FLOAT32": "F32", "TENSOR_FLOAT32_RELAXED": "F32 relaxed", "TENSOR_FLOAT16": "F16",
    "TENSOR_INT32": "I32", "TENSOR_BOOL8": "BOOL8", "TENSOR_QUANT8_ASYMM": "Q8", "TENSOR_QUANT8_ASYMM_SIGNED": "Q8S",
    "TENSOR_QUANT8_SYMM": "Q8sym", "TENSOR_QUANT8_SYMM_PER_CHANNEL": "Q8pc", "TENSOR_QUANT16_SYMM": "Q16sym",
    "TENSOR_QUANT16_ASYMM": "Q16", "FLOAT32": "f32", "FLOAT16": "f16", "INT32": "i32", "UINT32": "u32", "BOOL": "bool",
}
STATUS_LABELS = {"passed": "passed", "failed": "failed", "crashed": "crashed", "hung": "hung", "error": "error",
                 "xfailed": "expected failure", "xpassed": "unexpectedly passing", "unsupported": "skipped as unsupported",
                 "skipped": "skipped otherwise"}


def cell_class(counts: dict) -> str:
    """fail: anything failing; pass: all passed; partial: some passed, some unsupported;
    unsupported: nothing passed, some unsupported; other: skipped or expected failures only."""
    if any(counts.get(s) for s in FAILING):
        return "fail"
    if counts.get("passed") and not counts.get("unsupported"):
        return "pass"
    if counts.get("passed"):
        return "partial"
    return "unsupported" if counts.get("unsupported") else "other"


def anchor(*parts) -> str:
    return "c-" + "-".join(str(p) for p in parts).replace(" ", "_").replace("(", "").replace(")", "")


PICTURE_LIMIT = 1 << 20  # bytes of one embedded graph: a reproducer is small; a bigger file is no picture of one


def picture(test: dict, folders=(), draw: bool = False) -> str | None:
    """The reproducer's graph as a data URI for an ``<img>`` (the page stays one self-contained
    file, and an image runs no script): the SVG the failure named, else (with ``draw``, a live
    run) one drawn now where Graphviz exists. A path comes from a driver's message or a JSON
    file: only a file nnts made in the run's ``folders`` is read or drawn beside, and only a
    small SVG is embedded."""
    path = test.get("graph")
    if path and not results.made_by_nnts(path, folders, ".svg"):
        path = None
    if not path and draw and results.made_by_nnts(test.get("reproducer"), folders, ".json"):
        path = picture_beside(test["reproducer"])
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            svg = f.read(PICTURE_LIMIT + 1)
    except OSError:
        return None
    if len(svg) > PICTURE_LIMIT or b"<svg" not in svg[:4096]:
        return None
    return "data:image/svg+xml;base64," + base64.b64encode(svg).decode("ascii")


def render(data: dict, others: list[dict] = (), folders=(), draw: bool = False) -> str:
    """The page of a schema-2 results dict (results.to_json); ``others``: the driver's other
    results (reports/driver_page.py), summarized at the top and detailed at the end; pictures
    only of files nnts made in ``folders`` (:func:`picture`)."""
    tests = data["tests"]
    dtypes = sorted({d for per in data["matrix"].values() for d in per},
                    key=lambda d: (list(DTYPE_ABBREVIATIONS).index(d) if d in DTYPE_ABBREVIATIONS else 99, d))
    in_matrix = collections.defaultdict(list)
    for t in tests:
        if t["part"] in results.VALUE_PARTS:
            op = t["op"] or ("(random graphs)" if t["part"] == "random graphs" else "(other)")
            in_matrix[(op, t["dtype"] or "mixed")].append(t)
    groups = collections.defaultdict(list)  # failures by operation and data type, else by part
    for t in data["failures"]:
        key = f"{t['op']} {t['dtype'] or ''}".strip() if t["op"] else t["part"]
        groups[key].append(t)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]), undefined=jinja2.StrictUndefined)
    env.filters["cell_class"] = cell_class
    return env.get_template("conformance.html.j2").render(
        d=data, meta=data.get("meta", {}), headline=results.headline, others=list(others),
        statuses=[s for s in STATUSES if data["totals"].get(s) or s in ("passed", "failed")],  # columns that occur
        labels=STATUS_LABELS, failing=FAILING, dtypes=dtypes,
        abbrev=lambda d: DTYPE_ABBREVIATIONS.get(d, d.replace("TENSOR_", "")), cell_class=cell_class, anchor=anchor,
        picture=lambda t: picture(t, folders, draw),
        cells=dict(sorted(in_matrix.items())), failure_groups=dict(sorted(groups.items())),
        pytest_line=", ".join(f"{n} {k}" for k, n in data["pytest"].items() if n))


def write_reports(config, gathered) -> list[str]:
    """Every ``--report`` path of a pytest run: JSON for .json, else HTML; returns the lines to print."""
    lines = []
    meta = results.run_meta(config, gathered.started, gathered.run_facts["drivers"], gathered.run_facts["corpora"])
    comparison = None
    if config.getoption("baseline"):
        try:
            earlier = results.load(config.getoption("baseline"))
            comparison = dict(results.compare(gathered.tests, earlier["tests"]), path=config.getoption("baseline"))
        except results.ResultsError as e:
            lines.append(f"nnts: baseline not compared: {e}")
    folder = config.getoption("reproducers")
    results.vet_run_files(gathered.tests, folder, config.getoption("driver"))
    for t in gathered.tests:
        if t["status"] in FAILING and not t["replay"]:
            t["replay"] = results.pytest_replay(config, t["test"] or t["id"], t["variant"] if results.is_variant(t) else None)
    data = results.to_json(meta, gathered.tests, comparison)
    for path in config.getoption("report"):
        text = results.dumps(data) if path.endswith(".json") else render(data, folders=[folder], draw=True)
        try:
            results.write_atomically(path, text)
        except OSError as e:
            lines.append(f"nnts: conformance report NOT written to {path}: {e.strerror or e}")
            continue
        lines.append(f"nnts: conformance report written to {path}")
    return lines


def input_folders(paths) -> list[str]:
    """The folders of the results files a command was given: where their runs' pictures are
    read from (the files in them of this user; nothing is drawn)."""
    return list(dict.fromkeys(str(Path(p).resolve().parent) for p in paths))


def main_merge(paths: list[str], html: str | None, json_out: str | None, baseline: str | None = None) -> int:
    """``nnts report merge A.json B.json ... --html OUT --json OUT``."""
    if not html and not json_out:
        print("nnts: report merge needs --html OUT and/or --json OUT", file=sys.stderr)
        return 2
    try:
        files = [results.load(p) for p in paths]
        earlier = results.load(baseline) if baseline else None
    except results.ResultsError as e:
        print(f"nnts: {e}", file=sys.stderr)
        return 2
    meta, tests = results.merge(files, paths)
    results.vet_merged(tests)
    drivers = list(dict.fromkeys(str(f.get("meta", {}).get("driver_spec")) for f in files))
    if len(drivers) > 1:
        print(f"nnts: warning: the files are results of {len(drivers)} different drivers ({', '.join(drivers)}); "
              "their tests are counted together", file=sys.stderr)
    ids = collections.Counter(t["id"] for t in tests)
    repeated = [i for i, n in ids.items() if n > 1]
    if repeated:
        print(f"nnts: warning: {len(repeated)} test ids appear in more than one file (e.g. {repeated[0]}); "
              "each is counted every time", file=sys.stderr)
    comparison = dict(results.compare(tests, earlier["tests"]), path=baseline) if earlier else None
    data = results.to_json(meta, tests, comparison)
    try:
        if json_out:
            results.write_atomically(json_out, results.dumps(data))
        if html:
            results.write_atomically(html, render(data, folders=input_folders(paths)))
    except OSError as e:
        print(f"nnts: cannot write {e.filename or 'the report'}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"nnts: merged {len(paths)} files, {len(tests)} tests: " +
          ", ".join(f"{n} {s}" for s, n in data["totals"].items() if n))
    return 0
