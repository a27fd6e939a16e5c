"""Case axes, the attention suite's data and reference, derived metrics and report formatting."""

from __future__ import annotations

import csv
import io
import json

import pytest
import torch
from rich.console import Console

from kbench import metrics, report
from kbench.devices import PEAKS, by_key, peaks_for
from kbench.errors import UserError
from kbench.record import Record, Stats
from kbench.suite import Axis, Case, Suite

# --- axes and cases --------------------------------------------------------------

def test_axis_parse_ints_floats_strings_bools():
    assert Axis("n", int, (1,), "").parse("256") == [256]
    assert Axis("n", int, (1,), "").parse(" 1, 2 ,3") == [1, 2, 3]
    assert Axis("x", float, (1.0,), "").parse("0.5,2") == [0.5, 2.0]
    assert Axis("s", str, ("a",), "", choices=("a", "b")).parse("b,a") == ["b", "a"]
    flag = Axis("causal", bool, (False,), "")
    assert flag.parse("true,0,YES,off") == [True, False, True, False]
    with pytest.raises(UserError, match="'maybe' is not a boolean"):
        flag.parse("maybe")
    with pytest.raises(UserError, match="--x: 'abc' is not a number"):
        Axis("x", float, (1.0,), "").parse("abc")
    with pytest.raises(UserError, match=r"--s: unknown value 'c' \(choose from a, b\)"):
        Axis("s", str, ("a",), "", choices=("a", "b")).parse("c")
    with pytest.raises(UserError, match="empty value"):
        Axis("n", int, (1,), "").parse("1,")


def test_axis_option_name():
    assert Axis("head_dim", int, (1,), "").option == "--head-dim"


def test_case_identity():
    a = Case({"n": 1, "dtype": "fp16"})
    assert a.key == "n=1,dtype=fp16"
    assert repr(a) == "Case(n=1,dtype=fp16)"
    assert a.n == 1 and a.dtype == "fp16"
    with pytest.raises(AttributeError):
        a.d  # noqa: B018
    assert a == Case({"n": 1, "dtype": "fp16"}) and hash(a) == hash(Case({"n": 1, "dtype": "fp16"}))
    assert a != Case({"n": 2, "dtype": "fp16"})
    assert len({a, Case({"n": 1, "dtype": "fp16"})}) == 1


def test_suite_base_dtype_and_tolerance():
    class Toy(Suite):
        tolerances = {"fp32": (1.0, 2.0), "fp16": (3.0, 4.0)}

    toy = Toy()
    assert toy.dtype(Case({})) == "fp32"
    assert toy.tolerance(Case({"dtype": "fp16"})) == (3.0, 4.0)
    with pytest.raises(NotImplementedError):
        toy.make_inputs(Case({}), 0, "cpu")


# --- the attention suite -------------------------------------------------------------

def _case(**kw):
    values = {"n": 12, "d": 16, "batch": 2, "heads": 3, "dtype": "fp16", "causal": False}
    values.update(kw)
    return Case(values)


def test_attention_axes_and_defaults(attention):
    defaults = {axis.name: axis.default for axis in attention.axes}
    assert defaults == {"n": (256,), "d": (128,), "batch": (1,), "heads": (1,), "dtype": ("fp16",),
                        "causal": (False,)}
    assert attention.baseline == "naive"
    assert attention.distributions == ("normal", "large-scores", "outliers", "near-constant", "growing")
    assert attention.trials == len(attention.distributions)


@pytest.mark.parametrize("kw,message", [
    ({"n": 0}, "--n must be positive"), ({"batch": -1}, "--batch must be positive"),
    ({"heads": 0}, "--heads must be positive"), ({"d": 12}, "--d 12 is not supported"),
    ({"d": 264}, "--d 264 is not supported"), ({"d": 0}, "--d 0 is not supported"),
])
def test_attention_validate_rejects(attention, kw, message):
    with pytest.raises(UserError, match=message):
        attention.validate(_case(**kw))


def test_attention_validate_accepts(attention):
    for d in (8, 24, 256):
        attention.validate(_case(d=d))


def test_make_inputs_deterministic_and_fresh(attention):
    case = _case(dtype="bf16")
    a = attention.make_inputs(case, seed=3, device="cpu")
    b = attention.make_inputs(case, seed=3, device="cpu")
    c = attention.make_inputs(case, seed=4, device="cpu")
    assert set(a) == {"q", "k", "v"}
    for name in a:
        assert a[name].shape == (2, 3, 12, 16) and a[name].dtype == torch.bfloat16
        assert torch.equal(a[name], b[name])
        assert not torch.equal(a[name], c[name])
        assert a[name].abs().sum() > 0
    assert not torch.equal(a["q"], a["k"])  # three different tensors


