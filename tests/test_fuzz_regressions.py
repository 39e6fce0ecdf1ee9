"""Findings of the fuzzing campaigns (fuzz/harnesses.py), each reduced to the calls its artifact
made: a malformed model, model file or request must end in an NNAPI result code."""
import json
import os

import numpy as np
import pytest

from nnapi_ref import Model, NnapiError, OperandCode as T, OperandType, ResultCode, hal, ops, vectors
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.hal import ErrorStatus, HalError, Lifetime
from nnapi_ref.ops import pooling
from nnapi_ref.types import SCALAR_TYPES, OperationCode, PreferenceCode, PriorityCode
from nnapi_ref.validation import validate_model
from nnts.fuzz.harnesses import Builder, check_masked, provider, valid_request

CONTROL_FLOW = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cts", "corpus",
                            "control_flow.json")


def test_required_scalar_without_a_value_is_invalid_argument():
    """execute harness: SOFTMAX with its beta operand omitted (NO_VALUE) raised a TypeError
    ('>' between None and int) inside prepare instead of INVALID_ARGUMENT."""
    operands = [hal.Operand(T.TENSOR_FLOAT32, (1, 4), lifetime=Lifetime.SUBGRAPH_INPUT),
                hal.Operand(T.FLOAT32, lifetime=Lifetime.NO_VALUE),
                hal.Operand(T.TENSOR_FLOAT32, (1, 4), lifetime=Lifetime.SUBGRAPH_OUTPUT)]
    model = hal.Model(hal.Subgraph(operands, [hal.Operation(OperationCode.SOFTMAX, (0, 1), (2,))], (0,), (2,)))
    with pytest.raises(HalError) as e:
        ReferenceDevice().prepare_model(model, PreferenceCode.FAST_SINGLE_ANSWER, PriorityCode.MEDIUM, None, [], [],
                                        None)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT and "omitted" in e.value.message


def test_enormous_constant_is_not_taken_for_an_empty_one():
    """model harness: dimensions whose product overflows int64 (2**32 x 2**32, now refused as
    past uint32; (2**32 - 1) x (2**32 - 1) still overflows) made the size numpy computed 0, so an
    empty value was accepted for a constant of 2**64 elements."""
    big = 2**32 - 1
    with pytest.raises(NnapiError) as e:  # refused when added now: past NNAPI's uint32_t sizes
        Model().add_operand(OperandType(T.TENSOR_FLOAT32, (big, big)))
    assert e.value.code == ResultCode.BAD_DATA and str(4 * big * big) in e.value.message
    operands = [hal.Operand(T.TENSOR_FLOAT32, (big, big), lifetime=Lifetime.CONSTANT_COPY,
                            value=np.zeros(0, np.float32)),
                hal.Operand(T.TENSOR_FLOAT32, (big, big), lifetime=Lifetime.SUBGRAPH_INPUT),
                hal.Operand(T.INT32, lifetime=Lifetime.CONSTANT_COPY, value=np.zeros(1, np.int32)),
                hal.Operand(T.TENSOR_FLOAT32, (big, big), lifetime=Lifetime.SUBGRAPH_OUTPUT)]
    model = hal.Model(hal.Subgraph(operands, [hal.Operation(OperationCode.ADD, (0, 1, 2), (3,))], (1,), (3,)))
    with pytest.raises(NnapiError, match=f"take {4 * big * big} bytes, beyond NNAPI's uint32_t sizes"):
        validate_model(model)


def _document(test=None, **main_changes):
    """A valid one-test document (ADD of two inputs), with changes to its test or main subgraph."""
    operand = lambda type_, dims, life, data: {"type": type_, "dimensions": dims, "scale": 0.0, "zero_point": 0,
                                               "lifetime": life, "data": data}
    main = {"operands": [operand("TENSOR_FLOAT32", [2], "SUBGRAPH_INPUT", [1, 2]),
                         operand("TENSOR_FLOAT32", [2], "SUBGRAPH_INPUT", [3, 4]),
                         operand("INT32", [], "CONSTANT_COPY", [0]),
                         operand("TENSOR_FLOAT32", [2], "SUBGRAPH_OUTPUT", [4, 6])],
            "operations": [{"type": "ADD", "inputs": [0, 1, 2], "outputs": [3]}],
            "input_indexes": [0, 1], "output_indexes": [3]}
    for path, value in main_changes.items():  # operands__0__scale: main["operands"][0]["scale"]
        keys = [int(k) if k.isdigit() else k for k in path.split("__")]
        target = main
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    t = {"name": "t", "main": main} if test is None else test
    return {"format": vectors.FORMAT, "tests": [t]}


