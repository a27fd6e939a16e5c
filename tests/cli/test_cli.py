"""The command line: help, version, list, env, a real small run (also interleaved) and the output formats."""

from __future__ import annotations

import csv
import io
import re
import json
import subprocess
import sys
from pathlib import Path

import pytest

import kbench
from kbench.record import Record
from kbench.report import CPU_NOTE

CORPUS = __import__("pathlib").Path(__file__).resolve().parents[1] / "corpus" / "kernels"
ATTENTION_DISTRIBUTIONS = ["normal", "large-scores", "outliers", "near-constant", "growing"]

SMALL = ("--n", "64", "--d", "64", "--max-time", "0.3", "--min-time", "0.05")


# --- help and version ------------------------------------------------------

def test_root_help_lists_commands(cli, flat_text):
    result = cli("--help")
    assert result.exit_code == 0, result.output
    text = flat_text(result.stdout)
    assert "Usage: kbench" in text
    for command in ("run", "list", "env"):
        assert f" {command} " in text
    assert "--version" in text


def test_short_help_flag(cli, flat_text):
    result = cli("-h")
    assert result.exit_code == 0
    assert "Usage: kbench" in flat_text(result.stdout)


def test_run_help_lists_suites(cli, flat_text):
    result = cli("run", "--help")
    assert result.exit_code == 0, result.output
    text = flat_text(result.stdout)
    assert "Usage: kbench run" in text
    assert "attention" in text


def test_run_attention_help_lists_axes_with_defaults_and_common_options(cli, flat_text):
    result = cli("run", "attention", "--help")
    assert result.exit_code == 0, result.output
    text = flat_text(result.stdout)
    assert "Usage: kbench run attention" in text
    for axis, default in (("--n", "256"), ("--d", "128"), ("--batch", "1"), ("--heads", "1"), ("--dtype", "fp16")):
        assert axis in text
        assert f"[default: {default}]" in text
    assert "fp16|bf16|fp32" in text
    assert "--causal" in text and "--no-causal" in text
    for option in ("--impl", "--baseline", "--seed", "--trials", "--out", "--format", "--kernels", "--timeout",
                   "--min-time", "--max-time", "--target-noise", "--device", "--cuda-graph", "--flush-l2"):
        assert option in text, option
    assert "[default: naive]" in text  # the suite's baseline


def test_list_help(cli, flat_text):
    result = cli("list", "--help")
    assert result.exit_code == 0, result.output
    text = flat_text(result.stdout)
    assert "Usage: kbench list" in text
    assert "--kernels" in text


def test_env_help(cli, flat_text):
    result = cli("env", "--help")
    assert result.exit_code == 0, result.output
    text = flat_text(result.stdout)
    assert "Usage: kbench env" in text
    assert "--json" in text


def test_root_help_offers_shell_completion(cli, flat_text):
    result = cli("--help")
    assert result.exit_code == 0, result.output
    text = flat_text(result.stdout)
    assert "--install-completion" in text and "--show-completion" in text


@pytest.mark.parametrize("words, cword, expected", [
    ("kbench ro", 1, "roofline"),  # a command
    ("kbench run at", 2, "attention"),  # a suite, added at start-up
    ("kbench compare a b --allow", 4, "--allow-missing"),  # an option
])
def test_shell_completion_answers_through_the_root_command(kbench_proc, proc_env, words, cword, expected):
    """What the installed bash script runs on <TAB>: KbenchGroup.main must hand the request to Click's
    completion (and exit 0) rather than treat the empty command line as an error."""
    env = proc_env(_KBENCH_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=str(cword))
    proc = kbench_proc(env=env)
    assert proc.returncode == 0, proc.stderr
    assert expected in proc.stdout.split()
    assert proc.stderr == ""


def test_version(cli):
    result = cli("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"kbench {kbench.__version__}"


def test_real_help_subprocess_does_not_import_torch(kbench_proc):
    """`python -X importtime -m kbench --help`: every imported module is listed on stderr; torch must not be."""
    proc = kbench_proc("--help", python_args=("-X", "importtime"))
    assert proc.returncode == 0, proc.stderr
    assert "Usage: kbench" in proc.stdout
    modules = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "kbench.cli" in modules  # the import log is really there
    imported_torch = [m for m in modules if m == "torch" or m.startswith("torch.")]
    assert imported_torch == []


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["run", "attention", "--help"], ["list", "--help"],
                                  ["env", "--help"], ["--version"]])
