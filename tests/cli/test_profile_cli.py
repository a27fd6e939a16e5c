"""`kbench profile` end to end, with fake `ncu` and `nsys` executables first on PATH.

The fakes (tests/fixtures/profile/fake_profiler.py) record their argument lists, play back the
synthetic CSVs of tests/fixtures/profile/synthetic/ (not recorded from a real run: see
make_synthetic.py there) and act out each failure: no profiler, no permission, no kernels, a hang,
an ncu error. Most tests let the fake answer for the worker; two run the real worker on the CPU.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "profile"
SYNTHETIC = FIXTURES / "synthetic"
BIG = ["--n", "4096", "--d", "128", "--batch", "2", "--heads", "16"]  # the case the synthetic CSVs describe
RANGE = "kbench/attention/naive/n=4096,d=128,batch=2,heads=16,dtype=fp16,causal=False"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Put fake ncu and nsys first on PATH, work in tmp_path, pretend a GPU is there; returns a helper."""
    import kbench.runner

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    source = (FIXTURES / "fake_profiler.py").read_text()
    for tool in ("ncu", "nsys"):
        path = bin_dir / tool
        path.write_text(f"#!{sys.executable}\n{source}")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("KBENCH_NCU", raising=False)
    monkeypatch.delenv("KBENCH_NSYS", raising=False)
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("FAKE_CSV_DIR", str(SYNTHETIC))
    monkeypatch.setenv("FAKE_NSYS_DIR", str(SYNTHETIC))
    monkeypatch.setattr(kbench.runner, "host_has_gpu", lambda: True)

    class Fake:
        dir = bin_dir
        root = work

        @staticmethod
        def calls():
            path = tmp_path / "calls.jsonl"
            return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

        @staticmethod
        def mode(value):
            monkeypatch.setenv("FAKE_MODE", value)

    return Fake


def error_lines(result) -> list[str]:
    return [line for line in result.output.splitlines() if "kbench: error:" in line]


def test_ncu_table_files_and_fewest_bytes(fake, cli, wide_console):
    result = cli("profile", "--ncu", "attention", *BIG, "--impl", "naive", "--name", "h200")
    assert result.exit_code == 0, result.output
    out = result.output
    for kernel in ("cunn_SoftMaxForward", "vectorized_elementwise_kernel", "sm90_xmma_gemm_f16f16"):
        assert kernel in out
    assert "per call: 2,781.0 us in 4 kernels" in out
    assert "49.02x the fewest bytes" in out
    profiles = fake.root / "results" / "profiles"
    for name in ("h200-naive.ncu-rep", "h200-naive.raw.csv", "h200-naive.log", "h200.json"):
        assert (profiles / name).exists(), name
    summary = json.loads((profiles / "h200.json").read_text())
    (naive,) = summary["implementations"]
    assert naive["status"] == "OK" and naive["range"] == RANGE
    assert naive["per_call"]["traffic_ratio"] == pytest.approx(49.0234, rel=1e-4)
    assert summary["tool"] == "ncu" and summary["calls"] == 1


def test_ncu_command_line(fake, cli):
    result = cli("profile", "attention", "--ncu", *BIG, "--impl", "naive", "--name", "cmd",
                 "--kernel-name", "regex:gemm; rm -rf / $(boom) 'x'", "--launch-count", "7")
    assert result.exit_code == 0, result.output
    profile, imported = fake.calls()
    argv = profile["argv"]
    assert argv[:4] == ["--nvtx", "--nvtx-include",
                        "regex:kbench.attention.naive.n=4096.d=128.batch=2.heads=16.dtype=fp16.causal=False/",
                        "--clock-control"]
    assert argv[4:7] == ["none", "--launch-count", "7"]  # the GPU's own clocks by default
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--section"] == [
        "SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis",
        "WarpStateStats"]
    metrics = argv[argv.index("--metrics") + 1].split(",")
    assert metrics[0] == "gpu__time_duration.sum" and "dram__bytes_read.sum" in metrics
    assert argv[argv.index("--kernel-name") + 1] == "regex:gemm; rm -rf / $(boom) 'x'"  # one argument, untouched
    assert argv[argv.index("--export") + 1] == str(Path("results") / "profiles" / "cmd-naive")
    worker = argv[argv.index("kbench.worker") - 2:]
    assert worker[:3] == [sys.executable, "-m", "kbench.worker"]
    spec = json.loads(worker[3])
    (job,) = spec["jobs"]
    assert job["label"] == "naive" and job["impl"] == "naive"
    assert job["stop"]["min_samples"] == job["stop"]["max_samples"] == 1  # --calls 1: exactly one timed call
    assert Path(spec["answers"]).is_absolute()
    assert imported["argv"] == ["--import", str(Path("results") / "profiles" / "cmd-naive.ncu-rep"), "--csv",
                                "--page", "raw", "--print-units", "base", "--print-kernel-base", "function"]


