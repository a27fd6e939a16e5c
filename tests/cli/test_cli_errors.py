"""Every bad input: exit code 2, one clear error line, never a traceback, nothing written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kbench import results
from fake_records import fake_record

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
    # Not finite: nan passes every `<= 0` check, inf never ends a wait.
    ("timeout-nan", ["--timeout", "nan"], "--timeout must be a finite number (got nan)"),
    ("timeout-inf", ["--timeout", "inf"], "--timeout must be a finite number (got inf)"),
    ("max-time-nan", ["--max-time", "nan"], "--max-time must be a finite number (got nan)"),
    ("max-time-inf", ["--max-time", "inf"], "--max-time must be a finite number (got inf)"),
    ("target-noise-nan", ["--target-noise", "nan"], "--target-noise must be a finite number (got nan)"),
    ("min-time-nan", ["--min-time", "nan"], "--min-time must be a finite number (got nan)"),
    ("min-time-inf", ["--min-time", "inf"], "--min-time must be a finite number (got inf)"),
    # A --param value the implementation does not take: refused before anything runs, not a SKIP row.
    ("param-config-out-of-range", ["--impl", "naive,triton-fa2", "--param", "config=99"],
     "--param config (for triton-fa2): '99' is not one of auto, 0, 1, 2, 3, 4, 5, 6, 7"),
    ("param-config-in-a-sweep", ["--impl", "triton-fa2", "--param", "config=1,8"],
     "--param config (for triton-fa2): '8' is not one of auto, 0, 1"),
    ("param-tma", ["--impl", "triton-fa2", "--param", "tma=yes"],
     "--param tma (for triton-fa2): 'yes' is not one of auto, 0, 1"),
    ("param-block-n", ["--impl", "cupy-fa2", "--param", "block_n=100"],
     "--param block_n (for cupy-fa2): '100' must be a positive multiple of 16"),
    ("param-warps", ["--impl", "cupy-fa2", "--param", "warps=0"], "--param warps (for cupy-fa2): '0' must be 1 to 32"),
    ("param-layout", ["--impl", "cupy-fa2", "--param", "smem_layout=swizle"],
     "--param smem_layout (for cupy-fa2): 'swizle' is not one of swizzle, pad, plain"),
    ("param-rescale", ["--impl", "cupy-fa2", "--param", "rescale=4"],
     "--param rescale (for cupy-fa2): '4' is not one of 0, 8"),
    ("param-loads", ["--impl", "cupy-fa2", "--param", "loads=fast"],
     "--param loads (for cupy-fa2): 'fast' is not one of auto, checked, stepped"),
    # The same parameter twice: the later one used to win silently.
    ("param-twice", ["--impl", "triton-fa2", "--param", "config=1", "--param", "config=2"],
     "--param config is given twice ('config=1' and 'config=2'): write --param config=1,2 to sweep"),
    ("param-twice-spelt-two-ways", ["--impl", "cupy-fa2", "--param", "block_n=64", "--param", "block-n=128"],
     "--param block_n is given twice ('block_n=64' and 'block-n=128'): write --param block_n=64,128 to sweep"),
    # A value twice in a sweep: the same case or variant measured twice.
    ("dtype-twice", ["--dtype", "fp16,fp16"], "--dtype: fp16 is given twice in 'fp16,fp16'"),
    ("n-twice-spelt-two-ways", ["--n", "256,64,0256"], "--n: 256 is given twice in '256,64,0256'"),
    ("impl-twice", ["--impl", "naive,sdpa,naive"], "--impl: 'naive' is given twice"),
    ("param-value-twice", ["--impl", "triton-fa2", "--param", "config=1,auto,1"],
     "--param config (for triton-fa2): '1' is given twice in '1,auto,1'"),
    ("param-value-twice-typed", ["--impl", "cupy-fa2", "--param", "lse=0,00"],
     "--param lse (for cupy-fa2): '00' is given twice in '0,00'"),
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
def test_bad_run_input(cli, flat_text, tmp_path, monkeypatch, args, fragment):
    from kbench import runner

    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail("a usage error must stop the run before it starts"))
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
    assert "(suites: allreduce, attention, decode, kv-quantize, matmul, p2p, patterns, reduction, scan, streams)" in text  # all, in order
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
            if record.log:
                Path(record.log).unlink(missing_ok=True)
    assert "Traceback" not in result.output
    assert result.exit_code == 2, result.output
    assert result.output.count("kbench: error:") == 1
    assert "cuda" in flat_text(result.stderr).lower()


# --- not finite, as a user types it: no traceback, no empty results file --------------------------

@pytest.mark.parametrize("option", ["--timeout", "--max-time", "--target-noise", "--min-time"])
def test_nan_is_refused_before_the_default_results_file_exists(kbench_proc, tmp_path, option):
    proc = kbench_proc("run", "attention", "--impl", "naive", option, "nan", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"kbench: error: {option} must be a finite number (got nan)"]
    assert not (tmp_path / "results").exists()  # results/attention-TIME.jsonl was created empty before


def test_profile_timeout_must_be_finite(cli, flat_text):
    result = cli("profile", "--torch-profiler", "attention", "--impl", "naive", "--timeout", "nan")
    _assert_one_error_line(result, "--timeout must be a finite number (got nan)", flat_text)


# --- explain: any N answers at once ----------------------------------------------------------------

def test_explain_of_a_huge_causal_n_is_quick(kbench_proc, tmp_path):
    """cupy-fa2's causal walkthrough summed K/V tiles block by block: minutes at N = 10^11. Now in closed form.
    N = 10^11 is 781,250,000 blocks of 128 rows; block i visits 2i + 2 tiles of 64 keys (causal), and each
    warp of 4 issues 2·8·8 + 2·16·4 = 256 mma.sync per tile."""
    q_tiles = 10**11 // 128
    proc = kbench_proc("explain", "attention", "--n", 10**11, "--causal", "--impl", "cupy-fa2", cwd=tmp_path,
                       timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"{256 * 4 * q_tiles * (q_tiles + 1):,}" in proc.stdout


# --- --param values are checked in the parent, cheaply ------------------------------------------------

def test_param_values_are_checked_without_running_anything(registry):
    from kbench.errors import UserError
    from kbench.registry import parse_param_args, variants

    triton_fa2 = registry.implementations("attention")["triton-fa2"]
    cupy_fa2 = registry.implementations("attention")["cupy-fa2"]
    assert [v.label for v in variants([triton_fa2], parse_param_args(["config=auto,0,7"]))] == [
        "triton-fa2", "triton-fa2[config=0]", "triton-fa2[config=7]"]
    with pytest.raises(UserError, match=r"'-1' is not one of auto, 0, 1, 2, 3, 4, 5, 6, 7"):
        variants([triton_fa2], parse_param_args(["config=-1"]))
    # Values wrong only together stay SKIP rows: a sweep's cross product may hold a few (block_m=64 with
    # 8 warps leaves each warp 8 rows), and the pairs that fit still run.
    sweep = variants([cupy_fa2], parse_param_args(["block_m=64,128", "warps=4,8"]))
    assert len(sweep) == 4


# --- compare: two OK records of one case in one file --------------------------------------------------

def _record(label="naive", status="OK", median=1.0, case_key="n=16"):
    return fake_record(label, status, case_key=case_key, median=median)


def _write(path: Path, records, tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in records) + tail)
    return path


def test_compare_refuses_two_ok_records_of_one_case_in_one_file(kbench_proc, tmp_path):
    base = _write(tmp_path / "base.jsonl", [_record()])
    twice = _write(tmp_path / "twice.jsonl", [_record(median=1.0), _record("sdpa"), _record(median=2.0)])
    proc = kbench_proc("compare", base, twice, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [
        f"kbench: error: {twice}: lines 1 and 3 both hold an OK record of attention/naive [n=16] "
        "(two runs into one file?): keep one of them"]
    assert proc.stdout == ""


def test_compare_takes_the_rerun_of_a_failed_case(cli, tmp_path):
    """A FAIL, then the same case run again into the same file: the later record wins, as before."""
    base = _write(tmp_path / "base.jsonl", [_record()])
    rerun = _write(tmp_path / "rerun.jsonl", [_record(status="FAIL"), _record(median=1.0)])
    result = cli("compare", base, rerun)
    assert result.exit_code == 0, result.output


def _fake_runner(monkeypatch, ran: list, interrupt_after=None):
    """runner.run as kbench's: skips what ``done`` holds, appends one OK record per remaining job."""
    from kbench import runner

    def fake_run(registry, request, out, on_start, on_record, done=None):
        for variant in request.variants:
            for case in request.cases:
                if (request.suite, variant.label, case.key) in (done or {}):
                    continue
                if interrupt_after is not None and len(ran) == interrupt_after:
                    raise KeyboardInterrupt
                on_start(variant, case)
                record = _record(variant.label, case_key=case.key)
                ran.append((variant.label, case.key))
                out.append(record)
                on_record(record)

    monkeypatch.setattr(runner, "run", fake_run)