@pytest.mark.parametrize("doc", [
    {"format": vectors.FORMAT, "tests": {"a": 1}},                 # tests: an object, not a list
    {"format": vectors.FORMAT, "tests": [[1, 2]]},                 # a test: a list
    {"format": vectors.FORMAT, "tests": [{"name": "t"}]},          # no main
    _document(test={"name": "t", "main": None}),                  # main: null
    _document(operands__0__scale="x"),                            # a string where a number belongs
    _document(operands__0__scale={}),                             # an object where a number belongs
    _document(operands__0__dimensions=5),                         # a number where a list belongs
    _document(operands__0__dimensions=[2**40, 2**40]),            # enormous: never allocated
    _document(operands__1__dimensions=[3]),                       # 2 values for 3 elements
    _document(operands__1__dimensions=[-2]),                      # negative
    _document(operands__2__data=[10**30]),                        # an INT32 out of range
    _document(operands__0__data=[{}, 1]),                         # data of the wrong JSON type
    _document(operations=[1]),                                    # an operation: a number
    _document(test={"name": "t", "main": _document()["tests"][0]["main"], "min_feature_level": "x"}),
], ids=lambda d: json.dumps(d)[:60])
def test_malformed_vector_file_is_bad_data(doc, tmp_path):
    """vectors harness: each of these ended in a KeyError, TypeError, ValueError or
    AttributeError traceback out of load_file instead of BAD_DATA."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(vectors.FormatError) as e:
        vectors.load_file(path)
    assert e.value.code == ResultCode.BAD_DATA and e.value.message


def test_valid_document_still_loads(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_document()))
    [test] = vectors.load_file(path)
    assert test.inputs[0].tolist() == [1, 2] and test.expected[0].tolist() == [4, 6]


@pytest.mark.parametrize("operation, extra", [(OperationCode.RESHAPE, ()),
                                               (OperationCode.MEAN, (hal.Operand(T.INT32, lifetime=Lifetime.CONSTANT_COPY,
                                                                                 value=np.zeros(1, np.int32)),))])
def test_required_tensor_parameter_without_a_value_is_invalid_argument(operation, extra):
    """execute harness: RESHAPE's shape / MEAN's axes tensor omitted (NO_VALUE) raised a TypeError
    (int(None)) inside prepare instead of INVALID_ARGUMENT."""
    operands = [hal.Operand(T.TENSOR_FLOAT32, (4,), lifetime=Lifetime.SUBGRAPH_INPUT),
                hal.Operand(T.TENSOR_INT32, (1,), lifetime=Lifetime.NO_VALUE), *extra,
                hal.Operand(T.TENSOR_FLOAT32, (), lifetime=Lifetime.SUBGRAPH_OUTPUT)]
    out = len(operands) - 1
    model = hal.Model(hal.Subgraph(operands, [hal.Operation(operation, tuple(range(out)), (out,))], (0,), (out,)))
    with pytest.raises(HalError) as e:
        ReferenceDevice().prepare_model(model, PreferenceCode.FAST_SINGLE_ANSWER, PriorityCode.MEDIUM, None, [], [],
                                        None)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT and "omitted" in e.value.message


def test_omitted_if_condition_in_a_request_is_an_error_code():
    """request harness: an IF model executed with its condition input omitted (NO_VALUE in the
    request) failed with an AttributeError inside the executor, reported as GENERAL_FAILURE."""
    test = next(t for t in vectors.load_file(CONTROL_FLOW)
                if t.model.main.operations[0].type == OperationCode.IF)
    model = Builder(provider(b""), 0).build(test.model).hal_model
    prepared = ReferenceDevice().prepare_model(model, PreferenceCode.FAST_SINGLE_ANSWER, PriorityCode.MEDIUM, None,
                                               [], [], None)
    request = valid_request(model.main, provider(b""), values=True)
    request.inputs[0] = hal.RequestArgument(hal.ArgumentLifetime.NO_VALUE)
    with pytest.raises(HalError) as e:
        prepared.execute_synchronously(request, False, None, 10**9)
    check_masked(e.value)  # raises Finding for an internal exception turned into an error code
    assert "omitted" in e.value.message


@pytest.mark.parametrize("bad_index", [-1, 2**64, 10**6])
def test_if_branch_output_index_out_of_range_is_bad_data(bad_index):
    """vectors harness: an IF branch model whose output index lay outside its operands
    (2**64 here; -1 silently took the last operand) raised IndexError in validate_model: the
    branch's indexes were used before the branch itself was validated."""
    test = next(t for t in vectors.load_file(CONTROL_FLOW)
                if t.model.main.operations[0].type == OperationCode.IF)
    model = test.model
    branch = model.referenced[0]
    branch.output_indexes = (bad_index,) + tuple(branch.output_indexes[1:])
    with pytest.raises(NnapiError) as e:
        validate_model(model)
    assert e.value.code == ResultCode.BAD_DATA and "out of range" in e.value.message