def test_ncu_set_and_metrics_replace_the_sections(fake, cli):
    assert cli("profile", "--ncu", "attention", *BIG, "--impl", "naive", "--set", "full",
               "--clock-control", "base").exit_code == 0
    assert cli("profile", "--ncu", "attention", *BIG, "--impl", "naive",
               "--metrics", "sm__cycles_elapsed.avg,dram__bytes_read.sum").exit_code == 0
    full, _, chosen, _ = fake.calls()
    assert full["argv"][full["argv"].index("--set") + 1] == "full" and "--section" not in full["argv"]
    assert full["argv"][full["argv"].index("--clock-control") + 1] == "base"
    assert full["argv"][full["argv"].index("--launch-count") + 1] == "20"  # the default cap
    assert "--section" not in chosen["argv"] and "--set" not in chosen["argv"]
    assert chosen["argv"][chosen["argv"].index("--metrics") + 1] == \
        "gpu__time_duration.sum,sm__cycles_elapsed.avg,dram__bytes_read.sum"


def test_the_metrics_asked_for_are_shown(fake, cli, wide_console):
    result = cli("profile", "--ncu", "attention", *BIG, "--impl", "naive",
                 "--metrics", "launch__registers_per_thread,dram__bytes_read.sum,not__in_the_csv.sum")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "the metrics asked for (--metrics), per launch" in out
    lines = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 2}
    # The cuBLAS GEMM of the synthetic naive capture: 168 registers, 70,254,592 bytes read, grid (32, 32, 32);
    # a metric ncu did not report is "-".
    assert "168" in lines["launch__registers_per_thread"]
    assert "70,254,592" in lines["dram__bytes_read.sum"]
    assert "(32, 32, 32)" in lines["grid"] and "(384, 1, 1)" in lines["block"]
    assert lines["not__in_the_csv.sum"].count("-") >= 4
    # Without --metrics there is no such table.
    assert "metrics asked for" not in cli("profile", "--ncu", "attention", *BIG, "--impl", "naive").output


def test_compare_side_by_side(fake, cli, wide_console, flat_text):
    result = cli("profile", "--ncu", "attention", *BIG, "--compare", "naive", "triton-fa2", "--name", "cmp")
    assert result.exit_code == 0, result.output
    out = flat_text(result.output)
    assert "naive vs triton-fa2" in out
    assert "bytes moved / fewest bytes 49.02 1.06 0.02x" in out
    assert "time per call (us) 2,781.0 629.2 0.23x" in out
    summary = json.loads((fake.root / "results" / "profiles" / "cmp.json").read_text())
    assert [o["label"] for o in summary["implementations"]] == ["naive", "triton-fa2"]
    naive, fa2 = (o["per_call"]["traffic_ratio"] for o in summary["implementations"])
    assert naive / fa2 > 40  # naive attention moves many times the bytes FlashAttention-2 does


def test_compare_needs_profiled_implementations(fake, cli):
    result = cli("profile", "--ncu", "attention", "--impl", "naive,sdpa", "--compare", "naive", "triton-fa2")
    assert result.exit_code == 2
    assert "--compare: 'triton-fa2' is not among the profiled implementations" in result.output
    assert fake.calls() == []


