"""The documented failure classes as random-graph matchers (nnts.runners.known_classes): a class explains
a failure only where it applies in the failing model and its semantics reproduce what the driver
gave; nothing else is explained."""
import numpy as np

from nnapi_ref import hal
from nnapi_ref.drivers.reference import ReferenceDevice
from nnapi_ref.runtime import Device
from nnapi_ref.types import Lifetime, OperandCode as T, OperationCode as Op
from nnts.generators.graphs import Q8, Graph
from nnts.runners.differential import Failure, Outcome
from nnts.runners.known_classes import CLASSES, classes_for, explain, simulate

REFERENCE = [Device(ReferenceDevice())]


def mean_graph() -> tuple[Graph, int]:
    """A one-operation quantized MEAN whose truncated (NNAPI), rounded (TFLite) and half-even
    (ONNX Runtime) results differ: MEAN of [1, 2] and [3, 6] over axis 1 at the same scale:
    1.5 -> 1 (NNAPI), 2 (TFLite, ORT); 4.5 -> 4 (NNAPI), 5 (TFLite), 4 (ORT, half to even)."""
    x = np.array([[1, 2], [3, 6]], np.uint8)
    operands = [hal.Operand(Q8, (2, 2), 0.5, 0, Lifetime.SUBGRAPH_INPUT),
                hal.Operand(T.TENSOR_INT32, (1,), 0.0, 0, Lifetime.CONSTANT_COPY, np.array([1], np.int32)),
                hal.Operand(T.INT32, (), 0.0, 0, Lifetime.CONSTANT_COPY, np.array(0, np.int32)),
                hal.Operand(Q8, (2,), 0.5, 0, Lifetime.SUBGRAPH_OUTPUT)]
    expected = np.array([1, 4], np.uint8)
    graph = Graph(operands, [hal.Operation(Op.MEAN, (0, 1, 2), (3,))], [0], [3], {0: x, 3: expected})
    return graph, 3


def mismatch(graph: Graph, actual) -> Outcome:
    expected = [graph.values[k] for k in graph.outputs]
    return Outcome("fail", "", expected, [np.asarray(actual, np.uint8)], failure=Failure("mismatch", "MEAN", "values"),
                   mismatched=[0])


def test_a_class_explains_what_its_semantics_reproduce_and_nothing_else():
    graph, _ = mean_graph()
    tflite_like = mismatch(graph, [2, 5])
    assert simulate(graph, [c for c in classes_for("tflite") if c.number == 8])[0][0].tolist() == [2, 5]
    assert explain(graph, tflite_like, "tflite").startswith("tflite class 8")
    ort_like = mismatch(graph, [2, 4])
    assert explain(graph, ort_like, "onnxruntime").startswith("onnxruntime class 4")
    # A driver far from every class's semantics, and drivers without documented classes.
    assert explain(graph, mismatch(graph, [200, 100]), "tflite") is None
    assert explain(graph, tflite_like, "reference") is None
    assert explain(graph, tflite_like, "nnapi_ref.drivers.broken:wrong_add_quant8") is None


def test_a_class_that_changes_nothing_explains_nothing():
    """MEAN of [2, 4] and [6, 8]: exact means, so no rounding class can explain a mismatch."""
    graph, _ = mean_graph()
    graph.values[0] = np.array([[2, 4], [6, 8]], np.uint8)
    graph.values[3] = np.array([3, 7], np.uint8)
    assert explain(graph, mismatch(graph, [4, 8]), "tflite") is None
    assert explain(graph, mismatch(graph, [4, 8]), "onnxruntime") is None


def test_int32_division_by_zero_explains_a_failed_execution_only_with_a_zero_divisor():
    def div_graph(divisor):
        operands = [hal.Operand(T.TENSOR_INT32, (2,), lifetime=Lifetime.SUBGRAPH_INPUT),
                    hal.Operand(T.TENSOR_INT32, (2,), lifetime=Lifetime.SUBGRAPH_INPUT),
                    hal.Operand(T.INT32, (), lifetime=Lifetime.CONSTANT_COPY, value=np.array(0, np.int32)),
                    hal.Operand(T.TENSOR_INT32, (2,), lifetime=Lifetime.SUBGRAPH_OUTPUT)]
        values = {0: np.array([7, 8], np.int32), 1: np.array(divisor, np.int32), 3: np.array([0, 0], np.int32)}
        return Graph(operands, [hal.Operation(Op.DIV, (0, 1, 2), (3,))], [0, 1], [3], values)
    error = Outcome("fail", "", failure=Failure("result code", "", "OP_FAILED: tflite/kernels/div.cc:#: data[i] != "
                                                                   "zero_point was not true"))
    assert explain(div_graph([2, 0]), error, "tflite").startswith("tflite class 6")
    assert explain(div_graph([2, 3]), error, "tflite") is None
    other = Outcome("fail", "", failure=Failure("result code", "", "OP_FAILED: something else"))
    assert explain(div_graph([2, 0]), other, "tflite") is None
    assert explain(div_graph([2, 0]), error, "onnxruntime") is None


