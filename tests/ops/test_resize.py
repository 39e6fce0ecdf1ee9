"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR: hand-computed cases, properties, validation."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nnapi_ref.errors import NnapiError
from nnapi_ref.types import OperandCode as T, OperationCode as O, ResultCode
from nnts.generators.builders import output, run_operation, scalar, tensor

BIL, NN = O.RESIZE_BILINEAR, O.RESIZE_NEAREST_NEIGHBOR

# the 2x2 image [[0, 1], [2, 3]], i.e. f(x, y) = x + 2y, as NHWC with one channel
IMG = np.array([[0, 1], [2, 3]], np.float32).reshape(1, 2, 2, 1)


def resize(code, img, w, h, *flags, t=T.TENSOR_FLOAT32, scale=0.0, zp=0, size_type=T.INT32,
           out_scale=None, out_zp=None):
    ins = [tensor(t, img, scale, zp), scalar(size_type, w), scalar(size_type, h)]
    ins += [scalar(T.BOOL, f) for f in flags]
    out = output(t, None, scale if out_scale is None else out_scale, zp if out_zp is None else out_zp)
    return run_operation(code, ins, [out])[0]


def axis_values(positions):
    """f(x, y) = x + 2y sampled at the given coordinates (bilinear is exact on linear f)."""
    xs = np.asarray(positions, np.float32)
    return xs[None, :] + 2 * xs[:, None]


def test_bilinear_upscale_by_hand():
    # scale 2/3: rows/cols sample source coordinates 0, 2/3, 4/3 (the last clamps to 1)
    out = resize(BIL, IMG, 3, 3)
    expected = axis_values([0, 2 / 3, 1])
    np.testing.assert_allclose(out[0, :, :, 0], expected, rtol=1e-6, atol=1e-6)


def test_bilinear_align_corners_by_hand():
    out = resize(BIL, IMG, 3, 3, False, True, False)
    np.testing.assert_allclose(out[0, :, :, 0], [[0, .5, 1], [1, 1.5, 2], [2, 2.5, 3]], atol=1e-6)


def test_bilinear_half_pixel_centers_by_hand():
    # source coordinate (i + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25, clamped to [0, 1]
    out = resize(BIL, IMG, 4, 4, False, False, True)
    np.testing.assert_allclose(out[0, :, :, 0], axis_values([0, .25, .75, 1]), atol=1e-6)


def test_bilinear_downscale_picks_top_left_samples():
    img = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    out = resize(BIL, img, 2, 2)
    np.testing.assert_array_equal(out[0, :, :, 0], [[0, 2], [8, 10]])


def test_bilinear_width_and_height_order():
    img = np.arange(6, dtype=np.float32).reshape(1, 2, 3, 1)  # height 2, width 3
    out = resize(BIL, img, 6, 2)   # inputs are (width, height)
    assert out.shape == (1, 2, 6, 1)


def test_bilinear_quant8_rounds_half_up():
    """A quantized image's interpolated value is rounded half up, as AOSP's (TFLite's reference)
    kernel adds 0.5 before its cast; the goldens are the interpolation done by hand."""
    img = np.array([10, 20], np.uint8).reshape(1, 1, 2, 1)
    out = resize(BIL, img, 4, 1, t=T.TENSOR_QUANT8_ASYMM, scale=0.5, zp=3)
    np.testing.assert_array_equal(out.reshape(-1), [10, 15, 20, 20])
    # columns sample 0, 0.5, 1, 1.5: the values 0, 1.5, 3, 3 (AOSP and ONNX Runtime give [0, 2, 3, 3])
    half = resize(BIL, np.array([0, 3], np.uint8).reshape(1, 1, 2, 1), 4, 1, t=T.TENSOR_QUANT8_ASYMM, scale=0.5)
    np.testing.assert_array_equal(half.reshape(-1), [0, 2, 3, 3])
    # columns sample 0, 0.25, ..., 1.75: -7, -5.25, -3.5, -1.75, then 0; -5.5 above rounds up to -5
    signed = resize(BIL, np.array([-11, 0], np.int8).reshape(1, 1, 2, 1), 4, 1, False,
                    t=T.TENSOR_QUANT8_ASYMM_SIGNED, scale=0.5, zp=0)
    np.testing.assert_array_equal(signed.reshape(-1), [-11, -5, 0, 0])
    quarters = resize(BIL, np.array([-7, 0], np.int8).reshape(1, 1, 2, 1), 8, 1, False,
                      t=T.TENSOR_QUANT8_ASYMM_SIGNED, scale=0.5, zp=0)
    np.testing.assert_array_equal(quarters.reshape(-1), [-7, -5, -3, -2, 0, 0, 0, 0])


