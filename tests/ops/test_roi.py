"""ROI_ALIGN and ROI_POOLING: hand-computed cases, properties, validation."""
import numpy as np
import pytest

from nnapi_ref.errors import NnapiError
from nnapi_ref.runtime import Compilation, Execution, Model, OperandType
from nnapi_ref.types import OperandCode as T, OperationCode as O, ResultCode
from nnts.generators.builders import output, run_operation, scalar, tensor

# f(x, y) = x + 10 y on a 4x4 map; bilinear interpolation reproduces a linear f exactly
LINEAR = (np.arange(4)[None, :] + 10 * np.arange(4)[:, None]).astype(np.float32).reshape(1, 4, 4, 1)


def roi_align(img, rois, batches, out_h, out_w, h_ratio=1.0, w_ratio=1.0, h_samples=0, w_samples=0,
              nchw=False, t=T.TENSOR_FLOAT32, roi_t=None, scale=0.0, zp=0, out_scale=None, out_zp=None,
              roi_scale=0.0, roi_zp=0):
    roi_t = roi_t or t
    f = T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32
    ins = [tensor(t, img, scale, zp), tensor(roi_t, rois, roi_scale, roi_zp), tensor(T.TENSOR_INT32, batches),
           scalar(T.INT32, out_h), scalar(T.INT32, out_w), scalar(f, h_ratio), scalar(f, w_ratio),
           scalar(T.INT32, h_samples), scalar(T.INT32, w_samples), scalar(T.BOOL, nchw)]
    out = output(t, None, scale if out_scale is None else out_scale, zp if out_zp is None else out_zp)
    return run_operation(O.ROI_ALIGN, ins, [out])[0]


def roi_pool(img, rois, batches, out_h, out_w, h_ratio=1.0, w_ratio=1.0, nchw=False, t=T.TENSOR_FLOAT32,
             roi_t=None, scale=0.0, zp=0, roi_scale=0.0, out_scale=None):
    roi_t = roi_t or t
    f = T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32
    ins = [tensor(t, img, scale, zp), tensor(roi_t, rois, roi_scale), tensor(T.TENSOR_INT32, batches),
           scalar(T.INT32, out_h), scalar(T.INT32, out_w), scalar(f, h_ratio), scalar(f, w_ratio),
           scalar(T.BOOL, nchw)]
    out = output(t, None, scale if out_scale is None else out_scale, zp)
    return run_operation(O.ROI_POOLING, ins, [out])[0]


# ---------------------------------------------------------------------------------------------- ROI_ALIGN

def test_align_single_sample_is_bilinear_interpolation():
    img = np.array([[0, 1], [2, 3]], np.float32).reshape(1, 2, 2, 1)
    # ROI (0, 0)-(1, 1), one bin, one sample at its centre (0.5, 0.5): the mean of the 4 pixels
    out = roi_align(img, [[0, 0, 1, 1]], [0], 1, 1, h_samples=1, w_samples=1)
    np.testing.assert_allclose(out.reshape(-1), [1.5])


def test_align_full_image_averages_samples():
    # one bin over the whole 4x4 map, 2x2 samples at 1 and 3 (3 is the last pixel, no neighbour):
    # the average of pixels (1,1), (1,3), (3,1), (3,3)
    out = roi_align(LINEAR, [[0, 0, 4, 4]], [0], 1, 1, h_samples=2, w_samples=2)
    expected = LINEAR[0, [1, 1, 3, 3], [1, 3, 1, 3], 0].mean()
    np.testing.assert_allclose(out.reshape(-1), [expected], rtol=1e-6)


def test_align_adaptive_sampling_by_hand():
    # 2x2 bins of size 2 -> ceil(2) = 2 samples per axis at 0.5, 1.5 | 2.5, 3.5; a sample at 3.5 is
    # past the last pixel centre and reads pixel 3, so the second bin averages x = 2.5 and 3.
    out = roi_align(LINEAR, [[0, 0, 4, 4]], [0], 2, 2)
    xm = [1.0, 2.75]
    expected = np.array([[x + 10 * y for x in xm] for y in xm])
    np.testing.assert_allclose(out[0, :, :, 0], expected, rtol=1e-6)