def test_help_paths_do_not_import_torch(args, proc_env, tmp_path):
    """Nor numpy (70 ms of a 190 ms `kbench --help` when kbench.stats imported it at its top)."""
    script = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from kbench.cli import app\n"
        f"result = CliRunner().invoke(app, {args!r})\n"
        "assert result.exit_code == 0, result.output\n"
        "print('torch' in sys.modules, 'numpy' in sys.modules, 'kbench.cli' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=proc_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False", "True"]


# What no --help may import: the numeric libraries; rich.markdown (markdown-it-py, Pygments), which Typer's
# help module imports for rich_markup_mode="markdown" while kbench's help texts are Rich markup; and pydantic,
# which Typer coerces values with, for the groups' flags that a SUBCOMMAND --help passes without giving them.
NOT_FOR_HELP = ("torch", "triton", "cupy", "numpy", "scipy", "pandas", "matplotlib", "rich.markdown", "markdown_it",
                "pygments", "pydantic")


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["run", "attention", "--help"], ["profile", "--help"],
                                  ["explain", "mma", "--help"], ["compare", "--help"], ["bench", "--help"]])
def test_help_imports_no_heavy_library(kbench_proc, args):
    """`python -X importtime -m kbench ... --help` lists every module the real entry point imports on stderr."""
    proc = kbench_proc(*args, python_args=("-X", "importtime"))
    assert proc.returncode == 0, proc.stderr
    assert "Usage: kbench" in proc.stdout
    modules = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "typer.rich_utils" in modules  # the import log is there, and Typer's formatter drew the help
    assert sorted(m for m in modules if any(m == name or m.startswith(name + ".") for name in NOT_FOR_HELP)) == []
    if args == ["--help"]:  # the suites load when a command with a subcommand per suite is looked into
        assert "kbench.loader" not in modules
        # nor any command's module: the root's help lists them from kbench.cli.SUMMARIES
        assert sorted(m for m in modules if m.startswith("kbench.cli.") and m.endswith("_cmd")) == []


def test_the_roots_list_of_commands_says_what_each_command_says_of_itself():
    from kbench import cli

    assert list(cli.SUMMARIES) == list(cli.COMMANDS)
    for name in cli.COMMANDS:
        own = cli.load_command(name).help.split("\n\n")[0]
        assert " ".join(own.split()) == " ".join(cli.SUMMARIES[name].split()), name


def test_markdown_help_and_pretty_tracebacks_still_work_after_kbench_cli(proc_env, tmp_path):
    """kbench.cli imports Typer's help module with rich.markdown and rich.traceback deferred: another Typer
    app's Markdown help, and a pretty traceback, import them when they are first used."""
    script = (
        "import sys, typer\n"
        "from rich.console import Console\n"
        "from typer.models import DeveloperExceptionConfig\n"
        "from typer.testing import CliRunner\n"
        "import kbench.cli\n"
        "from typer import rich_utils\n"
        "assert 'rich.markdown' not in sys.modules and 'rich.traceback' not in sys.modules\n"
        "app = typer.Typer(rich_markup_mode='markdown')\n"
        "@app.command()\n"
        "def hello(name: str = 'x'):\n"
        "    '''Say **hello**.\n\n    * one item'''\n"
        "result = CliRunner().invoke(app, ['--help'], env={'COLUMNS': '100'})\n"
        "assert result.exit_code == 0, result.output\n"
        "assert 'Say hello.' in result.output and '• one item' in result.output, result.output\n"
        "try:\n"
        "    1 / 0\n"
        "except ZeroDivisionError as exc:\n"
        "    console = Console(width=100, record=True, file=open('/dev/null', 'w'))\n"
        "    console.print(rich_utils.get_traceback(exc, DeveloperExceptionConfig(), []))\n"
        "    assert 'ZeroDivisionError: division by zero' in console.export_text()\n"
        "import rich.markdown, rich.traceback\n"
        "print(type(rich_utils.Markdown('*x*')) is rich.markdown.Markdown)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=proc_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True"]


# --- list and env ----------------------------------------------------------

