"""nnts: a conformance and benchmarking suite for the Android Neural Networks API.

The suite's folders ``cts/``, ``vts/``, ``fuzz/``, ``mlts/`` and ``reports/`` are the packages
``nnts.cts``, ``nnts.vts``, ``nnts.fuzz``, ``nnts.mlts`` and ``nnts.reports`` (the mapping is
``[tool.setuptools.package-dir]`` in ``pyproject.toml``, the same for an installed and an editable
install), so a driver team's own ``fuzz`` or ``reports`` neither shadows nor is shadowed by them.
The NNAPI reference is the package ``nnapi_ref``; ``docs/architecture.md`` draws the layers.
"""
from importlib import metadata

try:
    __version__ = metadata.version("nnts")
except metadata.PackageNotFoundError:  # the sources on sys.path without an install
    __version__ = "0+unknown"


def compare(model, driver, inputs=None, mode: str = "sync"):
    """Run ``model`` on ``driver`` and on the reference and compare them, for a team's own tests:
    ``nnts.compare(graph, "acme.npu:make_device").check()`` (:mod:`nnts.runners.compare`)."""
    from nnts.runners.compare import compare as run
    return run(model, driver, inputs, mode)
