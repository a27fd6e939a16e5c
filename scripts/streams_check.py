"""The streams suite on a GPU, in this process (no kbench workers): correctness of every implementation,
the seed's event ordering, the stage figures, and the goals of issue 6.

    python3 scripts/streams_check.py [--bytes 1GiB] [--chunks 1,4,16,64] [--streams 4]

1. Correctness (kbench.correctness.check: fresh pinned inputs, output poisoned, float64 reference,
   then the inputs refilled and checked again) of serial, pipelined and events on byte counts the
   chunk count does not divide (1000 bytes in 16 chunks, 4,000,012 in 7, a prime count of elements
   in 64 chunks over 8 streams, work 0 = a copy kernel) and on --bytes itself.
2. The seed's event example ordered as it is written (the event recorded before stream 1's work,
   copy and kernel 1, instead of after it): whether stream 2 read the intermediate buffer before
   stream 1 wrote it (informational: expected on every run, since nothing orders them).
3. Balance: the pipelined implementation at --work 1024 gives the kernel's speed and the copies';
   the work that makes the kernel as long as the slower copy is chosen (kbench.pipeline.balanced_work).
4. At that work, for each --chunks: kbench's timing (CUDA events, adaptive stop) of serial and
   pipelined, then the pipelined closure's figures (stages alone, both copies at once, the serial
   schedule, ideal, efficiency, the timeline PNG under results/timelines/).

Goals (issue 6), checked at 16 chunks (or the middle of --chunks): pinned H2D and D2H each >= 50 GB/s;
balanced copy/compute pipelined <= 1.15x ideal and >= 1.8x faster than serial. Exit status 1 if a
correctness check failed or a goal was missed.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from kbench import correctness, loader, timing
from kbench.loader import BUILTIN_KERNELS, load_helper
from kbench.stopping import StopRule
from kbench.suite import Case, format_size, parse_size

H2D_GOAL_GBPS = 50.0
D2H_GOAL_GBPS = 50.0
IDEAL_RATIO_GOAL = 1.15  # pipelined / ideal at most
SPEEDUP_GOAL = 1.8  # serial / pipelined at least


def case(nbytes: int, chunks: int, streams: int, work: int) -> Case:
    return Case({"bytes": nbytes, "chunks": chunks, "streams": streams, "work": work})


def time_closure(fn) -> dict:
    """kbench's own timing of a closure (CUDA events, L2 flushed, adaptive stop, the side-stream check)."""
    return timing.measure_cuda(fn, timing.Settings(stop=StopRule(max_time=2.0)))


def check_all(suite, impls, big: int) -> int:
    cases = [case(1000, 16, 4, 5), case(4 * 1_000_003, 7, 3, 100), case(4 * 100_003, 64, 8, 0),
             case(4 * (2**22 + 3), 16, 4, 2048), case(big, 16, 4, 2048)]
    failed = 0
    for name in ("serial", "pipelined", "events"):
        for c in cases:
            start = time.time()
            try:
                verdict = correctness.check(suite, impls[name], c, "cuda", seed=1, trials=2)
                status = "OK" if verdict.ok else f"FAIL {verdict.reason[:200]}"
                err = f"max abs err {verdict.max_abs_err:.2e} (atol {verdict.atol:.2e})" if verdict.ok else ""
            except Exception as exc:  # noqa: BLE001 - report and go on
                status, err = f"CRASH {type(exc).__name__}: {str(exc)[:300]}", ""
            failed += status != "OK"
            print(f"  {name:9s} {c.key:55s} {status} {err} [{time.time() - start:.1f} s]", flush=True)
    return failed