def test_list_shows_builtin_implementations_and_cpu_availability(cli, wide_console):
    result = cli("list")
    assert result.exit_code == 0, result.output
    rows = {}
    for line in result.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) == 5 and cells[0]:
            rows[cells[0].split(" ")[0]] = cells
    for name in ("naive", "sdpa", "sdpa-math", "triton-fa2"):
        assert rows[name][3] == "yes", rows[name]
    assert rows["naive"][0] == "naive (baseline)"
    for name in ("sdpa-cudnn", "sdpa-efficient", "cupy-fa2"):
        assert rows[name][3] == "no: needs a CUDA device", rows[name]
    assert rows["triton-fa2"][1] == "triton"
    assert "runs here (cpu)" in result.stdout
    assert "warning" not in result.stderr


def test_list_with_user_folder_shows_user_kernel(cli, write_kernels, flat_text):
    folder = write_kernels({"mine.py": """
        @implementation("attention", "user-listed", backend="torch", description="a user kernel")
        def mine(case, inputs, out):
            return _correct(case, inputs, out)
    """})
    result = cli("list", "--kernels", folder)
    assert result.exit_code == 0, result.output
    text = flat_text(result.stdout)
    assert "user-listed" in text and "a user kernel" in text
    assert "triton-fa2" in text


def test_env_table(cli, flat_text, wide_console):
    result = cli("env")
    assert result.exit_code == 0, result.output
    text = flat_text(result.stdout)
    assert "kbench environment" in text
    assert "device cpu" in text
    assert "torch" in text and "python" in text
    assert "none: no GPU" in text


def test_env_json(cli):
    result = cli("env", "--json")
    assert result.exit_code == 0, result.output
    env = json.loads(result.stdout)
    assert env["device"] == "cpu"
    assert env["gpu"] is None
    assert env["peaks"] is None
    assert env["kbench"] == kbench.__version__
    assert "torch" in env["packages"] and "numpy" in env["packages"]
    assert set(env["git"]) == {"commit", "dirty"}


# --- a real run ------------------------------------------------------------

def test_real_run_naive_and_triton(cli, tmp_path, jsonl, flat_text, wide_console):
    out = tmp_path / "tmp" / "x.jsonl"  # the folder does not exist yet
    result = cli("run", "attention", *SMALL, "--impl", "naive,triton-fa2", "--out", out)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    text = flat_text(result.stdout)
    assert "attention: n=64,d=64,batch=1,heads=1,dtype=fp16,causal=False" in text
    assert flat_text(CPU_NOTE) in text
    assert f"results: {out} (2 records)" in flat_text(result.stderr)

    records = jsonl(out)
    assert [r["impl"] for r in records] == ["naive", "triton-fa2"]
    for r in records:
        assert r["status"] == "OK", r.get("reason")
        assert r["schema"] == 1
        assert r["case"] == {"n": 64, "d": 64, "batch": 1, "heads": 1, "dtype": "fp16", "causal": False}
        assert r["env"]["device"] == "cpu"
        assert r["timing"]["method"] == "cpu-wall-clock"
        assert r["timing"]["stats"]["n"] == len(r["timing"]["samples"]) >= 1
        # --trials 3 (the default), but one trial per input distribution at least
        assert r["correctness"]["ok"] is True and r["correctness"]["trials"] == len(ATTENTION_DISTRIBUTIONS) + 1  # then the first distribution again
        assert list(r["correctness"]["distributions"]) == ATTENTION_DISTRIBUTIONS
        for name, entry in r["correctness"]["distributions"].items():
            assert entry["max_abs_err"] <= entry["allowed"], (r["impl"], name, entry)
        assert r["timing"]["checked_calls"]["calls"] == len(r["timing"]["samples"])
        assert r["metrics"]["pct_of_peak"] is None  # no GPU: no roofline
        assert r["flops"] == 4.0 * 64 * 64 * 64
    assert records[0]["speedup"] == pytest.approx(1.0)
    assert records[1]["speedup"] == pytest.approx(
        records[0]["timing"]["stats"]["median"] / records[1]["timing"]["stats"]["median"])
    for r in records:
        low, high = r["speedup_interval"]  # None: a bound too few samples cannot set (interpreted Triton)
        assert (low is None or low <= r["speedup"]) and (high is None or r["speedup"] <= high)
    assert records[1]["config"]["BLOCK_M"] == 128  # the CPU tile config was used
    assert records[1]["backend"] == "triton"
    # both rows in the table
    # a row may carry a footnote mark (naive*) when its timing has a warning
    assert re.search(r"naive\*? OK", text) and re.search(r"triton-fa2\*? OK", text), text


