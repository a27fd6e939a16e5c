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
