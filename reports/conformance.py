"""The conformance page (``--report out/conformance.html``): the run's facts, totals equal to
pytest's by status and by part of the suite, the operation x data-type support matrix of the tests
that compute values, results per execution path, validation, unsupported operations, every failure
with its message and replay command, and the comparison with an earlier run. One self-contained
file, readable without JavaScript (a small script adds the operation filter and "failing only").
The figures come from reports/results.py, which also writes the JSON (``.json`` paths)."""
from __future__ import annotations

import base64
import collections
import os
import re
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


def _grouped(support: list[dict], skipped: dict) -> list[dict]:
    """The unsupported rows of the support facts, one per operation and reason (its data types
    together, from the lowest level), with the tests ``skipped`` for them ({op: {dtype: n}})."""
    groups: dict = {}
    for r in support:
        if r["status"] == "unsupported":
            g = groups.setdefault((r["operation"], r["reason"]), {"operation": r["operation"], "reason": r["reason"],
                                                                   "data_types": [], "level": r["level"]})
            g["data_types"].append(r["data_type"])
            g["level"] = min(g["level"], r["level"])
    for g in groups.values():
        g["tests"] = sum(skipped.get(g["operation"], {}).get(t, 0) for t in g["data_types"])
    return sorted(groups.values(), key=lambda g: (g["operation"], g["reason"]))


def failure_entries(data: dict) -> dict[str, list[dict]]:
    """The failures to fix, by operation and data type (else part of the suite): the variants of
    one generated test that fail the same way (the same line saying what went wrong) are one
    entry, "fails in sync, burst, fenced", with that cause, the first variant's replay command
    and graph, and the ids of all (each an anchor the matrix links to)."""
    variants_of = collections.Counter(t["test"] for t in data["tests"] if results.is_variant(t))
    entries: dict[tuple, dict] = {}
    for k, t in enumerate(data["failures"]):
        t = {**dict.fromkeys(results.TEST_KEYS), **t}
        cause = results.headline(t["message"])
        key = (t["test"], t["status"], cause) if results.is_variant(t) else (k,)  # a test of no variants: its own
        entry = entries.get(key)
        if entry is None:
            entry = entries[key] = dict(t, cause=cause, ids=[], variants=[], of=variants_of.get(t["test"], 0))
        entry["ids"].append(t["id"])
        if t["variant"] and results.is_variant(t):
            entry["variants"].append(t["variant"])
    groups = collections.defaultdict(list)
    for entry in entries.values():
        key = f"{entry['op']} {entry['dtype'] or ''}".strip() if entry["op"] else entry["part"]
        groups[key].append(entry)
    return dict(sorted(groups.items()))


def unsupported_rows(tests: list[dict]) -> list[tuple[str, str, int, str]]:
    """The Unsupported section's rows: (operation, its operand types with their tests, tests,
    why) per operation and reason, those nearest to running first (a type or a form the driver
    does not take, then whole operations)."""
    rows = collections.defaultdict(list)
    for op, dtype, n, why in results.unsupported_reasons(tests):
        rows[(op, why)].append((dtype, n))
    order = list(results.WHY_UNSUPPORTED)
    return [(op, ", ".join(f"{DTYPE_ABBREVIATIONS.get(d, d)} {n}" for d, n in types), sum(n for _, n in types),
             results.WHY_UNSUPPORTED[why])
            for (op, why), types in sorted(rows.items(), key=lambda item: (-order.index(item[0][1]), item[0][0]))]


def published(value, folder: Path | None):
    """``value`` (a results dict, a list, a string) with the paths of the machine that made it
    taken out, for a page that may be published: a path in the current folder becomes relative
    to it (``out/reproducers/x.json``, as the replay commands are run), else one under the
    page's ``folder`` relative to the page, one in nnts's installed suite relative to the
    suite (``cts/corpus/x.json``), one in the home folder starts with ``~/``, and any other
    absolute path keeps only its file name."""
    roots = [(root.rstrip("/") + "/", replacement) for root, replacement in
             [(os.getcwd(), ""), *([(str(folder), "")] if folder is not None else []),
              (str(Path(__file__).resolve().parents[1]), ""), (str(Path.home()), "~/")] if root.strip("/")]

    def shorten(found: re.Match) -> str:
        path = found.group(0)
        for root, replacement in roots:
            if path + "/" == root:
                return replacement or "."
            if path.startswith(root):
                return replacement + path[len(root):]
        return path.rsplit("/", 1)[-1]

    def walk(item):
        if isinstance(item, dict):
            return {k: walk(v) for k, v in item.items()}
        if isinstance(item, list):
            return [walk(v) for v in item]
        if isinstance(item, str) and "/" in item and (item[0] == "/" or any(m in item for m in PATH_MARKS)):
            return ABSOLUTE_PATH.sub(shorten, item)
        return item  # most strings (test ids, relative paths) cannot hold an absolute path: not scanned
    return walk(value)


