"""Results files: the append-only JSONL file a run writes its records to, and the readers of them.

Each record is written (and fsync'ed) as soon as it is measured, so an
interrupted run loses nothing that was already measured. What a line holds is
:class:`kbench.record.Record`'s business (its ``to_json`` and ``from_json``).

Two readers: :func:`read` is for a run reading back its own file (it skips a
torn last line left by a kill); :func:`read_strict` is for files from
elsewhere (``kbench show``, ``kbench compare``): JSON only, and a torn line, NaN
or Infinity, a time that is not a positive number as well. In both, a line that
is not a record (or one of a newer schema version) is a :class:`UserError`
naming the file and the line. Nothing is ever unpickled.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import tempfile
from pathlib import Path

from kbench.errors import UserError
from kbench.record import SCHEMA, STATUSES, Record, RecordError  # noqa: F401 - SCHEMA, STATUSES: part of this API

FAILED = ("FAIL", "CRASH", "TIMEOUT")
RESULTS_DIR = Path("results")
BASELINES_DIR = RESULTS_DIR / "baselines"
# A baseline name is a plain file name: letters, digits, '.', '_', '-', not starting with '.'.
_BASELINE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


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

    def append(self, record: Record) -> None:
        self._fh.write(dumps(record.to_json()) + "\n")
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


def read(path: Path) -> list[Record]:
    """Records of a JSONL file a run appends to. A line that is not JSON is skipped: a torn write of a
    killed run (ResultsFile ends it before appending more). A JSON line that is not a record (or is one
    of a newer schema version) is a UserError naming the file and the line."""
    records = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            records.append(_record(data, f"{path}:{number}"))
    return records


def _record(data, where: str) -> Record:
    try:
        return Record.from_json(data)
    except RecordError as exc:
        raise UserError(f"{where}: {exc}") from None


def drop_torn_last_line(path: Path, why: str) -> int:
    """Cut off the last line of a results file when it is not a JSON record (a run killed while
    writing it), so that records appended next follow whole lines only; returns the bytes removed.

    Only the last line can be torn by a kill: a bad line before it means the file was damaged some
    other way, and is a UserError (``why`` names the option asking) rather than something to guess at.
    A valid last line without its newline is kept (ResultsFile ends it before appending)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{why}: cannot read {str(path)!r}: {exc.strerror or exc}") from None
    lines = [(start, line) for start, line in _lines_with_offsets(data) if line.strip()]
    for number, (start, line) in enumerate(lines):
        if _is_json(line):
            continue
        if number < len(lines) - 1:
            line_number = data[:start].count(b"\n") + 1
            raise UserError(f"{why}: {path}:{line_number} is not a JSON record and is not the last line "
                            f"(not a torn write): remove or fix that line first")
        try:
            with open(path, "r+b") as fh:
                fh.truncate(start)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise UserError(f"{why}: cannot write {str(path)!r}: {exc.strerror or exc}") from None
        return len(data) - start
    return 0


def _lines_with_offsets(data: bytes):
    start = 0
    for line in data.split(b"\n"):
        yield start, line
        start += len(line) + 1


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line.decode("utf-8"))
    except ValueError:  # JSONDecodeError and UnicodeDecodeError (a multi-byte character cut in two)
        return False
    return True


# --- files from elsewhere ------------------------------------------------------------

def _refuse_constant(name: str):
    raise ValueError(f"{name} is not allowed (times must be finite numbers)")


def _location(path: Path, line: int | None) -> str:
    return f"{path}:{line}" if line else str(path)


