"""Profiler command lines and output parsers, without running any profiler.

The ncu CSVs under tests/fixtures/profile/synthetic/ are SYNTHETIC (written by make_synthetic.py from
the documented raw-page format, not recorded from a real run). Real ones, read from H200 reports
with `ncu --import R.ncu-rep --csv --page raw`, are tests/fixtures/profile/ncu_raw_<date>_<impl>.csv, which the
`recorded` test below reads. The nsys CSVs are synthetic too: that H200 had no nsys.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from kbench.profilers import common, ncu, nsys, torch_profiler

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "profile"
SYNTHETIC = FIXTURES / "synthetic"
CASE = "n=4096,d=128,batch=2,heads=16,dtype=fp16,causal=False"
MIN_BYTES = 4 * 2 * 16 * 4096 * 128 * 2  # attention's fewest bytes at that case: Q, K, V in, O out, fp16


def synthetic(impl: str) -> str:
    return (SYNTHETIC / f"ncu_raw_{impl}.csv").read_text()


# --- ncu: the command line ------------------------------------------------------------------

@pytest.mark.parametrize("label", ["naive", "sdpa-cudnn", "cupy-fa2[block_m=64,warps=4]"])
def test_nvtx_include_matches_exactly_its_range(label):
    name = f"kbench/attention/{label}/{CASE}"
    config = ncu.nvtx_include(name)
    assert config.startswith("regex:") and config.endswith("/")  # a push/pop range, as a regular expression
    body = config[len("regex:"):-1]
    assert not set(body) & set("/,@[]*+\\$")  # none of ncu's NVTX quantifiers inside
    assert re.fullmatch(body, name)
    for other in (f"kbench/attention/{label}x/{CASE}", f"kbench/attention/{label}/{CASE.replace('4096', '40960')}",
                  f"kbench/matmul/{label}/{CASE}"):
        assert not re.fullmatch(body, other)


def test_collection_args():
    default = ncu.collection_args()
    assert [default[i + 1] for i, a in enumerate(default) if a == "--section"] == list(ncu.DEFAULT_SECTIONS)
    assert default[-2:] == ["--metrics", ",".join(ncu.CORE_METRICS)]
    assert ncu.collection_args("detailed") == ["--set", "detailed", "--metrics", ",".join(ncu.CORE_METRICS)]
    assert ncu.collection_args(metrics=" a.sum , gpu__time_duration.sum,b.avg") == \
        ["--metrics", "gpu__time_duration.sum,a.sum,b.avg"]
    with pytest.raises(common.ProfileError, match="--set"):
        ncu.collection_args("full; rm")
    with pytest.raises(common.ProfileError, match="--metrics"):
        ncu.collection_args(metrics="a.sum,b c")


def test_profile_argv_is_a_list_with_the_filter_as_one_item():
    worker = ["/py", "-m", "kbench.worker", '{"jobs": []}']
    argv = ncu.profile_argv("/opt/ncu", Path("results/profiles/x-naive"), f"kbench/attention/naive/{CASE}", worker,
                            kernel_name="regex:gemm|softmax; echo hi", launch_count=12)
    assert argv[0] == "/opt/ncu" and argv[-4:] == worker
    assert argv[argv.index("--kernel-name") + 1] == "regex:gemm|softmax; echo hi"
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert argv[argv.index("--launch-count") + 1] == "12"
    assert argv[argv.index("--export") + 1] == "results/profiles/x-naive" and "--force-overwrite" in argv
    assert "--kernel-name" not in ncu.profile_argv("ncu", "s", "r", worker)


# --- ncu: the raw page ----------------------------------------------------------------------

def test_parse_synthetic_naive():
    kernels = ncu.parse_raw(synthetic("naive"))
    assert [k["id"] for k in kernels] == [0, 1, 2, 3]
    assert kernels[2]["name"] == "cunn_SoftMaxForward" and kernels[2]["block"] == "(1024, 1, 1)"
    assert f"kbench/attention/naive/{CASE}" in kernels[0]["nvtx"]
    m = kernels[0]["metrics"]
    assert m["gpu__time_duration.sum"] == pytest.approx(602_368e-9)  # "602,368" nsecond
    assert m["dram__bytes_write.sum"] == 1_073_741_824  # "1,073,741,824" byte
    assert m["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == 41.2
    assert "device__attribute_display_name" not in m  # text, not a number


@pytest.mark.parametrize("impl, ratio, time_us, kernels", [
    ("naive", 49.0234, 2780.992, 4), ("sdpa", 1.0, 803.712, 1), ("triton-fa2", 1.0625, 629.248, 1)])
def test_per_call_against_the_fewest_bytes(impl, ratio, time_us, kernels):
    per = ncu.summarize(synthetic(impl), 1, MIN_BYTES)["per_call"]
    assert per["traffic_ratio"] == pytest.approx(ratio, rel=1e-4)
    assert per["time_us"] == pytest.approx(time_us)
    assert per["kernels_per_call"] == kernels


def test_naive_moves_many_times_the_bytes_of_flash_attention():
    ratio = {impl: ncu.summarize(synthetic(impl), 1, MIN_BYTES)["per_call"]["traffic_ratio"]
             for impl in ("naive", "triton-fa2", "sdpa")}
    assert ratio["naive"] / ratio["triton-fa2"] > 40 and ratio["naive"] / ratio["sdpa"] > 40


def test_figures_of_one_kernel():
    naive = ncu.summarize(synthetic("naive"), 1, MIN_BYTES)
    gemm, mul, softmax, gemm2 = naive["kernels"]
    assert gemm["tensor_pct"] == 38.52  # the gmma pipe on Hopper (the hmma one reads 0)
    assert softmax["smem"] == 64 and gemm["smem"] == 197_632  # static + dynamic
    assert mul["registers"] == 26 and mul["occupancy"] == 86.2 and mul["l2_hit"] == 33.42
    sdpa = ncu.summarize(synthetic("sdpa"), 1, MIN_BYTES)["kernels"][0]
    assert sdpa["tensor_pct"] == 56.81  # hmma (mma.sync): whichever pipe the CSV has


def test_calls_divide_the_totals():
    one = ncu.summarize(synthetic("naive"), 1, MIN_BYTES)["per_call"]
    two = ncu.summarize(synthetic("naive"), 2, MIN_BYTES)["per_call"]
    assert two["time_us"] == pytest.approx(one["time_us"] / 2) and two["kernels_per_call"] == 2


SCALED = '''==PROF== Connected to process 77 (/usr/bin/python3)
"ID","Process ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum","launch__shared_mem_per_block_static","sm__throughput.avg.pct_of_peak_sustained_elapsed","launch__registers_per_thread"
"","","","usecond","Mbyte","Kbyte/block","%","register/thread"
"0","77","void k<(int)4>(float *, int)","1,234.50","2,048.00","48.00","n/a","32"
"1","77","k2","0.50","0.25","0","12.5","16"
==PROF== Disconnected from process 77
'''


def test_scaled_units_separators_and_missing_metrics():
    kernels = ncu.parse_raw(SCALED)
    assert len(kernels) == 2
    first = ncu.figures(kernels[0])
    assert first["name"] == "k"
    assert first["duration"] == pytest.approx(1234.5e-6)
    assert first["smem"] == pytest.approx(48_000)
    assert first["sm_pct"] is None  # "n/a"
    assert first["dram_read"] == pytest.approx(2.048e9) and first["dram_write"] is None
    assert first["dram_bytes"] is None and first["l2_hit"] is None and first["tensor_pct"] is None
    per = ncu.per_call([first, ncu.figures(kernels[1])], 1, 1e6)
    assert per["traffic_ratio"] is None and per["sm_pct"] == 12.5 and per["registers"] == 32


@pytest.mark.parametrize("unit, scale", [("nsecond", 1e-9), ("ns", 1e-9), ("us", 1e-6), ("ms", 1e-3), ("usecond", 1e-6), ("msecond", 1e-3), ("second", 1),
                                         ("byte", 1), ("Kbyte", 1e3), ("Mbyte", 1e6), ("Gbyte", 1e9),
                                         ("Tbyte", 1e12), ("Gbyte/second", 1e9), ("Kbyte/block", 1e3), ("%", 1),
                                         ("register/thread", 1), ("Mhz", 1e6), ("", 1)])
def test_unit_scale(unit, scale):
    assert ncu.unit_scale(unit) == scale


def test_not_a_table():
    assert ncu.parse_raw("") == []
    assert ncu.parse_raw("==ERROR== the report could not be read\n") == []


def test_short_names():
    assert ncu.short_name("void at::native::(anonymous namespace)::cunn_SoftMaxForward<(int)8, c10::Half>"
                          "(T4 *, const T2 *, int)") == "at::native::cunn_SoftMaxForward"
    assert ncu.short_name("_fa2_forward") == "_fa2_forward"


RECORDED = sorted(FIXTURES.glob("ncu_raw_*_*.csv"))


@pytest.mark.skipif(not RECORDED, reason="no ncu CSV recorded on an H200")
@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_recorded_on_the_device(path):
    """Real `ncu --import --csv --page raw` output: every kernel has a duration, and DRAM bytes when collected."""
    summary = ncu.summarize(path.read_text(), 1, MIN_BYTES)
    assert summary["launches"]
    assert all(k["duration"] and k["duration"] > 0 for k in summary["launches"])
    assert summary["per_call"]["time_us"] > 0


@pytest.mark.parametrize("impl, kernels, time_us, ratio", [
    ("naive", 4, 2788.8, 48.56), ("sdpa", 1, 787.8, 1.00), ("triton-fa2", 1, 566.9, 0.94)])
def test_recorded_attention(impl, kernels, time_us, ratio):
    """`kbench profile --ncu attention --n 4096 --d 128 --batch 2 --heads 16` on the H200 (2026-11-29):
    the figures docs/performance.md quotes, read back from the raw CSVs."""
    per = ncu.summarize((FIXTURES / f"ncu_raw_20261129_{impl}.csv").read_text(), 1, MIN_BYTES)["per_call"]
    assert per["kernels_per_call"] == kernels
    assert per["time_us"] == pytest.approx(time_us, abs=0.05)
    assert per["traffic_ratio"] == pytest.approx(ratio, abs=0.005)


@pytest.mark.parametrize("impl, name, duration_ns, read, written", [
    ("constant-cmem", "conv_cmem", 8_851_136, 268_505_600, 252_459_776),
    ("constant-global", "conv_global", 4_776_448, 268_515_328, 252_199_680)])
def test_recorded_constant_lesson(impl, name, duration_ns, read, written):
    """ncu 2025.3 on the H200 (`kbench profile --ncu patterns --lesson constant --set full`, 2026-11-29):
    durations come in 'ns' there, not 'nsecond' (read as seconds, they made an 8.9 ms kernel 8.9e12 us)."""
    text = (FIXTURES / f"ncu_raw_20261129_{impl}.csv").read_text()
    (kernel,) = ncu.parse_raw(text)
    figures = ncu.figures(kernel)
    assert figures["name"] == name
    assert figures["duration"] == pytest.approx(duration_ns * 1e-9)
    assert figures["dram_read"] == read and figures["dram_write"] == written
    per = ncu.summarize(text, 1, 536_872_956)["per_call"]
    assert per["time_us"] == pytest.approx(duration_ns / 1e3)


@pytest.mark.parametrize("impl, top", [
    ("constant-cmem", [("imc_miss", 12.74), ("no_instruction", 2.75), ("wait", 1.75)]),
    ("constant-global", [("lg_throttle", 22.3), ("not_selected", 7.32), ("long_scoreboard", 3.61)])])
def test_recorded_stall_reasons(impl, top):
    """The constant lesson's why, from the H200's WarpStateStats: the __constant__ weights wait on
    immediate-constant cache misses, the global ones on the load queue. 'selected' is not a stall."""
    (kernel,) = ncu.parse_raw((FIXTURES / f"ncu_raw_20261129_{impl}.csv").read_text())
    assert ncu.figures(kernel)["stalls"] == top
    summary = ncu.summarize((FIXTURES / "ncu_raw_20261129_sdpa.csv").read_text(), 1, MIN_BYTES)
    assert summary["kernels"][0]["stalls"] == []  # collected without WarpStateStats


@pytest.mark.parametrize("impl, kernel, top", [
    ("blelloch", "scan_blelloch", [("barrier", 60.72), ("long_scoreboard", 18.06), ("short_scoreboard", 6.37)]),
    ("wmma-smem", "matmul_wmma_smem", [("wait", 32.51), ("long_scoreboard", 19.37), ("short_scoreboard", 10.23)])])
def test_stalls_from_warp_sampling_where_the_set_has_no_warp_state_stats(impl, kernel, top):
    """ncu 2025.3 on the H200 with `--set detailed` (2026-12-04): no WarpStateStats averages in the raw page,
    only the SourceCounters' sampled warp states. The top stalls are then shares of the kernel's samples
    ('_not_issued' counts narrow the same samples; 'selected' is not a stall): the scan's warps waited at
    block barriers, the WMMA kernel's on fixed-latency dependencies."""
    text = (FIXTURES / f"ncu_raw_20261204_{impl}-detailed.csv").read_text()
    figures = {f["name"]: f for f in map(ncu.figures, ncu.parse_raw(text))}
    assert figures[kernel]["stalls"] == top and figures[kernel]["stall_unit"] == "samples"
    merged = {k["name"]: k for k in ncu.summarize(text, 1, MIN_BYTES)["kernels"]}
    assert merged[kernel]["stall_unit"] == "samples" and merged[kernel]["stalls"] == top
    (cmem,) = ncu.parse_raw((FIXTURES / "ncu_raw_20261129_constant-cmem.csv").read_text())
    assert ncu.figures(cmem)["stall_unit"] == "cycles"  # WarpStateStats collected: its averages come first
    assert ncu.sampled_stalls({"smsp__pcsamp_warps_issue_stalled_barrier": 5.0}) == []  # no sample count


