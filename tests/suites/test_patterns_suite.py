"""The patterns suite on the CPU: its cost model, validation, float64 reference (against loops and
against fp32 emulations of each kernel, with wrong ones failing), every kernel refusing the other
lessons, launch geometry for odd sizes, the lessons' arithmetic (bank conflicts, sectors, paths a warp
runs), the per-case baseline (Suite.baseline_for) through the runner and the CLI, the report's
"lesson predicts" columns, and the CUDA sources (nvcc, sm_80 and sm_90)."""

from __future__ import annotations

import io
import math
import re
import shutil
import subprocess
import sys

import pytest
import torch
from rich.console import Console

from kbench import metrics, report, results, runner
from kbench.correctness import check
from kbench.devices import by_key
from kbench.errors import UserError
from kbench.loader import BUILTIN_KERNELS, BUILTIN_SUITES, load_helper
from kbench.record import Record
from kbench.registry import Implementation, Needs, Unsupported, out_of_case, skip_reason, variants
from kbench.suite import Case, Suite
from kernel_modules import load_kernel_module

lessons = load_helper(BUILTIN_SUITES / "patterns" / "lessons.py")

LESSONS = ("transpose", "access", "divergence", "constant", "ptx")
IMPLS = {
    "transpose": ("transpose-naive", "transpose-smem", "transpose-padded"),
    "access": ("access-strided", "access-coalesced"),
    "divergence": ("divergence-lane", "divergence-warp"),
    "constant": ("constant-global", "constant-cmem"),
    "ptx": ("ptx-plain", "ptx-cg", "ptx-cg-approx"),
}
BASELINES = {"transpose": "transpose-naive", "access": "access-strided", "divergence": "divergence-lane",
             "constant": "constant-global", "ptx": "ptx-plain"}
NVCC = shutil.which("nvcc")
ODD_AND_EVEN = (1, 2, 17, 31, 32, 33, 100, 257)


def case(lesson, n=17):
    return Case({"lesson": lesson, "n": n, "dtype": "fp32"})


@pytest.fixture(scope="module")
def patterns(registry):
    return registry.suite("patterns")


@pytest.fixture(scope="module")
def suite_module(patterns):
    return sys.modules[type(patterns).__module__]


def kernel_module(name: str):
    """kernels/patterns/NAME.py, executed into a throwaway registry (its plan and lesson figures)."""
    return load_kernel_module(BUILTIN_KERNELS / "patterns" / f"{name}.py")


# --- the suite ---------------------------------------------------------------------------------

def test_registered_implementations(registry, patterns):
    impls = registry.implementations("patterns")
    assert set(impls) == {name for names in IMPLS.values() for name in names}
    assert not registry.load_errors
    for name, impl in impls.items():
        assert impl.backend == "cupy" and impl.needs.cuda and "cupy" in impl.needs.modules
        assert impl.needs.dtypes == ("fp32",)
        assert "Lesson predicts: " in impl.description, name  # `kbench list` shows the prediction
    assert impls["transpose-naive"].unit == impls["access-strided"].unit == "memory"
    assert impls["divergence-warp"].unit == impls["constant-cmem"].unit == impls["ptx-plain"].unit == "cuda-core"


def test_axes_and_baselines(patterns):
    axes = {axis.name: axis for axis in patterns.axes}
    assert axes["lesson"].choices == LESSONS and axes["lesson"].default == LESSONS
    assert axes["n"].default == (8192,) and axes["dtype"].choices == ("fp32",)
    assert patterns.baseline_per_case
    for lesson in LESSONS:
        assert patterns.baseline_for(case(lesson)) == BASELINES[lesson]