def _assert_interval_brackets_speedup(record: Record):
    interval = record.speedup_interval
    assert isinstance(interval, list) and len(interval) == 2
    low, high = interval
    assert isinstance(low, float) and isinstance(high, float)
    assert 0 < low <= record.speedup <= high, record.impl


def test_interleaved_run(cli, tmp_path, jsonl, flat_text, wide_console):
    out = tmp_path / "i.jsonl"
    result = cli("run", "attention", "--n", "32", "--d", "16", "--interleave", "--impl", "naive,sdpa",
                 "--max-time", "0.2", "--out", out)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    records = jsonl(out)
    assert [r["impl"] for r in records] == ["naive", "sdpa"]  # the baseline first
    for r in records:
        assert r["status"] == "OK", r.get("reason")
        assert r["timing"]["method"] == "cpu-wall-clock"
        assert r["timing"]["stats"]["n"] == len(r["timing"]["samples"]) >= 1
        assert r["timing"]["checked_calls"]["checked"] >= 1  # the timed calls were judged in bursts too
        assert list(r["correctness"]["distributions"]) == ATTENTION_DISTRIBUTIONS
        _assert_interval_brackets_speedup(Record.from_json(r))
    assert records[0]["speedup"] == pytest.approx(1.0)
    assert records[1]["speedup"] == pytest.approx(
        records[0]["timing"]["stats"]["median"] / records[1]["timing"]["stats"]["median"])
    text = flat_text(result.stdout)
    assert "vs naive [95% CI]" in text
    assert re.search(r"naive\*? OK", text) and re.search(r"sdpa\*? OK", text), text


def test_interleaved_crash_costs_only_its_row(cli, tmp_path, jsonl, flat_text):
    """A segfault in one implementation's worker (during its checks) ends that row only: the others
    are sampled in turn as usual."""
    out = tmp_path / "c.jsonl"
    result = cli("run", "attention", "--n", "32", "--d", "16", "--interleave", "--kernels", CORPUS,
                 "--impl", "naive,cheat-segfault,sdpa", "--max-time", "0.2", "--out", out)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    records = {r["impl"]: r for r in jsonl(out)}
    assert set(records) == {"naive", "cheat-segfault", "sdpa"}
    assert records["cheat-segfault"]["status"] == "CRASH"
    assert "SIGSEGV" in records["cheat-segfault"]["reason"]
    assert "timing" not in records["cheat-segfault"] and "speedup" not in records["cheat-segfault"]
    for name in ("naive", "sdpa"):
        assert records[name]["status"] == "OK", records[name].get("reason")
        _assert_interval_brackets_speedup(Record.from_json(records[name]))
    assert "cheat-segfault" in flat_text(result.stderr) and "CRASH" in flat_text(result.stderr)
    # The live line names the worker's log, which keeps the Python stack faulthandler wrote.
    log = records["cheat-segfault"]["log"]
    assert f"(worker log: {log})" in flat_text(result.stderr)
    assert "Fatal Python error" in Path(log).read_text()


def test_a_compilers_own_error_lines_join_the_reason(cli, tmp_path, write_kernels, jsonl):
    """A kernel whose compiler printed its diagnostics to stderr and raised a generic error (Triton's
    "PassManager::run failed"): the record's reason carries the diagnostic lines this job wrote to the
    worker's log, not a Python line and not an earlier job's."""
    folder = write_kernels({"broken.py": """
        @implementation("attention", "broken-build", backend="torch")
        def broken(case, inputs, out):
            import os
            import sys

            os.write(2, b"kernel.py:72:12: error: 'ttg.warp_specialize' op cannot be lowered\\n")
            sys.stderr.write("ValueError: not a compiler line\\n")
            sys.stderr.flush()
            raise RuntimeError("PassManager::run failed")
    """})
    out = tmp_path / "broken.jsonl"
    result = cli("run", "attention", "--n", "32", "--d", "16", "--kernels", folder,
                 "--impl", "naive,broken-build", "--max-time", "0.2", "--out", out)
    assert result.exit_code == 1, result.output
    records = {r["impl"]: r for r in jsonl(out)}
    reason = records["broken-build"]["reason"]
    assert reason == ("raised RuntimeError: PassManager::run failed (the log: kernel.py:72:12: error: "
                      "'ttg.warp_specialize' op cannot be lowered)"), reason
    assert records["naive"]["status"] == "OK"


