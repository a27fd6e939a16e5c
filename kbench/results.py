"""Result records and the append-only JSONL file they go to.

Each record is written (and fsync'ed) as soon as it is measured, so an
interrupted run loses nothing that was already measured.
"""

from __future__ import annotations

import datetime as dt
import json
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
            self._fh = open(self.path, "a", encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot write results to {str(self.path)!r}: {exc.strerror or exc}") from None

    def append(self, record: dict) -> None:
        self._fh.write(json.dumps(record, sort_keys=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


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
