"""Result records and the append-only JSONL file they go to.

Each record is written (and fsync'ed) as soon as it is measured, so an
interrupted run loses nothing that was already measured.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from pathlib import Path

from kbench.errors import UserError

SCHEMA = 1
STATUSES = ("OK", "FAIL", "SKIP", "CRASH", "TIMEOUT")


def default_path(suite: str, folder: Path = Path("results")) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return folder / f"{suite}-{stamp}.jsonl"


class ResultsFile:
    """Appends one JSON line per record; checks up front that the path is writable."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a+", encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot write results to {str(self.path)!r}: {exc.strerror or exc}") from None
        # A run killed mid-write leaves a torn last line: end it, or our first
        # record would be glued to it and both lost.
        if self._fh.tell() > 0:
            self._fh.seek(self._fh.tell() - 1)
            if self._fh.read(1) != "\n":
                self._fh.write("\n")

    def append(self, record: dict) -> None:
        self._fh.write(dumps(record) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def json_safe(value):
    """NaN and ±Inf become null: strict JSON that jq and browsers accept."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def dumps(record, **kwargs) -> str:
    return json.dumps(json_safe(record), allow_nan=False, default=str, **kwargs)


def read(path: Path) -> list[dict]:
    """Records of a JSONL file; a torn last line (a run killed mid-write) is ignored."""
    records = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
