"""The patterns suite's correctness sweep and a quick look at each lesson, on a GPU, in this process.

    python3 scripts/patterns_check.py [LESSON,...]      (default: all five)

Checks every patterns implementation against the float64 reference on odd and even sizes (two trials of
fresh inputs, outputs poisoned: kbench.correctness.check, then kbench.correctness.recheck: the closure
must read its refilled inputs), checks that it refuses the other lessons (Unsupported), then times each
lesson at --n 8192 with CUDA events (a few calls after warm-ups, L2 not flushed) and prints each ratio
beside what the lesson predicts. Exit status 1 if any check failed. For the measurements that count:
kbench run patterns (L2 flushed, adaptive stop).
"""

import sys
import time

import torch

from kbench import correctness, loader
from kbench.record import Record, Stats, Timing
from kbench.registry import Unsupported
from kbench.report import lesson_verdict
from kbench.suite import Case

SIZES = (1, 2, 17, 32, 33, 100, 257, 1000)
TIMED_N = 8192

start = time.time()
registry = loader.load()
print("load errors:", registry.load_errors or "none")
suite = registry.suite("patterns")
impls = registry.implementations("patterns")
lessons = sys.argv[1].split(",") if len(sys.argv) > 1 else list(suite.axes[0].choices)


def case(lesson, n):
    return Case({"lesson": lesson, "n": n, "dtype": "fp32"})


def lesson_of(name):
    return name.split("-")[0]


failed = 0
for name, impl in impls.items():
    lesson = lesson_of(name)
    if lesson not in lessons:
        continue
    problems = []
    for n in SIZES:
        try:
            verdict = correctness.check(suite, impl, case(lesson, n), "cuda", seed=1, trials=2)
            again = correctness.recheck(verdict, "cuda") if verdict.ok else ""
            if not verdict.ok or again:
                problems.append(f"n={n}: {(verdict.reason or again)[:160]}")
        except Exception as exc:  # noqa: BLE001 - report and go on
            problems.append(f"n={n}: {type(exc).__name__}: {str(exc)[:300]}")
    other = next(x for x in suite.axes[0].choices if x != lesson)
    c = case(other, 17)
    inputs = suite.make_inputs(c, seed=0, device="cuda")
    try:
        impl.make(c, inputs, suite.make_output(c, inputs))
        problems.append(f"--lesson {other}: ran instead of raising Unsupported")
    except Unsupported:
        pass
    failed += bool(problems)
    print(f"{name:18s} {'OK' if not problems else problems}", flush=True)
print(f"correctness done in {time.time() - start:.1f} s", flush=True)


def time_ms(name, c):
    inputs = suite.make_inputs(c, seed=0, device="cuda")
    out = suite.make_output(c, inputs)
    fn = impls[name].make(c, inputs, out)
    for _ in range(3):
        fn()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(20):
        fn()
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end) / 20, getattr(fn, "config", {})


print(f"\ntimings at n={TIMED_N} ({torch.cuda.get_device_name()}), CUDA events, L2 not flushed:")
for lesson in lessons:
    c = case(lesson, TIMED_N)
    measured = {name: time_ms(name, c) for name in impls if lesson_of(name) == lesson}
    # as run records, for kbench.report.lesson_verdict: median(versus) / median(this) against the lesson's range
    records = {name: Record(suite="patterns", impl=name, case_key=c.key, status="OK",
                            timing=Timing(stats=Stats(median=ms)), config=config)
               for name, (ms, config) in measured.items()}
    for name, (ms, config) in measured.items():
        check = config.get("lesson_check")
        measured_verdict = lesson_verdict(records[name], list(records.values()))
        verdict = ""
        if measured_verdict:
            ratio, holds = measured_verdict
            verdict = f"{ratio:.2f}x vs {check['versus']}: {'holds' if holds else 'does not hold'}"
        gbps = suite.min_bytes(c) / ms / 1e6
        print(f"  {name:18s} {ms:8.3f} ms {gbps:8.1f} GB/s  regs={config.get('registers_per_thread')}  "
              f"{verdict}  [{config.get('lesson_predicts')}]", flush=True)
print(f"total {time.time() - start:.1f} s")
sys.exit(1 if failed else 0)
