"""Configuration is passed down, never read from the environment deep inside: the library (nnapi_ref
and nnts's runners, formats, generators and adapters) takes its settings as arguments, and only
the entry points listed here read ``os.environ`` (nnts.runners.settings.Settings is how they do)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("nnapi_ref", "nnts/runners", "nnts/formats", "nnts/generators", "nnts/adapters")
SCANNED = ("nnapi_ref", "nnts", "cts", "vts", "fuzz", "mlts", "reports")
ENTRY_POINTS = {
    "nnts/cli/__init__.py",      # nnts COMMAND (nnts serve included): Settings.from_environment
    "nnts/cli/common.py",        # --driver's default, NNTS_DRIVER
    "nnts/plugin.py",            # option defaults and pytest_configure, in the controller and each xdist worker
    "fuzz/engine.py",            # python -m nnts.fuzz.engine, and its child's PYTHONPATH
    "fuzz/execute_fuzzer.py", "fuzz/model_fuzzer.py", "fuzz/remote_fuzzer.py", "fuzz/request_fuzzer.py",
    "fuzz/vectors_fuzzer.py",    # the fuzzers' scripts (atheris, ClusterFuzzLite)
    "mlts/stress.py",            # python -m nnts.mlts.stress client
    "mlts/stress_run.py",        # the client processes' environment: this one's, with the call timeout
    "mlts/bench_suite.py",       # the measured pytest run's plugin, and that run's environment
    "mlts/diverge.py", "mlts/bench_remote.py",  # python -m mains
}
NOT_CONFIGURATION = {
    "mlts/bench_ops.py",         # BLAS thread variables for numpy, set before it is imported
    "mlts/models/__init__.py",   # the XDG cache folder of downloaded models
}


def reads_environment(path: Path) -> list[int]:
    """Lines of ``path`` that touch the process environment (``os.environ``, ``os.getenv``, ...)."""
    names = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in names and isinstance(node.value, ast.Name) \
                and node.value.id == "os":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and any(a.name in names for a in node.names):
            lines.append(node.lineno)
    return sorted(lines)


def modules(folders) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def test_the_library_never_reads_the_environment():
    found = {str(p.relative_to(ROOT)): lines for p in modules(LIBRARY) if (lines := reads_environment(p))}
    assert not found, f"the environment read below the entry points (take a Settings argument): {found}"


def test_only_the_listed_entry_points_read_the_environment():
    found = {str(p.relative_to(ROOT)) for p in modules(SCANNED) if reads_environment(p)}
    assert found - ENTRY_POINTS - NOT_CONFIGURATION == set(), "read the environment in an entry point and pass it down"
    assert not (ENTRY_POINTS | NOT_CONFIGURATION) & {str(p.relative_to(ROOT)) for p in modules(LIBRARY)}


def test_the_scan_sees_every_form(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import os\nfrom os import getenv\nos.environ.get('X')\nos.getenv('Y')\nos.path.join('a')\n")
    assert reads_environment(probe) == [2, 3, 4]