def test_the_hottest_instructions_of_a_source_page():
    """ncu 2025.3's source page of the scan on the H200 (2026-12-04; trimmed to its 30 busiest SASS lines):
    40 % of the kernel's 87,516 samples found a warp at the instruction after the barrier that waits for
    warp 0's look-back. Samples are shares of the raw page's count, not of the trimmed rows'."""
    text = (FIXTURES / "ncu_source_20261204_blelloch-trimmed.csv").read_text()
    rows = ncu.parse_source(text, "scan_blelloch")
    assert len(rows) == 30 and rows[0]["address"] == "0x7f618f7aab10" and rows[0]["sass"] == "S2R R3, SR_TID.X"
    hot = ncu.hot_lines(rows, 87516, top=3)
    assert [(h["sass"], h["percent"], h["state"]) for h in hot] == [
        ("UMOV UR4, 0x400", 40.3, "barrier"), ("BSSY B0, 0x7f618f7ad3f0", 7.5, "barrier"),
        ("STS.128 [R42], R4", 7.4, "long_scoreboard")]
    assert ncu.parse_source(text, "scan_blelloch_pipelined") == []  # another kernel's page
    assert ncu.parse_source("==ERROR== no source\n") == [] and ncu.hot_lines([]) == []
    argv = ncu.source_argv("ncu", "r.ncu-rep", "scan_blelloch")
    assert argv[-2:] == ["--kernel-name", "regex:scan_blelloch$"] and "--print-source" in argv


