"""kbench from Python: the H200 report's records as a pandas DataFrame, then a short run on this machine.

    python docs/examples/results_in_pandas.py

Reads results/baselines/ (one file per suite), prints each kernel's speedup over its run's baseline
with the 95 % interval, then checks and times two attention implementations at a small size (on the
CPU when there is no GPU) and prints them the same way.
"""

import tempfile
from pathlib import Path

import kbench

REPO = Path(__file__).resolve().parents[2]

h200 = kbench.load(REPO / "results" / "baselines").to_pandas()
ok = h200[h200.status == "OK"]
print(ok[["suite", "label", "baseline", "median_ms", "speedup", "speedup_low", "speedup_high", "sm_mhz"]]
      .to_string(index=False, float_format=lambda v: f"{v:.3f}"))

with tempfile.TemporaryDirectory() as folder:
    mine = kbench.run("attention", impl="naive,sdpa", n=[64, 128], d=32, max_time=0.1,
                      out=Path(folder) / "attention.jsonl")
frame = mine.to_pandas()
print(frame.pivot(index="n", columns="impl", values="median_ms").to_string(float_format=lambda v: f"{v:.4f}"))
assert (frame.status == "OK").all(), frame[["impl", "n", "status", "reason"]]
