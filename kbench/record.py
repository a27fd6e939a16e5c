"""A result record: what one job (one implementation on one case) measured, as typed fields.

A record is one JSON object a line in a results file. :meth:`Record.from_json` and
:meth:`Record.to_json` are the only places that know the key names; everything else
reads fields (``record.timing.stats.median``). Each part keeps the keys it does not
know in ``extra`` (a suite's or a newer kbench's additions), so reading and writing a
record again loses nothing. Free-form parts stay plain dicts: ``params``, ``case``,
``config`` and ``figures`` (whatever an implementation or suite reports), ``env``
(the host, as :mod:`kbench.envinfo` describes it).

Which keys a record had is kept too: a part read from JSON is written back with the
keys it had, in their order, and any field set since, so an old record is written as
it was read. A part built here (by the runner) leaves out its optional keys while they
are None or empty. Only the standard library is imported here: ``kbench --help`` reads
no records but imports this module.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import ClassVar

# The layout's version. Raise it when a key changes meaning or goes away (adding a key does
# not need it: older kbench keep unknown keys). A file of a newer version is refused.
SCHEMA = 1
STATUSES = ("OK", "FAIL", "SKIP", "CRASH", "TIMEOUT")


class RecordError(ValueError):
    """A JSON value that is not a record this kbench reads; the message names the key."""


def optional(default=None):
    """A key records may lack: not written while None (or, for a dict or list default, while empty)."""
    if isinstance(default, (dict, list)):
        return field(default_factory=type(default), metadata={"optional": True})
    return field(default=default, metadata={"optional": True})


def _absent(value) -> bool:
    return value is None or (isinstance(value, (dict, list)) and not value)


_REQUIRED = object()


def _default(f):
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else _REQUIRED


@dataclass(kw_only=True)
class Part:
    """A JSON object whose known keys are fields (in the order they are written) and whose other
    keys are kept, in their order, in ``extra``. ``PARTS`` names the fields that are parts themselves."""

    PARTS: ClassVar[dict[str, type]] = {}

    @classmethod
    def from_json(cls, data, where: str = ""):
        if not isinstance(data, dict):
            raise RecordError(f"{where} is not a JSON object (got {type(data).__name__})")
        names = {f.name for f in fields(cls)} - {"extra"}
        known, extra = {}, {}
        for key, value in data.items():
            if key not in names:
                extra[key] = value
            elif key in cls.PARTS and value is not None:
                known[key] = cls.PARTS[key].from_json(value, f"{where}.{key}" if where else key)
            else:
                known[key] = value
        part = cls(**known, extra=extra)
        # The keys as read: older kbench wrote some in another order (the clock's), and a record read
        # is written back as it was.
        part._read_order = tuple(data)
        return part

    def to_json(self) -> dict:
        """The JSON object: known keys in their order, then the kept ones. Values are shared, not copied."""
        data = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "extra" and self._written(f, value):
                data[f.name] = value.to_json() if isinstance(value, Part) else value
        data.update(self.extra)
        order = getattr(self, "_read_order", ())
        if order:
            data = {**{key: data[key] for key in order if key in data}, **data}
        return data

    def _written(self, f, value) -> bool:
        read = getattr(self, "_read_order", None)
        if read is not None:  # read from JSON: the keys it had, and any field set since
            return f.name in read or value != _default(f)
        return not (f.metadata.get("optional") and _absent(value))


@dataclass(kw_only=True)
class Stats(Part):
    """Of the samples, in milliseconds (:func:`kbench.stats.summarize`): every key, always."""

    n: int | None = None
    median: float | None = None
    p20: float | None = None
    p80: float | None = None
    q25: float | None = None
    q75: float | None = None
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None
    median_noise: float | None = None  # the median's relative standard error; unknown from one sample
    extra: dict = field(default_factory=dict)


@dataclass(kw_only=True)
class Clock(Part):
    """The SM clock while sampling: per-sample stamps or NVML readings (:mod:`kbench.clocks`)."""

    sm_mhz_max_rated: int | None = None
    source: str | None = optional()
    sm_mhz_min: int | None = optional()
    sm_mhz_median: int | None = optional()
    sm_mhz_max: int | None = optional()
    throttled: int | None = optional()  # samples under the throttle fraction of the rated clock
    power_w_median: float | None = optional()
    power_w_max: float | None = optional()
    extra: dict = field(default_factory=dict)


@dataclass(kw_only=True)
class Timing(Part):
    """How the job was timed and what came out (:mod:`kbench.timing`)."""

    PARTS: ClassVar[dict[str, type]] = {"stats": Stats, "clock": Clock}

    method: str | None = None  # "cuda-events+l2-flush-read", "cuda-graph-replay", "cpu-wall-clock", ...
    unit: str = "ms"
    samples: list = field(default_factory=list)
    stats: Stats = field(default_factory=Stats)
    stop_reason: str | None = None
    warnings: list = field(default_factory=list)
    clock: Clock | None = optional()
    sample_sm_mhz: list = optional([])
    synced_wall_ms: float | None = optional()
    host_enqueue_ms: float | None = optional()  # the host's time to queue one call (CUDA)
    uncovered: str | None = optional()  # why the events missed part of the call's work
    # How a call was seen to wait on the GPU inside; such a call is timed from an idle GPU (no hold).
    host_synchronous: str | None = optional()
    checked_calls: dict = optional({})
    # A launch-bound row timed as graph replays (the headline, above): its CUDA-event timing, launched from
    # Python, kept beside it. Older records, and rows that were not launch-bound, have none.
    eager: Timing | None = optional()
    graph_error: str | None = optional()  # why a launch-bound row could not be graph-timed (eager shown)
    extra: dict = field(default_factory=dict)


Timing.PARTS = {**Timing.PARTS, "eager": Timing}  # the eager sub-result is a Timing too


def comparable(a: Timing, b: Timing) -> tuple[Timing, Timing, str]:
    """The two timings a ratio between ``a`` and ``b`` takes, and "eager" when they are not the headlines.

    Like with like: the headlines when both were timed the same way (both graph replays, both events);
    where one row was graph-timed (launch-bound) and the other not, the eager timing of each, which every
    graph-timed row keeps (``eager``). Timings that stay unlike (two runs' different flags) are the
    headlines, as before: kbench compare names the method that differs."""
    if a.method == b.method:
        return a, b, ""
    eager_a, eager_b = a.eager or a, b.eager or b
    if (a.eager or b.eager) and eager_a.method == eager_b.method:
        return eager_a, eager_b, "eager"
    return a, b, ""


@dataclass(kw_only=True)
class Correctness(Part):
    """The check against the reference (:class:`kbench.correctness.Verdict`)."""

    ok: bool = False
    reason: str = ""
    trials: int = 0
    max_abs_err: float | None = None  # None: not measurable (wrong shape, NaN output)
    max_rel_err: float | None = None
    atol: float | None = None
    rtol: float | None = None
    # input distribution -> its worst trial: max_abs_err, and where the suite has a plain
    # computation to bound it, plain_max_abs_err, allowed and factor
    distributions: dict = optional({})
    bound: str | None = optional()
    # The error the inputs carry before the implementation runs (Suite.input_error), kept apart from
    # its own: name -> {max_abs_err, max_rel_err (each the worst input distribution's), distributions:
    # {distribution: {max_abs_err, max_rel_err}}}. Suites whose inputs are exact have none.
    input_error: dict = optional({})
    extra: dict = field(default_factory=dict)


@dataclass(kw_only=True)
class Roof(Part):
    """The roofline the metrics were taken against (:mod:`kbench.roofline`)."""

    gpu: str | None = None
    unit: str | None = None
    compute: str | None = None
    compute_tflops: float | None = None  # None: a memory kernel
    hbm_tbs: float | None = None
    extra: dict = field(default_factory=dict)


@dataclass(kw_only=True)
class Metrics(Part):
    """Figures derived from the median (:func:`kbench.metrics.derive`); None where no peak is known."""

    tflops: float | None = None
    gbps: float | None = None
    intensity: float | None = None
    pct_of_peak: float | None = None
    bound: str | None = None
    extra: dict = field(default_factory=dict)


@dataclass(kw_only=True)
class Record(Part):
    """One job's result. Every key but schema, suite, impl, case_key and status may be absent
    (older records lack the later ones; a SKIP has no timing)."""

    PARTS: ClassVar[dict[str, type]] = {"correctness": Correctness, "timing": Timing, "roof": Roof,
                                        "metrics": Metrics}

    schema: int = SCHEMA
    created_at: str | None = optional()
    suite: str
    impl: str
    label: str | None = optional()  # impl and its --param values; older records have none
    params: dict = field(default_factory=dict)
    backend: str | None = optional()
    case: dict = field(default_factory=dict)
    case_key: str
    status: str
    reason: str = ""
    out_of_case: bool | None = optional()  # a SKIP because the implementation is not part of this case
    baseline: str | None = optional()  # the implementation speedups are relative to
    flops: float | None = optional()
    min_bytes: float | None = optional()
    correctness: Correctness | None = optional()
    timing: Timing | None = optional()
    config: dict = optional({})  # what the implementation ran with (its tile, its autotuner's choice...)
    figures: dict = optional({})  # what the implementation measured itself, after timing
    log: str | None = optional()  # the worker's log of a crash or a timeout
    roof: Roof | None = optional()
    metrics: Metrics | None = optional()
    speedup: float | None = optional()
    speedup_interval: list | None = optional()  # [low, high] at 95 %; a bound the samples cannot set is None
    speedup_basis: str | None = optional()  # "eager": taken between eager times (record.comparable); else headlines
    env: dict | None = optional()
    command: str | None = optional()
    # Where the harness spent the row's wall time, in seconds: its worker's start-up and the run's wait for
    # it (first job of a worker), the check, the warm-up, the sampling and what follows it.
    harness: dict = optional({})
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, data) -> Record:
        """The record of a JSON object; RecordError when it is not one (of a version this kbench reads)."""
        if not isinstance(data, dict):
            raise RecordError(f"expected a JSON object (a record), got {type(data).__name__}")
        schema = data.get("schema")
        if type(schema) is int and schema > SCHEMA:
            raise RecordError(f"schema version {schema} is newer than this kbench reads ({SCHEMA}): "
                              "read it with the kbench that wrote it, or a newer one")
        if type(schema) is not int or schema != SCHEMA:  # not True, not 1.0: JSON's 1
            raise RecordError(f"unknown schema version {schema!r} (this kbench reads version {SCHEMA})")
        for name in ("suite", "impl", "case_key", "status"):
            if not isinstance(data.get(name), str) or not data[name]:
                raise RecordError(f"field {name!r} is missing or not a string")
        if data["status"] not in STATUSES:
            raise RecordError(f"unknown status {data['status']!r} (expected one of {', '.join(STATUSES)})")
        for name in ("params", "case", "config", "figures", "env"):
            value = data.get(name)
            if value is not None and not isinstance(value, dict):
                raise RecordError(f"{name} is not a JSON object (got {type(value).__name__})")
        record = super().from_json(data)
        for name in ("params", "case", "config", "figures"):
            if getattr(record, name) is None:  # an implementation's `config = None`, say: nothing to tell
                setattr(record, name, {})
        if record.status == "OK" and (record.timing is None or not isinstance(data["timing"].get("stats"), dict)):
            raise RecordError("an OK record without timing.stats")
        return record

    def _written(self, f, value) -> bool:
        if f.name == "config" and not hasattr(self, "_read_order"):
            return bool(value) or self.timing is not None  # a measurement records what it ran with, if only {}
        return super()._written(f, value)

    @property
    def name(self) -> str:
        """The row's name: the label (impl and its --param values), else the implementation."""
        return self.label or self.impl

    @property
    def key(self) -> tuple[str, str, str]:
        """The record's identity across runs: (suite, label, case key)."""
        return self.suite, self.name, self.case_key

    @property
    def ok(self) -> bool:
        return self.status == "OK"

    @property
    def median(self) -> float | None:
        """The median time in ms of an OK record; None for any other."""
        return self.timing.stats.median if self.ok else None

    @property
    def gpu(self) -> dict:
        """The GPU the job ran on, as the environment describes it; {} on a CPU or when not recorded."""
        return (self.env or {}).get("gpu") or {}
