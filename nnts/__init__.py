"""nnts: a conformance and benchmarking suite for the Android Neural Networks API.

Installed, the suite lives under this one name, so that it never claims a generic top-level
module a driver team's own repository may have: ``nnts.cts`` and ``nnts.vts`` (the conformance
suites), ``nnts.fuzz``, ``nnts.mlts`` (benchmark, stress, .tflite import) and ``nnts.reports``
come from the repository's folders ``cts/``, ``vts/``, ``fuzz/``, ``mlts/`` and ``reports/``
(the mapping is ``[tool.setuptools.package-dir]`` in ``pyproject.toml``); ``nnts.plugin`` is the
pytest plugin. The NNAPI reference keeps its own distinct name, ``nnapi_ref``.
"""
import os
from importlib import metadata

# In a clone the suite's folders are beside this package, not in it (the repository's layout), and
# the clone's root may come first on sys.path (python -m from there): nnts.cts is then ../cts, as
# the editable install maps it.
_CLONE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.isfile(os.path.join(_CLONE, "pyproject.toml")) and os.path.isfile(os.path.join(_CLONE, "cts", "__init__.py")):
    __path__.append(_CLONE)

try:
    __version__ = metadata.version("nnts")
except metadata.PackageNotFoundError:  # a clone run without installing: its pyproject.toml says
    import tomllib
    try:
        with open(os.path.join(_CLONE, "pyproject.toml"), "rb") as f:
            __version__ = tomllib.load(f)["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        __version__ = "0+unknown"