ABSOLUTE_PATH = re.compile(r"(?<![\w.~/-])/(?!/)[^\s'\"<>:;,()\[\]]+")  # not a URL's //, not a/b
PATH_MARKS = tuple(c + "/" for c in " \n\t:=('\"[,;<>")  # what starts an absolute path ABSOLUTE_PATH finds


def render(data: dict, others: list[dict] = (), folder: str | Path | None = None, folders=(),
           draw: bool = False) -> str:
    """The page of a schema-2 results dict (results.to_json); ``others``: the driver's other
    results (reports/driver_page.py), summarized at the top and detailed at the end. ``folder``:
    where the page goes, which its paths are shown relative to (:func:`published`); pictures
    only of files nnts made in ``folders`` (:func:`picture`)."""
    folder = Path(folder).resolve() if folder is not None else None
    entries = failure_entries(data)
    pictures = [[picture(entry, folders, draw) for entry in group] for group in entries.values()]  # real paths
    shown = published({"data": data, "entries": entries, "others": list(others)}, folder)
    for group, drawn in zip(shown["entries"].values(), pictures):
        for entry, image in zip(group, drawn):
            entry["picture"] = image
    data, others = shown["data"], shown["others"]
    tests = data["tests"]
    dtypes = sorted({d for per in data["matrix"].values() for d in per},
                    key=lambda d: (list(DTYPE_ABBREVIATIONS).index(d) if d in DTYPE_ABBREVIATIONS else 99, d))
    in_matrix = collections.defaultdict(list)
    for t in tests:
        if t["part"] in results.VALUE_PARTS:
            op = t["op"] or ("(random graphs)" if t["part"] == "random graphs" else "(other)")
            in_matrix[(op, t["dtype"] or "mixed")].append(t)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]), undefined=jinja2.StrictUndefined)
    env.filters["cell_class"] = cell_class
    support = data.get("meta", {}).get("support") or []
    why = {(r["operation"], r["data_type"]): r["reason"] for r in support if r["status"] == "unsupported"}
    return env.get_template("conformance.html.j2").render(
        d=data, meta=data.get("meta", {}), headline=results.headline, others=list(others),
        statuses=[s for s in STATUSES if data["totals"].get(s) or s in ("passed", "failed")],  # columns that occur
        labels=STATUS_LABELS, failing=FAILING, dtypes=dtypes,
        abbrev=lambda d: DTYPE_ABBREVIATIONS.get(d, d.replace("TENSOR_", "")), cell_class=cell_class, anchor=anchor,
        why=why, not_supported=_grouped(support, data.get("unsupported", {})),
        cells=dict(sorted(in_matrix.items())), failure_groups=shown["entries"],
        unsupported=unsupported_rows(tests),
        unsupported_line=results.unsupported_line(tests), any_type=results.ANY_TYPE,
        pytest_line=", ".join(f"{n} {k}" for k, n in data["pytest"].items() if n))


def write_reports(config, gathered) -> list[str]:
    """Every ``--report`` path of a pytest run: JSON for .json, else HTML; returns the lines to print."""
    meta = results.run_meta(config, gathered.started, gathered.run_facts["drivers"], gathered.run_facts["corpora"])
    if gathered.run_facts.get("support"):
        meta["support"] = gathered.run_facts["support"]
    comparison, lines = _compared(gathered.tests, config.getoption("baseline"))
    vet(config, gathered.tests)
    data = results.to_json(meta, gathered.tests, comparison)
    return lines + _write(data, config.getoption("report"), config.getoption("reproducers"))


def vet(config, tests: list[dict]) -> None:
    """A live run's records as its reports show them: their run files vetted
    (:func:`nnts.reports.results.vet_run_files`), and a replay command for each failure without one."""
    results.vet_run_files(tests, config.getoption("reproducers"), config.getoption("driver"))
    for t in tests:
        if t["status"] in FAILING and not t["replay"]:
            t["replay"] = results.pytest_replay(config, t["test"] or t["id"], t["variant"] if results.is_variant(t) else None)


def _compared(tests: list[dict], baseline: str | None) -> tuple[dict | None, list[str]]:
    """The comparison of ``tests`` with the ``baseline`` results file (None without one), and the
    lines to print (a baseline that cannot be read is not compared)."""
    if not baseline:
        return None, []
    try:
        earlier = results.load(baseline)
    except results.ResultsError as e:
        return None, [f"nnts: baseline not compared: {e}"]
    return dict(results.compare(tests, earlier["tests"]), path=baseline), []


def _write(data: dict, paths: list[str], folder: str) -> list[str]:
    """The report ``data`` at every path (JSON for .json, else HTML), each whole or not at all;
    returns the lines to print."""
    lines = []
    for path in paths:
        text = results.dumps(data) if path.endswith(".json") else render(data, folder=Path(path).parent,
                                                                          folders=[folder], draw=True)
        try:
            results.write_atomically(path, text)
        except OSError as e:
            lines.append(f"nnts: conformance report NOT written to {path}: {e.strerror or e}")
            continue
        lines.append(f"nnts: conformance report written to {path}")
    return lines


