"""A fuzz artifact's sidecar: the ``.json`` beside it naming the harness, driver, vectors and provider
it was found with, read (and checked, as an artifact may come from anyone) for ``nnts fuzz --replay``."""
from __future__ import annotations

import json
import os

from nnts.formats.files import UsageError


def read_sidecar(path: str) -> dict:
    """An artifact's ``.json`` sidecar (harness, driver, vectors, provider), or {} without one;
    a UsageError when it is there but not such an object."""
    sidecar = path + ".json"
    if not os.path.exists(sidecar):
        return {}
    try:
        with open(sidecar, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError, RecursionError) as e:
        raise UsageError(f"--replay {path}: its sidecar {sidecar} is not readable JSON ({e})") from None
    kinds = {"harness": str, "driver": str, "provider": str, "vectors": list}
    if not isinstance(meta, dict) or any(k in meta and meta[k] is not None and not isinstance(meta[k], kind)
                                         for k, kind in kinds.items()) \
            or not all(isinstance(v, str) for v in meta.get("vectors") or ()):
        raise UsageError(f"--replay {path}: its sidecar {sidecar} is not an object of harness, driver, provider "
                         "(strings) and vectors (a list of paths)")
    return meta
