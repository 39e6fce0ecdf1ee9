"""``nnts.compare(model, driver)``: run one model on a driver and on the reference and compare, for
a team's own tests (a property test over ``nnts.generators.strategies.models()``, a model of
its own)::

    import nnts
    from hypothesis import given
    from nnts.generators.strategies import models

    @given(models(operations=["CONV_2D", "ADD"], types=["TENSOR_FLOAT32"], max_operations=4))
    def test_my_driver_agrees(graph):
        nnts.compare(graph, "acme.npu:make_device").check()

``model`` is a drawn random graph (compared with the random-graph criteria, as
``cts/test_random_graph.py`` does), a test model of a vector file (``nnapi_ref.vectors.load_file``),
or a model (``nnapi_ref.Model`` after ``finish()``, or a HAL ``nnapi_ref.hal.Model``) with
``inputs``, one array per model input; those are compared with NNAPI's tolerances against the
reference's outputs, as the generated tests compare. The model is compiled for the driver alone
(no CPU fallback to hide a fault): a model the driver reports unsupported is ``skipped``.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from nnapi_ref import budget, hal
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.errors import NnapiError
from nnapi_ref.runtime import Device
from nnapi_ref.types import DTYPES, SCALAR_TYPES, ResultCode, byte_size
from nnapi_ref.vectors import TestModel
from nnts.generators.graphs import Graph
from nnts.runners import differential, model_runner
from nnts.runners.drivers import load_drivers
from nnts.runners.parameters import describe_model
from nnts.runners.settings import Settings


@dataclass
class Comparison:
    """The verdict: ``status`` "passed", "failed" (values, shapes or a result code differ from
    the reference's) or "skipped" (the driver does not support the model, or its feature level
    is too low); ``message`` says how, naming the operations and their parameters. True unless
    it failed; :meth:`check` raises AssertionError with the message when it failed."""

    status: str
    message: str
    operations: str = ""
    expected: list[np.ndarray] = field(default_factory=list, repr=False)  # the reference's outputs

    def __bool__(self) -> bool:
        return self.status != "failed"

    def check(self) -> Comparison:
        if self.status == "failed":
            raise AssertionError(f"{self.message}\noperations: {self.operations}")
        return self


def compare(model, driver, inputs: Sequence[np.ndarray] | None = None, mode: str = "sync",
            settings: Settings = Settings()) -> Comparison:
    """Run ``model`` on ``driver`` (a ``--driver`` string, or ``hal.Device`` instances) and on the
    reference; compare (see the module docstring). ``mode``: sync, async, burst or fenced."""
    if mode not in model_runner.MODES:
        raise ValueError(f"mode {mode!r}: one of {', '.join(model_runner.MODES)}")
    devices = [Device(d) for d in (load_drivers(driver, settings=settings) if isinstance(driver, str) else
                                   [driver] if isinstance(driver, hal.Device) else list(driver))]
    reference = [Device(ReferenceDevice())]
    if isinstance(model, Graph):
        outcome = differential.check(model, devices, reference)
        status = {"pass": "passed", "fail": "failed", "skip": "skipped"}[outcome.status]
        return Comparison(status, outcome.message or status, describe_model(model.to_test("model").model),
                          list(outcome.expected or []))
    test = _as_test(model, inputs)
    try:
        expected = differential.run(reference, test)
    except NnapiError as e:
        raise ValueError(f"the reference rejects the model: {e.code.name}: {e}") from None
    test = dataclasses.replace(test, expected=expected, ignored=[False] * len(expected),
                               output_dims=[tuple(e.shape) for e in expected])
    result = model_runner.run_test(test, devices, mode)
    status = {model_runner.PASS: "passed", model_runner.SKIP: "skipped"}.get(result.status, "failed")
    return Comparison(status, result.message or status, describe_model(test.model), expected)


def _as_test(model, inputs) -> TestModel:
    if isinstance(model, TestModel):
        return model
    hal_model = getattr(model, "hal_model", model)
    if not isinstance(hal_model, hal.Model):
        raise TypeError(f"nnts.compare: {type(model).__name__} is not a model (a random graph, a test model, "
                        "nnapi_ref.Model or nnapi_ref.hal.Model)")
    count = len(hal_model.main.input_indexes)
    if inputs is None or len(inputs) != count:
        raise NnapiError(ResultCode.BAD_DATA, f"nnts.compare: the model has {count} inputs, "
                                              f"{'none' if inputs is None else len(inputs)} given")
    main = hal_model.main
    outputs = [main.operands[k] for k in main.output_indexes]
    if any(not o.dimensions or 0 in o.dimensions for o in outputs if o.type not in SCALAR_TYPES):
        raise NnapiError(ResultCode.BAD_DATA, "nnts.compare: a model output of unknown dimensions: give a test "
                                              "model (nnapi_ref.vectors.TestModel) with its expected shapes")
    budget.check(sum(byte_size(o.type, o.dimensions) for o in outputs), "nnts.compare: the model's outputs")
    room = [np.zeros(o.dimensions, DTYPES[o.type]) for o in outputs]  # output buffers of the outputs' sizes
    return TestModel("model", hal_model, [np.asarray(x) for x in inputs], room, [False] * len(room))
