"""Formats, schemes and quantize_tensor: zero-copy in and out, round trips from NumPy and torch, errors."""

import numpy as np
import pytest

import lowbit
from lowbit import _lowbit

torch = pytest.importorskip("torch")


def weights(rows=64, cols=256, seed=0):
    return np.random.default_rng(seed).normal(0, 0.02, size=(rows, cols)).astype(np.float32)


def test_formats_match_the_cli():
    from conftest import run_cli_json

    assert lowbit.formats() == run_cli_json("formats")
    names = [f["name"] for f in lowbit.formats()]
    assert {"int4", "nf4", "mxfp4", "nvfp4", "fp8_e4m3"} <= set(names)


def test_scheme_fields_and_bits_per_weight():
    s = lowbit.Scheme("int4:g128")
    assert (s.format, s.bits, s.granularity, s.group, s.scale_type, s.asymmetric) == ("int4", 4, "group", 128, "f16", False)
    assert s.bits_per_weight() == pytest.approx(4 + 16 / 128)  # codes + one fp16 scale per 128 weights
    a = lowbit.Scheme("int4:g128:asym")
    assert a.asymmetric and a.bits_per_weight() == pytest.approx(4 + (16 + 4) / 128)
    n = lowbit.Scheme("nvfp4")
    assert n.tensor_scale and n.scale_type == "ue4m3" and n.group == 16
    assert lowbit.Scheme("int4:g128") == lowbit.Scheme(s.text) and repr(s) == "Scheme('int4:g128:scale=f16')"


def test_bad_scheme_is_a_lowbit_error():
    with pytest.raises(lowbit.Error, match="int9"):
        lowbit.Scheme("int9")


def test_codes_scales_zeros_are_views_of_the_tensor():
    w = weights()
    q = lowbit.quantize_tensor(w, lowbit.Scheme("int4:g64:asym"))
    codes = q.codes
    assert codes.dtype == np.uint8 and codes.shape == (64, 128)
    assert codes.__array_interface__["data"][0] == q.codes.__array_interface__["data"][0]
    assert q.scales.dtype == np.float16 and q.scales.shape == (64, 4)
    assert q.zeros.dtype == np.uint8 and q.zeros.shape == (64, 2)  # four 4-bit zero-points per row
    before = q.dequantize()
    codes[0, 0] ^= 0x0F  # the first code of row 0: writing the view changes the tensor
    after = q.dequantize()
    assert after[0, 0] != before[0, 0] and np.array_equal(after[1:], before[1:])
    del q  # the views keep the storage alive
    assert codes[0, 0] == codes[0, 0]


def test_float32_input_is_read_in_place():
    w = weights()
    assert _lowbit._input_address(w) == w.__array_interface__["data"][0]
    t = torch.from_numpy(w)
    assert _lowbit._input_address(t) == t.data_ptr()
    half = w.astype(np.float16)
    assert _lowbit._input_address(half) != half.__array_interface__["data"][0]  # widened: a copy is needed


def test_round_trip_error_matches_numpy():
    w = weights()
    q = lowbit.quantize_tensor(w, lowbit.Scheme("int8:channel"))
    back = lowbit.dequantize(q)
    assert back.shape == w.shape and back.dtype == np.float32
    report = q.error_report(w)
    assert report["mse"] == pytest.approx(float(np.mean((w.astype(np.float64) - back) ** 2)), rel=1e-9)
    # int8 per channel: every error is half a step at most (the row's stored scale, amax / 127.5 in fp16), plus
    # the clamp of amax itself to code 127 after the scale's fp16 rounding (127.5 * 2^-11 of a step)
    step = q.scale_values()
    assert step.shape == (64, 1)
    assert np.all(np.abs(w - back) <= step * (0.5 + 127.5 * 2.0**-11))
    assert q.bits_per_weight == pytest.approx(8 + 16 / 256)


def test_int4_by_hand():
    # The GPTQ / compressed-tensors grid: scale = amax / 7.5 = 0.09333 (stored as fp16 0.0933228), codes
    # round(w / scale) clamped to [-8, 7]: 7.5 -> 7, -3.75 -> -4, 1.07 -> 1, 0 -> 0, stored offset-binary
    # (code + 8): 15, 4, 9, 8, two per byte with the first in the low nibble: 0x4F, 0x89.
    w = np.array([[0.7, -0.35, 0.1, 0.0]], dtype=np.float32)
    q = lowbit.quantize_tensor(w, lowbit.Scheme("int4:channel"))
    assert q.scales.dtype == np.float16 and float(q.scales[0, 0]) == float(np.float16(0.7 / 7.5))
    assert list(q.codes[0]) == [0x4F, 0x89]


def test_numpy_and_torch_give_the_same_codes():
    w = weights(32, 128, seed=3)
    s = lowbit.Scheme("nvfp4")
    a = lowbit.quantize_tensor(w, s)
    b = lowbit.quantize_tensor(torch.from_numpy(w), s)
    assert np.array_equal(a.codes, b.codes) and np.array_equal(a.scales, b.scales)
    assert a.tensor_scale == b.tensor_scale


def test_bf16_and_fp16_inputs_quantize_their_exact_values():
    w = torch.from_numpy(weights(16, 128, seed=4)).to(torch.bfloat16)
    s = lowbit.Scheme("int4:g32")
    from_bf16 = lowbit.quantize_tensor(w, s)
    from_fp32 = lowbit.quantize_tensor(w.float().numpy(), s)  # bf16 -> fp32 is exact
    assert np.array_equal(from_bf16.codes, from_fp32.codes)
    h = weights(16, 128, seed=5).astype(np.float16)
    assert np.array_equal(lowbit.quantize_tensor(h, s).codes, lowbit.quantize_tensor(h.astype(np.float32), s).codes)


def test_bad_arrays_are_refused_clearly():
    s = lowbit.Scheme("int4:g32")
    with pytest.raises(lowbit.Error, match="float32, float16 or bfloat16"):
        lowbit.quantize_tensor(np.ones((4, 64), dtype=np.int32), s)
    with pytest.raises(lowbit.Error, match="not C-contiguous"):
        lowbit.quantize_tensor(weights(64, 128).T, s)
    with pytest.raises(lowbit.Error, match="1-D or 2-D"):
        lowbit.quantize_tensor(np.ones((2, 2, 64), dtype=np.float32), s)
    with pytest.raises(TypeError):
        lowbit.quantize_tensor([[0.5, 0.25]], s)  # not an array