def test_cost_model(patterns):
    n, count = 17, 289
    assert patterns.flops(case("transpose", n)) == patterns.flops(case("access", n)) == 0
    assert patterns.min_bytes(case("transpose", n)) == patterns.min_bytes(case("access", n)) == 8 * count
    # divergence: 145 even elements take 128 FMAs (2 FLOPs), 144 odd ones 128 multiplies and FMAs (3)
    assert patterns.flops(case("divergence", n)) == 128 * (145 * 2 + 144 * 3)
    assert patterns.min_bytes(case("divergence", n)) == 8 * count
    assert patterns.flops(case("constant", n)) == 2 * 256 * count
    assert patterns.min_bytes(case("constant", n)) == 4 * ((count + 255) + 256 + count)
    assert patterns.flops(case("ptx", n)) == 3 * 32 * count
    assert patterns.min_bytes(case("ptx", 8192)) == 8 * 2**26  # the default: 256 MiB in, 256 MiB out


def test_validate(patterns):
    for bad, fragment in ((0, "--n must be positive"), (-3, "--n must be positive"),
                          (32769, "--n must be at most 32768")):
        with pytest.raises(UserError, match=fragment):
            patterns.validate(case("transpose", bad))
    patterns.validate(case("ptx", 1))
    patterns.validate(case("constant", 32768))


@pytest.mark.parametrize("args,fragment", [
    (["--n", "0"], "--n must be positive (got 0)"),
    (["--n", "40000", "--lesson", "ptx"], "--n must be at most 32768"),
    (["--n", "x"], "--n: 'x' is not an integer"),
    (["--lesson", "tranpose"], "--lesson: unknown value 'tranpose'"),
    (["--dtype", "fp16"], "--dtype: unknown value 'fp16'"),
    (["--baseline", "nope"], "--baseline: unknown implementation 'nope'"),
])
def test_bad_input_is_one_line_and_exit_2(cli, args, fragment, tmp_path, flat_text):
    result = cli("run", "patterns", *args, "--out", tmp_path / "x.jsonl")
    assert result.exit_code == 2, result.output
    assert fragment in flat_text(result.output) and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.jsonl").exists()


@pytest.mark.parametrize("lesson", LESSONS)
def test_inputs_are_random_seeded_and_in_range(patterns, lesson):
    c = case(lesson, 33)
    first = patterns.make_inputs(c, seed=3, device="cpu")
    again = patterns.make_inputs(c, seed=3, device="cpu")
    other = patterns.make_inputs(c, seed=4, device="cpu")
    for name, t in first.items():
        assert t.dtype == torch.float32 and t.abs().sum() > 0
        assert t.equal(again[name]) and not t.equal(other[name])
    out = patterns.make_output(c, first)
    assert out.dtype == torch.float32
    assert tuple(out.shape) == ((33, 33) if lesson in ("transpose", "access") else (33 * 33,))
    if lesson == "divergence":
        assert 0.05 <= float(first["x"].min()) and float(first["x"].max()) <= 0.95
    if lesson == "ptx":
        assert 1.0 <= float(first["x"].min()) and float(first["x"].max()) < 2.0
    if lesson == "constant":
        assert tuple(first["x"].shape) == (33 * 33 + 255,) and tuple(first["w"].shape) == (256,)


def test_reference_against_plain_loops(patterns):
    """n = 3 (9 elements), every lesson's reference against a loop over Python floats."""
    n = 3
    inputs = {lesson: patterns.make_inputs(case(lesson, n), seed=1, device="cpu") for lesson in LESSONS}
    a = inputs["transpose"]["a"].double()
    assert torch.equal(patterns.reference(case("transpose", n), inputs["transpose"]), a.t())
    assert torch.equal(patterns.reference(case("access", n), inputs["access"]), inputs["access"]["a"].double())

    x = inputs["divergence"]["x"].double().tolist()
    expected = []
    for i, y in enumerate(x):
        for _ in range(128):
            y = y * (1 - 2**-10) + 2**-10 if i % 2 == 0 else y - y * y * 2**-10
        expected.append(y)
    got = patterns.reference(case("divergence", n), inputs["divergence"])
    assert got.dtype == torch.float64 and got.tolist() == pytest.approx(expected, rel=1e-14)

    x, w = inputs["constant"]["x"].double().tolist(), inputs["constant"]["w"].double().tolist()
    expected = [sum(x[i + j] * w[j] for j in range(256)) for i in range(9)]
    assert patterns.reference(case("constant", n), inputs["constant"]).tolist() == pytest.approx(expected, abs=1e-12)

    x = inputs["ptx"]["x"].double().tolist()
    expected = [sum(math.sqrt(v + r) for r in range(32)) for v in x]
    assert patterns.reference(case("ptx", n), inputs["ptx"]).tolist() == pytest.approx(expected, rel=1e-14)