def seed_ordering(suite, helper, nbytes: int) -> None:
    """The seed's cudaEventRecord(start, stream1) before stream 1's work, then cudaStreamWaitEvent(stream2, start):
    the wait is satisfied at once, and kernel 2 reads the intermediate buffer (NaN here) while stream 1
    is still copying in."""
    c = case(nbytes, 1, 2, 4096)
    inputs = suite.make_inputs(c, seed=5, device="cuda")
    out = suite.make_output(c, inputs)
    x, y = helper.host_buffers(inputs, out)
    n = x.numel()
    relax = helper.Relax(c.work)
    d_in, d_mid, d_out = (helper.device_buffer(n) for _ in range(3))
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    start_event = torch.cuda.Event()
    ref = suite.reference(c, {"x": x.clone()})
    atol, rtol = suite.tolerance(c)
    bad_runs = 0
    for _ in range(5):
        d_mid.fill_(float("nan"))
        out.fill_(float("nan"))
        torch.cuda.synchronize()
        with torch.cuda.stream(first):
            start_event.record(first)  # the seed's place: before stream 1's work on the data
            d_in.copy_(x, non_blocking=True)
            relax.launch(first, d_in, d_mid, n, work=c.work // 2)
        second.wait_event(start_event)
        with torch.cuda.stream(second):
            relax.launch(second, d_mid, d_out, n, work=c.work - c.work // 2)
            y.copy_(d_out, non_blocking=True)
        torch.cuda.synchronize()
        reason, _, _ = correctness.compare(out, out, ref, atol, rtol)
        bad_runs += bool(reason)
    print(f"  event recorded before stream 1's work (as the seed writes it): {bad_runs} of 5 runs wrong"
          + (" -- stream 2 read kernel 1's output early" if bad_runs else " (the race did not show this time)"))


def pipelined_figures(suite, impls, c: Case) -> dict:
    inputs = suite.make_inputs(c, seed=0, device="cuda")
    out = suite.make_output(c, inputs)
    fn = impls["pipelined"].make(c, inputs, out)
    result = time_closure(fn)
    if result.get("uncovered"):
        print(f"  UNCOVERED: {result['uncovered']}")
    return fn.figures(result)


def serial_timing(suite, impls, c: Case) -> dict:
    inputs = suite.make_inputs(c, seed=0, device="cuda")
    fn = impls["serial"].make(c, inputs, suite.make_output(c, inputs))
    return time_closure(fn)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", default="1GiB")
    parser.add_argument("--chunks", default="1,4,16,64")
    parser.add_argument("--streams", type=int, default=4)
    args = parser.parse_args()
    nbytes = parse_size(args.bytes, "--bytes")
    sweep = [int(v) for v in args.chunks.split(",")]
    began = time.time()
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    registry = loader.load()
    print("load errors:", registry.load_errors or "none")
    suite = registry.suite("streams")
    impls = registry.implementations("streams")
    helper = load_helper(BUILTIN_KERNELS / "streams" / "_streams.py")

    print("1. correctness", flush=True)
    failed = check_all(suite, impls, nbytes)

    print("2. the seed's event ordering", flush=True)
    seed_ordering(suite, helper, min(nbytes, 256 * 2**20))

    print("3. balance", flush=True)
    probe = pipelined_figures(suite, impls, case(nbytes, 16, args.streams, 1024))
    for line in probe["summary"]:
        print("  " + line)
    work = probe["balanced_work"] or 1024
    print(f"  balanced work: {work}", flush=True)

    print(f"4. {format_size(nbytes)}, work {work}, {args.streams} streams, chunks {sweep}", flush=True)
    goal_chunks = 16 if 16 in sweep else sweep[len(sweep) // 2]
    missed, goal_lines = [], []
    serial = serial_timing(suite, impls, case(nbytes, 1, 1, work))
    print(f"  serial (kbench timing): {serial['stats']['median']:.3f} ms", flush=True)
    print(f"  {'chunks':>6} {'pipelined ms':>12} {'ideal ms':>9} {'efficiency':>10} {'vs serial':>9} "
          f"{'H2D GB/s':>8} {'D2H GB/s':>8} {'both GB/s':>9}")
    for chunks in sweep:
        fig = pipelined_figures(suite, impls, case(nbytes, chunks, args.streams, work))
        speed = serial["stats"]["median"] / fig["pipelined_ms"]
        print(f"  {chunks:6d} {fig['pipelined_ms']:12.3f} {fig['ideal_ms']:9.3f} {fig['overlap_efficiency']:10.1%} "
              f"{speed:8.2f}x {fig['h2d_gbps']:8.1f} {fig['d2h_gbps']:8.1f} {fig['both_gbps']:9.1f}", flush=True)
        for line in fig["summary"]:
            print("         " + line)
        if chunks == goal_chunks:
            ratio = fig["pipelined_ms"] / fig["ideal_ms"]
            goals = [(f"pinned H2D {fig['h2d_gbps']:.1f} GB/s >= {H2D_GOAL_GBPS:g}", fig["h2d_gbps"] >= H2D_GOAL_GBPS),
                     (f"pinned D2H {fig['d2h_gbps']:.1f} GB/s >= {D2H_GOAL_GBPS:g}", fig["d2h_gbps"] >= D2H_GOAL_GBPS),
                     (f"pipelined / ideal {ratio:.3f} <= {IDEAL_RATIO_GOAL}", ratio <= IDEAL_RATIO_GOAL),
                     (f"speedup over serial {speed:.2f}x >= {SPEEDUP_GOAL}x", speed >= SPEEDUP_GOAL)]
            missed += [text for text, ok in goals if not ok]
            goal_lines = [f"{'met' if ok else 'MISSED'}: {text}" for text, ok in goals]
    print(f"goals at {goal_chunks} chunks:")
    for line in goal_lines:
        print("  " + line)
    print(f"correctness failures: {failed}; goals missed: {len(missed)}; total {time.time() - began:.1f} s")
    print(f"next: kbench run streams --bytes {args.bytes} --chunks {args.chunks} --streams {args.streams} "
          f"--work {work}")
    return 1 if failed or missed else 0


if __name__ == "__main__":
    sys.exit(main())