def test_ncu_missing(fake, cli, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    if Path("/usr/local/cuda/bin/ncu").exists():
        pytest.skip("this machine has ncu in /usr/local/cuda/bin")
    result = cli("profile", "--ncu", "attention", "--impl", "naive")
    assert result.exit_code == 2
    (line,) = error_lines(result)
    assert "ncu (Nsight Compute) was not found" in result.output


def test_nsys_missing_offers_the_torch_profiler(fake, cli, monkeypatch, tmp_path, flat_text):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    if Path("/usr/local/cuda/bin/nsys").exists():
        pytest.skip("this machine has nsys in /usr/local/cuda/bin")
    result = cli("profile", "--nsys", "attention", "--impl", "naive")
    assert result.exit_code == 2
    assert len(error_lines(result)) == 1
    assert "nsys (Nsight Systems) was not found" in flat_text(result.output)
    assert "--torch-profiler records the same ranges" in flat_text(result.output)


def test_not_permitted(fake, cli, flat_text):
    fake.mode("perm")
    result = cli("profile", "--ncu", "attention", *BIG, "--impl", "naive")
    assert result.exit_code == 3
    assert len(error_lines(result)) == 1
    text = flat_text(result.output)
    assert "ERR_NVGPUCTRPERM" in text
    assert "NVreg_RestrictProfilingToAdminUsers=0" in text and "root" in text
    assert "https://developer.nvidia.com/ERR_NVGPUCTRPERM" in text


def test_no_kernels(fake, cli, flat_text):
    fake.mode("nokernels")
    result = cli("profile", "--ncu", "attention", *BIG, "--impl", "naive", "--kernel-name", "nothing_like_this")
    assert result.exit_code == 4
    text = flat_text(result.output)
    assert f"ncu captured no kernels inside {RANGE}" in text
    assert "--kernel-name 'nothing_like_this'" in text


def test_ncu_error_before_the_worker_ran(fake, cli, flat_text):
    fake.mode("fail")
    result = cli("profile", "--ncu", "attention", *BIG, "--impl", "naive")
    assert result.exit_code == 1
    text = flat_text(result.output)
    assert "naive: CRASH ncu exited with code 1 before the worker answered" in text
    assert "Failed to find metric sm__made_up_metric.sum" in text


def test_import_failure(fake, cli, flat_text):
    fake.mode("badimport")
    result = cli("profile", "--ncu", "attention", *BIG, "--impl", "naive")
    assert result.exit_code == 1
    assert "not a valid report" in flat_text(result.output)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] == "Z"  # a zombie is dead, only not yet reaped
    except OSError:
        return True