@pytest.mark.parametrize("t, value", [(T.TENSOR_QUANT8_ASYMM, 46), (T.TENSOR_QUANT8_ASYMM_SIGNED, -18)])
def test_bilinear_quant8_of_one_pixel_is_that_pixel(t, value):
    """Every output of a one-pixel image is that pixel, though the float32 weights (sixths and
    quarters) do not sum to exactly 1: a truncating cast gave 45 at 3 of the 24 places."""
    img = np.array([value], np.uint8 if t == T.TENSOR_QUANT8_ASYMM else np.int8).reshape(1, 1, 1, 1)
    out = resize(BIL, img, 6, 4, t=t, scale=0.25, zp=0)
    assert out.shape == (1, 4, 6, 1)
    assert (out == value).all()


def test_float16_matches_hand_values():
    out = resize(BIL, IMG.astype(np.float16), 3, 3, False, True, False, t=T.TENSOR_FLOAT16)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out[0, :, :, 0].astype(np.float32), [[0, .5, 1], [1, 1.5, 2], [2, 2.5, 3]])


def test_scale_factors_equal_output_size():
    img = np.random.default_rng(0).random((2, 3, 5, 2), np.float32)
    by_size = resize(BIL, img, 10, 6)
    by_scale = resize(BIL, img, 2.0, 2.0, size_type=T.FLOAT32)
    np.testing.assert_array_equal(by_size, by_scale)
    # floor(3 * 1.5) = 4, floor(5 * 1.3) = 6
    assert resize(NN, img, 1.3, 1.5, False, size_type=T.FLOAT32).shape == (2, 4, 6, 2)


def test_nchw_is_transposed_nhwc():
    img = np.random.default_rng(1).random((1, 3, 4, 2), np.float32)
    nhwc = resize(BIL, img, 7, 5, False)
    nchw = resize(BIL, img.transpose(0, 3, 1, 2), 7, 5, True)
    np.testing.assert_array_equal(nchw, nhwc.transpose(0, 3, 1, 2))


@settings(max_examples=15, deadline=None)
@given(h=st.integers(1, 5), w=st.integers(1, 5), c=st.integers(1, 3),
       flags=st.sampled_from([(False, False), (True, False), (False, True)]),
       nearest=st.booleans())
def test_same_size_is_identity(h, w, c, flags, nearest):
    img = np.random.default_rng(h * 31 + w).random((1, h, w, c), np.float32)
    out = resize(NN if nearest else BIL, img, w, h, False, *flags)
    np.testing.assert_array_equal(out, img)


def test_nearest_integer_upscale_repeats_pixels():
    img = np.arange(6, dtype=np.float32).reshape(1, 2, 3, 1)
    out = resize(NN, img, 6, 4, False)
    expected = np.repeat(np.repeat(img[0, :, :, 0], 2, axis=0), 2, axis=1)
    np.testing.assert_array_equal(out[0, :, :, 0], expected)


def test_nearest_align_corners_and_half_pixel_by_hand():
    row = np.array([0, 1, 2], np.float32).reshape(1, 1, 3, 1)
    # align corners: scale (3 - 1) / (2 - 1) = 2 -> sources 0 and 2
    np.testing.assert_array_equal(resize(NN, row, 2, 1, False, True, False).reshape(-1), [0, 2])
    # half pixel, 3 -> 2: scale 1.5, sources floor(0.75) = 0, floor(2.25) = 2
    np.testing.assert_array_equal(resize(NN, row, 2, 1, False, False, True).reshape(-1), [0, 2])
    # legacy, 3 -> 2: sources floor(0) = 0, floor(1.5) = 1
    np.testing.assert_array_equal(resize(NN, row, 2, 1, False).reshape(-1), [0, 1])


def test_nearest_quantized_copies_values():
    img = np.array([[1, 200], [7, 255]], np.uint8).reshape(1, 2, 2, 1)
    out = resize(NN, img, 4, 4, False, t=T.TENSOR_QUANT8_ASYMM, scale=0.1, zp=5)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out[0, ::2, ::2, 0], img[0, :, :, 0])


def bad(code, *args, **kwargs):
    with pytest.raises(NnapiError) as e:
        resize(code, *args, **kwargs)
    assert e.value.code == ResultCode.BAD_DATA, e.value


def test_validation():
    bad(BIL, IMG, 4, 4, False, True, True)                      # align_corners and half_pixel_centers
    bad(BIL, IMG, 0, 4)                                         # zero output width
    bad(NN, IMG, 4, -1, False)                                  # negative output height
    bad(BIL, IMG, 0.2, 2.0, size_type=T.FLOAT32)                # floor(2 * 0.2) = 0
    bad(BIL, IMG[0], 4, 4)                                      # rank 3 input
    bad(NN, IMG, 4, 4)                                          # NEAREST_NEIGHBOR needs the layout flag
    bad(BIL, IMG.astype(np.float16), 2.0, 2.0, size_type=T.FLOAT32, t=T.TENSOR_FLOAT16)  # FLOAT16 scales