def test_a_resumed_file_never_holds_a_case_twice(cli, tmp_path, monkeypatch):
    """compare refuses two OK records of one case in a file; --resume, run any number of times, makes none."""
    out = tmp_path / "run.jsonl"
    args = ["run", "attention", "--impl", "naive,sdpa", "--n", "16,32", "--out", out]
    ran = []
    _fake_runner(monkeypatch, ran, interrupt_after=1)
    assert cli(*args).exit_code == 130
    _fake_runner(monkeypatch, ran)
    for _ in range(2):
        assert cli(*args, "--resume").exit_code == 0
    assert len(ran) == 4 and len(set(ran)) == 4
    keys = [record.key for _, record in results.read_strict(out)]
    assert len(keys) == len(set(keys)) == 4
    assert cli("compare", out, out).exit_code == 0


# --- --resume after a torn last line ------------------------------------------------------------------

TORN = '{"schema": 1, "suite": "attention", "impl": "sdpa", "label": "sdpa", "sta'


def test_resume_removes_a_torn_last_line(cli, tmp_path, monkeypatch, flat_text):
    out = _write(tmp_path / "killed.jsonl", [_record("naive", case_key="n=16,d=128,batch=1,heads=1,dtype=fp16,"
                                                                         "causal=False")], tail=TORN)
    ran = []
    _fake_runner(monkeypatch, ran)
    result = cli("run", "attention", "--impl", "naive,sdpa", "--n", "16", "--out", out, "--resume")
    assert result.exit_code == 0, result.output
    assert [label for label, _ in ran] == ["sdpa"]
    assert f"resuming {out}: removed its torn last line ({len(TORN)} bytes" in flat_text(result.stderr)
    assert [r.label for _, r in results.read_strict(out)] == ["naive", "sdpa"]  # the strict reader: no torn line
    assert TORN not in out.read_text()
    assert cli("show", out).exit_code == 0
    assert cli("compare", out, out).exit_code == 0