def test_tolerances(patterns):
    assert patterns.tolerance(case("transpose")) == patterns.tolerance(case("access")) == (0.0, 0.0)  # copies
    assert patterns.tolerance(case("divergence")) == (4 * 128 * 2**-24, 0.0)
    assert patterns.tolerance(case("constant")) == (4 * 256 * 2**-24, 4 * 2**-24)
    assert patterns.tolerance(case("ptx")) == (0.0, 4 * 32 * 2**-24)


def test_suite_explain(patterns):
    figures = patterns.explain(case("transpose", 8192))
    assert figures["baseline (speedups are relative to it)"] == "transpose-naive"
    assert figures["problem"] == "8192 x 8192, fp32 (268,435,456 bytes an array)"
    assert figures["FLOPs"] == "0"
    assert "32-way bank conflict" in figures["what it teaches"]


def test_suite_constants_match_the_kernels(suite_module):
    assert kernel_module("divergence").ROUNDS == suite_module.DIVERGENCE_ROUNDS
    assert kernel_module("ptx").TERMS == suite_module.SQRT_TERMS
    assert kernel_module("constant").TAPS == suite_module.CONV_TAPS
    cu = (BUILTIN_KERNELS / "patterns" / "constant.cu").read_text()
    assert f"constexpr int TAPS = {suite_module.CONV_TAPS};" in cu
    assert suite_module.BASELINES == BASELINES


# --- fp32 emulations of the kernels: the tolerance passes them, and wrong ones fail ------------------

def _fma32(a, b, c):
    """fmaf on float32 tensors: the product is exact in float64, one rounding to float32 (nearly)."""
    return (a.double() * b + c.double() if not torch.is_tensor(b) else a.double() * b.double() + c.double()).float()


def _emulation(lesson: str, wrong: bool = False):
    def make(case, inputs, out):
        def run():
            if lesson == "transpose":
                out.copy_(inputs["a"] if wrong else inputs["a"].t())
            elif lesson == "access":
                out.copy_(inputs["a"])
                if wrong:
                    out[-1, -1] = 0.0  # an element past the last full tile left out
            elif lesson == "divergence":
                x = inputs["x"]
                even, odd = (x[1::2], x[0::2]) if wrong else (x[0::2], x[1::2])  # wrong: the paths swapped
                for _ in range(128):
                    even = _fma32(even, 1 - 2**-10, torch.full_like(even, 2**-10))
                    odd = _fma32(odd * odd, -(2**-10), odd)
                if wrong:
                    out[1::2], out[0::2] = even, odd
                else:
                    out[0::2], out[1::2] = even, odd
            elif lesson == "constant":
                x, w, count = inputs["x"], inputs["w"], out.numel()
                acc = torch.zeros(count, dtype=torch.float32)
                shift = 1 if wrong else 0  # wrong: every tap one element late
                for j in range(256):
                    xs = x[j + shift:j + shift + count]
                    if xs.numel() < count:
                        xs = torch.cat([xs, torch.zeros(count - xs.numel())])
                    acc = _fma32(xs, w[j], acc)
                out.copy_(acc)
            else:
                x = inputs["x"]
                acc = torch.zeros_like(x)
                for r in range(31 if wrong else 32):  # wrong: one term short
                    s = torch.sqrt(x + float(r)) * (1 + 2**-22)  # sqrt.approx: allow it 2 ulp
                    acc = acc + s
                out.copy_(acc)

        return run

    return Implementation("patterns", f"emulated-{lesson}", "torch", make, Needs(), "", __file__)