def read_strict(path: Path) -> list[tuple[int, Record]]:
    """(line number, record) for every record of a results file, checked; UserError on anything doubtful.

    JSONL (one record a line, as `kbench run` writes) or a JSON array (`kbench run --format json`).
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise UserError(f"{_location(path, line)}: not UTF-8 text (results files are JSON lines)") from None
    if not text.strip():
        raise UserError(f"{path}: no records (empty file)")
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text, parse_constant=_refuse_constant)
        except ValueError as exc:
            raise UserError(f"{_location(path, getattr(exc, 'lineno', None))}: not valid JSON: {_why(exc)}") from None
        if not isinstance(items, list):
            raise UserError(f"{path}: expected a JSON array of records")
        entries = [(None, item) for item in items]
    else:
        entries = []
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                entries.append((number, json.loads(line, parse_constant=_refuse_constant)))
            except ValueError as exc:
                if not entries and _one_object(text):  # pretty-printed JSON: a `kbench profile` summary, say
                    raise UserError(f"{path}:{number}: not a results file: one JSON object over several lines "
                                    "(kbench run writes one record a line)") from None
                torn = number == text.count("\n") + 1 and not text.endswith("\n")
                hint = " (a truncated line: the run was killed while writing?)" if torn else ""
                raise UserError(f"{path}:{number}: not valid JSON{hint}: {_why(exc)}") from None
    checked = []
    for index, (number, data) in enumerate(entries):
        where = _location(path, number) if number else f"{path}: record {index + 1}"
        record = _record(data, where)
        _check_times(record, where)
        checked.append((number or index + 1, record))
    return checked


def _one_object(text: str) -> bool:
    """Whether the text is one JSON object written over several lines."""
    if "\n" not in text.strip():
        return False
    try:
        return isinstance(json.loads(text, parse_constant=_refuse_constant), dict)
    except ValueError:
        return False


def _why(exc: ValueError) -> str:
    return exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)


def _check_times(record: Record, where: str) -> None:
    """An OK record's median and samples are positive, finite numbers (a file from elsewhere may say anything)."""
    if not record.ok:
        return
    timings = [("timing", record.timing)]
    if record.timing.eager is not None:  # a graph-timed row's eager timing: ratios may take it (record.comparable)
        timings.append(("timing.eager", record.timing.eager))
    for name, timing in timings:
        _check_time(timing.stats.median, f"{where}: {name}.stats.median")
        if not isinstance(timing.samples, list):
            raise UserError(f"{where}: {name}.samples is not a list")
        for i, sample in enumerate(timing.samples):
            _check_time(sample, f"{where}: {name}.samples[{i}]")


def _check_time(value, what: str) -> None:
    # The writer turns NaN and Infinity into null: a null time was not finite.
    if value is None:
        raise UserError(f"{what} is null (a NaN or Infinity time)")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UserError(f"{what} is {value!r}, not a finite number")
    if value <= 0:
        raise UserError(f"{what} is not positive ({value!r})")


def results_files(path: Path) -> list[Path]:
    """A results file, or every *.jsonl / *.json file directly in a folder (sorted); UserError if none."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".jsonl", ".json"))
        if not files:
            raise UserError(f"{str(path)!r}: no results files (*.jsonl) in this folder")
        return files
    if not path.exists():
        raise UserError(f"cannot read {str(path)!r}: No such file or directory")
    return [path]


# --- baselines: written whole, atomically ---------------------------------------------

def baseline_path(name: str, folder: Path = BASELINES_DIR) -> Path:
    """results/baselines/NAME.jsonl. NAME must be a plain file name: nothing that could escape the folder."""
    stem = name[: -len(".jsonl")] if name.endswith(".jsonl") else name
    if not _BASELINE_NAME.fullmatch(stem) or stem in (".", ".."):
        raise UserError(f"--save-baseline: {name!r} is not a plain name (use letters, digits, '.', '_' and '-'; "
                        f"the baseline is written to {folder}/NAME.jsonl)")
    return Path(folder) / f"{stem}.jsonl"


def write_atomic(path: Path, records: list[Record]) -> None:
    """Write every record to ``path`` at once (see :func:`write_json_lines_atomic`)."""
    write_json_lines_atomic(path, [record.to_json() for record in records])


def write_json_lines_atomic(path: Path, objects: list[dict]) -> None:
    """Write one JSON line per object to ``path`` at once: a temporary file in the same folder, flushed and
    fsync'ed, then renamed over ``path``. A reader sees the old file or the whole new one, never a part."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise UserError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), _file_mode(path))  # mkstemp makes it private; a baseline is an ordinary file
            for data in objects:
                fh.write(dumps(data) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise UserError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
        raise
    _fsync_folder(path.parent)


def _file_mode(path: Path) -> int:
    """The mode of the file being replaced, else what open() would give a new file (0o666 less the umask)."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (POSIX); a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
