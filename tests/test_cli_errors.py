"""Every bad input: exit code 2, one clear error line, never a traceback, nothing written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kbench import results

BAD_RUNS = [
    # (id, args after `run attention`, expected fragment of the error message)
    ("impl-typo", ["--impl", "naiv"],
     "unknown implementation 'naiv' for suite 'attention'; did you mean 'naive'?"),
    ("impl-unknown-in-list", ["--impl", "naive,nope"], "unknown implementation 'nope' for suite 'attention'"),
    ("n-zero", ["--n", "0"], "--n must be positive (got 0)"),
    ("n-negative", ["--n", "-5"], "--n must be positive (got -5)"),
    ("n-not-int", ["--n", "abc"], "--n: 'abc' is not an integer"),
    ("n-float", ["--n", "1.5"], "--n: '1.5' is not an integer"),
    ("n-sweep-with-bad", ["--n", "64,abc"], "--n: 'abc' is not an integer"),
    ("n-empty-item", ["--n", "64,,128"], "--n: empty value in '64,,128'"),
    ("batch-zero", ["--batch", "0"], "--batch must be positive (got 0)"),
    ("heads-negative", ["--heads", "-2"], "--heads must be positive (got -2)"),
    ("d-unsupported", ["--d", "100"], "--d 100 is not supported: head dim must be a multiple of 8 up to 256"),
    ("d-too-big", ["--d", "512"], "--d 512 is not supported"),
    ("dtype-fp8", ["--dtype", "fp8"], "--dtype: unknown value 'fp8' (choose from fp16, bf16, fp32)"),
    ("baseline-unknown", ["--baseline", "foo"], "--baseline: unknown implementation 'foo'"),
    ("baseline-typo", ["--baseline", "naiv"], "--baseline: unknown implementation 'naiv'; did you mean 'naive'?"),
    ("format-xml", ["--format", "xml"], "--format: unknown format 'xml' (choose from table, json, csv)"),
    ("device-tpu", ["--device", "tpu"], "--device: unknown device 'tpu' (choose from auto, cuda, cpu)"),
    ("trials-zero", ["--trials", "0"], "--trials must be at least 1"),
    ("timeout-zero", ["--timeout", "0"], "must be positive"),
    ("max-time-negative", ["--max-time", "-1"], "must be positive"),
    ("kernels-missing", ["--kernels", "/does/not/exist"], "kernel folder '/does/not/exist' does not exist"),
    ("param-not-declared", ["--param", "foo=1"], "--param: no chosen implementation has a parameter 'foo'"),
    ("param-no-value", ["--param", "block_m"], "--param: expected NAME=VALUE[,VALUE...], got 'block_m'"),
    ("param-bad-int", ["--impl", "cupy-fa2", "--param", "block_m=abc"],
     "--param block_m (for cupy-fa2): 'abc' is not an integer"),
]


def _assert_one_error_line(result, fragment, flat):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.output.count("kbench: error:") == 1, result.output
    assert result.stderr.lstrip().startswith("kbench: error:"), result.stderr
    assert fragment in flat(result.stderr), result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("args,fragment", [pytest.param(a, f, id=i) for i, a, f in BAD_RUNS])
def test_bad_run_input(cli, flat_text, tmp_path, args, fragment):
    out = tmp_path / "never.jsonl"
    result = cli("run", "attention", "--impl", "naive", "--out", out, *args) if "--impl" not in args \
        else cli("run", "attention", "--out", out, *args)
    _assert_one_error_line(result, fragment, flat_text)
    assert not out.exists()  # rejected before anything ran or was written


def test_out_under_a_file(cli, flat_text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("not a folder")
    result = cli("run", "attention", "--impl", "naive", "--out", "afile/x.jsonl")
    _assert_one_error_line(result, "cannot write results to 'afile/x.jsonl'", flat_text)


def test_out_under_proc(cli, flat_text):
    result = cli("run", "attention", "--impl", "naive", "--out", "/proc/x")
    _assert_one_error_line(result, "cannot write results to '/proc/x'", flat_text)


def test_out_is_a_directory(cli, flat_text, tmp_path):
    result = cli("run", "attention", "--impl", "naive", "--out", tmp_path)
    _assert_one_error_line(result, f"cannot write results to '{tmp_path}': Is a directory", flat_text)


def test_list_with_missing_kernel_folder(cli, flat_text):
    result = cli("list", "--kernels", "/does/not/exist")
    _assert_one_error_line(result, "kernel folder '/does/not/exist' does not exist", flat_text)


def test_kbench_kernels_env_missing_folder(cli, flat_text, monkeypatch):
    monkeypatch.setenv("KBENCH_KERNELS", "/does/not/exist/either")
    result = cli("list")
    _assert_one_error_line(result, "kernel folder '/does/not/exist/either' does not exist", flat_text)


def test_unknown_suite_suggests_once(cli):
    """`kbench run attenton`: exit 2, the suite named, one 'did you mean' (not two)."""
    result = cli("run", "attenton")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    # Undo rich's panel and line wrapping before searching.
    text = " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())
    assert "unknown suite 'attenton'" in text
    assert "(suites: attention, matmul," in text  # every suite listed, in order
    suggestions = re.findall(r"did you mean 'attention'", text, flags=re.IGNORECASE)
    assert len(suggestions) == 1, text


def test_unknown_suite_without_close_match(cli):
    result = cli("run", "zzzzzz")
    assert result.exit_code == 2
    text = " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())
    assert "unknown suite 'zzzzzz'" in text
    assert "did you mean" not in text.lower()
    assert "Traceback" not in result.output


def test_unknown_option_is_a_usage_error(cli):
    result = cli("run", "attention", "--bogus")
    assert result.exit_code == 2
    assert "No such option: --bogus" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args,fragment", [
    pytest.param(["--n", "0"], "kbench: error: --n must be positive (got 0)", id="short-message"),
    pytest.param(["--impl", "naiv"],
                 "kbench: error: unknown implementation 'naiv' for suite 'attention'; did you mean 'naive'? "
                 "(known: {known})", id="long-message"),
])
def test_error_is_one_physical_line_when_piped(kbench_proc, registry, tmp_path, args, fragment):
    """common.user_errors promises 'one line on stderr'. Piped (no TTY, no $COLUMNS) the consoles are
    140 columns wide: a longer message must still be one line, not hard-wrapped by rich."""
    proc = kbench_proc("run", "attention", *args, "--out", tmp_path / "never.jsonl", cwd=tmp_path)
    assert proc.returncode == 2
    fragment = fragment.format(known=", ".join(registry.implementations("attention")))
    if "naiv" in args:
        assert len(fragment) > 140  # longer than the 140 columns rich uses when piped
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [fragment], proc.stderr


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(_has_cuda(), reason="checks the message given on a machine without a CUDA device")
def test_device_cuda_without_a_gpu_is_a_usage_error(cli, flat_text, tmp_path):
    """`--device cuda` where there is no CUDA device is the user's mistake (README: exit 2, one line),
    not a CRASH of every implementation (exit 1), each after starting a worker just to refuse."""
    out = tmp_path / "cuda.jsonl"
    result = cli("run", "attention", "--n", "16", "--d", "16", "--impl", "naive", "--device", "cuda",
                 "--out", out)
    if out.exists():  # rows were run after all: remove the worker logs kept for them
        for record in results.read(out):
            if record.get("log"):
                Path(record["log"]).unlink(missing_ok=True)
    assert "Traceback" not in result.output
    assert result.exit_code == 2, result.output
    assert result.output.count("kbench: error:") == 1
    assert "cuda" in flat_text(result.stderr).lower()