def test_align_ratio_scales_rois():
    a = roi_align(LINEAR, [[0, 0, 4, 4]], [0], 2, 2)
    b = roi_align(LINEAR, [[0, 0, 8, 16]], [0], 2, 2, h_ratio=4.0, w_ratio=2.0)
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_align_batch_index_and_layout():
    img = np.stack([LINEAR[0], 100 + LINEAR[0]])
    rois = [[0, 0, 2, 2], [1, 1, 3, 4], [0, 0, 2, 2]]
    out = roi_align(img, rois, [0, 1, 1], 2, 3, h_samples=2, w_samples=1)
    assert out.shape == (3, 2, 3, 1)
    np.testing.assert_allclose(out[2], out[0] + 100, rtol=1e-6)
    nchw = roi_align(img.transpose(0, 3, 1, 2), rois, [0, 1, 1], 2, 3, h_samples=2, w_samples=1, nchw=True)
    np.testing.assert_allclose(nchw, out.transpose(0, 3, 1, 2), rtol=1e-6)


def test_align_float16():
    out = roi_align(LINEAR.astype(np.float16), np.array([[0, 0, 4, 4]], np.float16), [0], 2, 2,
                    t=T.TENSOR_FLOAT16)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out[0, :, :, 0].astype(np.float32), [[11, 12.75], [28.5, 30.25]], rtol=1e-3)


@pytest.mark.parametrize("t, q", [(T.TENSOR_QUANT8_ASYMM, 140), (T.TENSOR_QUANT8_ASYMM_SIGNED, -37)])
def test_align_quantized_constant_map(t, q):
    # a constant map averages to itself; ROIs are QUANT16_ASYMM in units of 1/8
    img = np.full((1, 5, 5, 2), q, dtype=np.uint8 if t == T.TENSOR_QUANT8_ASYMM else np.int8)
    rois = np.array([[0, 0, 32, 32], [8, 4, 40, 24]], np.uint16)
    out = roi_align(img, rois, [0, 0], 2, 2, t=t, roi_t=T.TENSOR_QUANT16_ASYMM, scale=0.5, zp=3,
                    roi_scale=0.125)
    assert np.all(np.abs(out.astype(int) - q) <= 1)
    # requantized to a different output scale: real value (q - 3) * 0.5 at scale 0.25, zero point 0
    out2 = roi_align(img, rois, [0, 0], 2, 2, t=t, roi_t=T.TENSOR_QUANT16_ASYMM, scale=0.5, zp=3,
                     roi_scale=0.125, out_scale=0.25, out_zp=0)
    lo, hi = (0, 255) if t == T.TENSOR_QUANT8_ASYMM else (-128, 127)
    assert np.all(np.abs(out2.astype(int) - np.clip((q - 3) * 2, lo, hi)) <= 1)


@pytest.mark.parametrize("rois,out_w", [([[0, 0, 1, 1]], 5), ([[0.5, 0, 1.5, 1]], 7)])
def test_align_sums_as_many_samples_as_it_divides_by(rois, out_w):
    """Each bin takes exactly sampling-ratio samples per axis (AOSP's loop since April 2019), so a
    map of ones averages to 1 whatever the ratio; the earlier float32 ``while (v < end)`` loop
    took 3,001 samples of 3,000 in some of these bins (1.00033)."""
    ones = np.ones((1, 4, 4, 1), np.float32)
    out = roi_align(ones, rois, [0], 1, out_w, h_samples=1, w_samples=3000)
    np.testing.assert_allclose(out, np.ones((1, 1, out_w, 1)), rtol=1e-6)


# ---------------------------------------------------------------------------------------------- ROI_POOLING

def test_pooling_quadrant_max_by_hand():
    img = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    # ROI (0,0)-(3,3) covers pixels 0..3 -> 4 / 2 = 2 pixels per bin
    out = roi_pool(img, [[0, 0, 3, 3]], [0], 2, 2)
    np.testing.assert_array_equal(out[0, :, :, 0], [[5, 7], [13, 15]])
    # ratio 2: the same ROI given in image coordinates twice as large
    out2 = roi_pool(img, [[0, 0, 6, 6]], [0], 2, 2, h_ratio=2.0, w_ratio=2.0)
    np.testing.assert_array_equal(out2, out)