# --- nsys stats -------------------------------------------------------------------------------

def test_nsys_kernels_inside_the_range_only():
    prefix = SYNTHETIC / "nsys-naive"
    data = nsys.summarize(prefix, f"kbench/attention/naive/{CASE}", calls=10)
    assert data["source"] == "nvtx_kern_sum"
    names = [k["name"] for k in data["kernels"]]
    assert len(names) == 4 and "elsewhere_kernel" not in names
    assert "at::native::cunn_SoftMaxForward" in names
    assert data["per_call"]["calls"] == 10 and data["per_call"]["kernels_per_call"] == 4
    assert data["per_call"]["time_us"] == pytest.approx(2780.736)
    assert data["per_call"]["range_med_us"] == pytest.approx(2809.8)


def test_nsys_falls_back_to_the_whole_capture(tmp_path):
    prefix = tmp_path / "old"
    (tmp_path / "old_cuda_gpu_kern_sum.csv").write_text((SYNTHETIC / "nsys-naive_cuda_gpu_kern_sum.csv").read_text())
    data = nsys.summarize(prefix, f"kbench/attention/naive/{CASE}", calls=10)
    assert data["source"] == "cuda_gpu_kern_sum" and len(data["kernels"]) == 5  # the L2 flush kernel too


def test_nsys_range_names_and_time_units():
    text = ('Processing [r.sqlite] with [nvtx_kern_sum.py]...\n'
            '"NVTX Range","Style","NVTX Inst","Kern Inst","Total Time (us)","Avg (us)","Kernel Name"\n'
            '"Domain:kbench/a/b/c","PushPop","2","4","10.5","2.625","k"\n'
            '"kbench/a/b/c","PushPop","2","2","1,000","500","void j<1>(int)"\n'
            '"kbench/a/b/cd","PushPop","2","2","7","3.5","other"\n')
    kernels, instances = nsys.kernels_in_range(text, "kbench/a/b/c")
    assert instances == 2 and [k["name"] for k in kernels] == ["k", "j"]
    assert kernels[0]["total"] == pytest.approx(10.5e-6) and kernels[1]["total"] == pytest.approx(1e-3)
    assert nsys.read_table("nothing here") == []