def write_from_journal(journal: str, crashed: str | None, message: str | None) -> list[str]:
    """The ``--report`` files of a pytest run that died in the test ``crashed`` (an in-process
    driver crashed the process), from its journal (``ConformanceResults``: the run's settings
    and facts, and each finished test's records, one JSON object a line): every test that ended
    before the crash, and the crashed one (if it died in a test), CRASHED with ``message``. Returns
    the lines to print."""
    import datetime
    import json
    from types import SimpleNamespace

    settings, facts, tests, running = None, {}, [], {}
    try:
        with open(journal, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:  # a line the crash cut short
                    continue
                if "settings" in entry:
                    settings = entry["settings"]
                elif "facts" in entry:
                    facts = entry["facts"]
                elif "running" in entry:
                    running = entry["running"]
                elif "tests" in entry:
                    tests += entry["tests"]
    except OSError:
        return []
    if not settings:
        return []
    meta = dict(settings["meta"], drivers=facts.get("drivers", []), corpora=facts.get("corpora", []))
    if facts.get("support"):
        meta["support"] = facts["support"]
    started = datetime.datetime.fromisoformat(meta["started"])
    meta["duration_s"] = round((datetime.datetime.now() - started).total_seconds(), 1)
    folder = meta.get("reproducers")
    if crashed:
        props = dict(running.get("props", {}) if running.get("test") == crashed else {}, nnts_verdict="crashed")
        report = SimpleNamespace(when="call", passed=False, skipped=False, failed=True, nodeid=crashed, duration=0.0,
                                 longreprtext=message or "CRASH")
        tests += results.records_of_report(report, props)
        results.vet_run_files(tests[-1:], folder, meta.get("driver_spec"))  # (the others were vetted as they ended)
        if not tests[-1]["replay"] and running.get("test") == crashed:
            tests[-1]["replay"] = running.get("replay")
    comparison, lines = _compared(tests, settings.get("baseline"))
    lines += _write(results.to_json(meta, tests, comparison), settings["reports"], folder)
    if settings.get("junitxml"):
        try:
            results.write_atomically(settings["junitxml"], junit_xml(tests, meta["duration_s"]))
            lines.append(f"nnts: JUnit XML written to {settings['junitxml']} (from the tests that ended before the crash)")
        except OSError as e:
            lines.append(f"nnts: JUnit XML NOT written to {settings['junitxml']}: {e.strerror or e}")
    return lines


# A test's JUnit element by the worst status of its records (its variants, its teardown).
_JUNIT = {"crashed": "failure", "hung": "failure", "failed": "failure", "xpassed": "failure", "error": "error",
          "unsupported": "skipped", "skipped": "skipped", "xfailed": "skipped"}
_WORST = ("crashed", "hung", "error", "failed", "xpassed", "unsupported", "skipped", "xfailed", "passed")


def _xml_text(text: str) -> str:
    """``text`` without the characters XML 1.0 cannot hold (a driver's message can have any)."""
    return re.sub("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]", "?", text)


def junit_xml(tests: list[dict], duration_s: float) -> str:
    """pytest's JUnit XML (one ``testcase`` a pytest test, its classname and name as pytest writes
    them) of result records: what ``--junitxml`` gets when pytest could not write it."""
    import xml.etree.ElementTree as ET

    by_test: dict[str, list[dict]] = {}
    for t in tests:
        by_test.setdefault(t["test"] or t["id"], []).append(t)
    suite = ET.Element("testsuite", name="pytest", time=f"{duration_s:.3f}")
    counts = collections.Counter()
    for nodeid, records in by_test.items():
        path, _, name = nodeid.partition("::")
        worst = min(records, key=lambda r: _WORST.index(r["status"]) if r["status"] in _WORST else 0)
        case = ET.SubElement(suite, "testcase", classname=path.removesuffix(".py").replace("/", "."), name=name,
                             time=f"{sum(r['duration_s'] or 0 for r in records):.3f}")
        kind = _JUNIT.get(worst["status"])
        counts[kind or "passed"] += 1
        if kind:
            element = ET.SubElement(case, kind, message=_xml_text(f"{worst['status']}: "
                                                                  f"{results.headline(worst['message'])}"))
            element.text = _xml_text("\n".join(filter(None, [worst["message"],
                                                             worst["replay"] and f"replay: {worst['replay']}"])))
    suite.set("tests", str(len(by_test)))
    for kind, attribute in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        suite.set(attribute, str(counts[kind]))
    root = ET.Element("testsuites")
    root.append(suite)
    return '<?xml version="1.0" encoding="utf-8"?>' + ET.tostring(root, encoding="unicode") + "\n"


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
            results.write_atomically(html, render(data, folder=Path(html).parent, folders=input_folders(paths)))
    except OSError as e:
        print(f"nnts: cannot write {e.filename or 'the report'}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"nnts: merged {len(paths)} files, {len(tests)} tests: " +
          ", ".join(f"{n} {s}" for s, n in data["totals"].items() if n))
    return 0