def test_interleaved_crash_while_sampling_costs_only_its_row(cli, tmp_path, write_kernels, jsonl):
    """A worker that dies between two bursts (the closure segfaults once sampling is under way)."""
    folder = write_kernels({"late_crash.py": """
        @implementation("attention", "late-crash", backend="torch")
        def late_crash(case, inputs, out):
            import ctypes
            import time

            run = _correct(case, inputs, out)
            born = time.perf_counter()

            def call():
                if time.perf_counter() - born > 0.5:  # past the checks and the warm-up
                    ctypes.string_at(0)
                return run()

            return call
    """})
    out = tmp_path / "late.jsonl"
    result = cli("run", "attention", "--n", "32", "--d", "16", "--interleave", "--kernels", folder,
                 "--impl", "naive,late-crash", "--max-time", "2", "--min-time", "1.5", "--out", out)
    assert result.exit_code == 1, result.output
    records = {r["impl"]: r for r in jsonl(out)}
    assert records["late-crash"]["status"] == "CRASH" and "SIGSEGV" in records["late-crash"]["reason"]
    assert records["naive"]["status"] == "OK", records["naive"].get("reason")
    assert records["naive"]["timing"]["stats"]["n"] >= 1


def _run_interleaved(registry, names, case, device, path, on_record=lambda record: None):
    """runner.run with --interleave over these attention implementations of one case: its records."""
    from kbench import results, runner
    from kbench.registry import Variant

    impls = registry.implementations("attention")
    request = runner.RunRequest(suite="attention", variants=[Variant(impls[n], {}, n) for n in names],
                                cases=[case], baseline=None, device=device, interleave=True)
    out = results.ResultsFile(path)
    try:
        return runner.run(registry, request, out, on_record=on_record)
    finally:
        out.close()


def test_interleaved_runner_takes_turns(registry, monkeypatch, tmp_path):
    """Every implementation of a case is checked and warmed up first, then they take turns of one burst
    each, in the same order every round, until each is done; one that ends early (a SKIP at its start,
    a crash in a burst) drops out of the rounds; the records come baselines first."""
    from kbench import runner
    from kbench.suite import Case

    log = []
    bursts_to_finish = {"naive": 3, "sdpa": 1}
    medians = {"naive": 4.0, "sdpa": 2.0}
    env = {"device": "cpu", "gpu": None}

    def send_job(self, variant, case, trials_ahead):
        log.append(("start", variant.label))
        if variant.label == "sdpa-cudnn":
            return {"status": "SKIP", "reason": "needs a CUDA device"}, env
        return None

    def check(self):
        log.append(("check", self.impl.name))

    def warm_up(self):
        log.append(("warm_up", self.impl.name))

    def burst(self, seconds):
        name = self.impl.name
        log.append(("burst", name, seconds))
        if name == "sdpa-math":
            return True, ({"status": "CRASH", "reason": "worker killed by SIGSEGV"}, env)
        bursts_to_finish[name] -= 1
        return bursts_to_finish[name] == 0, None

    def finish(self):
        name = self.impl.name
        log.append(("finish", name))
        samples = [medians[name] * (1 + 0.01 * (i % 5 - 2)) for i in range(40)]
        timing = {"method": "cpu-wall-clock", "samples": samples,
                  "stats": {"median": medians[name], "n": len(samples)}, "warnings": []}
        return {"status": "OK", "timing": timing}, env

    monkeypatch.setattr(runner._VariantWorker, "send_job", send_job)
    monkeypatch.setattr(runner._VariantWorker, "prepared", lambda self: None)
    monkeypatch.setattr(runner._VariantWorker, "check", check)
    monkeypatch.setattr(runner._VariantWorker, "warm_up", warm_up)
    monkeypatch.setattr(runner._VariantWorker, "burst", burst)
    monkeypatch.setattr(runner._VariantWorker, "finish", finish)
    names = ["sdpa-math", "sdpa", "sdpa-cudnn", "naive"]  # the baseline last: the runner puts it first
    case = Case({"n": 16, "d": 16, "batch": 1, "heads": 1, "dtype": "fp32", "causal": False})
    records = _run_interleaved(registry, names, case, "cpu", tmp_path / "turns.jsonl")

    assert [entry[1] for entry in log[:4]] == ["naive", "sdpa-math", "sdpa", "sdpa-cudnn"]
    assert all(entry[0] == "start" for entry in log[:4])
    # every job sent first (the small case's trials drawn side by side), then each checked and warmed up
    # in turn, then the bursts
    assert [entry[0] for entry in log[4:10]] == ["check", "warm_up"] * 3 and log[10][0] == "burst"
    turns = [entry[1] for entry in log if entry[0] == "burst"]
    assert turns == ["naive", "sdpa-math", "sdpa", "naive", "naive"]
    assert {entry[2] for entry in log if entry[0] == "burst"} == {runner.BURST_SECONDS}
    assert [entry[1] for entry in log if entry[0] == "finish"] == ["naive", "sdpa"]
    assert [(r.impl, r.status) for r in records] == [
        ("naive", "OK"), ("sdpa-math", "CRASH"), ("sdpa", "OK"), ("sdpa-cudnn", "SKIP")]
    by_name = {r.impl: r for r in records}
    assert by_name["sdpa"].speedup == pytest.approx(2.0)
    _assert_interval_brackets_speedup(by_name["sdpa"])
    _assert_interval_brackets_speedup(by_name["naive"])
    assert by_name["sdpa-math"].speedup is None and by_name["sdpa-cudnn"].speedup is None