def test_drop_torn_last_line_keeps_whole_lines(tmp_path):
    whole = json.dumps(_record().to_json())
    path = tmp_path / "r.jsonl"
    path.write_text(whole + "\n" + whole)  # a valid last line without its newline: kept (ResultsFile ends it)
    assert results.drop_torn_last_line(path, "--resume") == 0
    assert path.read_text() == whole + "\n" + whole
    path.write_text(whole + "\n" + '{"a": "x' + "\n\n")  # an unparseable last line (a blank one after it)
    assert results.drop_torn_last_line(path, "--resume") > 0
    assert path.read_text() == whole + "\n"
    path.write_bytes(whole.encode() + b"\n" + '{"a": "\u00e9'.encode()[:-1])  # a character cut in two
    results.drop_torn_last_line(path, "--resume")
    assert path.read_text() == whole + "\n"


def test_resume_refuses_a_bad_line_before_the_last(kbench_proc, tmp_path):
    """Only the last line can be torn by a kill: a bad line in the middle is left alone and named."""
    out = tmp_path / "damaged.jsonl"
    out.write_text(json.dumps(_record().to_json()) + "\n" + TORN + "\n" + json.dumps(_record("sdpa").to_json()) + "\n")
    before = out.read_bytes()
    proc = kbench_proc("run", "attention", "--impl", "naive", "--out", out, "--resume", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"kbench: error: --resume: {out}:2 is not a JSON record and is not the last line (not a torn write): "
        "remove or fix that line first"]
    assert out.read_bytes() == before


# --- --kernels FILE.py --------------------------------------------------------------------------------