def test_while_condition_output_index_out_of_range_is_bad_data():
    """vectors harness: a WHILE condition model whose output index lay outside its operands
    raised IndexError in validate_model (the same class as the IF branch above)."""
    test = next(t for t in vectors.load_file(CONTROL_FLOW)
                if t.model.main.operations[0].type == OperationCode.WHILE)
    model = test.model
    cond = model.referenced[model.main.operands[model.main.operations[0].inputs[0]].value]
    cond.output_indexes = (2**64,)
    with pytest.raises(NnapiError) as e:
        validate_model(model)
    assert e.value.code == ResultCode.BAD_DATA


@pytest.mark.parametrize("operation", [OperationCode.PAD, OperationCode.MIRROR_PAD])
def test_omitted_paddings_are_invalid_argument(operation):
    """execute harness (CI smoke run): PAD with its paddings operand omitted (NO_VALUE) raised a
    ValueError (reshaping None) in prepare instead of INVALID_ARGUMENT."""
    operands = [hal.Operand(T.TENSOR_FLOAT32, (2, 2), lifetime=Lifetime.SUBGRAPH_INPUT),
                hal.Operand(T.TENSOR_INT32, (2, 2), lifetime=Lifetime.NO_VALUE),
                hal.Operand(T.TENSOR_FLOAT32, (4, 4), lifetime=Lifetime.SUBGRAPH_OUTPUT)]
    inputs = (0, 1)
    if operation == OperationCode.MIRROR_PAD:
        operands.insert(2, hal.Operand(T.INT32, lifetime=Lifetime.CONSTANT_COPY, value=np.array([0], np.int32)))
        inputs = (0, 1, 2)
    out = len(operands) - 1
    model = hal.Model(hal.Subgraph(operands, [hal.Operation(operation, inputs, (out,))], (0,), (out,)))
    with pytest.raises(HalError) as e:
        ReferenceDevice().prepare_model(model, PreferenceCode.FAST_SINGLE_ANSWER, PriorityCode.MEDIUM, None, [], [],
                                        None)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT and "omitted" in e.value.message


# -- omitted inputs: the class of the findings above, closed in the registry -------------------------

DETECTION = os.path.join(os.path.dirname(CONTROL_FLOW), "detection.json")
QUANTIZED = {T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_ASYMM,
             T.TENSOR_QUANT16_SYMM}


def _operand(code, lifetime) -> hal.Operand:
    """An operand of ``code`` that passes the per-type checks (a SUBGRAPH one refers to subgraph 0)."""
    if code == T.SUBGRAPH and lifetime != Lifetime.NO_VALUE:
        return hal.Operand(code, lifetime=Lifetime.SUBGRAPH, value=0)
    dims = () if code in SCALAR_TYPES else (1,)
    if code == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        return hal.Operand(code, dims, lifetime=lifetime, channel_quant=hal.ChannelQuant((0.5,), 0))
    return hal.Operand(code, dims, 0.5 if code in QUANTIZED else 0.0, lifetime=lifetime)


def _one_operation_model(code, signature, omitted: int | None) -> hal.Model:
    """One ``code`` operation with ``signature``'s operand types, every input a model input
    except input ``omitted``, which has no value (NO_VALUE)."""
    operands = [_operand(t, Lifetime.NO_VALUE if i == omitted else Lifetime.SUBGRAPH_INPUT)
                for i, t in enumerate(signature.inputs)]
    operands += [_operand(t, Lifetime.SUBGRAPH_OUTPUT) for t in signature.outputs]
    n = len(signature.inputs)
    inputs = tuple(k for k in range(n) if operands[k].lifetime == Lifetime.SUBGRAPH_INPUT)
    outputs = tuple(range(n, len(operands)))
    main = hal.Subgraph(operands, [hal.Operation(code, tuple(range(n)), outputs)], inputs, outputs)
    placeholder = hal.Subgraph([hal.Operand(T.TENSOR_FLOAT32, (1,), lifetime=Lifetime.SUBGRAPH_OUTPUT)], [], (), (0,))
    return hal.Model(main, [placeholder] if T.SUBGRAPH in signature.inputs else [])


