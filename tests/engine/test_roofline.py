"""Roofs per compute unit, and where a measurement sits under them."""

import math

import pytest

from kbench import metrics, roofline
from kbench.devices import by_key
from kbench.record import Record


def record(median_ms, flops, nbytes, dtype="fp16", tf32=False, status="OK", label="k") -> Record:
    return Record.from_json({"schema": 1, "status": status, "suite": "s", "impl": label, "label": label,
                             "case_key": "c", "case": {"dtype": dtype, "tf32": tf32}, "flops": flops,
                             "min_bytes": nbytes, "timing": {"stats": {"median": median_ms}}})


def test_compute_roof_by_unit():
    h200 = by_key("h200")
    assert roofline.compute_roof(h200, "tensor", "fp16") == (989, "fp16 tensor cores")
    assert roofline.compute_roof(h200, "tensor", "bf16")[0] == 989
    # fp32 without TF32 runs on the CUDA cores even in cuBLAS
    assert roofline.compute_roof(h200, "tensor", "fp32") == (67, "fp32 CUDA cores")
    assert roofline.compute_roof(h200, "tensor", "fp32", tf32=True) == (495, "tf32 tensor cores")
    assert roofline.compute_roof(h200, "cuda-core", "fp16") == (67, "fp32 CUDA cores")
    assert roofline.compute_roof(h200, "memory", "fp32") == (None, "memory")


def test_the_a100_roofline_of_312_over_2():
    a100 = by_key("a100")
    # 312 TFLOP/s over 2 TB/s: the ridge at 156 FLOP/byte
    assert a100.ridge["fp16"] == pytest.approx(156.0)
    below = roofline.point(record(1.0, 100e9, 1e9), a100, "tensor")  # intensity 100 < 156
    assert below.bound == "memory" and below.attainable_tflops == pytest.approx(200.0)
    above = roofline.point(record(1.0, 300e9, 1e9), a100, "tensor")  # intensity 300 > 156
    assert above.bound == "compute" and above.attainable_tflops == 312


def test_same_measurement_on_two_roofs():
    # 400 TFLOP/s at intensity 1000 is 40 % of an H200's roof but above an A100's: impossible there.
    rec = record(1.0, 400e9, 0.4e9)
    on_h200 = roofline.point(rec, by_key("h200"), "tensor")
    on_a100 = roofline.point(rec, by_key("a100"), "tensor")
    assert on_h200.valid and on_h200.pct_of_roof == pytest.approx(100 * 400 / 989)
    assert not on_a100.valid and on_a100.pct_of_roof > 100


def test_memory_unit_has_only_the_bandwidth_roof():
    p = roofline.point(record(1.0, 1e9, 4e9, dtype="fp32"), by_key("h200"), "memory")
    assert p.bound == "memory" and p.compute_tflops is None
    assert p.attained_tbs == pytest.approx(4.0) and p.pct_of_roof == pytest.approx(100 * 4.0 / 4.8)


def test_no_point_without_an_ok_time():
    assert roofline.point(record(1.0, 1e9, 1e9, status="FAIL"), by_key("h200"), "tensor") is None
    assert roofline.point(record(None, 1e9, 1e9), by_key("h200"), "tensor") is None


def test_metrics_take_the_units_roof():
    h200 = by_key("h200")
    # A TF32 matmul at 300 TFLOP/s: possible on tensor cores, impossible on fp32 CUDA cores.
    flops = 2 * 4096**3
    ms = flops / 300e12 * 1e3
    assert metrics.impossible(ms, flops, 3 * 4096**2 * 4, "fp32", h200)  # dtype peak alone: 67
    assert metrics.impossible(ms, flops, 3 * 4096**2 * 4, "fp32", h200, compute_tflops=495) == ""
    m = metrics.derive(ms, flops, 3 * 4096**2 * 4, "fp32", h200, compute_tflops=495)
    assert m["pct_of_peak"] == pytest.approx(100 * 300 / 495) and m["bound"] == "compute"
    # a memory kernel: infinite compute roof, the bandwidth alone decides
    m = metrics.derive(1.0, 1e9, 4.8e9, "fp32", h200, compute_tflops=math.inf)
    assert m["bound"] == "memory" and m["pct_of_peak"] == pytest.approx(100.0)