def test_timeout_kills_the_profiler_and_its_children(fake, cli, monkeypatch, tmp_path, flat_text):
    fake.mode("hang")
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAKE_PIDS", str(pids))
    start = time.monotonic()
    result = cli("profile", "--ncu", "attention", *BIG, "--impl", "naive", "--timeout", "2")
    assert time.monotonic() - start < 30
    assert result.exit_code == 5
    assert "ncu did not finish within 2 s" in flat_text(result.output)
    profiler, child = map(int, pids.read_text().split())
    deadline = time.monotonic() + 5
    while not (_gone(profiler) and _gone(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(profiler) and _gone(child)


@pytest.mark.parametrize("name", ["../evil", "a/b", "/tmp/x", ".hidden", "..", "a b"])
def test_names_that_would_escape_results_are_refused(fake, cli, name):
    result = cli("profile", "--ncu", "attention", "--impl", "naive", "--name", name)
    assert result.exit_code == 2
    assert "is not a plain name" in result.output
    assert fake.calls() == []
    assert not (fake.root / "results").exists() or not any((fake.root / "results").rglob("*.ncu-rep"))


def test_usage_errors(fake, cli, monkeypatch):
    import kbench.runner

    assert "choose one profiler" in cli("profile", "attention", "--impl", "naive").output
    both = cli("profile", "--ncu", "attention", "--nsys")
    assert both.exit_code == 2 and "(got --ncu, --nsys)" in both.output
    sweep = cli("profile", "--ncu", "attention", "--n", "256,512")
    assert sweep.exit_code == 2 and "takes one case" in sweep.output
    ncu_only = cli("profile", "--torch-profiler", "attention", "--set", "full")
    assert ncu_only.exit_code == 2 and "Nsight Compute's" in ncu_only.output
    clocks = cli("profile", "--ncu", "attention", "--clock-control", "fast")
    assert clocks.exit_code == 2 and "--clock-control" in clocks.output
    monkeypatch.setattr(kbench.runner, "host_has_gpu", lambda: False)
    cuda = cli("profile", "--torch-profiler", "attention", "--device", "cuda")
    assert cuda.exit_code == 2 and "no CUDA device is visible" in cuda.output
    no_gpu = cli("profile", "--ncu", "attention")
    assert no_gpu.exit_code == 2 and "no CUDA device is visible" in no_gpu.output
    assert fake.calls() == []


def test_nsys_table_and_command_line(fake, cli, wide_console):
    result = cli("profile", "--nsys", "attention", *BIG, "--impl", "naive", "--name", "sys")
    assert result.exit_code == 0, result.output
    assert "per call: 2,780.7 us of kernels" in result.output
    assert "elsewhere_kernel" not in result.output and "FillFunctor" not in result.output  # outside the range
    assert "at::native::cunn_SoftMaxForward" in result.output
    profile, stats = fake.calls()
    argv = profile["argv"]
    assert argv[0] == "profile" and "--trace=cuda,nvtx" in argv and "--capture-range=nvtx" in argv
    assert f"--nvtx-capture={RANGE}" in argv and "--capture-range-end=none" in argv
    assert profile["env"]["NSYS_NVTX_PROFILER_REGISTER_ONLY"] == "0"
    prefix = str(Path("results") / "profiles" / "sys-naive")
    assert stats["argv"] == ["stats", "--report", "nvtx_kern_sum,cuda_gpu_kern_sum,nvtx_sum", "--format", "csv",
                             "--output", prefix, "--force-export=true", "--force-overwrite=true", prefix + ".nsys-rep"]


def test_nsys_no_capture(fake, cli, flat_text):
    fake.mode("nokernels")  # the capture range never opened: no report
    result = cli("profile", "--nsys", "attention", *BIG, "--impl", "naive")
    assert result.exit_code == 4
    assert "nsys captured no kernels" in flat_text(result.output)


def test_against_a_run_checks_the_agreement(fake, cli, wide_console, tmp_path):
    """--against RUN: after profiling, the profiled time per call against the run's event median (the
    H200's run of this case: naive at 2,795.5 us; the synthetic CSV's naive takes 2,781.0 us)."""
    run = FIXTURES / "h200-n4096-pinned" / "run.jsonl"
    result = cli("profile", "--ncu", "attention", *BIG, "--impl", "naive", "--name", "a", "--against", str(run))
    assert result.exit_code == 0, result.output
    (naive,) = [line for line in result.output.splitlines() if line.startswith("│ naive ")]
    assert "2,781.0" in naive and "2,795.5" in naive and "-0.5%" in naive and "agrees" in naive
    records = [json.loads(line) for line in run.read_text().splitlines()]
    records[0]["timing"]["stats"]["median"] = 3.2  # the run's naive now 15 % slower than the profiled call
    slow = tmp_path / "slow.jsonl"
    slow.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = cli("profile", "--ncu", "attention", *BIG, "--impl", "naive", "--name", "b", "--against", str(slow))
    assert result.exit_code == 1 and "DISAGREES" in result.output


def test_against_checks_the_run_before_profiling(fake, cli, flat_text):
    run = FIXTURES / "h200-n4096-pinned" / "run.jsonl"
    other_case = cli("profile", "--ncu", "attention", "--impl", "naive", "--against", str(run))
    assert other_case.exit_code == 2
    assert "has no timed record of case n=256,d=128" in flat_text(other_case.output)
    missing = cli("profile", "--ncu", "attention", *BIG, "--impl", "naive", "--against", "nowhere.jsonl")
    assert missing.exit_code == 2 and "cannot read 'nowhere.jsonl'" in flat_text(missing.output)
    assert fake.calls() == []  # neither profiled anything


def test_against_keeps_the_profiles_exit_code(fake, cli, flat_text):
    """A capture without kernels is exit 4 with --against too (the check has nothing to compare)."""
    fake.mode("nokernels")
    result = cli("profile", "--ncu", "attention", *BIG, "--impl", "naive",
                 "--against", str(FIXTURES / "h200-n4096-pinned" / "run.jsonl"))
    assert result.exit_code == 4
    assert "not checked (missing figure)" in flat_text(result.output)


def test_ncu_runs_the_real_worker(fake, cli, monkeypatch, wide_console):
    """The fake ncu runs kbench's worker for real (on the CPU): batch mode answers, exactly --calls timed calls."""
    monkeypatch.setenv("FAKE_WORKER", "run")
    result = cli("profile", "--ncu", "attention", "--n", "32", "--d", "16", "--impl", "naive", "--calls", "2",
                 "--name", "real")
    # The synthetic CSV describes another case, but ncu would have profiled whatever ran: the flow is what counts.
    assert result.exit_code == 0, result.output
    answers = [json.loads(line) for line in
               (fake.root / "results" / "profiles" / "real-naive.worker.jsonl").read_text().splitlines()]
    hello, record = answers
    assert hello["type"] == "hello" and hello["device"] == "cpu"
    assert record["status"] == "OK"
    assert record["timing"]["stats"]["n"] == 2 and record["timing"]["stop_reason"] == "sample limit"


def test_torch_profiler_on_the_cpu(tmp_path, kbench_proc, proc_env):
    """For real: naive attention under torch.profiler on the CPU, a Chrome trace with one scope per timed call."""
    result = kbench_proc("profile", "--torch-profiler", "attention", "--n", "64", "--d", "16", "--impl", "naive",
                         "--calls", "3", "--name", "cpu", cwd=tmp_path, env=proc_env(COLUMNS="200"))
    assert result.returncode == 0, result.stderr + result.stdout
    assert "naive: torch.profiler" in result.stdout
    assert "aten::bmm" in result.stdout and "aten::_softmax" in result.stdout
    trace = json.loads((tmp_path / "results" / "profiles" / "cpu-naive.trace.json").read_text())
    name = "kbench/attention/naive/n=64,d=16,batch=1,heads=1,dtype=fp16,causal=False"
    scopes = [e for e in trace["traceEvents"] if e.get("name") == name and e.get("ph") == "X"]
    assert len(scopes) == 3
    summary = json.loads((tmp_path / "results" / "profiles" / "cpu.json").read_text())
    (naive,) = summary["implementations"]
    assert naive["per_call"]["calls"] == 3 and naive["rows"] == "ops"
    ops = {row["name"]: row["count"] for row in naive["ops"]}
    assert ops["aten::bmm"] == 6 and ops["aten::_softmax"] == 3  # two matmuls and one softmax a call


def test_help_does_not_import_torch(kbench_proc):
    for args in (["profile", "--help"], ["profile", "attention", "--help"]):
        result = kbench_proc(*args, python_args=("-X", "importtime"))
        assert result.returncode == 0
        modules = [line.split("|")[-1].strip() for line in result.stderr.splitlines() if "|" in line]
        assert not [m for m in modules if m == "torch" or m.startswith("torch.")], args
    assert "--ncu" in result.stdout and "--compare" in result.stdout and "--n" in result.stdout


def test_ncu_stalls_from_warp_sampling_are_shares_of_the_samples(fake, cli, wide_console, tmp_path, monkeypatch):
    """A section set without WarpStateStats (`--set detailed`): the stall line gives each state's share of
    the kernel's sampled warp states, from the H200's raw page of the scan (recorded 2026-12-04)."""
    played = tmp_path / "played"
    played.mkdir()
    (played / "ncu_raw_naive.csv").write_text((FIXTURES / "ncu_raw_20261204_blelloch-detailed.csv").read_text())
    (played / "ncu_source_naive.csv").write_text((FIXTURES / "ncu_source_20261204_blelloch-trimmed.csv").read_text())
    monkeypatch.setenv("FAKE_CSV_DIR", str(played))
    result = cli("profile", "--ncu", "attention", *BIG, "--impl", "naive", "--set", "detailed", "--name", "src")
    assert result.exit_code == 0, result.output
    assert ("scan_blelloch: top stalls, share of its sampled warp states: barrier 61 %, long_scoreboard 18 %, "
            "short_scoreboard 6 %") in result.output
    # and, from the source page, where: the instruction after the look-back's barrier
    assert "scan_blelloch: the instructions its sampled warps waited at most" in result.output
    assert "40.3 %  barrier          UMOV UR4, 0x400  (0x7f618f7ada40)" in result.output
    assert "STS.128 [R42], R4" in result.output  # SASS brackets printed as they are, not read as markup
    pages = [call["argv"] for call in fake.calls() if "source" in call["argv"]]
    assert [argv[-1] for argv in pages] == ["regex:scan_blelloch$", "regex:vectorized_elementwise_kernel$"]
    # the memset kernel's page is the scan's here (a fake): it is not read as the memset's
    assert "vectorized_elementwise_kernel: the instructions" not in result.output
    profiles = fake.root / "results" / "profiles"
    assert (profiles / "src-naive.scan_blelloch.source.csv").exists()
