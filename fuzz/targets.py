"""Every fuzz target ``nnts fuzz --harness`` names: NNAPI's (models, executions, requests, test
vectors, the remote protocol: :mod:`nnts.fuzz.harnesses`) and the suite's own input formats
(.tflite, gate files, --include JSON, artifact sidecars: :mod:`nnts.fuzz.input_harnesses`)."""
from __future__ import annotations

from nnapi_ref import hal
from nnts.fuzz.harnesses import NNAPI_HARNESSES, Harness
from nnts.fuzz.input_harnesses import INPUT_HARNESSES

HARNESSES = {**NNAPI_HARNESSES, **INPUT_HARNESSES}


def make(name: str, driver: hal.Device | None = None, vector_paths=None) -> Harness:
    """A harness by name, set up (its seeds loaded)."""
    harness = HARNESSES[name](driver, vector_paths)
    harness.setup()
    return harness
