"""The conformance page of real runs, as a driver engineer opens it: the reference, a broken
driver, a driver that crashes (in its own process) and the example C driver, each run on a small
selection under xdist. The totals equal pytest's summary; a failure's replay command, run as
printed, fails the same way; the C driver's unsupported operations do not read as partly
supported. In headless Chromium (skipped without it): no console errors, the matrix fits a
1400 px window, the operation filter and "failing only" work, every cell links to its tests; a
screenshot of each page is saved under out/."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from markupsafe import escape as html_escape

from nnts.reports import conformance
from tests import native
from tests.test_report import pytest_summary

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
SELECTION = ["-k", "nnts_add_quant8_relu or nnts_mul_broadcast_float32 or nnts_add_float32"]
RUNS = {
    "reference": ("reference", SELECTION),
    "broken": ("nnapi_ref.drivers.broken:wrong_add_quant8", SELECTION),
    "crashing": ("remote:nnts serve nnapi_ref.drivers.faulty:aborts_on_mul", SELECTION),
    "c-driver": (None, ["-m", "op_ADD or op_MUL or op_ABS", "-k", "FLOAT32 or FLOAT16"]),
}

# Loads the page in a 1400 px frame, measures it and works its controls; the findings go in #out.
PROBE = """<!doctype html><html><body style="margin:0">
<iframe id="f" src="%s" style="width:1400px;height:900px;border:0"></iframe><pre id="out">not loaded</pre>
<script>
document.getElementById("f").onload = function () {
  var doc = this.contentDocument, m = doc.getElementById("matrix"), rows = Array.from(m.tBodies[0].rows);
  function visible() { return rows.filter(function (r) { return r.style.display !== "none"; }).map(function (r) { return r.dataset.op; }); }
  var out = {matrixRight: m.getBoundingClientRect().right, pageWidth: doc.documentElement.scrollWidth,
             controls: getComputedStyle(doc.getElementById("controls")).display, all: visible()};
  var filter = doc.getElementById("op-filter"), failing = doc.getElementById("failing-only");
  filter.value = "mul"; filter.dispatchEvent(new Event("input")); out.filtered = visible();
  filter.value = ""; filter.dispatchEvent(new Event("input"));
  failing.checked = true; failing.dispatchEvent(new Event("change")); out.failing = visible();
  out.deadLinks = Array.from(m.querySelectorAll("a")).filter(function (a) {
    return !doc.getElementById(a.getAttribute("href").slice(1)); }).length;
  out.headerHeights = Array.from(m.tHead.rows[0].cells).map(function (c) { return c.getBoundingClientRect().height; });
  out.cellHeights = rows.length ? Array.from(rows[0].cells).map(function (c) { return c.getBoundingClientRect().height; }) : [];
  failing.checked = false; failing.dispatchEvent(new Event("change"));
  this.contentWindow.scrollTo(0, m.getBoundingClientRect().top + this.contentWindow.scrollY + 300);
  out.headerTopScrolled = m.tHead.rows[0].cells[0].getBoundingClientRect().top;  /* 0 when it sticks */
  out.matrixTopScrolled = m.getBoundingClientRect().top;
  document.getElementById("out").textContent = JSON.stringify(out);
};
</script></body></html>"""


@pytest.fixture(scope="module")
def c_driver_binary(tmp_path_factory):
    if native.compilers() is None:
        pytest.skip(native.missing_compiler_reason())
    return native.build(native.C_EXAMPLE, tmp_path_factory.mktemp("c_driver"), "nnts_example_driver",
                        native.objects_folder(tmp_path_factory))


def _env() -> dict:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # nnts serve
    env.pop("NNTS_DRIVER", None)
    return env


def run_suite(tmp_path, driver, selection):
    html, js = tmp_path / "conformance.html", tmp_path / "conformance.json"
    command = [sys.executable, "-m", "pytest", "cts", "vts", "-n", "2", "-q", "-p", "no:cacheprovider", "-p",
               "no:randomly", "--no-shared-vectors", "--reproducers", str(tmp_path / "reproducers"), "--driver", driver,
               *selection, "--report", str(html), "--report", str(js)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=_env())
    return done.stdout + done.stderr, html, json.loads(js.read_text())


def chromium(*args, timeout=120):
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--enable-logging=stderr", "--v=0"]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("name", list(RUNS))
def test_conformance_page(name, tmp_path, request):
    driver, selection = RUNS[name]
    if driver is None:
        driver = f"remote:{shlex.quote(str(request.getfixturevalue('c_driver_binary')))}"
    output, html, data = run_suite(tmp_path, driver, selection)
    summary = pytest_summary(output)
    assert data["pytest"] == summary, output[-3000:]
    page = html.read_text()
    assert f'<span id="pytest-summary">{", ".join(f"{n} {k}" for k, n in summary.items() if n)}</span>' in page
    assert data["meta"]["drivers"] and data["meta"]["drivers"][0]["version"], data["meta"]
    assert data["meta"]["corpora"][0]["models"] > 0 and "http" not in re.sub(r"<code>.*?</code>", "", page)
    if name == "reference":
        assert summary["passed"] > 50 and not data["failures"]
    elif name == "broken":
        # the generated tests' failures are listed by variant: a test fails when one of them does
        assert summary["failed"] > 0 and len({f["test"] for f in data["failures"]}) == summary["failed"]
        cts = [f for f in data["failures"] if f["part"] == "CTS generated"]
        assert {f["variant"] for f in cts} > {"sync"} and all(f["id"] == f"{f['test'][:-1]}-{f['variant']}]"
                                                              for f in cts)
        assert cts and all(f["replay"] and Path(f["reproducer"]).is_file() for f in cts)
        failure = next(f for f in cts if f["variant"] == "sync")
        worst = re.search(r"worst at .*", failure["message"]).group(0)
        replay = subprocess.run(failure["replay"], shell=True, cwd=ROOT, capture_output=True, text=True, timeout=300,
                                env=_env())
        assert replay.returncode != 0 and worst in replay.stdout + replay.stderr, (worst, replay.stdout[-2000:])
        assert html_escape(worst) in page
        shown = conformance.published(failure["replay"], html.parent)  # no path of this machine on the page
        assert f"<th>replay</th><td><code>{html_escape(shown)}</code>" in page and str(tmp_path) not in page
    elif name == "crashing":
        assert data["totals"]["crashed"] == summary["failed"] > 0 and "SIGABRT" in data["failures"][0]["message"]
        # A test that saved its model replays it with nnts vectors run, another reruns itself with pytest.
        kinds = {f["replay"].split()[0]: f["replay"] for f in data["failures"]}
        assert kinds and set(kinds) <= {"nnts", "pytest"}, kinds
        for command in kinds.values():
            replay = subprocess.run(command, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=300,
                                    env=dict(_env(), PYTEST_ADDOPTS="-p no:cacheprovider"))
            said = replay.stdout + replay.stderr
            assert replay.returncode == 1 and "SIGABRT" in said, (command, said[-2000:])
    else:
        partial = [(op, dt) for op, per in data["matrix"].items() for dt, c in per.items()
                   if c["passed"] and c["unsupported"] or op not in ("ADD", "MUL") and c["passed"]]
        assert not partial, partial
        assert data["matrix"]["ABS"] and data["totals"]["unsupported"] > 0
    if CHROMIUM is None:
        pytest.skip("no Chromium (apt-get install chromium) to render the page")
    found = probe(tmp_path, html)
    assert found["matrixRight"] <= 1400 and found["pageWidth"] <= 1400, found
    assert found["controls"] == "block" and found["deadLinks"] == 0
    assert found["all"] == list(data["matrix"]) and found["filtered"] == [op for op in data["matrix"] if "MUL" in op]
    failing_ops = [op for op, per in data["matrix"].items()
                   if any(c[s] for c in per.values() for s in ("failed", "crashed", "hung", "error", "xpassed"))]
    assert found["failing"] == failing_ops
    assert max(found["headerHeights"]) < 40 and max(found["cellHeights"]) < 30, found  # no wrapped cell
    shot = ROOT / "out" / f"conformance-{name}.png"
    shot.parent.mkdir(exist_ok=True)
    shot.unlink(missing_ok=True)
    snap = chromium(f"--user-data-dir={tmp_path / 'profile2'}", f"--screenshot={shot}", "--window-size=1400,1800",
                    html.as_uri())
    assert snap.returncode == 0 and shot.stat().st_size > 10_000, snap.stderr[-2000:]


def probe(tmp_path, html: Path) -> dict:
    """What PROBE measured of the page in a 1400 px frame (console errors fail the test)."""
    page = tmp_path / "probe.html"
    page.write_text(PROBE % html.name)
    dom = chromium("--allow-file-access-from-files", "--virtual-time-budget=10000",
                   f"--user-data-dir={tmp_path / 'profile-probe'}", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    return json.loads(re.search(r'<pre id="out">(.*?)</pre>', dom.stdout, re.S).group(1))


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install chromium) to render the page")
def test_the_widest_matrix_fits_1400_px(tmp_path):
    # Every operation in every data type of the corpus, four-digit counts: the widest the matrix gets.
    from nnapi_ref.types import OperationCode
    from nnts.reports import conformance, results
    dtypes = list(conformance.DTYPE_ABBREVIATIONS)
    tests = [{"id": f"cts/test_generated.py::test_generated[{op.name}-{dt}-m{k}-sync]", "part": "CTS generated",
              "op": op.name, "dtype": dt, "variant": "sync", "status": status, "phase": "call", "duration_s": 0,
              "message": "worst at [0]: expected 1, got 2" if status == "failed" else None, "reproducer": None,
              "replay": "pytest x" if status == "failed" else None}
             for op in OperationCode for dt in dtypes[:12]
             for k, status in enumerate(["passed"] * 1000 + ["failed"] * 10 + ["unsupported"] * 100
                                        if op.name == "BIDIRECTIONAL_SEQUENCE_LSTM" else ["passed", "unsupported"])]
    html = tmp_path / "wide.html"
    html.write_text(conformance.render(results.to_json({"driver_spec": "reference"}, tests)))
    found = probe(tmp_path, html)
    assert len(found["all"]) == len(OperationCode) and found["failing"] == ["BIDIRECTIONAL_SEQUENCE_LSTM"]
    assert found["matrixRight"] <= 1400 and found["pageWidth"] <= 1400, found
    assert max(found["cellHeights"]) < 30 and max(found["headerHeights"]) < 40, found
    assert found["matrixTopScrolled"] < -250 and found["headerTopScrolled"] == 0, found  # the header stays in view
    shot = ROOT / "out" / "conformance-widest-matrix.png"
    shot.parent.mkdir(exist_ok=True)
    snap = chromium(f"--user-data-dir={tmp_path / 'profile2'}", f"--screenshot={shot}", "--window-size=1400,1000",
                    html.as_uri())
    assert snap.returncode == 0, snap.stderr[-2000:]
