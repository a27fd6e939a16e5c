"""Shared fixtures for the kbench test suite.

TRITON_INTERPRET must be in the environment before any kernel module imports
triton (kbench.loader.load() executes kernels/attention/triton_fa2.py), so it is
set here, at import time, before any test module imports kbench.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"
# Tests must not pick up a developer's extra kernel folders.
os.environ.pop("KBENCH_KERNELS", None)

import functools  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# For kernel files written by tests: ``_correct``, a right attention closure factory (fixtures/_correct_attention.py).
CORRECT_ATTENTION = f"""
from kbench.loader import load_helper as _load_helper
_correct = _load_helper(__import__("pathlib").Path({str(FIXTURES / "_correct_attention.py")!r})).correct
"""


def flat(text: str) -> str:
    """Text with rich's box characters removed and all whitespace runs joined, so a
    message that rich wrapped over several lines can be searched as one string."""
    for ch in "│╭╮╰╯─┃━┏┓┗┛┡┩╇┳┻╋┣┫":
        text = text.replace(ch, " ")
    return " ".join(text.split())


@functools.cache
def _builtin_registry():
    from kbench import loader

    return loader.load()


# Package-scoped, so that a test module's own module-scoped fixtures (a suite, its kernels) can use it;
# loaded once per test run all the same (_builtin_registry is cached).
@pytest.fixture(scope="package")
def registry():
    """The built-in suites and kernels, loaded once per test run (module-scoped fixtures use it too)."""
    return _builtin_registry()


@pytest.fixture(scope="package")
def attention(registry):
    return registry.suite("attention")


@pytest.fixture
def write_kernels(tmp_path):
    """write_kernels({"file.py": source, ...}, folder="name") -> Path of a kernel folder in tmp_path.

    Every file gets ``from kbench.registry import implementation`` and the
    ``_correct`` factory (a right attention closure) prepended.
    """

    def write(files: dict[str, str], folder: str = "kernels") -> Path:
        root = tmp_path / folder
        root.mkdir(parents=True, exist_ok=True)
        for name, source in files.items():
            header = "from kbench.registry import implementation\n" + CORRECT_ATTENTION
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(header + "\n" + textwrap.dedent(source))
        return root

    return write


@pytest.fixture
def cli():
    """invoke(*args) -> typer.testing Result of ``kbench ARGS`` run in this process."""
    from typer.testing import CliRunner

    from kbench.cli import app

    runner = CliRunner()

    def invoke(*args, **kwargs):
        return runner.invoke(app, [str(a) for a in args], **kwargs)

    return invoke


@pytest.fixture
def wide_console(monkeypatch):
    """Make kbench's rich consoles wide, so table rows are not wrapped."""
    from kbench.cli import common

    monkeypatch.setattr(common.stdout, "width", 300)
    monkeypatch.setattr(common.stderr, "width", 300)


@pytest.fixture
def flat_text():
    return flat


def subprocess_env(**extra) -> dict:
    env = os.environ.copy()
    env.pop("COLUMNS", None)
    env.pop("KBENCH_KERNELS", None)
    env.pop("KBENCH_SUITES", None)
    env.update(extra)
    return env


@pytest.fixture
def kbench_proc():
    """kbench_proc(*args, cwd=..., env=...) -> CompletedProcess of ``python -m kbench ARGS`` (pipes, no TTY)."""

    def run(*args, cwd=None, env=None, timeout=300, python_args=()):
        return subprocess.run(
            [sys.executable, *python_args, "-m", "kbench", *map(str, args)],
            cwd=cwd or REPO_ROOT,
            env=env or subprocess_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


@pytest.fixture
def jsonl():
    return read_jsonl


@pytest.fixture
def proc_env():
    """proc_env(**extra) -> a copy of the environment for a kbench subprocess (no COLUMNS, KBENCH_KERNELS or KBENCH_SUITES)."""
    return subprocess_env