@pytest.mark.parametrize("code", sorted(ops.load_all()), ids=lambda c: c.name)
def test_every_non_optional_input_without_a_value_is_bad_data(code):
    """For every operation and signature of the registry, an input left without a value is
    BAD_DATA at model validation, naming the operation and the input, unless the signature
    declares it omittable (NeuralNetworks.h's optional tensors); an omittable one, and the same
    model with nothing omitted, pass validation (checked where no referenced model is needed)."""
    for signature in ops.load_all()[code].signatures:
        plain = T.SUBGRAPH not in signature.inputs
        if plain:
            validate_model(_one_operation_model(code, signature, None))
        for position in range(len(signature.inputs)):
            model = _one_operation_model(code, signature, position)
            if position in signature.omittable:
                validate_model(model)
                continue
            with pytest.raises(NnapiError) as e:
                validate_model(model)
            assert e.value.code == ResultCode.BAD_DATA
            if signature.inputs[position] == T.SUBGRAPH:  # refused by the operand rules already
                assert "must have SUBGRAPH lifetime" in e.value.message
            else:
                assert f"input {position} of {code.name}" in e.value.message and "omitted" in e.value.message


def test_omittable_inputs_are_the_optional_tensors_of_the_header():
    """The declarations the test above relies on, spot-checked against NeuralNetworks.h."""
    def omittable(code):
        return set().union(*(s.omittable for s in ops.load_all()[code].signatures))
    assert omittable(OperationCode.LSTM) == {1, 5, 9, 10, 11, 12, 16, 17, 23, 24, 25, 26}
    assert omittable(OperationCode.UNIDIRECTIONAL_SEQUENCE_LSTM) == {1, 5, 9, 10, 11, 12, 16, 17, 24, 25, 26, 27}
    assert omittable(OperationCode.BIDIRECTIONAL_SEQUENCE_LSTM) == (
        {1, 5, 9, 10, 11, 12, 16, 17, 18, 22, 26, 27, 28, 29, 33, 34} | set(range(39, 48)) | set(range(53, 61)))
    assert omittable(OperationCode.QUANTIZED_LSTM) == {1, 5, 9, 10, 11, 12, 16, 17, 20, 21, 22, 23}
    assert omittable(OperationCode.BIDIRECTIONAL_SEQUENCE_RNN) == {9, 10, 11}
    assert omittable(OperationCode.SVDF) == {3}
    assert omittable(OperationCode.LSH_PROJECTION) == {2}
    assert omittable(OperationCode.SQUEEZE) == omittable(OperationCode.TRANSPOSE) == {1}
    others = [c.name for c in ops.load_all() if omittable(c) and c not in (
        OperationCode.LSTM, OperationCode.UNIDIRECTIONAL_SEQUENCE_LSTM, OperationCode.BIDIRECTIONAL_SEQUENCE_LSTM,
        OperationCode.QUANTIZED_LSTM, OperationCode.BIDIRECTIONAL_SEQUENCE_RNN, OperationCode.SVDF,
        OperationCode.LSH_PROJECTION, OperationCode.SQUEEZE, OperationCode.TRANSPOSE)]
    assert others == []


def test_omitted_box_with_nms_limit_threshold_is_invalid_argument():
    """execute harness (seed 7, ~22k executions): BOX_WITH_NMS_LIMIT with its score threshold
    (a scalar) omitted passed prepare and failed in execution with "AttributeError: 'NoneType'
    object has no attribute 'astype'", reported as GENERAL_FAILURE. Now model validation rejects it."""
    test = next(t for t in vectors.load_file(DETECTION)
                if t.model.main.operations[0].type == OperationCode.BOX_WITH_NMS_LIMIT)
    model = test.model
    model.main.operands[3].lifetime, model.main.operands[3].value = Lifetime.NO_VALUE, None
    with pytest.raises(HalError) as e:
        ReferenceDevice().prepare_model(model, PreferenceCode.FAST_SINGLE_ANSWER, PriorityCode.MEDIUM, None, [], [],
                                        None)
    check_masked(e.value)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert "input 3 of BOX_WITH_NMS_LIMIT" in e.value.message and "omitted" in e.value.message