def test_every_class_names_its_page_and_operations():
    for c in CLASSES:
        assert c.operations and c.drivers and (c.semantics is None) != (c.fails is None)
        assert c.name(c.drivers[0]).startswith(("onnxruntime class", "tflite class"))


def test_quantize_of_nan_is_explained_on_the_drivers_that_give_the_minimum():
    """NNAPI (AOSP's std::min/std::max clamp) gives 255 for a NaN; ONNX Runtime and TFLite's
    reference kernels 0. XNNPACK gives 255 too: nothing to explain there."""
    operands = [hal.Operand(T.TENSOR_FLOAT32, (2,), lifetime=Lifetime.SUBGRAPH_INPUT),
                hal.Operand(Q8, (2,), 0.5, 3, Lifetime.SUBGRAPH_OUTPUT)]
    graph = Graph(operands, [hal.Operation(Op.QUANTIZE, (0,), (1,))], [0], [1],
                  {0: np.array([np.nan, 1.0], np.float32), 1: np.array([255, 5], np.uint8)})
    outcome = mismatch(graph, [0, 5])
    assert explain(graph, outcome, "onnxruntime").startswith("onnxruntime class 7")
    assert explain(graph, outcome, "tflite-ref").startswith("tflite class 13")
    assert explain(graph, outcome, "tflite") is None


def test_nan_in_maximum_is_explained_by_each_runtimes_own_class():
    """MAXIMUM([NaN, 1], [1, NaN]): NNAPI [NaN, 1], ONNX Runtime [NaN, NaN], TFLite [1, NaN];
    each runtime's result is explained by its page's class 1; ONNX Runtime's is not TFLite's."""
    f32 = T.TENSOR_FLOAT32
    operands = [hal.Operand(f32, (2,), lifetime=Lifetime.SUBGRAPH_INPUT),
                hal.Operand(f32, (2,), lifetime=Lifetime.SUBGRAPH_INPUT),
                hal.Operand(f32, (2,), lifetime=Lifetime.SUBGRAPH_OUTPUT)]
    graph = Graph(operands, [hal.Operation(Op.MAXIMUM, (0, 1), (2,))], [0, 1], [2],
                  {0: np.array([np.nan, 1], np.float32), 1: np.array([1, np.nan], np.float32),
                   2: np.array([np.nan, 1], np.float32)})

    def outcome(actual):
        return Outcome("fail", "", [graph.values[2]], [np.array(actual, np.float32)],
                       failure=Failure("mismatch", "MAXIMUM", "values"), mismatched=[0])
    assert explain(graph, outcome([np.nan, np.nan]), "onnxruntime").startswith("onnxruntime class 1")
    assert explain(graph, outcome([np.nan, np.nan]), "tflite") is None
    assert explain(graph, outcome([1, np.nan]), "tflite").startswith("tflite class 1")
    # (ORT's [NaN, NaN] would accept [1, NaN] too: the criteria do not compare non-finite
    # expected values, so a class is as lenient as the comparison it explains.)


def test_tflite_argmax_leaves_a_leading_nan_where_nnapi_stays():
    """ARGMAX over rows [NaN, 1, 2] and [3, NaN, 5]: NNAPI keeps the first row's NaN (index 0),
    TFLite's comparator replaces it with a number (index 2); both skip the second row's NaN."""
    operands = [hal.Operand(T.TENSOR_FLOAT32, (2, 3), lifetime=Lifetime.SUBGRAPH_INPUT),
                hal.Operand(T.INT32, (), lifetime=Lifetime.CONSTANT_COPY, value=np.array(1, np.int32)),
                hal.Operand(T.TENSOR_INT32, (2,), lifetime=Lifetime.SUBGRAPH_OUTPUT)]
    x = np.array([[np.nan, 1, 2], [3, np.nan, 5]], np.float32)
    graph = Graph(operands, [hal.Operation(Op.ARGMAX, (0, 1), (2,))], [0], [2], {0: x, 2: np.array([0, 2], np.int32)})

    def outcome(actual):
        return Outcome("fail", "", [graph.values[2]], [np.asarray(actual, np.int32)],
                       failure=Failure("mismatch", "ARGMAX", "values"), mismatched=[0])
    assert explain(graph, outcome([2, 2]), "tflite-ref").startswith("tflite class 3")
    assert explain(graph, outcome([1, 0]), "tflite-ref") is None