def test_make_output_shape_dtype(attention):
    case = _case(dtype="fp32")
    out = attention.make_output(case, attention.make_inputs(case, 0, "cpu"))
    assert out.shape == (2, 3, 12, 16) and out.dtype == torch.float32


@pytest.mark.parametrize("causal", [False, True])
def test_reference_matches_torch_sdpa_in_float64(attention, causal):
    case = _case(n=13, causal=causal)
    inputs = attention.make_inputs(case, seed=1, device="cpu")
    ref = attention.reference(case, inputs)
    q, k, v = (inputs[x].double() for x in "qkv")
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert ref.dtype == torch.float64
    torch.testing.assert_close(ref, expected, rtol=1e-12, atol=1e-12)
    if causal:  # the first query sees only the first key
        torch.testing.assert_close(ref[..., 0, :], v[..., 0, :])


def test_flops_and_bytes(attention):
    case = _case(n=256, d=128, batch=1, heads=1, dtype="fp16")
    assert attention.flops(case) == 4 * 256 * 256 * 128
    assert attention.flops(_case(n=256, d=128, batch=1, heads=1, causal=True)) == 2 * 256 * 256 * 128
    assert attention.min_bytes(case) == 4 * 256 * 128 * 2
    assert attention.min_bytes(_case(n=256, d=128, batch=2, heads=4, dtype="fp32")) == 4 * 8 * 256 * 128 * 4
    # recorded only: the plain computation sets the bound (kbench.correctness)
    assert attention.tolerance(_case(dtype="bf16")) == (0.0, 0.0)


def test_plain_is_the_computation_in_the_cases_own_type(attention):
    """The plain computation rounds to the case's type (so its error, which scales the bound, is the
    type's): fp32 is far closer to the float64 reference than fp16, and fp16 than bf16."""
    errors = {}
    for dtype in ("fp32", "fp16", "bf16"):
        case = _case(n=40, d=32, dtype=dtype, causal=True)
        inputs = attention.make_inputs(case, seed=6, device="cpu")
        plain = attention.plain(case, inputs)
        assert plain.dtype == inputs["q"].dtype and tuple(plain.shape) == attention.shape(case)
        errors[dtype] = float((plain.double() - attention.reference(case, inputs)).abs().max())
    assert 0 < 100 * errors["fp32"] < errors["fp16"] < errors["bf16"]


@pytest.mark.parametrize("distribution", ["normal", "large-scores", "outliers", "near-constant", "growing"])
def test_input_distributions_are_seeded_and_finite(attention, distribution):
    case = _case(n=33, d=16, dtype="fp16")
    a = attention.make_inputs(case, seed=3, device="cpu", distribution=distribution)
    b = attention.make_inputs(case, seed=3, device="cpu", distribution=distribution)
    c = attention.make_inputs(case, seed=4, device="cpu", distribution=distribution)
    for name in ("q", "k", "v"):
        assert torch.equal(a[name], b[name]) and torch.isfinite(a[name]).all()
        assert a[name].dtype == torch.float16 and a[name].shape == (2, 3, 33, 16)
    assert any(not torch.equal(a[name], c[name]) for name in ("q", "k", "v"))
    assert torch.isfinite(attention.reference(case, a)).all()


# --- metrics and peaks -----------------------------------------------------------------

def test_derive_without_peaks():
    m = metrics.derive(median_ms=2.0, flops=4e12, min_bytes=2e9, dtype="fp16", peaks=None)
    assert m["tflops"] == pytest.approx(2000.0)
    assert m["gbps"] == pytest.approx(1000.0)
    assert m["intensity"] == pytest.approx(2000.0)
    assert m["pct_of_peak"] is None and m["bound"] is None


def test_derive_roofline():
    h100 = peaks_for("NVIDIA H100 80GB HBM3")
    # compute bound: intensity 1e4 flop/byte x 3.35 TB/s > 989 TFLOP/s
    m = metrics.derive(median_ms=1.0, flops=494.5e9, min_bytes=494.5e5, dtype="fp16", peaks=h100)
    assert m["bound"] == "compute"
    assert m["pct_of_peak"] == pytest.approx(50.0)
    # memory bound: intensity 1 flop/byte -> roof 3.35 TFLOP/s
    m = metrics.derive(median_ms=1.0, flops=3.35e9, min_bytes=3.35e9, dtype="fp16", peaks=h100)
    assert m["bound"] == "memory"
    assert m["pct_of_peak"] == pytest.approx(100.0)
    # a dtype the table lacks: no percentage
    assert metrics.derive(1.0, 1e9, 1e9, "int8", h100)["pct_of_peak"] is None


