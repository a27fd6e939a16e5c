"""pyproject.toml's extras: what each install brings (the README's commands name them)."""

import pytest

from kbench.loader import PROJECT_ROOT
from kbench.toml_parser import toml_loads


@pytest.fixture(scope="module")
def extras() -> dict[str, list[str]]:
    loads, _ = toml_loads()
    if loads is None:
        pytest.skip("no TOML parser (Python 3.10 without tomli)")
    return loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _names(requirements: list[str]) -> set[str]:
    """Distribution names without their version specifiers."""
    names = set()
    for req in requirements:
        for sep in ("==", ">=", "<=", "~=", "!=", "<", ">", ";", "["):
            req = req.split(sep)[0]
        names.add(req.strip())
    return names


def test_cpu_extra_can_draw_the_plots(extras):
    # The README's run command installs .[cpu]; `kbench plot` and `roofline --plot` import matplotlib.
    assert "matplotlib" in _names(extras["cpu"])


def test_gpu_is_the_cuda13_set(extras):
    # The docs' `pip install -e '.[gpu]'` keeps installing what it always did.
    assert extras["gpu"] == extras["gpu-cuda13"]


@pytest.mark.parametrize("extra, cupy, other", [("gpu-cuda13", "cupy-cuda13x", "cupy-cuda12x"),
                                                ("gpu-cuda12", "cupy-cuda12x", "cupy-cuda13x")])
def test_each_cuda_extra_brings_its_own_cupy_wheel(extras, extra, cupy, other):
    names = _names(extras[extra])
    assert cupy in names and other not in names  # two CuPy wheels in one environment conflict
    # Apart from the CuPy wheel, the two CUDA sets install the same things.
    assert names - {cupy} == _names(extras["gpu-cuda13"]) - {"cupy-cuda13x"}


def test_records_name_the_cupy_of_every_extra(extras):
    # compare refuses timings whose CuPy differs: the environment must record the one installed.
    from kbench import compare, envinfo

    cupys = {name for reqs in extras.values() for name in _names(reqs) if name.startswith("cupy")}
    assert cupys <= set(envinfo.PACKAGES)
    assert {f"packages.{name}" for name in cupys} <= set(compare.ENV_FIELDS)


def test_test_extra_drives_the_report_browser_test(extras):
    # tests/cli/test_report_browser.py drives Debian's Chromium with Playwright; in CI it must run, not skip.
    assert "playwright" in _names(extras["test"])


def test_ci_runs_exactly_the_readmes_test_command():
    readme = (PROJECT_ROOT / "README.md").read_text()
    block = readme.split("Run the tests (this is exactly what `.ci/run` runs):\n\n", 1)[1].split("\n\n", 1)[0]
    commands = [line.strip() for line in block.splitlines()]
    assert commands[0].startswith("apt-get") and "chromium" in commands[0]
    script = (PROJECT_ROOT / ".ci" / "run").read_text().splitlines()
    assert script[-len(commands):] == commands