def test_a_mean_at_an_exact_half_may_round_up_on_onnx_runtime():
    """MEAN of [121, 119, 128, 122] around zero point 123 is exactly half a step below it: NNAPI
    truncates to 122, ONNX Runtime's float32 mean (its sum's order set by the data's alignment)
    can land on the half and round to 123; a one-element L2_NORMALIZATION axis then makes the
    step -1.0 against 0.0 (random-graph seed 2002523). The float32 recomputation lands below the
    half, as NNAPI does: only the exact mean, halves up, explains it."""
    scale = 0.3081510663032532
    operands = [hal.Operand(Q8, (1, 4), scale, 123, Lifetime.SUBGRAPH_INPUT),
                hal.Operand(T.TENSOR_INT32, (1,), 0.0, 0, Lifetime.CONSTANT_COPY, np.array([1], np.int32)),
                hal.Operand(T.INT32, (), 0.0, 0, Lifetime.CONSTANT_COPY, np.array(1, np.int32)),
                hal.Operand(Q8, (1, 1), scale, 123, Lifetime.TEMPORARY_VARIABLE),
                hal.Operand(Q8, (1, 1), 1 / 128, 128, Lifetime.SUBGRAPH_OUTPUT)]
    x = np.array([[121, 119, 128, 122]], np.uint8)
    graph = Graph(operands, [hal.Operation(Op.MEAN, (0, 1, 2), (3,)), hal.Operation(Op.L2_NORMALIZATION, (3,), (4,))],
                  [0], [4], {0: x, 3: np.array([[122]], np.uint8), 4: np.array([[0]], np.uint8)})
    assert simulate(graph, [])[0][0].tolist() == [[0]]  # NNAPI: -1.0
    ort_like = mismatch(graph, [[128]])
    assert explain(graph, ort_like, "onnxruntime").startswith("onnxruntime class 4")
    float32_path = [c for c in classes_for("onnxruntime") if c.number == 4][:1]
    assert simulate(graph, float32_path)[1] is False  # recomputed in float32, the mean rounds as NNAPI's
    assert explain(graph, mismatch(graph, [[255]]), "onnxruntime") is None


def test_a_per_channel_convolution_requantized_once_is_explained_with_its_bias_scaled():
    """A per-channel int8 DEPTHWISE_CONV_2D of the zero point with bias 30 at multiplier
    0.2479128: NNAPI rounds twice (29.75 -> 30, 7.5 -> 8), ONNX Runtime and XNNPACK once (7.44 ->
    7). The bias's scale is 0 beside a per-channel filter: the matchers' float recomputation
    takes its real value as 30 times the input's and the channel's scales (random-graph seed
    2002909)."""
    s8, pc = T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM_PER_CHANNEL

    def scalar(v):
        return hal.Operand(T.INT32, (), 0.0, 0, Lifetime.CONSTANT_COPY, np.array(v, np.int32))
    operands = [hal.Operand(s8, (1, 1, 1, 1), 0.3388423025608063, -57, Lifetime.SUBGRAPH_INPUT),
                hal.Operand(pc, (1, 1, 1, 1), 0.0, 0, Lifetime.CONSTANT_COPY, np.array([[[[43]]]], np.int8),
                            hal.ChannelQuant((0.011096084,), 3)),
                hal.Operand(T.TENSOR_INT32, (1,), 0.0, 0, Lifetime.CONSTANT_COPY, np.array([30], np.int32)),
                *[scalar(v) for v in (0, 0, 0, 0, 1, 1, 1, 0)],
                hal.Operand(s8, (1, 1, 1, 1), 0.0151659045368433, -39, Lifetime.SUBGRAPH_OUTPUT)]
    graph = Graph(operands, [hal.Operation(Op.DEPTHWISE_CONV_2D, tuple(range(11)), (11,))], [0], [11],
                  {0: np.full((1, 1, 1, 1), -57, np.int8), 11: np.full((1, 1, 1, 1), -31, np.int8)})
    assert simulate(graph, [])[0][0].item() == -31  # NNAPI: 8 steps
    once = Outcome("fail", "", [graph.values[11]], [np.full((1, 1, 1, 1), -32, np.int8)],
                   failure=Failure("mismatch", "DEPTHWISE_CONV_2D", "values"), mismatched=[0])
    assert explain(graph, once, "onnxruntime").startswith("onnxruntime class 3")
    assert explain(graph, once, "tflite").startswith("tflite class 14")
    assert explain(graph, once, "tflite-ref") is None  # TFLite's reference kernels round twice, as NNAPI