def test_request_omitting_a_non_optional_input_is_invalid_argument():
    """A model input left without a value in the request is checked against the same
    declarations: omitting a SQUEEZE's axes is fine, omitting its data is INVALID_ARGUMENT."""
    operands = [hal.Operand(T.TENSOR_FLOAT32, (1, 2), lifetime=Lifetime.SUBGRAPH_INPUT),
                hal.Operand(T.TENSOR_INT32, (1,), lifetime=Lifetime.SUBGRAPH_INPUT),
                hal.Operand(T.TENSOR_FLOAT32, (2,), lifetime=Lifetime.SUBGRAPH_OUTPUT)]
    model = hal.Model(hal.Subgraph(operands, [hal.Operation(OperationCode.SQUEEZE, (0, 1), (2,))], (0, 1), (2,)))
    prepared = ReferenceDevice().prepare_model(model, PreferenceCode.FAST_SINGLE_ANSWER, PriorityCode.MEDIUM, None,
                                               [], [], None)
    pool = hal.SharedMemory(np.array([1.5, -2.0, 0.0, 0.0], np.float32).view(np.uint8))
    data = hal.RequestArgument(hal.ArgumentLifetime.POOL, 0, 0, 8)
    output = hal.RequestArgument(hal.ArgumentLifetime.POOL, 0, 8, 8)
    no_value = hal.RequestArgument(hal.ArgumentLifetime.NO_VALUE)
    prepared.execute_synchronously(hal.Request([data, no_value], [output], [pool]), False, None, 10**9)
    assert pool.buffer[8:].view(np.float32).tolist() == [1.5, -2.0]
    with pytest.raises(HalError) as e:
        prepared.execute_synchronously(hal.Request([no_value, no_value], [output], [pool]), False, None, 10**9)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert "model input 0 is omitted" in e.value.message and "input 0 of SQUEEZE" in e.value.message


@pytest.mark.parametrize("driver", ["reference", "onnxruntime", "tflite"])
def test_every_driver_rejects_a_request_omitting_a_needed_input(driver):
    """The same request check in the drivers backed by other runtimes (they keep the reference's
    plans for it): an ADD's input omitted in the request is INVALID_ARGUMENT, not a failure."""
    from nnts.runners.drivers import load_driver
    try:
        device = load_driver(driver)
    except NnapiError as e:  # the runtime's package is not installed
        pytest.skip(str(e))
    tensor = dict(type=T.TENSOR_FLOAT32, dimensions=(2,))
    operands = [hal.Operand(**tensor, lifetime=Lifetime.SUBGRAPH_INPUT),
                hal.Operand(**tensor, lifetime=Lifetime.SUBGRAPH_INPUT),
                hal.Operand(T.INT32, (), lifetime=Lifetime.CONSTANT_COPY, value=np.array(0, np.int32)),
                hal.Operand(**tensor, lifetime=Lifetime.SUBGRAPH_OUTPUT)]
    model = hal.Model(hal.Subgraph(operands, [hal.Operation(OperationCode.ADD, (0, 1, 2), (3,))], (0, 1), (3,)))
    prepared = device.prepare_model(model, PreferenceCode.FAST_SINGLE_ANSWER, PriorityCode.MEDIUM, None, [], [], None)
    pool = hal.SharedMemory(np.array([1.5, -2.0, 0.25, 1.0, 0.0, 0.0], np.float32).view(np.uint8))
    a, b = hal.RequestArgument(hal.ArgumentLifetime.POOL, 0, 0, 8), hal.RequestArgument(hal.ArgumentLifetime.POOL, 0, 8, 8)
    output = hal.RequestArgument(hal.ArgumentLifetime.POOL, 0, 16, 8)
    prepared.execute_synchronously(hal.Request([a, b], [output], [pool]), False, None, 10**9)
    assert pool.buffer[16:].view(np.float32).tolist() == [1.75, -1.0]
    no_value = hal.RequestArgument(hal.ArgumentLifetime.NO_VALUE)
    with pytest.raises(HalError) as e:
        prepared.execute_synchronously(hal.Request([a, no_value], [output], [pool]), False, None, 10**9)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert "model input 1 is omitted" in e.value.message and "of ADD" in e.value.message