def test_format_json(cli, tmp_path, jsonl):
    out = tmp_path / "j.jsonl"
    result = cli("run", "attention", "--n", "32", "--d", "32", "--max-time", "0.2", "--impl", "naive",
                 "--format", "json", "--out", out)
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert isinstance(records, list) and len(records) == 1
    assert records[0]["impl"] == "naive" and records[0]["status"] == "OK"
    assert records[0]["case_key"] == "n=32,d=32,batch=1,heads=1,dtype=fp16,causal=False"
    assert records == jsonl(out)  # the same records as the results file


def test_format_csv(cli, tmp_path):
    from kbench.report import CSV_FIELDS

    out = tmp_path / "c.jsonl"
    result = cli("run", "attention", "--n", "32", "--d", "32", "--max-time", "0.2", "--impl", "sdpa-cudnn",
                 "--format", "csv", "--out", out)
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert tuple(rows[0].keys()) == CSV_FIELDS
    by_impl = {row["impl"]: row for row in rows}
    assert set(by_impl) == {"naive", "sdpa-cudnn"}  # the baseline is added
    assert by_impl["naive"]["status"] == "OK"
    assert float(by_impl["naive"]["median_ms"]) > 0
    assert int(by_impl["naive"]["samples"]) >= 1
    assert by_impl["naive"]["method"] == "cpu-wall-clock"
    assert by_impl["sdpa-cudnn"]["status"] == "SKIP"
    assert by_impl["sdpa-cudnn"]["reason"] == "needs a CUDA device"
    assert "baseline naive added" in result.stderr


def test_user_kernel_runs_via_kernels_option(cli, tmp_path, write_kernels, jsonl):
    folder = write_kernels({"user_attention.py": """
        @implementation("attention", "user-attn", backend="torch")
        def user_attn(case, inputs, out):
            run = _correct(case, inputs, out)
            run.config = {"from": "user"}
            return run
    """})
    out = tmp_path / "u.jsonl"
    result = cli("run", "attention", "--n", "24", "--d", "16", "--causal", "--max-time", "0.2", "--kernels", folder,
                 "--impl", "user-attn", "--baseline", "user-attn", "--out", out)
    assert result.exit_code == 0, result.output
    (record,) = jsonl(out)
    assert record["impl"] == "user-attn"
    assert record["status"] == "OK", record.get("reason")
    assert record["case"]["causal"] is True
    assert record["config"] == {"from": "user"}


# --- exit codes, with the runner replaced (no workers) ------------------------

def _fake_record(status: str, impl: str = "naive") -> Record:
    timed = {"timing": {"stats": {"median": 1.0, "p20": 1.0, "p80": 1.0, "n": 1}}} if status == "OK" else {}
    return Record.from_json({"schema": 1, "suite": "attention", "impl": impl, "label": impl, "backend": "torch",
                             "case": {}, "case_key": "n=1", "status": status,
                             "reason": "" if status == "OK" else f"why {status}", "baseline": "naive",
                             "env": {"device": "cpu"}, **timed})