def test_pooling_single_pixel_roi_and_nchw():
    img = np.random.default_rng(3).random((2, 3, 4, 5), np.float32)
    out = roi_pool(img, [[2, 1, 2, 1], [0, 0, 3, 2]], [1, 0], 1, 1)
    np.testing.assert_array_equal(out[0, 0, 0], img[1, 1, 2])
    np.testing.assert_array_equal(out[1, 0, 0], img[0].max(axis=(0, 1)))
    nchw = roi_pool(img.transpose(0, 3, 1, 2), [[2, 1, 2, 1], [0, 0, 3, 2]], [1, 0], 1, 1, nchw=True)
    np.testing.assert_array_equal(nchw, out.transpose(0, 3, 1, 2))


def test_pooling_quantized():
    img = np.arange(16, dtype=np.int8).reshape(1, 4, 4, 1) - 8
    rois = np.array([[0, 0, 24, 24]], np.uint16)          # (0,0)-(3,3) in units of 1/8
    out = roi_pool(img, rois, [0], 2, 2, t=T.TENSOR_QUANT8_ASYMM_SIGNED, roi_t=T.TENSOR_QUANT16_ASYMM,
                   scale=0.5, zp=1, roi_scale=0.125)
    np.testing.assert_array_equal(out[0, :, :, 0], np.array([[5, 7], [13, 15]]) - 8)


def test_pooling_nan_only_where_it_starts_a_bin():
    """AOSP (RoiPooling.cpp) starts each bin's maximum at its first pixel (row-major) and takes
    only greater values: a NaN there is the result, a NaN elsewhere in the bin is skipped."""
    img = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    img[0, 1, 1, 0] = img[0, 0, 2, 0] = img[0, 3, 3, 0] = np.nan   # inside bin (0,0), first of (0,1), last of (1,1)
    out = roi_pool(img, [[0, 0, 3, 3]], [0], 2, 2)
    np.testing.assert_array_equal(out[0, :, :, 0], [[4, np.nan], [13, 14]])
    half = roi_pool(img.astype(np.float16), [[0, 0, 3, 3]], [0], 2, 2, t=T.TENSOR_FLOAT16)
    np.testing.assert_array_equal(half[0, :, :, 0], [[4, np.nan], [13, 14]])


# ---------------------------------------------------------------------------------------------- zero ROIs

def test_zero_rois_from_nms_give_empty_output():
    """BOX_WITH_NMS_LIMIT keeping no box feeds ROI_ALIGN zero ROIs: the output is zero-sized."""
    m = Model()
    f32 = lambda dims: m.add_operand(OperandType(T.TENSOR_FLOAT32, dims))
    i32 = lambda dims: m.add_operand(OperandType(T.TENSOR_INT32, dims))
    sc, box, bat = f32([1, 2]), f32([1, 8]), i32([1])
    nms_params = [(T.FLOAT32, 0.9), (T.INT32, -1), (T.INT32, 0), (T.FLOAT32, 0.5), (T.FLOAT32, 1.0),
                  (T.FLOAT32, 0.1)]
    params = []
    for t, v in nms_params:
        k = m.add_operand(OperandType(t, []))
        m.set_operand_value(k, np.asarray(v, np.float32 if t == T.FLOAT32 else np.int32))
        params.append(k)
    o_sc, o_box, o_cls, o_bat = f32([0]), f32([0, 4]), i32([0]), i32([0])
    m.add_operation(O.BOX_WITH_NMS_LIMIT, [sc, box, bat] + params, [o_sc, o_box, o_cls, o_bat])
    img = f32([1, 4, 4, 1])
    align_params = []
    for t, v in [(T.INT32, 2), (T.INT32, 2), (T.FLOAT32, 1.0), (T.FLOAT32, 1.0), (T.INT32, 0), (T.INT32, 0),
                 (T.BOOL, False)]:
        k = m.add_operand(OperandType(t, []))
        m.set_operand_value(k, np.asarray(v, {T.FLOAT32: np.float32, T.INT32: np.int32, T.BOOL: np.bool_}[t]))
        align_params.append(k)
    out = f32([0, 2, 2, 1])
    m.add_operation(O.ROI_ALIGN, [img, o_box, o_bat] + align_params, [out])
    m.identify_inputs_and_outputs([sc, box, bat, img], [o_sc, out])
    m.finish()
    c = Compilation(m)
    c.finish()
    e = Execution(c)
    e.set_input(0, np.array([[0.9, 0.5]], np.float32))     # class-1 score 0.5 <= threshold 0.9
    e.set_input(1, np.array([[0, 0, 1, 1, 0, 0, 2, 2]], np.float32))
    e.set_input(2, np.array([0], np.int32))
    e.set_input(3, LINEAR)
    e.set_output(0, np.zeros(4, np.float32))
    e.set_output(1, np.zeros(16, np.float32))
    e.compute()
    assert list(e.get_output_operand_dimensions(0)) == [0]
    assert list(e.get_output_operand_dimensions(1)) == [0, 2, 2, 1]


