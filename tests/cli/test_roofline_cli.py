"""`kbench roofline` and `kbench plot` on results recorded on the H200 (tests/fixtures/h200/)."""

import copy
import json
from pathlib import Path

import pytest

from kbench.loader import PROJECT_ROOT

H200_RUN = PROJECT_ROOT / "tests" / "fixtures" / "h200" / "attention-n4096.jsonl"


def test_roofline_of_a_recorded_h200_run(cli):
    result = cli("roofline", "--from", H200_RUN)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    # sdpa (flash) at N=4096: 2048 FLOP/byte, compute-bound on the fp16 tensor-core roof
    assert "sdpa" in text and "2048.0" in text and "fp16 tensor cores" in text and "compute" in text
    assert "INVALID: above the roof" not in text


def test_the_same_run_on_the_a100_roof(cli, tmp_path):
    result = cli("roofline", "--from", H200_RUN, "--gpu", "a100", "--plot", tmp_path / "a100.png")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    # cuDNN's 599 TFLOP/s on the H200 is above an A100's 312: where it would sit, said so, not "invalid"
    # (it was below the roof of the GPU that ran it)
    assert "above a100's roof (ran on h200)" in text and "INVALID" not in text
    assert "A100 (312 TFLOP/s over 2 TB/s)" in result.output
    # the roofs and their ridge point above the table, not only in the plot's label
    assert "memory 2 TB/s; fp16 tensor cores 312 TFLOP/s, ridge at 156 FLOP/byte" in text
    assert text.index("ridge at 156") < text.index("FLOP/B")
    assert (tmp_path / "a100.png").stat().st_size > 10_000


def test_above_the_roof_of_its_own_gpu_is_invalid_on_any_roof(cli, tmp_path):
    records = [json.loads(line) for line in H200_RUN.read_text().splitlines()]
    for r in records:
        r["timing"]["stats"]["median"] /= 5  # sdpa-cudnn now at ~3000 TFLOP/s on an H200: impossible
    path = tmp_path / "fast.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    for gpu in ("detected", "a100"):
        result = cli("roofline", "--from", path, "--gpu", gpu)
        assert result.exit_code == 0 and "INVALID: above the roof" in result.output, gpu


def test_roofline_plot_writes_png_and_svg(cli, tmp_path):
    result = cli("roofline", "--from", H200_RUN, "--plot", tmp_path / "roof.png")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "roof.png").stat().st_size > 10_000 and (tmp_path / "roof.svg").stat().st_size > 10_000
    assert (tmp_path / "roof.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args,fragment", [
    (["--gpu", "v100"], "--gpu: unknown GPU 'v100'"),
    (["--from", "/does/not/exist.jsonl"], "No such file"),
])
def test_roofline_bad_input(cli, args, fragment):
    result = cli("roofline", *(args if "--from" in args else ["--from", H200_RUN, *args]))
    assert result.exit_code == 2 and fragment in result.output


def test_roofline_of_cpu_results_says_why_not(cli, tmp_path):
    records = [json.loads(line) for line in H200_RUN.read_text().splitlines()]
    for r in records:
        r["env"]["gpu"] = None
    path = tmp_path / "cpu.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = cli("roofline", "--from", path)
    assert result.exit_code == 2 and "no OK GPU results" in result.output


def sweep_file(tmp_path) -> Path:
    """The recorded N=4096 run, copied to N=1024 and 2048 with times scaled by N² (a fake sweep)."""
    base = [json.loads(line) for line in H200_RUN.read_text().splitlines()]
    rows = []
    for n in (1024, 2048, 4096):
        for r in base:
            r = copy.deepcopy(r)
            scale = (n / 4096) ** 2
            r["case"]["n"] = n
            r["case_key"] = ",".join(f"{k}={v}" for k, v in r["case"].items())
            r["flops"] *= scale
            r["timing"]["stats"]["median"] *= scale * 1.1
            r["metrics"]["tflops"] = r["flops"] / (r["timing"]["stats"]["median"] / 1e3) / 1e12
            rows.append(r)
    path = tmp_path / "sweep.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_plot_a_sweep(cli, tmp_path):
    result = cli("plot", sweep_file(tmp_path), "--out", tmp_path / "sweep.png")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "sweep.png").exists() and (tmp_path / "sweep.svg").exists()


def test_plot_needs_a_sweep(cli, tmp_path):
    result = cli("plot", H200_RUN, "--out", tmp_path / "one.png")
    assert result.exit_code == 2 and "do not sweep a numeric case axis" in result.output
    result = cli("plot", H200_RUN, "--metric", "flops")
    assert result.exit_code == 2 and "--metric" in result.output


def test_calibrated_roofs_are_shown_beside_the_datasheet(cli, tmp_path, monkeypatch):
    from kbench import calibrate

    gpu = json.loads(H200_RUN.read_text().splitlines()[0])["env"]["gpu"]
    monkeypatch.chdir(tmp_path)  # calibrations live under ./results/calibration
    calibrate.save({"gpu": gpu, "hbm_tbs": 4.3, "fp16_tensor_tflops": 790.0, "fp32_tflops": 60.0,
                    "method": {}})
    assert calibrate.load_for(gpu)["fp16_tensor_tflops"] == 790.0
    assert calibrate.load_for(dict(gpu, uuid="other", driver="other")) is None
    result = cli("roofline", "--from", H200_RUN)
    assert result.exit_code == 0, result.output
    assert "measured roof" in result.output and "790.0" in result.output


def test_calibrate_without_a_gpu_is_a_usage_error(cli):
    result = cli("calibrate")
    assert result.exit_code == 2 and "needs a CUDA device" in result.output


def test_calibrated_plot(cli, tmp_path, monkeypatch):
    from kbench import calibrate

    gpu = json.loads(H200_RUN.read_text().splitlines()[0])["env"]["gpu"]
    monkeypatch.chdir(tmp_path)
    calibrate.save({"gpu": gpu, "hbm_tbs": 4.3, "fp16_tensor_tflops": 790.0, "fp32_tflops": 60.0, "method": {}})
    result = cli("roofline", "--from", H200_RUN, "--plot", tmp_path / "cal.png")
    assert result.exit_code == 0, result.output
    assert "measured fp16 tensor" in (tmp_path / "cal.svg").read_text()