@pytest.mark.parametrize("status,code", [("OK", 0), ("SKIP", 0), ("FAIL", 1), ("CRASH", 1), ("TIMEOUT", 1)])
def test_exit_code_follows_worst_status(cli, monkeypatch, tmp_path, status, code):
    from kbench import runner

    def fake_run(registry, request, out, on_start, on_record, done=None):
        for variant in request.variants:
            for case in request.cases:
                on_start(variant, case)
                name = variant.impl.name
                record = _fake_record("OK" if name == "naive" else status, name)
                out.append(record)
                on_record(record)

    monkeypatch.setattr(runner, "run", fake_run)
    result = cli("run", "attention", "--impl", "naive,sdpa", "--out", tmp_path / "e.jsonl")
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    if code:
        assert f"{status} why {status}" in result.stderr


def test_keyboard_interrupt_exits_130_and_keeps_records(cli, monkeypatch, tmp_path, jsonl):
    from kbench import runner

    def fake_run(registry, request, out, on_start, on_record, done=None):
        record = _fake_record("OK")
        out.append(record)
        on_record(record)
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run", fake_run)
    out = tmp_path / "i.jsonl"
    result = cli("run", "attention", "--impl", "naive", "--out", out)
    assert result.exit_code == 130
    assert f"interrupted: 1 records kept in {out}" in result.stderr
    assert "Traceback" not in result.output
    assert len(jsonl(out)) == 1


def test_param_sweep_runs_each_variant(cli, tmp_path, write_kernels, jsonl):
    """--param NAME=V1,V2 makes one row per value, labelled by the values away from the defaults (mode=right
    is the default), all in the implementation's one worker."""
    folder = write_kernels({"tunable.py": """
        @implementation("attention", "tunable", backend="torch", params={"mode": "right", "tile": 32})
        def tunable(case, inputs, out, mode, tile):
            if mode == "wrong":
                return lambda: inputs["v"]
            run = _correct(case, inputs, out)
            run.config = {"mode": mode, "tile": tile}
            return run
    """})
    out = tmp_path / "p.jsonl"
    result = cli("run", "attention", "--n", "16", "--d", "16", "--max-time", "0.1", "--kernels", folder,
                 "--impl", "tunable", "--baseline", "tunable", "--param", "mode=right,wrong",
                 "--param", "tile=64", "--out", out)
    assert result.exit_code == 1, result.output  # the wrong variant FAILs
    records = jsonl(out)
    assert [(r["label"], r["status"]) for r in records] == [
        ("tunable[tile=64]", "OK"), ("tunable[mode=wrong,tile=64]", "FAIL")]
    assert records[0]["params"] == {"mode": "right", "tile": 64}
    assert records[0]["config"]["tile"] == 64  # an int, converted from the command line's text
    assert "tunable[mode=wrong,tile=64]" in result.stderr