@pytest.mark.parametrize("n", [1, 17, 33])
@pytest.mark.parametrize("lesson", LESSONS)
def test_fp32_emulation_passes(patterns, lesson, n):
    verdict = check(patterns, _emulation(lesson), case(lesson, n), "cpu", seed=5, trials=2)
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize("lesson", LESSONS)
def test_wrong_emulation_fails(patterns, lesson):
    verdict = check(patterns, _emulation(lesson, wrong=True), case(lesson, 17), "cpu", seed=5, trials=1)
    assert not verdict.ok and "outside atol" in verdict.reason


# --- every implementation refuses the other lessons ---------------------------------------------------

@pytest.mark.parametrize("lesson", LESSONS)
def test_every_implementation_skips_the_other_lessons(registry, patterns, lesson):
    for name, impl in registry.implementations("patterns").items():
        mine = name in IMPLS[lesson]
        c = case(lesson, 17)
        reason = out_of_case(impl, c)
        if mine:
            assert reason is None, name
            # decided before any worker starts: the runner asks skip_reason first
            assert skip_reason(impl, c, "cpu") == "needs a CUDA device"
            continue
        own = next(k for k, v in IMPLS.items() if name in v)
        assert reason == f"{own} lesson only (this case is --lesson {lesson})"
        # not part of the case comes first: such a SKIP is counted under the table, not listed in it
        assert skip_reason(impl, c, "cpu") == reason
        # and in set-up (a direct call, or a worker that gets the job): Unsupported, a SKIP with the reason
        inputs = patterns.make_inputs(c, seed=0, device="cpu")
        with pytest.raises(Unsupported, match=f"{own} lesson only"):
            impl.make(c, inputs, patterns.make_output(c, inputs))


def test_a_cpu_run_skips_everything_with_the_lesson_baseline(cli, tmp_path, jsonl):
    out = tmp_path / "p.jsonl"
    result = cli("run", "patterns", "--lesson", "access", "--n", "17", "--device", "cpu", "--out", out)
    assert result.exit_code == 0, result.output
    records = jsonl(out)
    assert {r["impl"] for r in records} == {name for names in IMPLS.values() for name in names}
    assert all(r["status"] == "SKIP" and r["baseline"] == "access-strided" for r in records)
    assert records[0]["impl"] == "access-strided"  # the baseline runs first
    assert "vs access-strided" in result.stdout


# --- launch geometry for odd sizes, and the lessons' arithmetic -----------------------------------------

