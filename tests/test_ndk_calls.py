"""README's table of NNAPI's NDK calls: every function of NeuralNetworks.h and
NeuralNetworksExtensions.h is listed (read from AOSP's headers under ../shared/aosp-native when
they are there), and every counterpart it names exists in nnapi_ref."""
import re
from pathlib import Path

import pytest

import nnapi_ref
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.runtime.devices import Device

ROOT = Path(__file__).resolve().parents[1]
HEADERS = ROOT.parent / "shared" / "aosp-native" / "neuralnetworks" / "runtime" / "include"
ROW = re.compile(r"^\| `(ANeuralNetworks\w*)` \| (.+) \|$")
NOT_APPLICABLE = "not applicable off-device: "
NOT_IMPLEMENTED = "not implemented: "


def table() -> dict[str, str]:
    rows = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        match = ROW.match(line)
        if match:
            assert match.group(1) not in rows, f"{match.group(1)} is listed twice"
            rows[match.group(1)] = match.group(2)
    return rows


def resolve(name: str):
    """``f()``, ``Class(...)``, ``Class.method()`` or ``Class.attribute`` in nnapi_ref."""
    owner, _, member = re.sub(r"\(.*\)$", "", name).partition(".")
    target = getattr(nnapi_ref, owner)
    if not member:
        return target
    if owner == "Device":  # its properties are set per device
        target = Device(ReferenceDevice())
    return getattr(target, member)


def test_every_counterpart_exists():
    rows = table()
    assert len(rows) >= 70
    for call, counterpart in rows.items():
        if counterpart.startswith((NOT_APPLICABLE, NOT_IMPLEMENTED)):
            continue
        names = re.findall(r"`([^`]+)`", counterpart)
        assert names, f"{call}: no counterpart named in {counterpart!r}"
        for name in names:
            assert resolve(name) is not None, f"{call}: {name} does not exist"


def test_no_call_is_missing():
    missing = sorted(call for call, counterpart in table().items() if counterpart.startswith(NOT_IMPLEMENTED))
    assert missing == []
    not_applicable = [call for call, counterpart in table().items() if counterpart.startswith(NOT_APPLICABLE)]
    assert all(call.endswith("_free") for call in not_applicable), not_applicable


@pytest.mark.skipif(not HEADERS.is_dir(), reason=f"AOSP's NNAPI headers are not at {HEADERS}")
def test_every_function_of_the_headers_is_listed():
    declared = set()
    for header in ("NeuralNetworks.h", "NeuralNetworksExtensions.h"):
        declared |= set(re.findall(r"\b(ANeuralNetworks[A-Za-z]*_[A-Za-z0-9]+)\(", (HEADERS / header).read_text()))
    assert len(declared) >= 70
    assert sorted(declared - set(table())) == []