def test_a_fault_of_kbench_itself_is_one_line_and_its_traceback_a_file(tmp_path):
    """Not a kernel's failure or the user's input: an exception from kbench's own code. One line names it
    and the file holding its traceback; the exit code is 70 (EX_SOFTWARE)."""
    script = ("import sys, kbench.envinfo as e\n"
              "def boom(device):\n    raise RuntimeError('collect broke')\n"
              "e.collect = boom\nsys.argv = ['kbench', 'env']\n"
              "from kbench.cli import main\nmain()\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                          env={**__import__("os").environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 70, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "internal error: RuntimeError: collect broke" in lines[0], proc.stderr
    log = next(tmp_path.glob("kbench-error-*.log"))
    assert str(log) in lines[0] and "collect broke" in log.read_text() and "Traceback" in log.read_text()


def test_interleaved_case_too_large_for_the_gpu_is_sampled_in_groups(registry, monkeypatch, tmp_path):
    """Under --interleave each worker holds its case until sampling ends: where the GPU has no room for
    one more worker like the largest so far, the variants so far are sampled in turns and finished
    (giving their memory back) before the next group; each record names the others it was sampled with."""
    from kbench import gpu_memory, runner
    from kbench.suite import Case

    gib = 1 << 30
    free = [10 * gib]  # what NVML would say: each worker takes 3 GiB from its job to its finish
    log = []

    def send_job(self, variant, case, trials_ahead):
        self.env = {"device": "cuda", "gpu": {"uuid": "GPU-test", "name": "NVIDIA H200"}}
        log.append(("job", variant.label, free[0] // gib))

    def warm_up(self):
        free[0] -= 3 * gib

    def burst(self, seconds):
        log.append(("burst", self.impl.name))
        return True, None

    def finish(self):
        free[0] += 3 * gib
        log.append(("finish", self.impl.name))
        samples = [1.0 + 0.01 * (i % 5) for i in range(20)]
        return {"status": "OK", "timing": {"method": "cuda-events", "samples": samples,
                                           "stats": {"median": 1.02, "n": 20}, "warnings": []}}, self.env

    monkeypatch.setattr(runner._VariantWorker, "send_job", send_job)
    monkeypatch.setattr(runner._VariantWorker, "prepared", lambda self: None)
    monkeypatch.setattr(runner._VariantWorker, "check", lambda self: None)
    monkeypatch.setattr(runner._VariantWorker, "warm_up", warm_up)
    monkeypatch.setattr(runner._VariantWorker, "burst", burst)
    monkeypatch.setattr(runner._VariantWorker, "finish", finish)
    monkeypatch.setattr(runner, "Room", lambda: gpu_memory.Room(read=lambda uuid: free[0]))  # one GPU
    monkeypatch.setattr(runner, "skip_reason", lambda impl, case, device: None)
    names = ["naive", "sdpa", "sdpa-math", "sdpa-efficient"]
    case = Case({"n": 2048, "d": 128, "batch": 1, "heads": 16, "dtype": "fp16", "causal": False})  # 64 MiB
    assert registry.suite("attention").min_bytes(case) > runner.SIDE_BY_SIDE_BYTES
    records = _run_interleaved(registry, names, case, "cuda", tmp_path / "groups.jsonl",
                               on_record=lambda record: log.append(("record", record.impl)))

    # 10 GiB free: two workers of 3 GiB fit (7 GiB >= 1.25 x 3 + 2 spare), a third does not (4 GiB). The
    # first group's records are written before the second group starts: an interrupt loses none of them.
    assert log == [("job", "naive", 10), ("job", "sdpa", 7), ("burst", "naive"), ("burst", "sdpa"),
                   ("finish", "naive"), ("finish", "sdpa"), ("record", "naive"), ("record", "sdpa"),
                   ("job", "sdpa-math", 10), ("job", "sdpa-efficient", 7), ("burst", "sdpa-math"),
                   ("burst", "sdpa-efficient"), ("finish", "sdpa-math"), ("finish", "sdpa-efficient"),
                   ("record", "sdpa-math"), ("record", "sdpa-efficient")]
    assert [r.impl for r in records] == names
    notes = {r.impl: [w for w in r.timing.warnings if w.startswith("interleaved")] for r in records}
    assert notes["naive"] == ["interleaved with sdpa only: 4.0 GiB of GPU memory free, an implementation's "
                              "worker taking up to 3.0 GiB"]
    assert notes["sdpa-efficient"][0].startswith("interleaved with sdpa-math only")
    assert records[1].speedup == pytest.approx(1.0)  # against the baseline of the first group


def test_gpu_room_fits_what_it_cannot_measure():
    from kbench.gpu_memory import Room

    room = Room(read=lambda uuid: None)  # no NVML
    room.before_job("GPU-x")
    room.after_warm_up("GPU-x")
    assert room.fits_another("GPU-x") and room.largest == 0


def test_gpu_room_counts_what_a_worker_needs_only_while_it_checks():
    """A worker that keeps 3 GiB but peaked at 10 GiB during its check (float64 references, given back
    before its warm-up): the next one fits only where 1.25 x 3 + 7 + 2 GiB are free."""
    from kbench.gpu_memory import Room

    gib = 1 << 30
    free = [100 * gib]
    room = Room(read=lambda uuid: free[0])
    room.before_job("GPU-x")
    free[0] -= 3 * gib
    room.after_warm_up("GPU-x", gpu_peak_bytes=10 * gib, gpu_held_bytes=3 * gib)
    assert (room.largest, room.transient) == (3 * gib, 7 * gib)
    free[0] = int(12.8 * gib)
    assert room.fits_another("GPU-x")
    free[0] = int(12.7 * gib)
    assert not room.fits_another("GPU-x")
    assert "(and 7.0 GiB more while it checks)" in room.describe()
