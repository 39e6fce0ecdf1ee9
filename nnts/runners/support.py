"""What a driver supports, learned once by asking it: one small probe model per (operation,
operand-type signature) the registry and the random-case generator know, at the driver's feature
level, put to the driver's ``get_supported_operations``. Random graphs and single operations for a
partial driver are drawn from these facts (:meth:`Support.options`), and the conformance report's
matrix and its unsupported list name the reason (operation, operand type or feature level).

A probe is the generator's own one-operation model of that operation starting from that data
type (a few seeds, so per-channel filters, omitted optional inputs and the other forms show up as
signatures of their own). An operation whose every signature for a type needs a later feature
level than the driver's is unsupported for that type by feature level, without a probe.

The facts are cached by the drivers' identity (name, version string, feature level) and by the
source of the probes (this module and the generator), in the user's cache folder
(``Settings.cache_dir``, ``support/``): computed once, written atomically under a lock, so xdist
workers started together compute them once and read them after. No code is read from the cache:
JSON only, checked as it is read; a damaged entry is computed afresh.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from nnapi_ref import hal, ops
from nnapi_ref.errors import NnapiError
from nnapi_ref.types import OperandCode as T, OperationCode as Op, type_name
from nnapi_ref.validation import validate_model
from nnts.formats.files import write_atomic
from nnts.generators import families, graphs, random_graphs

FORMAT = "nnts-support/1"
ACROSS_STREAM = 0xAC  # the random stream (beside the seed) that picks a graph across devices' operations
PROBE_ATTEMPTS = 12  # seeds tried per (operation, data type)
PROBES_PER_TYPE = 4  # successful probe models kept per (operation, data type)
SUPPORTED, UNSUPPORTED, UNKNOWN = "supported", "unsupported", "unknown"
# Reasons of an unsupported row
BY_OPERATION, BY_TYPE, BY_LEVEL = "operation", "operand type", "feature level"


@dataclass(frozen=True)
class Signature:
    """One probed signature: its operand types and what the driver said of its probe model."""

    operation: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    supported: bool
    error: str = ""  # the driver's error where the query itself failed


@dataclass(frozen=True)
class Row:
    """One line of the table: an operation on a data type (the type of the input its random
    cases start from), from the lowest feature level the registry declares it at."""

    operation: str
    data_type: str
    level: int
    status: str  # supported, unsupported (some or all of its signatures), unknown (no probe model)
    reason: str = ""  # for unsupported: operation, operand type or feature level
    signatures: int = 0  # probe signatures asked
    supported_signatures: int = 0


@dataclass
class Support:
    """The facts about drivers ``drivers`` (their name, version and feature level each) at
    feature ``level``."""

    drivers: list[dict]
    level: int
    rows: list[Row] = field(default_factory=list)
    signatures: list[Signature] = field(default_factory=list)

    # -- what random cases may use --------------------------------------------------------------

    @functools.cached_property
    def _verdicts(self) -> dict:
        return {(s.operation, s.inputs, s.outputs): s.supported for s in self.signatures}

    @functools.cached_property
    def _pairs(self) -> dict:
        """(operation, data type) -> supported, from the rows (any supported signature)."""
        pairs: dict = {}
        for r in self.rows:
            if r.status != UNKNOWN:
                pairs[(r.operation, r.data_type)] = pairs.get((r.operation, r.data_type), False) or \
                    r.supported_signatures > 0
        return pairs

    @property
    def complete(self) -> bool:
        """Everything probed at this level is supported (the random cases are today's)."""
        return all(r.status != UNSUPPORTED or r.reason == BY_LEVEL for r in self.rows)

    def operations(self) -> list[Op]:
        """The operations supported on some data type."""
        return sorted({Op[o] for (o, _), ok in self._pairs.items() if ok})

    def types(self, operation: Op | None = None) -> list[T]:
        """The data types some supported operation (or ``operation``) starts from."""
        return sorted({T[t] for (o, t), ok in self._pairs.items() if ok and (operation is None or o == operation.name)},
                      key=type_name)

    def allows(self, code: Op, inputs: Sequence[T], outputs: Sequence[T]) -> bool:
        """Whether a signature is supported: as probed, else as its operation on its data type."""
        key = (Op(code).name, tuple(type_name(t) for t in inputs), tuple(type_name(t) for t in outputs))
        if key in self._verdicts:
            return self._verdicts[key]
        family = families.FAMILIES.get(code) or families.SINGLE_FAMILIES.get(code)
        position = family.position if family is not None else 0
        primary = type_name(inputs[position]) if len(inputs) > position else ""
        return self._pairs.get((key[0], primary), False)

    def options(self, operation: Op | None = None) -> dict:
        """The generator's arguments for this driver's random graphs (or, given ``operation``,
        its single-operation cases of it): none for a complete driver (today's cases), else the
        supported operations, the data types they start from and the signatures."""
        if self.complete:
            return {}
        codes = [operation] if operation is not None else [c for c in self.operations() if c in families.FAMILIES]
        return {"operations": codes, "types": [t for t in self.types(operation) if t in graphs.DATA_TYPES],
                "allows": self.allows}

    def across_graph(self, seed: int, size: int, attempts: int = 8) -> graphs.Graph:
        """Random graph ``seed`` across devices: from the random graphs' supported operations and
        as many (at most) the driver does not support, picked by the seed, every signature allowed,
        starting from the data types it supports (every other draw from any type: a type it
        does not support is what a graph of a driver of one type mixes); drawn again (seeds
        ``seed + k * 10**9``) until some of its operations are supported and some are not. The
        last draw when none mixes."""
        supported = [c for c in self.operations() if c in families.FAMILIES]
        others = sorted(set(families.FAMILIES) - set(supported))
        types = [t for t in self.types() if t in graphs.DATA_TYPES]
        for attempt in range(attempts):
            draw = seed + attempt * 10**9
            rng = np.random.default_rng([draw, ACROSS_STREAM])
            picked = [others[k] for k in rng.choice(len(others), min(len(others), max(1, len(supported))),
                                                    replace=False)]
            graph = random_graphs.generate(draw, size, types=types if attempt % 2 == 0 else None,
                                           operations=sorted(set(supported) | set(picked)), level=self.level)
            verdicts = [self.allows(op.type, [graph.operands[k].type for k in op.inputs],
                                    [graph.operands[k].type for k in op.outputs]) for op in graph.operations]
            if any(verdicts) and not all(verdicts):
                break
        return graph

    def summary(self) -> str:
        """One line naming the support a case was drawn under (for reproducers and messages)."""
        names = ", ".join(f"{d['name']} {d['version']} (feature level {d['feature_level']})" for d in self.drivers)
        if self.complete:
            return f"{names}: complete at feature level {self.level}"
        return (f"{names}: {len(self.operations())} operations on "
                f"{', '.join(type_name(t) for t in self.types())} at feature level {self.level}")

    def table(self) -> list[dict]:
        """The rows as the conformance report keeps them (``meta.support``)."""
        return [{"operation": r.operation, "data_type": r.data_type, "level": r.level, "status": r.status,
                 "reason": r.reason} for r in self.rows]

    # -- files ------------------------------------------------------------------------------

    def to_json(self) -> dict:
        return {"format": FORMAT, "drivers": self.drivers, "level": self.level,
                "rows": [asdict(r) for r in self.rows], "signatures": [asdict(s) for s in self.signatures]}

    @classmethod
    def from_json(cls, doc) -> Support:
        """The facts of ``doc``; ValueError where it is not such a document."""
        try:
            if doc.get("format") != FORMAT:
                raise ValueError(f"not {FORMAT}")
            rows = [Row(str(r["operation"]), str(r["data_type"]), int(r["level"]), str(r["status"]),
                        str(r["reason"]), int(r["signatures"]), int(r["supported_signatures"])) for r in doc["rows"]]
            signatures = [Signature(str(s["operation"]), tuple(map(str, s["inputs"])), tuple(map(str, s["outputs"])),
                                    bool(s["supported"]), str(s.get("error", ""))) for s in doc["signatures"]]
            drivers = [{"name": str(d["name"]), "version": str(d["version"]), "feature_level": int(d["feature_level"])}
                       for d in doc["drivers"]]
            return cls(drivers, int(doc["level"]), rows, signatures)
        except (AttributeError, KeyError, TypeError) as e:
            raise ValueError(f"malformed support facts ({type(e).__name__}: {e})") from None


def identity(driver: hal.Device) -> dict:
    return {"name": str(driver.get_name()), "version": str(driver.get_version_string()),
            "feature_level": int(driver.get_feature_level())}


def probes(level: int):
    """(operation, data type, lowest level, [probe graphs]) for every operation the generator
    knows and every data type its random cases may start from, at feature ``level``."""
    registry = ops.load_all()
    for code in sorted(families.FAMILIES.keys() | families.SINGLE_FAMILIES.keys()):
        family = families.FAMILIES.get(code) or families.SINGLE_FAMILIES[code]
        lowest: dict = {}
        for sig in registry[code].signatures:
            if len(sig.inputs) > family.position:
                t = sig.inputs[family.position]
                lowest[t] = min(lowest.get(t, sig.level), sig.level)
        for t, first in sorted(lowest.items()):
            found = []
            if first <= level:
                for seed in range(PROBE_ATTEMPTS):
                    g = random_graphs.generate(seed, 1, types=[t], operations=[code], level=level)
                    if g.operations and g.operands[g.operations[0].inputs[family.position]].type == t and _valid(g):
                        found.append(g)
                        if len(found) == PROBES_PER_TYPE:
                            break
            yield code, t, first, found


def _valid(graph: graphs.Graph) -> bool:
    """Whether NNAPI's validation accepts a probe model (one the driver may be asked about)."""
    try:
        validate_model(graph.to_test("probe").model)
    except NnapiError:
        return False
    return True


def probe(drivers: Sequence[hal.Device], level: int | None = None) -> Support:
    """Ask ``drivers`` (HAL devices) about every probe model; a signature is supported when any
    of them supports it (the runtime places each operation on a device that does)."""
    level = min(int(d.get_feature_level()) for d in drivers) if level is None else level
    level = min(level, graphs.MAX_LEVEL)
    asked: dict = {}
    rows_raw = []
    for code, t, first, found in probes(level):
        keys = []
        for g in found:
            op = g.operations[0]
            key = (code.name, tuple(type_name(g.operands[k].type) for k in op.inputs),
                   tuple(type_name(g.operands[k].type) for k in op.outputs))
            if key not in asked:
                asked[key] = _ask(drivers, g)
            keys.append(key)
        rows_raw.append((code, t, first, list(dict.fromkeys(keys))))
    supported_ops = {k[0] for k, (ok, _) in asked.items() if ok}
    rows = []
    for code, t, first, keys in rows_raw:
        n_ok = sum(asked[k][0] for k in keys)
        if first > level:
            rows.append(Row(code.name, type_name(t), int(first), UNSUPPORTED, BY_LEVEL))
        elif not keys:
            rows.append(Row(code.name, type_name(t), int(first), UNKNOWN, "no probe model"))
        elif n_ok == len(keys):
            rows.append(Row(code.name, type_name(t), int(first), SUPPORTED, "", len(keys), n_ok))
        else:
            reason = BY_OPERATION if code.name not in supported_ops else BY_TYPE
            rows.append(Row(code.name, type_name(t), int(first), UNSUPPORTED, reason, len(keys), n_ok))
    signatures = [Signature(k[0], k[1], k[2], ok, error) for k, (ok, error) in asked.items()]
    return Support([identity(d) for d in drivers], int(level), rows, signatures)


def _ask(drivers: Sequence[hal.Device], graph: graphs.Graph) -> tuple[bool, str]:
    """Whether any of ``drivers`` supports the probe's one operation, and the error of a query
    that failed (an invalid-model error or a dead driver reads as unsupported)."""
    model = graph.to_test("probe").model
    errors = []
    for d in drivers:
        try:
            if d.get_supported_operations(model)[0]:
                return True, ""
        except Exception as e:  # noqa: BLE001 - a driver's failure to answer is a fact about it
            errors.append(f"{type(e).__name__}: {e}")
    return False, "; ".join(errors)


@functools.cache
def _source_digest() -> str:
    digest = hashlib.sha256()
    for module in (__file__, graphs.__file__, families.__file__, random_graphs.__file__, ops.__file__):
        digest.update(Path(module).read_bytes())
    return digest.hexdigest()


def cache_path(drivers: Sequence[hal.Device], level: int, cache_dir: str | os.PathLike) -> Path:
    key = json.dumps([[identity(d) for d in drivers], int(level), FORMAT, _source_digest()])
    return Path(cache_dir) / "support" / (hashlib.sha256(key.encode()).hexdigest() + ".json")


def learn(drivers: Sequence[hal.Device], level: int | None = None, cache_dir: str | os.PathLike | None = None,
          refresh: bool = False) -> Support:
    """The support of ``drivers``: from the cache in ``cache_dir`` (None: no cache) where it
    holds them, else probed and written there. Processes asking at once compute it once."""
    level = min(int(d.get_feature_level()) for d in drivers) if level is None else level
    level = min(level, graphs.MAX_LEVEL)
    if cache_dir is None:
        return probe(drivers, level)
    path = cache_path(drivers, level, cache_dir)
    with _locked(path):
        if not refresh:
            try:
                return Support.from_json(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                pass
        support = probe(drivers, level)
        with contextlib.suppress(OSError):
            write_atomic(path, json.dumps(support.to_json()))
        return support


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock beside ``path`` (none where the folder cannot be made)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
