"""The multi-GPU check (issue 11), one command on a machine with 2 GPUs (or more: --gpus N):

    python scripts/allreduce_check.py [--gpus 2] [--sweep-pieces] [--folder results/allreduce-check]

It runs kbench itself (each step a `kbench run`, so each implementation in its own worker, the ranks
started by kbench) and then reads the records back:

1. correctness of nccl, nccl-ring and ring at odd sizes: 12 bytes (3 fp32 elements: fewer than a
   piece, not divisible by 2), 4100 bytes and 1000004 bytes (250001 elements: odd), and 6 bytes of
   bf16; every rank's result is checked against the exact sum (kbench fails the row otherwise);
   a byte count that is not a whole number of elements (1001 bytes of fp32) must be refused (exit 2);
2. bandwidth at 1MiB, 64MiB, 1GiB and 4GiB: algbw and busbw (nccl-tests' definitions) of each
   implementation, the op alone (back to back, nccl-tests' method) and kbench's median of the closure,
   and ring's busbw as a ratio to nccl-ring's at 1 GiB and more (goal >= 0.85x); a busbw plot;
3. with --sweep-pieces, ring's pipelining depth at 1GiB and 4GiB (--param pieces=1,2,4,8);
4. the p2p copy-bandwidth matrix of every pair of GPUs (1 GiB copies).

The same with kbench's command line:

    kbench run allreduce --gpus 2 --bytes 12,4100,1000004 --out results/allreduce-odd.jsonl
    kbench run allreduce --gpus 2 --bytes 6 --dtype bf16 --out results/allreduce-odd.jsonl
    kbench run allreduce --gpus 2 --bytes 1MiB,64MiB,1GiB,4GiB --max-time 2 --out results/allreduce.jsonl
    kbench plot results/allreduce.jsonl --metric busbw
    kbench run allreduce --gpus 2 --bytes 1GiB,4GiB --impl ring --param pieces=1,2,4,8
    kbench run p2p --bytes 1GiB

Exit status: 0 when every row is OK (the bandwidth goal is reported, not enforced), 1 when a row
failed, crashed or timed out or the odd byte count was not refused, 2 when fewer than --gpus GPUs are
visible.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from kbench import results
from kbench.suite import format_size

ROOT = Path(__file__).resolve().parent.parent
IMPLS = ("nccl", "nccl-ring", "ring")
ODD = "12,4100,1000004"
SIZES = "1MiB,64MiB,1GiB,4GiB"
GIB = 1 << 30
GOAL = 0.85


def kbench(*args: str, timeout: float = 1800) -> int:
    command = [sys.executable, "-m", "kbench", *args]
    print(f"\n$ kbench {' '.join(args)}", flush=True)
    started = time.monotonic()
    code = subprocess.run(command, cwd=ROOT, timeout=timeout).returncode
    print(f"(exit {code}, {time.monotonic() - started:.0f} s)", flush=True)
    return code


def records(path: Path) -> list:
    return results.read(path) if path.exists() else []


def bandwidth_table(rows: list) -> None:
    print("\nall-reduce bandwidth (GB/s; busbw = algbw x 2(N-1)/N)")
    print(f"{'size':>8} {'ranks':>5} {'implementation':<22} {'busbw op':>9} {'algbw op':>9} {'busbw closure':>14} "
          f"{'closure ms':>11}")
    for r in sorted(rows, key=lambda r: (r.case["bytes"], r.name)):
        f = r.figures
        head = f"{format_size(r.case['bytes']):>8} {r.case['gpus']:>5} {r.name:<22}"
        if not r.ok or not f:
            print(f"{head} {r.status}: {r.reason}")
            continue
        print(f"{head} {f['alone_busbw_gbps']:9.1f} "
              f"{f['alone_algbw_gbps']:9.1f} {f['busbw_gbps']:14.1f} {r.median:11.3f}")


def ratios(rows: list) -> bool:
    """ring's busbw over nccl-ring's at 1 GiB and more (the op alone; and the closures); True if the goal holds."""
    ok = {(r.case["bytes"], r.name): r.figures for r in rows if r.ok and r.figures}
    sizes = sorted({s for s, _ in ok if s >= GIB})
    print(f"\nring / nccl-ring busbw at 1 GiB and more (goal >= {GOAL}x)")
    if not sizes:
        print("no size of 1 GiB or more was measured")
    met = bool(sizes)
    for size in sizes:
        ring, nccl_ring = ok.get((size, "ring")), ok.get((size, "nccl-ring"))
        if not ring or not nccl_ring:
            print(f"{format_size(size):>8}: not both measured")
            met = False
            continue
        alone = ring["alone_busbw_gbps"] / nccl_ring["alone_busbw_gbps"]
        closure = ring["busbw_gbps"] / nccl_ring["busbw_gbps"]
        met &= alone >= GOAL
        print(f"{format_size(size):>8}: op alone {alone:.3f}x ({ring['alone_busbw_gbps']:.1f} / "
              f"{nccl_ring['alone_busbw_gbps']:.1f} GB/s), closures {closure:.3f}x "
              f"(nccl-ring's closure also copies x into out) -> {'met' if alone >= GOAL else 'NOT met'}")
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--folder", type=Path, default=ROOT / "results" / "allreduce-check")
    parser.add_argument("--sweep-pieces", action="store_true", help="also sweep ring's pieces at 1GiB and 4GiB")
    args = parser.parse_args()

    import torch

    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if found < args.gpus:
        print(f"allreduce_check: needs {args.gpus} GPUs, found {found}", file=sys.stderr, flush=True)
        return 2
    folder = args.folder
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.jsonl"):
        old.unlink()
    gpus = str(args.gpus)
    bad = []

    odd = folder / "odd.jsonl"
    kbench("run", "allreduce", "--gpus", gpus, "--bytes", ODD, "--out", str(odd), "--max-time", "1")
    kbench("run", "allreduce", "--gpus", gpus, "--bytes", "6", "--dtype", "bf16", "--out", str(odd), "--max-time", "1")
    if kbench("run", "allreduce", "--gpus", gpus, "--bytes", "1001", "--out", str(folder / "never.jsonl")) != 2:
        bad.append("--bytes 1001 (fp32) was not refused with exit 2")

    sweep = folder / "allreduce.jsonl"
    kbench("run", "allreduce", "--gpus", gpus, "--bytes", SIZES, "--out", str(sweep), "--max-time", "2")
    kbench("plot", str(sweep), "--metric", "busbw", "--out", str(folder / "busbw.png"))
    if args.sweep_pieces:
        kbench("run", "allreduce", "--gpus", gpus, "--bytes", "1GiB,4GiB", "--impl", "ring",
               "--param", "pieces=1,2,4,8", "--out", str(folder / "pieces.jsonl"))

    p2p = folder / "p2p.jsonl"
    kbench("run", "p2p", "--bytes", "1GiB", "--out", str(p2p))

    print("\n=== summary ===")
    odd_rows, sweep_rows = records(odd), records(sweep)
    pieces_rows, p2p_rows = records(folder / "pieces.jsonl"), records(p2p)
    print(f"odd sizes: {sum(r.ok for r in odd_rows)} of {len(odd_rows)} rows OK")
    for r in odd_rows + sweep_rows + pieces_rows + p2p_rows:
        if not r.ok:
            bad.append(f"{r.suite} {r.name} {r.case_key}: {r.status} {r.reason}")
    bandwidth_table(sweep_rows + pieces_rows)
    met = ratios(sweep_rows)
    for r in p2p_rows:
        for line in r.figures.get("summary", []):
            print(line)
    print(f"\nbandwidth goal (ring >= {GOAL}x nccl-ring busbw at >= 1 GiB): {'met' if met else 'NOT met'}")
    for line in bad:
        print(f"PROBLEM: {line}")
    print("allreduce_check:", "OK" if not bad else f"{len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
