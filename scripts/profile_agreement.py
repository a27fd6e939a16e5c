"""Does a profiler's kernel time per call agree with kbench's CUDA-event median?

Where the profiler reports cycles and the run recorded its SM clock, the profiler's time is taken at
the run's clock (its cycles over the run's median clock) before the two are compared: a profiled
single call runs at full clock, sustained sampling often at the power limit's lower one.

    python3 scripts/profile_agreement.py results/profiles/NAME.json RUN.jsonl [--tolerance 0.05] [--min-us 50]

NAME.json is what `kbench profile` wrote; RUN.jsonl a `kbench run` of the same case (its event medians).
Calls under --min-us are listed but not checked (launch gaps dominate them). Exit 0 when every checked
implementation agrees, 1 when one does not, 2 when nothing could be compared.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbench import results  # noqa: E402
from kbench.profilers.common import agreement_rows  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("summary", type=Path)
    parser.add_argument("run", type=Path)
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--min-us", type=float, default=50.0)
    args = parser.parse_args()
    summary = json.loads(args.summary.read_text())
    rows = agreement_rows(summary, results.read(args.run), args.tolerance, args.min_us)
    print(f"{summary.get('tool')} kernel time per call vs kbench's event median, {summary.get('case_key')} "
          f"(tolerance {args.tolerance:.0%}, checked from {args.min_us:g} us)")
    print(f"{'implementation':<16} {'profiler us':>12} {'at run clock':>13} {'events us':>12} {'diff':>8}  "
          f"{'clocks MHz (profiler, run)':>27}  verdict")
    checked = failed = 0
    for row in rows:
        fmt = lambda v: "-" if v is None else f"{v:,.1f}"  # noqa: E731
        diff = "-" if row["diff"] is None else f"{row['diff']:+.1%}"
        verdict = ("agrees" if row["ok"] else "DISAGREES") if row["checked"] else f"not checked ({row['why']})"
        clocks = (f"{row['profiled_mhz']:,.0f}, {row['run_mhz']:,.0f}" if row.get("run_mhz") else "-")
        print(f"{row['label']:<16} {fmt(row['profiled_us']):>12} {fmt(row.get('profiled_us_at_run_clock')):>13} "
              f"{fmt(row['event_us']):>12} {diff:>8}  {clocks:>27}  {verdict}")
        checked += row["checked"]
        failed += row["checked"] and not row["ok"]
    if not checked:
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