# ---------------------------------------------------------------------------------------------- validation

def code_of(fn, *args, **kwargs):
    with pytest.raises(NnapiError) as e:
        fn(*args, **kwargs)
    return e.value.code


@pytest.mark.parametrize("fn", [roi_align, roi_pool])
def test_validation_bad_data(fn):
    ok = dict(img=LINEAR, rois=[[0, 0, 2, 2]], batches=[0], out_h=2, out_w=2)
    assert code_of(fn, **{**ok, "out_h": 0}) == ResultCode.BAD_DATA
    assert code_of(fn, **{**ok, "h_ratio": 0.0}) == ResultCode.BAD_DATA
    assert code_of(fn, **{**ok, "rois": [[0, 0, 2, 2, 1]]}) == ResultCode.BAD_DATA          # not [n, 4]
    assert code_of(fn, **{**ok, "rois": [0, 0, 2, 2]}) == ResultCode.BAD_DATA              # rank 1
    assert code_of(fn, **{**ok, "batches": [0, 0]}) == ResultCode.BAD_DATA                 # one per ROI
    assert code_of(fn, **{**ok, "img": LINEAR[0]}) == ResultCode.BAD_DATA                  # rank 3
    # QUANT16 ROIs must have scale 0.125
    assert code_of(fn, img=LINEAR.astype(np.uint8), rois=np.array([[0, 0, 8, 8]], np.uint16), batches=[0],
                   out_h=1, out_w=1, t=T.TENSOR_QUANT8_ASYMM, roi_t=T.TENSOR_QUANT16_ASYMM, scale=1.0,
                   roi_scale=0.25) == ResultCode.BAD_DATA


def test_align_negative_sampling_ratio():
    assert code_of(roi_align, LINEAR, [[0, 0, 2, 2]], [0], 2, 2, h_samples=-1) == ResultCode.BAD_DATA


def test_pooling_quantized_output_must_keep_input_quantization():
    assert code_of(roi_pool, LINEAR.astype(np.uint8), np.array([[0, 0, 8, 8]], np.uint16), [0], 1, 1,
                   t=T.TENSOR_QUANT8_ASYMM, roi_t=T.TENSOR_QUANT16_ASYMM, scale=1.0, roi_scale=0.125,
                   out_scale=2.0) == ResultCode.BAD_DATA


@pytest.mark.parametrize("fn", [roi_align, roi_pool])
@pytest.mark.parametrize("rois, batches", [([[0, 0, 5, 2]], [0]),      # beyond the 4-wide map
                                           ([[2, 0, 1, 2]], [0]),      # x2 < x1
                                           ([[-1, 0, 1, 2]], [0]),     # negative
                                           ([[0, 0, 1, 1]], [1])])     # no batch 1
def test_bad_rois_fail_at_execution(fn, rois, batches):
    # values known only at execution: the runtime reports the operation's failure as OP_FAILED
    assert code_of(fn, LINEAR, rois, batches, 1, 1) == ResultCode.OP_FAILED
