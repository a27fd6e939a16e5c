"""`kbench compare`'s thresholds, from ``pyproject.toml`` ``[tool.kbench]``.

    [tool.kbench]
    threshold = 0.05          # or "5%": the smallest change of a median that counts
    alpha = 0.01              # significance level of compare's test

    [tool.kbench.thresholds]  # per suite, over the threshold above (and over --threshold)
    attention = 0.03

The file is looked for in the current folder and then upward; the first
``pyproject.toml`` found is the project's, whether or not it has a
``[tool.kbench]`` table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from kbench import toml_parser
from kbench.errors import UserError

DEFAULT_THRESHOLD = 0.05
DEFAULT_ALPHA = 0.01


@dataclass
class Config:
    threshold: float | None = None  # [tool.kbench] threshold
    thresholds: dict[str, float] = field(default_factory=dict)  # [tool.kbench.thresholds]
    alpha: float | None = None
    source: Path | None = None  # the pyproject.toml read, if any
    note: str = ""  # why a file that exists was not read (no TOML parser)


def find_pyproject(start: Path | None = None) -> Path | None:
    folder = Path(start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        if path.is_file():
            return path
    return None


def load(start: Path | None = None) -> Config:
    path = find_pyproject(start)
    if path is None:
        return Config()
    loads, decode_error = toml_parser.toml_loads()
    if loads is None:
        return Config(source=None, note=f"{path}: [tool.kbench] not read (Python < 3.11 without tomli: "
                                        "pip install tomli); using the defaults")
    try:
        data = loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    except (decode_error, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None
    table = data.get("tool", {}).get("kbench", {})
    if not isinstance(table, dict):
        raise UserError(f"{path}: [tool.kbench] must be a table")
    where = f"{path} [tool.kbench]"
    config = Config(source=path)
    if "threshold" in table:
        config.threshold = parse_fraction(table["threshold"], f"{where} threshold")
    if "alpha" in table:
        config.alpha = parse_fraction(table["alpha"], f"{where} alpha")
    thresholds = table.get("thresholds", {})
    if not isinstance(thresholds, dict):
        raise UserError(f"{where} thresholds must be a table of suite = threshold")
    for suite, value in thresholds.items():
        config.thresholds[suite] = parse_fraction(value, f"{path} [tool.kbench.thresholds] {suite}")
    return config


def parse_fraction(value, what: str) -> float:
    """0.05, "0.05" or "5%" -> 0.05. A bare number of 1 or more is refused (is 5 meant as 5 %?)."""
    text = str(value).strip()
    try:
        if isinstance(value, bool):
            raise ValueError
        if text.endswith("%"):
            number = float(text[:-1]) / 100
        else:
            number = float(text)
            if number >= 1:
                raise UserError(f"{what}: {text} is ambiguous: write a fraction (0.05) or a percentage (5%)")
    except ValueError:
        raise UserError(f"{what}: {value!r} is not a fraction (0.05) or a percentage (5%)") from None
    if not math.isfinite(number) or not 0 < number < 1:
        raise UserError(f"{what}: {text} must be more than 0 and less than 100%")
    return number


def threshold_for(suite: str, config: Config, cli_threshold: float | None) -> tuple[float, str]:
    """The suite's threshold and where it came from: [tool.kbench.thresholds] SUITE, else --threshold,
    else [tool.kbench] threshold, else 5 %."""
    if suite in config.thresholds:
        return config.thresholds[suite], f"[tool.kbench.thresholds] {suite}"
    if cli_threshold is not None:
        return cli_threshold, "--threshold"
    if config.threshold is not None:
        return config.threshold, "[tool.kbench] threshold"
    return DEFAULT_THRESHOLD, "default"