@pytest.mark.parametrize("n", ODD_AND_EVEN)
def test_tile_launches_cover_the_matrix_once(n):
    """The 2-D kernels' index arithmetic (transpose.cu, access.cu), replayed over the launch's grid:
    every element of the n x n matrix is read and written exactly once, nothing outside it."""
    transpose, access = kernel_module("transpose"), kernel_module("access")
    for module, variant in ((transpose, "transpose-naive"), (transpose, "transpose-padded"),
                            (access, "access-strided"), (access, "access-coalesced")):
        lesson = variant.split("-")[0]
        p = module.plan(case(lesson, n), variant)
        assert p["block"] == (32, 8) and p["grid"] == (-(-n // 32), -(-n // 32))
        written = torch.zeros(n, n, dtype=torch.int32)
        for bx in range(p["grid"][0]):
            for by in range(p["grid"][1]):
                for tx in range(32):
                    for ty in range(8):
                        for j in range(0, 32, 8):
                            if variant == "access-strided":
                                row, col = by * 32 + tx, bx * 32 + ty + j
                            elif variant == "access-coalesced":
                                row, col = by * 32 + ty + j, bx * 32 + tx
                            else:  # the output element of the transposes: (x, y) of the second phase
                                row, col = bx * 32 + ty + j, by * 32 + tx
                            if row < n and col < n:
                                written[row, col] += 1
        assert torch.equal(written, torch.ones(n, n, dtype=torch.int32)), variant


@pytest.mark.parametrize("n", ODD_AND_EVEN + (1001,))
def test_linear_launches_cover_every_element_once(n):
    count = n * n
    for lesson, name in (("divergence", "divergence-lane"), ("divergence", "divergence-warp"),
                         ("constant", "constant-cmem"), ("ptx", "ptx-cg-approx")):
        p = kernel_module(lesson).plan(case(lesson, n), name)
        assert p["block"] == (256,) and p["grid"] == (-(-count // 256),)
    divergence = kernel_module("divergence")
    threads = p["grid"][0] * 256
    for variant in ("divergence-lane", "divergence-warp"):
        taken = [divergence.element(variant, t) for t in range(threads)]
        assert sorted(taken) == list(range(threads))  # a permutation of the launched threads
        inside = [i for i in taken if i < count]
        assert sorted(inside) == list(range(count))  # the bounds check keeps exactly the elements


def test_paths_per_warp():
    divergence = kernel_module("divergence")
    for warp in range(8):
        assert divergence.paths_per_warp("divergence-lane", warp) == 2
        assert divergence.paths_per_warp("divergence-warp", warp) == 1
    # the warp-branched kernel still computes out[i] by i's parity: warp 0 the even, warp 1 the odd
    assert [divergence.element("divergence-warp", t) for t in (0, 1, 31, 32, 33, 63, 64)] == [0, 2, 62, 1, 3, 63, 64]


def test_bank_conflicts_and_sectors():
    transpose, access = kernel_module("transpose"), kernel_module("access")
    assert transpose.column_read_conflict(pad=0) == 32  # float tile[32][32]: one bank for the whole warp
    assert transpose.column_read_conflict(pad=1) == 1  # tile[32][33]: 32 banks
    assert transpose.column_read_conflict(pad=2) == 2  # stride 34: every other bank
    assert all(transpose.column_read_conflict(0, c) == 32 for c in range(32))
    assert transpose.store_sectors("transpose-naive", 8192) == 32
    assert transpose.store_sectors("transpose-padded", 8192) == 4
    assert access.warp_sectors("access-strided", 8192) == 32 and access.warp_sectors("access-coalesced", 8192) == 4
    assert access.warp_sectors("access-strided", 16) == 16  # 16 lanes inside, rows 64 bytes apart
    assert access.warp_sectors("access-strided", 2) == 1  # rows 8 bytes apart: one sector


def test_predictions_name_their_lesson(patterns):
    for lesson, names in IMPLS.items():
        module = kernel_module(lesson)
        assert set(module.PREDICTS) == set(names)
        baselines = [name for name, p in module.PREDICTS.items() if p.versus is None]
        assert baselines == [patterns.baseline_for(case(lesson))]
        for name, p in module.PREDICTS.items():
            config = p.config()
            assert config["lesson_predicts"] == p.text
            if p.versus is None:
                assert "lesson_check" not in config and p.text.startswith("baseline: ")
            else:
                assert p.versus in names and p.versus != name
                assert config["lesson_check"] == {"versus": p.versus, "low": p.low, "high": p.high}
    divergence = kernel_module("divergence")
    assert divergence.PREDICTS["divergence-warp"].text.startswith("1.5-2.5x vs divergence-lane: ")
    assert kernel_module("transpose").PREDICTS["transpose-padded"].text.startswith(">= 1.1x vs transpose-smem: ")


# --- kbench explain ---------------------------------------------------------------------------------------

def test_explain_hooks(registry):
    impls = registry.implementations("patterns")
    figures = impls["transpose-smem"].explain(case("transpose", 8192), {})
    assert figures["grid"] == "(256, 256) = 65,536 blocks of 256 threads (8 warps)"
    assert "a 32-way bank conflict" in figures["shared-memory tile"]
    assert figures["lesson predicts"].startswith(">= 1.1x vs transpose-naive")
    assert "conflict-free" in impls["transpose-padded"].explain(case("transpose", 8192), {})["shared-memory tile"]
    assert impls["divergence-warp"].explain(case("divergence", 64), {})["paths a warp runs"] == "1 of 2, 128 steps each"
    for lesson, names in IMPLS.items():
        other = next(x for x in LESSONS if x != lesson)
        for name in names:
            assert impls[name].explain(case(other), {}) == {}  # not this case: kbench explain says so


def test_explain_cli(cli, flat_text, wide_console):
    result = cli("explain", "patterns", "--lesson", "access", "--n", "1000")
    assert result.exit_code == 0, result.output
    text = flat_text(result.stdout)
    assert "access-strided" in text and "32 sectors of 32 bytes for 128 useful bytes (8x the bytes moved)" in text
    elsewhere = text.split("not for this case: ")[1].split(", ")
    assert set(elsewhere) == {name for lesson, names in IMPLS.items() if lesson != "access" for name in names}
    assert cli("explain", "patterns", "--n", "0").exit_code == 2


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed: no ptxas figures")
def test_explain_reads_ptxas(registry):
    figures = registry.implementations("patterns")["transpose-padded"].explain(case("transpose", 8192), {})
    assert figures["shared memory per block"] == "4,224 bytes"  # 32 x 33 floats
    assert 0 < int(figures["registers per thread"].split()[0]) <= 255


# --- the CUDA sources -------------------------------------------------------------------------------------

def _launched(registry):
    """(source, name expression) of every kernel the patterns implementations launch."""
    out = set()
    for lesson, names in IMPLS.items():
        module = kernel_module(lesson)
        for name in names:
            out.add((module.SOURCE, module.plan(case(lesson, 17), name)["name"]))
    return sorted(out)


def test_the_cuda_sources_are_built_by_test_cuda_sources():
    """tests/suites/test_cuda_sources.py compiles every .cu under kernels/ (sm_80, sm_90, warnings as errors)."""
    sources = {p.name for p in BUILTIN_KERNELS.rglob("*.cu") if p.parent.name == "patterns"}
    assert sources == {"transpose.cu", "access.cu", "divergence.cu", "constant.cu", "ptx.cu"}


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed here: CUDA sources not compiled")
def test_kbench_instantiate_builds_every_launched_kernel(registry, tmp_path):
    """-DKBENCH_INSTANTIATE (test_cuda_sources' build) must compile each kernel kbench launches: as many
    entry functions as the file's distinct launched names."""
    by_source: dict = {}
    for source, name in _launched(registry):
        by_source.setdefault(source, set()).add(name)
    for source, names in by_source.items():
        done = subprocess.run([NVCC, "-std=c++17", "-DKBENCH_INSTANTIATE", "-arch=sm_90", "-cubin", "-Xptxas", "-v",
                               "-o", str(tmp_path / "out.cubin"), str(source)], capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr
        entries = set(re.findall(r"Compiling entry function '(\w+)'", done.stderr))
        assert len(entries) == len(names), (source.name, entries, names)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed here: CUDA sources not compiled")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_launched_name_compiles(registry, arch):
    """The name expressions NVRTC is given, instantiated by nvcc exactly (kbench.kernel_resources)."""
    from kbench.kernel_resources import from_nvcc

    for source, name in _launched(registry):
        res = from_nvcc(source, name, arch=arch)
        assert res["spill_stores"] == 0 and res["registers"] <= 64, (name, res)


# --- the per-case baseline: Suite.baseline_for through the runner and the CLI -----------------------------

def test_baseline_for_defaults_to_the_suite_baseline():
    class Plain(Suite):
        baseline = "ref"

    assert Plain().baseline_for(Case({"n": 1})) == "ref" and not Plain().baseline_per_case


def test_runner_takes_each_cases_baseline(registry, tmp_path, monkeypatch):
    medians = {"transpose-naive": 4.0, "transpose-smem": 2.0, "transpose-padded": 1.0, "access-strided": 8.0,
               "access-coalesced": 1.0}

    def fake_measure(self, variant, c, trials_ahead):  # the job ends as it is sent: its record, as a worker would
        name = variant.impl.name
        if name not in IMPLS[c.lesson]:
            return {"status": "SKIP", "reason": "another lesson"}, {"device": "cpu"}
        stats = {"median": medians[name], "p20": medians[name], "p80": medians[name], "n": 3}
        timing = {"method": "cpu-wall-clock", "samples": [medians[name]] * 3, "stats": stats, "warnings": []}
        return {"status": "OK", "timing": timing}, {"device": "cpu"}

    monkeypatch.setattr(runner._VariantWorker, "send_job", fake_measure)
    chosen = variants(registry.select("patterns", list(medians)[::-1]), {})  # baselines last: the runner reorders
    cases = [case("transpose"), case("access")]
    started = []
    out = results.ResultsFile(tmp_path / "r.jsonl")
    try:
        request = runner.RunRequest(suite="patterns", variants=chosen, cases=cases, baseline=None, device="cpu")
        records = runner.run(registry, request, out, on_start=lambda v, c: started.append(v.label))
    finally:
        out.close()
    # case by case, each case's baselines first
    assert set(started[:2]) == set(started[5:7]) == {"transpose-naive", "access-strided"}
    by = {(r.impl, r.case["lesson"]): r for r in records}
    assert by[("transpose-padded", "transpose")].baseline == "transpose-naive"
    assert by[("transpose-padded", "transpose")].speedup == 4.0
    assert by[("access-coalesced", "access")].baseline == "access-strided"
    assert by[("access-coalesced", "access")].speedup == 8.0
    assert by[("access-coalesced", "transpose")].status == "SKIP"

    # --baseline given: one for every case, as before
    out = results.ResultsFile(tmp_path / "s.jsonl")
    try:
        records = runner.run(registry, runner.RunRequest(suite="patterns", variants=chosen, cases=cases[:1],
                                                         baseline="transpose-smem", device="cpu"), out)
    finally:
        out.close()
    assert {r.baseline for r in records} == {"transpose-smem"}
    assert [r.speedup for r in records if r.impl == "transpose-padded"] == [2.0]


def test_cli_adds_each_lessons_baseline(cli, tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(runner, "run", lambda registry, request, out, **kw: seen.append(request) or [])
    result = cli("run", "patterns", "--lesson", "transpose,ptx", "--n", "64", "--impl", "transpose-padded,ptx-cg",
                 "--out", tmp_path / "a.jsonl")
    assert result.exit_code == 0, result.output
    request = seen[-1]
    assert request.baseline is None
    assert [v.label for v in request.variants] == ["transpose-naive", "ptx-plain", "transpose-padded", "ptx-cg"]
    assert "baseline transpose-naive added" in result.stderr and "baseline ptx-plain added" in result.stderr

    result = cli("run", "patterns", "--lesson", "transpose", "--impl", "transpose-padded", "--baseline",
                 "transpose-smem", "--out", tmp_path / "b.jsonl")
    assert result.exit_code == 0, result.output
    assert seen[-1].baseline == "transpose-smem"
    assert [v.label for v in seen[-1].variants] == ["transpose-smem", "transpose-padded"]


def test_run_help_shows_the_lessons(cli, flat_text):
    result = cli("run", "patterns", "--help", env={"COLUMNS": "300"})
    assert result.exit_code == 0
    text = flat_text(result.output)
    assert "--lesson" in text and "transpose|access|divergence|constant|ptx" in text
    assert "case by case" in text  # --baseline has no one default here
    matmul = flat_text(cli("run", "matmul", "--help", env={"COLUMNS": "300"}).output)
    assert "[default: cublas]" in matmul


# --- the report: what the lesson predicts beside what was measured ----------------------------------------

def _record(impl, median, predicts=None, status="OK", gpu="NVIDIA H200", config=None) -> Record:
    rec = {"schema": 1, "suite": "patterns", "impl": impl, "label": impl, "backend": "cupy",
           "case": {"lesson": "transpose", "n": 8192, "dtype": "fp32"},
           "case_key": "lesson=transpose,n=8192,dtype=fp32",
           "status": status, "reason": "" if status == "OK" else "why", "baseline": "transpose-naive",
           "env": {"device": "cuda", "gpu": {"name": gpu, "driver": "570", "cuda_runtime": "13.0"}}}
    if status == "OK":
        rec["timing"] = {"method": "cuda-event+l2-flush", "stats": {"median": median, "p20": median, "p80": median,
                                                                     "n": 9}, "warnings": []}
        rec["speedup"] = 2.0 / median
    if predicts is not None:
        rec["config"] = predicts.config()
    if config is not None:
        rec["config"] = config
    return Record.from_json(rec)


def test_report_shows_the_prediction_and_whether_it_holds():
    transpose = kernel_module("transpose")
    rows = [_record("transpose-naive", 2.0, transpose.PREDICTS["transpose-naive"]),
            _record("transpose-smem", 1.9, transpose.PREDICTS["transpose-smem"]),  # 1.05x: below 1.1x
            _record("transpose-padded", 1.0, transpose.PREDICTS["transpose-padded"]),  # 1.9x vs smem
            _record("access-strided", None, status="SKIP")]
    assert lessons.verdict(rows[2], rows) == (pytest.approx(1.9), True)
    assert lessons.verdict(rows[1], rows) == (pytest.approx(2.0 / 1.9), False)
    assert lessons.verdict(rows[0], rows) is None and lessons.verdict(rows[3], rows) is None
    assert lessons.cell(rows[2], rows) == ">= 1.1x vs transpose-smem: 1.90x, holds"
    assert lessons.cell(rows[1], rows) == ">= 1.1x vs transpose-naive: 1.05x, does not hold"
    assert lessons.cell(rows[0], rows) == "baseline" and lessons.cell(rows[3], rows) == ""
    assert lessons.cell(rows[2], rows[2:]) == ">= 1.1x vs transpose-smem: not measured"
    lines = lessons.lines(rows)
    assert lines[0] == "transpose-naive: " + transpose.PREDICTS["transpose-naive"].text
    assert lines[1].endswith("; measured 1.05x: does not hold on NVIDIA H200")  # say so where it was measured
    assert lines[2].endswith("; measured 1.90x: holds") and len(lines) == 3

    console = Console(width=200, record=True, file=io.StringIO())  # every column unwrapped
    report.print_tables(rows, console)
    text = " ".join(console.export_text().split())
    assert "lesson predicts: measured" in text and "1.90x, holds" in text
    assert "what the lessons predict: transpose-naive: baseline: coalesced reads, column writes" in text
    assert "does not hold on NVIDIA H200" in text
    # a range: divergence-warp is predicted 1.5-2.5x; 3x is outside it
    divergence = kernel_module("divergence")
    rows = [_record("divergence-lane", 3.0, divergence.PREDICTS["divergence-lane"]),
            _record("divergence-warp", 1.0, divergence.PREDICTS["divergence-warp"])]
    assert lessons.cell(rows[1], rows) == "1.5-2.5x vs divergence-lane: 3.00x, does not hold"


def test_report_without_predictions_is_unchanged():
    rows = [_record("naive", 1.0, config={"tile": 16})]
    table, _ = report.table_for_case("x", rows)
    assert [c.header for c in table.columns][-1] == "max err" and len(table.columns) == 9
    assert lessons.lines(rows) == []


def test_zero_flop_kernels_get_their_share_of_the_bandwidth():
    h200 = by_key("h200")
    m = metrics.derive(1.0, 0.0, h200.hbm_tbs * 1e9 / 2, "fp32", h200, compute_tflops=math.inf)
    assert m["pct_of_peak"] == pytest.approx(50.0) and m["bound"] == "memory" and m["tflops"] == 0.0


def test_other_lessons_kernels_are_counted_under_the_table_not_listed(cli, tmp_path):
    """A sweep over two lessons: each lesson's table lists its own kernels, and one footnote counts the
    rest; the records keep every row (a SKIP marked out_of_case), so nothing is lost."""
    from kbench import report
    from kbench.results import read

    out = tmp_path / "p.jsonl"
    result = cli("run", "patterns", "--lesson", "transpose,access", "--n", "64", "--out", out)
    assert result.exit_code == 0, result.output
    records = read(out)
    transpose = [r for r in records if r.case["lesson"] == "transpose"]
    outside = [r for r in transpose if r.out_of_case]
    assert outside and all(r.status == "SKIP" and "lesson only" in r.reason for r in outside)
    rows = report.case_rows(transpose)
    assert tuple(row[0].rstrip("*") for row in rows.rows) == IMPLS["transpose"]
    assert f"{len(outside)} not part of this case, left out: " in rows.footnotes[-1]
