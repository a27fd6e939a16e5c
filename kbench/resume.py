"""Continuing an interrupted run: the records its results file already holds are not measured again.

A run appends to the file, so a last line torn by a kill is cut off first (it would otherwise end up
between records, where `kbench show` and `kbench compare` refuse the file); its job runs again."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kbench import results
from kbench.errors import UserError


@dataclass
class Recorded:
    done: dict = field(default_factory=dict)  # Record.key -> the record (the last one wins)
    torn_bytes: int = 0  # the size of the torn last line removed (0: none)


def recorded(path: Path, wanted: set, why: str = "--resume") -> Recorded:
    """The records of an earlier run in ``path`` that this run would make again (keys in ``wanted``),
    after removing a torn last line; ``why`` names the option asking, in error messages."""
    path = Path(path)
    if not path.exists():
        return Recorded()
    torn = results.drop_torn_last_line(path, why)
    try:
        previous = results.read(path)  # lenient, though the torn line is already gone
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{why}: cannot read {str(path)!r}: {getattr(exc, 'strerror', None) or exc}") from None
    done = {}
    for record in previous:  # results.read refused what is not a record
        if record.key in wanted:
            done[record.key] = record
    return Recorded(done, torn)