def test_kernels_takes_a_single_file(cli, write_kernels, wide_console):
    folder = write_kernels({"one.py": """
        @implementation("attention", "single-file", backend="torch")
        def single(case, inputs, out):
            return _correct(case, inputs, out)
    """, "other.py": """
        @implementation("attention", "not-this-one", backend="torch")
        def other(case, inputs, out):
            return _correct(case, inputs, out)
    """})
    from kbench import loader

    table = loader.load([folder / "one.py"]).implementations("attention")
    assert "single-file" in table and "not-this-one" not in table
    result = cli("list", "--kernels", folder / "one.py")
    assert result.exit_code == 0, result.output
    assert "single-file" in result.stdout and "not-this-one" not in result.stdout


def test_kernels_path_that_is_neither_folder_nor_python_file(cli, flat_text, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a kernel")
    out = tmp_path / "never.jsonl"
    result = cli("run", "attention", "--impl", "naive", "--kernels", notes, "--out", out)
    _assert_one_error_line(result, f"kernel path '{notes}' is neither a folder nor a .py file", flat_text)
    assert not out.exists()


# --- roofline: an unknown suite is the name's fault --------------------------------------------------

@pytest.mark.parametrize("name,fragment", [
    ("nosuchsuite", "kbench: error: unknown suite 'nosuchsuite' (suites: allreduce, attention, decode, kv-quantize,"),
    ("atention", "kbench: error: unknown suite 'atention'; did you mean 'attention'? (suites: allreduce, attention,"),
])
def test_roofline_unknown_suite(cli, flat_text, tmp_path, monkeypatch, name, fragment):
    monkeypatch.chdir(tmp_path)  # no results/ here: the name is still what is wrong
    result = cli("roofline", name)
    _assert_one_error_line(result, fragment.removeprefix("kbench: error: "), flat_text)
    assert flat_text(result.stderr).startswith(fragment)


# --- Click's own usage errors: one line, as every other mistake ---------------------------------------

PARSER_ERRORS = [
    (["run", "attention", "--bogus"], "No such option: --bogus"),
    (["run", "attention", "--n"], "Option '--n' requires an argument"),
    (["run", "attention", "--trials", "x"], "Invalid value for '--trials'"),
    (["run", "attention", "--causal=3"], "Option '--causal' does not take a value"),
    (["run", "attenton"], "unknown suite 'attenton'; did you mean 'attention'?"),
    (["bogus"], "No such command 'bogus'"),
    (["show", "--format"], "Option '--format' requires an argument"),
    (["compare"], "Missing argument 'BASE'"),
    (["explain", "attention", "--bogus"], "No such option: --bogus"),
    (["explain", "mma", "--lane", "x"], "Invalid value for '--lane'"),
    (["explain", "sotfmax"], "unknown suite or command 'sotfmax'; did you mean 'softmax'? (suites: allreduce, "),
    (["explain", "kv"], "streams; commands: mma, softmax)"),
    (["profile", "attention", "--ncu", "--calls", "x"], "Invalid value for '--calls'"),
    (["roofline", "--gpu"], "Option '--gpu' requires an argument"),
    (["plot"], "Missing argument 'RESULTS'"),
    (["list", "--bogus"], "No such option: --bogus"),
    (["env", "--bogus"], "No such option: --bogus"),
    (["calibrate", "--bogus"], "No such option: --bogus"),
]


@pytest.mark.parametrize("args,fragment", [pytest.param(a, f, id=" ".join(a)) for a, f in PARSER_ERRORS])
def test_parser_errors_are_one_line(kbench_proc, tmp_path, args, fragment):
    proc = kbench_proc(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kbench: error: "), proc.stderr
    assert fragment in lines[0]
    assert "Traceback" not in proc.stderr and "╭" not in proc.stderr and "Usage:" not in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["run", "attention", "--help"], ["compare", "--help"]])
def test_help_and_version_still_exit_0(kbench_proc, tmp_path, args):
    proc = kbench_proc(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout and proc.stderr == ""


def test_usage_error_in_process_is_one_line_with_exit_2(cli):
    """The same handling for typer.testing's CliRunner, which calls the root command's main()."""
    result = cli("compare")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == ["kbench: error: Missing argument 'BASE' (see 'kbench compare --help')"]


def test_calibrate_without_a_gpu_says_only_why(kbench_proc, proc_env, tmp_path):
    """No CUDA device: one error line, not first the promise of a minute's measuring."""
    proc = kbench_proc("calibrate", cwd=tmp_path, env=proc_env(CUDA_VISIBLE_DEVICES=""))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "kbench: error: kbench calibrate needs a CUDA device (none is visible here)"]
    assert not (tmp_path / "results").exists()