def test_nsys_command_lines():
    worker = ["/py", "-m", "kbench.worker", "{}"]
    argv = nsys.profile_argv("/opt/nsys", "results/profiles/s-naive", "kbench/a/naive/n=1,d=2", worker)
    assert argv[:2] == ["/opt/nsys", "profile"] and argv[-4:] == worker
    assert "--nvtx-capture=kbench/a/naive/n=1,d=2" in argv and "--capture-range=nvtx" in argv
    assert nsys.ENV == {"NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
    stats = nsys.stats_argv("nsys", "r.nsys-rep", "r")
    assert stats[-1] == "r.nsys-rep" and stats[stats.index("--output") + 1] == "r"
    assert nsys.stats_file("results/profiles/s", "nvtx_sum") == Path("results/profiles/s_nvtx_sum.csv")


# --- torch.profiler's table -------------------------------------------------------------------

def event(name, self_us=0.0, total_us=0.0, children=()):
    return SimpleNamespace(name=name, self_cpu_time_total=self_us, cpu_time_total=total_us,
                           cpu_children=list(children))


def test_torch_range_table_counts_only_inside_the_scopes():
    def call():
        mm = event("aten::mm", 5.0, 6.0)
        matmul = event("aten::matmul", 1.0, 7.0, children=[mm])
        soft = event("aten::_softmax", 2.0, 2.0)
        return event("R", 3.0, 12.0, children=[matmul, soft])

    outside = event("aten::mm", 50.0, 50.0)  # warm-up: not in a scope
    table = torch_profiler.range_table([call(), outside, call()], "R")
    assert table["calls"] == 2 and table["scope_us"] == 24.0
    ops = {row["name"]: (row["count"], row["total_us"]) for row in table["ops"]}
    assert ops == {"aten::mm": (2, 10.0), "aten::matmul": (2, 2.0), "aten::_softmax": (2, 4.0)}
    assert [row["name"] for row in table["ops"]] == ["aten::mm", "aten::_softmax", "aten::matmul"]  # by time


def test_torch_range_table_skips_the_scopes_gpu_projection():
    """On a GPU torch.profiler lists each record_function twice, the second on the CUDA device."""
    cpu, gpu = event("R", 1.0, 5.0), event("R", 0.0, 0.0)
    cpu.device_type, gpu.device_type = SimpleNamespace(name="CPU"), SimpleNamespace(name="CUDA")
    assert torch_profiler.range_table([cpu, gpu], "R")["calls"] == 1


def _trace():
    """A SYNTHETIC Chrome trace in torch.profiler's (Kineto's) documented shape: two calls of range R
    on thread 7, each launching a Triton kernel through the driver and a memset through the runtime;
    a warm-up launch before them and an L2 flush between them, outside R; another thread's launch
    inside R's time."""
    ev = lambda cat, name, ts, dur, tid=7, corr=None: {  # noqa: E731
        "ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
        **({"args": {"correlation": corr}} if corr is not None else {})}
    events = [ev("cuda_driver", "cuLaunchKernelEx", 10, 5, corr=1), ev("kernel", "_fa2_forward", 20, 600, 0, corr=1)]
    for call, start in enumerate((1000, 3000)):
        events += [ev("user_annotation", "R", start, 100),
                   ev("cuda_driver", "cuLaunchKernelEx", start + 10, 5, corr=10 + call),
                   ev("cuda_runtime", "cudaMemsetAsync", start + 20, 3, corr=20 + call),
                   ev("kernel", "_fa2_forward", start + 50, 566.9, 0, corr=10 + call),
                   ev("gpu_memset", "Memset (Device)", start + 40, 1.0, 0, corr=20 + call),
                   ev("gpu_user_annotation", "R", start + 40, 600, 0)]
    events += [ev("cuda_runtime", "cudaLaunchKernel", 2000, 5, corr=30), ev("kernel", "flush", 2010, 90, 0, corr=30),
               ev("cuda_runtime", "cudaLaunchKernel", 1050, 5, tid=8, corr=40), ev("kernel", "other", 1060, 9, 0, corr=40),
               {"ph": "M", "name": "process_name", "pid": 1}]
    return {"traceEvents": events}


@pytest.mark.parametrize("impl, kernel, total_us", [
    ("sdpa", "pytorch_flash::flash_fwd_kernel", 3900.39), ("triton-fa2", "_fa2_forward", 2808.148)])
def test_torch_trace_recorded_on_the_device(impl, kernel, total_us):
    """Real traces (tests/fixtures/profile/torch_trace_20261129_*.json, launch/kernel/annotation events
    kept): Triton's kernel is launched through cuLaunchKernelEx (cuda_driver), SDPA's through the runtime."""

    trace = json.loads((FIXTURES / f"torch_trace_20261129_{impl}.json").read_text())
    table = torch_profiler.trace_kernels(trace, f"kbench/attention/{impl}/{CASE}")
    assert table["calls"] == 5 and len(table["kernels"]) == 1
    (row,) = table["kernels"]
    assert kernel in row["name"] and row["count"] == 5 and row["total_us"] == pytest.approx(total_us)
    assert table["unattributed"] > 0  # warm-up, correctness and L2-flush kernels, outside the range


def test_torch_trace_kernels_inside_the_range():
    table = torch_profiler.trace_kernels(_trace(), "R")
    assert table["calls"] == 2 and table["unattributed"] == 3  # the warm-up, the flush, thread 8's
    kernels = {row["name"]: (row["count"], row["total_us"]) for row in table["kernels"]}
    assert kernels == {"_fa2_forward": (2, pytest.approx(1133.8)), "Memset (Device)": (2, 2.0)}
    assert torch_profiler.trace_kernels(_trace(), "S") == {"calls": 0, "kernels": [], "unattributed": 7}


# --- paths ----------------------------------------------------------------------------------

def test_output_stems_stay_in_results_profiles(tmp_path):
    folder = tmp_path / "results" / "profiles"
    folder.mkdir(parents=True)
    for label in ("../../etc/passwd", "cupy-fa2[block_m=64,warps=4]", "/abs", "..", "a/../../b"):
        stem = common.output_stem("run", label, folder)
        assert stem.parent == folder and common.inside(stem, folder)
    assert common.safe_label("cupy-fa2[block_m=64,warps=4]") == "cupy-fa2_block_m_64_warps_4"
    for bad in ("../x", "a/b", "", ".", "..", "-rf", ".hidden", "x" * 200):
        with pytest.raises(common.UnsafeName):
            common.profile_name(bad, "attention")
    assert common.profile_name(None, "attention").startswith("attention-")
