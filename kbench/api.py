"""kbench from Python (a notebook, a pytest test, a script): run a suite, load results, get a DataFrame.

    import kbench
    results = kbench.run("attention", impl="naive,sdpa", n=256, d=128)   # what `kbench run` does
    frame = kbench.load("results/baselines").to_pandas()                 # one row per record

``run`` takes the options of ``kbench run SUITE`` as keyword arguments, with the same names (dashes
as underscores), values and defaults: a list or a comma-separated string sweeps an axis, a bool
sets a flag. It measures in worker processes exactly as the command line does, writes the records
to a results file (``out``, default ``results/SUITE-TIME.jsonl``) and returns them.

Like kbench/cli/, this module is a front end over the engine: the engine never imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from kbench.record import Record


@dataclass
class ResultSet:
    """Records of one or more runs, in the order they were measured or read."""

    records: list[Record] = field(default_factory=list)
    # Where each record was read, as (file, line), beside records; empty for records measured here.
    origins: list[tuple[Path, int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __getitem__(self, index: int) -> Record:
        return self.records[index]

    def where(self, suite: str | None = None, impl: str | None = None, status: str | None = None) -> ResultSet:
        """The records of one suite, implementation and/or status."""
        kept = [i for i, r in enumerate(self.records) if (suite is None or r.suite == suite)
                and (impl is None or r.impl == impl) and (status is None or r.status == status)]
        return ResultSet([self.records[i] for i in kept], [self.origins[i] for i in kept] if self.origins else [])

    def located(self) -> Iterator[tuple[Record, Path | None, int | None]]:
        """(record, file, line) for every record; file and line are None for records measured here."""
        for index, record in enumerate(self.records):
            file, line = self.origins[index] if self.origins else (None, None)
            yield record, file, line

    def to_pandas(self):
        """A pandas DataFrame, one row per record: suite, implementation, label, every case axis as a
        column, status, median and spread (ms), the eager median beside a graph-timed one, throughput, the
        speedup over the run's baseline with its 95 % interval, the SM clock, the GPU and the commit."""
        import pandas as pd  # only here: `import kbench` and `kbench --help` stay fast

        return pd.DataFrame([_row(r) for r in self.records])


def _row(record: Record) -> dict:
    stats = record.timing.stats if record.ok else None
    clock = record.timing.clock if record.ok and record.timing else None
    eager = record.timing.eager if record.ok and record.timing else None
    metrics = record.metrics if record.ok else None
    interval = record.speedup_interval or [None, None]
    env = record.env or {}
    return {
        "suite": record.suite, "impl": record.impl, "label": record.name, **record.case,
        "status": record.status, "reason": record.reason or "",
        "median_ms": record.median,
        # A launch-bound row's median is graph replay; its eager CUDA-event median is kept here (else None).
        "eager_median_ms": eager.stats.median if eager else None,
        "p20_ms": stats.p20 if stats else None, "p80_ms": stats.p80 if stats else None,
        "samples": stats.n if stats else None,
        "tflops": metrics.tflops if metrics else None, "gbps": metrics.gbps if metrics else None,
        "pct_of_peak": metrics.pct_of_peak if metrics else None,
        "baseline": record.baseline, "speedup": record.speedup if record.ok else None,
        "speedup_low": interval[0], "speedup_high": interval[1],
        "max_abs_err": record.correctness.max_abs_err if record.correctness else None,
        **_input_errors(record),
        "sm_mhz": clock.sm_mhz_median if clock else None,
        "method": record.timing.method if record.timing else None,
        "gpu": record.gpu.get("name"), "commit": (env.get("git") or {}).get("commit"),
        "created_at": record.created_at, "command": record.command,
    }


def _input_errors(record: Record) -> dict:
    """The inputs' own error (Suite.input_error: a quantized cache's, say) as NAME_max_abs_err and
    NAME_max_rel_err columns (quantization_max_abs_err...), beside the kernel's max_abs_err."""
    errors = record.correctness.input_error if record.correctness else {}
    return {f"{name}_{key}": figures.get(key) for name, figures in errors.items()
            for key in ("max_abs_err", "max_rel_err")}


def load(*paths: str | Path) -> ResultSet:
    """The records of results files, or of every results file in folders (as `kbench show` reads them).
    A file that is not a results file is a UserError naming it."""
    from kbench import results

    if not paths:
        raise TypeError("kbench.load() needs at least one file or folder")
    records, origins = [], []
    for path in paths:
        for file in results.results_files(Path(path)):
            for line, record in results.read_strict(file):
                records.append(record)
                origins.append((file, line))
    return ResultSet(records, origins)


def run(suite: str, **options) -> ResultSet:
    """Check and time ``suite``'s implementations as ``kbench run SUITE`` does (see the module's help)
    and return the records. A mistake in the options is a UserError with kbench run's message."""
    from kbench import loader, results, resume
    from kbench.cli import run_cmd
    from kbench.errors import UserError
    from kbench.registry import _did_you_mean

    suites = loader.builtin_suites()
    if suite not in suites:
        raise UserError(f"unknown suite {suite!r}{_did_you_mean(suite, suites)} (suites: {', '.join(suites)})")
    ready = run_cmd.prepare_args(suites[suite], _args(suites[suite], options))
    path = ready.out or results.default_path(suite)
    done = resume.recorded(path, set(ready.jobs)).done if ready.resume else {}  # resume=True: continue `out`
    results_file = results.ResultsFile(path)
    try:
        measured = run_cmd.measure(ready, results_file, done,
                                   f"kbench.run({suite!r}, ..., resume=True, out={str(path)!r}) continues")
    finally:
        results_file.close()
    return ResultSet([done[key] for key in ready.jobs if key in done] + list(measured))


def _args(suite, options: dict) -> list[str]:
    """Keyword arguments as `kbench run SUITE` arguments: n=[256, 1024] -> --n 256,1024; causal=True ->
    --causal; interleave=False -> nothing, or --no-NAME where the option has that form."""
    from kbench.cli import run_cmd
    from kbench.errors import UserError

    command = run_cmd.run_command(suite, handler=lambda *a, **k: None)
    params = {p.name: p for p in command.params if p.param_type_name == "option"}
    args = []
    for name, value in options.items():
        param = params.get(name)
        if param is None:
            known = ", ".join(sorted(params))
            raise UserError(f"kbench.run({suite.name!r}): unknown option {name!r} (options: {known})")
        if param.is_flag:
            if value:
                args.append(param.opts[0])
            elif param.secondary_opts:
                args.append(param.secondary_opts[0])
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        if param.multiple:
            for item in values:
                args += [param.opts[0], str(item)]
        else:
            args += [param.opts[0], ",".join(str(v) for v in values)]
    return args