def test_speedup():
    assert metrics.speedup(2.0, 1.0) == 2.0
    assert metrics.speedup(None, 1.0) is None
    assert metrics.speedup(1.0, None) is None
    assert metrics.speedup(0.0, 1.0) is None


@pytest.mark.parametrize("reported,key", [
    ("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA A100-SXM4-80GB", "a100-80"), ("NVIDIA A100-SXM4-40GB", "a100-40"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie"), ("NVIDIA A100-PCIE-40GB", "a100-pcie-40"),
    ("NVIDIA L4", "l4"), ("NVIDIA L40S", "l40s"), ("NVIDIA GeForce RTX 4090", "rtx4090"),
])
def test_peaks_for(reported, key):
    assert peaks_for(reported).key == key


def test_peaks_table():
    assert peaks_for("Tesla T4") is None and peaks_for(None) is None
    assert by_key("a100").ridge["fp16"] == pytest.approx(156.0)  # the A100 roofline: 312 TFLOP/s over 2 TB/s
    assert by_key("h200").hbm_tbs == 4.8 and by_key("h200").sms == 132
    for p in PEAKS:
        assert p.compute_peak("fp16") >= p.compute_peak("fp32") > p.compute_peak("fp64")
        assert p.source and p.l2_mb > 0 and p.boost_mhz > 1000


# --- report ----------------------------------------------------------------------------------

def _json(impl, status="OK", median=1.5, reason="", speedup=None, warnings=(), device="cpu", gpu=None,
          method="cpu-wall-clock", clock=None, **fields) -> dict:
    """A record as a results file holds it; ``fields`` replace its top-level keys."""
    r = {"schema": 1, "suite": "attention", "impl": impl, "backend": "torch", "case_key": "n=1", "status": status,
         "reason": reason, "baseline": "naive", "env": {"device": device, "gpu": gpu}}
    if status == "OK":
        r["timing"] = {"method": method, "stats": {"median": median, "p20": median * 0.9,
                                                   "p80": median * 1.1, "n": 7},
                       "warnings": list(warnings)}
        if clock:
            r["timing"]["clock"] = clock
        r["metrics"] = {"tflops": 1.234, "gbps": 56.78, "pct_of_peak": None}
        r["correctness"] = {"max_abs_err": 1e-4, "max_rel_err": 2e-4}
        r["speedup"] = speedup
    return {**r, **fields}


def _record(impl, **options) -> Record:
    return Record.from_json(_json(impl, **options))


def test_format_time_and_spread():
    assert report.format_time(None) == "-"
    assert report.format_time(0.0123) == "12.3 us"
    assert report.format_time(12.3456) == "12.346 ms"
    assert report.format_time(2500) == "2.50 s"
    assert report.spread(Stats(median=2.0, p20=1.8, p80=2.2)) == "±10.0%"
    assert report.spread(Stats()) == "-"


def test_table_footnotes_mark_rows_with_notes():
    rows = [_record("naive", speedup=1.0), _record("slow", warnings=["noisy: median known to ±3.0%"]),
            _record("bad", status="CRASH", reason="worker killed by SIGSEGV")]
    table, notes = report.table_for_case("attention: n=1", rows)
    assert notes == ["slow: noisy: median known to ±3.0%", "bad: worker killed by SIGSEGV"]
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(table)
    text = console.export_text()
    assert "slow*" in text and "bad*" in text and "naive*" not in text
    assert "1.500 ms" in text and "1.00x" in text and "vs naive [95% CI]" in text
    assert "SM MHz" not in text  # no record carries a clock


def test_speedup_cell_shows_its_interval():
    fast = _record("fast", median=1.0, speedup=1.44, speedup_interval=[1.41, 1.47])
    unknown = _record("few", median=1.2, speedup=1.25, speedup_interval=[0.0, float("inf")])
    rows = [_record("naive", speedup=1.0, speedup_interval=[0.98, 1.02]), fast, unknown,
            _record("old", median=2.0, speedup=0.75)]  # a record from before intervals were kept
    table, _ = report.table_for_case("attention: n=1", rows)
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(table)
    text = console.export_text()
    assert "vs naive [95% CI]" in text
    assert "1.44x [1.41-1.47]" in text and "1.00x [0.98-1.02]" in text
    assert "1.25x" in text and "1.25x [" not in text  # an unbounded interval is not shown
    assert "0.75x" in text and "0.75x [" not in text


def test_sm_clock_column_appears_when_records_carry_it():
    clocked = _record("naive", speedup=1.0, clock={"sm_mhz_median": 1845, "throttled": 0})
    throttled = _record("hot", speedup=1.1, clock={"sm_mhz_median": 1410, "throttled": 12})
    rows = [clocked, throttled, _record("noclock"), _record("bad", status="CRASH", reason="killed")]
    table, _ = report.table_for_case("attention: n=1", rows)
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(table)
    lines = console.export_text().splitlines()
    assert any("SM MHz" in line for line in lines)
    row = {name: next(line for line in lines if line.strip().startswith(name)) for name in ("naive", "hot", "noclock")}
    assert row["naive"].rstrip().endswith("1845")
    assert row["hot"].rstrip().endswith("1410 (12 low)")
    assert row["noclock"].rstrip().endswith("-")


def _headers(rows) -> list[str]:
    table, _ = report.table_for_case("attention: n=1", rows)
    return [column.header for column in table.columns]


def test_cpu_table_leaves_out_the_throughput_columns():
    gpu = {"name": "NVIDIA H200", "driver": "570.1", "cuda_runtime": "12.8"}
    on_gpu = _record("naive", device="cuda", gpu=gpu, method="cuda-events+l2-flush")
    skipped = _record("cupy-fa2", status="SKIP", reason="needs a CUDA device")
    crashed = _record("bad", status="CRASH", reason="killed", method="cuda-events+l2-flush")
    throughput = ["TFLOP/s", "GB/s", "% peak"]
    cpu_only = _headers([_record("naive", speedup=1.0), _record("sdpa"), skipped])
    assert not set(throughput) & set(cpu_only)
    assert cpu_only == ["implementation", "status", "median", "spread", "vs naive [95% CI]", "max err"]
    # One GPU time among the rows, or no time at all: the columns stay (the layout of a GPU run).
    for rows in ([on_gpu, _record("sdpa")], [on_gpu, skipped], [skipped, crashed]):
        headers = _headers(rows)
        assert headers[4:7] == throughput and len(headers) == 9, rows
    # The rows' cells follow their headers: the CPU row's speedup sits under "vs naive".
    table, _ = report.table_for_case("attention: n=1", [_record("naive", speedup=1.0)])
    cells = {column.header: column._cells[0] for column in table.columns}
    assert cells["vs naive [95% CI]"] == "1.00x" and cells["max err"] == "1.0e-04"


def test_print_tables_groups_by_case_and_notes_cpu():
    rows = [_record("naive"), _record("naive", case_key="n=2")]
    console = Console(width=200, record=True, file=io.StringIO())
    report.print_tables(rows, console)
    text = console.export_text()
    assert "attention: n=1" in text and "attention: n=2" in text
    assert "CPU run: times are wall clock" in text


def test_cpu_note_only_for_times_measured_on_the_cpu():
    """On a GPU machine a SKIP row's environment says cpu (nothing ran on the GPU for it): the note about
    CPU wall-clock times must come from a row timed that way, not from any row's device."""
    gpu = {"name": "NVIDIA H200", "driver": "570.1", "cuda_runtime": "12.8"}
    timed = _record("naive", device="cuda", gpu=gpu, method="cuda-events+l2-flush")
    skipped = _record("cupy-fa2", status="SKIP", reason="needs cupy (not installed)", device="cpu")
    failed_on_cpu = _record("x", device="cpu")  # timed, but no time is shown
    failed_on_cpu.status = "FAIL"
    for rows, noted in (([timed, skipped], False), ([timed, failed_on_cpu], False), ([timed, _record("y")], True)):
        console = Console(width=200, record=True, file=io.StringIO())
        report.print_tables(rows, console)
        assert ("CPU run: times are wall clock" in console.export_text()) is noted, rows


def test_print_tables_gpu_line_and_markup_safety():
    gpu = {"name": "NVIDIA H200", "driver": "570.1", "cuda_runtime": "12.8"}
    rows = [_record("naive", status="FAIL", reason="values [1, 2] wrong", device="cuda", gpu=gpu)]
    console = Console(width=200, record=True, file=io.StringIO())
    report.print_tables(rows, console)
    text = console.export_text()
    assert "device: NVIDIA H200 (driver 570.1, CUDA 12.8)" in text
    assert "CPU run" not in text
    assert "naive: values [1, 2] wrong" in text  # footnotes are escaped, not read as markup


def test_csv_and_json():
    rows = [_record("naive", speedup=1.0), _record("x", status="SKIP", reason="needs a CUDA device")]
    parsed = list(csv.DictReader(io.StringIO(report.to_csv(rows))))
    assert [r["impl"] for r in parsed] == ["naive", "x"]
    assert parsed[0]["median_ms"] == "1.5" and parsed[0]["samples"] == "7" and parsed[0]["speedup"] == "1.0"
    assert parsed[1]["status"] == "SKIP" and parsed[1]["median_ms"] == ""
    assert tuple(parsed[0]) == report.CSV_FIELDS
    assert json.loads(report.to_json(rows)) == [r.to_json() for r in rows]
    assert [r["impl"] for r in json.loads(report.to_json(rows))] == ["naive", "x"]