@pytest.mark.parametrize("operation, expected", [(OperationCode.AVERAGE_POOL_2D, 3.5), (OperationCode.MAX_POOL_2D, 7.0),
                                                 (OperationCode.L2_POOL_2D, float(np.sqrt(140 / 8)))])
def test_pooling_filter_far_wider_than_the_input(operation, expected, monkeypatch):
    """execute harness (10-minute campaign): AVERAGE_POOL_2D with a filter 2**24 - 1 wide over a
    4-wide input (SAME padding) ran a Python step per filter column (a 15 s timeout) over an input
    padded to the filter's width. Only the taps that can reach the input are run now, over an
    input padded no wider than they reach: checked here with a filter of 2**31 - 1 columns (whose
    padded input would take 16 GiB). Each window covers the whole [1, 2, 4, 1] input (0..7)."""
    padded = pooling.padded_window_input

    def bounded(x, top, left, need_h, need_w, fill=0):
        assert need_h * need_w <= 64, f"a padded input of {need_h} x {need_w} for a 2 x 4 input"
        return padded(x, top, left, need_h, need_w, fill)

    monkeypatch.setattr(pooling, "padded_window_input", bounded)
    scalar = lambda v: hal.Operand(T.INT32, lifetime=Lifetime.CONSTANT_COPY, value=np.array([v], np.int32))
    operands = [hal.Operand(T.TENSOR_FLOAT32, (1, 2, 4, 1), lifetime=Lifetime.SUBGRAPH_INPUT),
                scalar(1), scalar(2), scalar(2), scalar(2**31 - 1), scalar(2), scalar(0),  # SAME, strides, filter
                hal.Operand(T.TENSOR_FLOAT32, (1, 1, 2, 1), lifetime=Lifetime.SUBGRAPH_OUTPUT)]
    model = hal.Model(hal.Subgraph(operands, [hal.Operation(operation, tuple(range(7)), (7,))], (0,), (7,)))
    prepared = ReferenceDevice().prepare_model(model, PreferenceCode.FAST_SINGLE_ANSWER, PriorityCode.MEDIUM, None,
                                               [], [], None)
    pool = hal.SharedMemory(np.concatenate([np.arange(8, dtype=np.float32), np.zeros(2, np.float32)]).view(np.uint8))
    request = hal.Request([hal.RequestArgument(hal.ArgumentLifetime.POOL, 0, 0, 32)],
                          [hal.RequestArgument(hal.ArgumentLifetime.POOL, 0, 32, 8)], [pool])
    prepared.execute_synchronously(request, False, None, 10**9)
    np.testing.assert_allclose(pool.buffer[32:].view(np.float32), [expected, expected], rtol=1e-6)


@pytest.mark.parametrize("scale", [3.0e38, 1.0e30, -3.0e38])
def test_resize_scale_overflowing_the_output_size_is_invalid_argument(scale):
    """execute harness, against every driver built on the reference: RESIZE_BILINEAR with a float
    scale whose product with the image size overflows float32 (or any dimension) raised
    OverflowError (int() of infinity) out of prepare_model instead of INVALID_ARGUMENT."""
    operands = [hal.Operand(T.TENSOR_FLOAT32, (1, 4, 4, 1), lifetime=Lifetime.SUBGRAPH_INPUT),
                hal.Operand(T.FLOAT32, lifetime=Lifetime.CONSTANT_COPY, value=np.float32(scale)),
                hal.Operand(T.FLOAT32, lifetime=Lifetime.CONSTANT_COPY, value=np.float32(1.0)),
                hal.Operand(T.BOOL, lifetime=Lifetime.CONSTANT_COPY, value=np.bool_(False)),
                hal.Operand(T.TENSOR_FLOAT32, (0, 0, 0, 0), lifetime=Lifetime.SUBGRAPH_OUTPUT)]
    model = hal.Model(hal.Subgraph(operands, [hal.Operation(OperationCode.RESIZE_BILINEAR, (0, 1, 2, 3), (4,))],
                                   (0,), (4,)))
    with pytest.raises(HalError) as e:
        ReferenceDevice().prepare_model(model, PreferenceCode.FAST_SINGLE_ANSWER, PriorityCode.MEDIUM, None, [], [],
                                        None)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert "output" in e.value.message
