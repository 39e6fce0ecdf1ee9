"""A fuzz artifact's sidecar: the ``.json`` beside it naming the harness, driver, vectors and provider
it was found with, read (and checked, as an artifact may come from anyone) for ``nnts fuzz --replay``."""
from __future__ import annotations

import os

from nnts.formats import jsonfile
from nnts.formats.files import UsageError

SCHEMA = {"harness": (str, None), "driver": (str, None), "provider": (str, None), "vectors": ([str], None)}


def read_sidecar(path: str) -> dict:
    """An artifact's ``.json`` sidecar (harness, driver, vectors, provider), or {} without one;
    a UsageError when it is there but not such an object."""
    sidecar = path + ".json"
    if not os.path.exists(sidecar):
        return {}
    try:
        return jsonfile.read(sidecar, SCHEMA, max_bytes=1 << 20)
    except jsonfile.JsonError as e:
        raise UsageError(f"--replay {path}: its sidecar is not an object of harness, driver, provider (strings) and "
                         f"vectors (a list of paths): {e}") from None
