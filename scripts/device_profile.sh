#!/usr/bin/env bash
# Issue 7's H200 check in one device call (docs/performance.md, "Pending on the device"):
#   device run:  KBENCH_GIT_COMMIT=<sha> bash scripts/device_profile.sh
#   a subset:    STEPS="env filters" bash scripts/device_profile.sh
# Writes logs, the raw ncu CSVs (to commit as tests/fixtures/profile/ncu_raw_<date>_<impl>.csv), the
# profile summaries and the agreement table under $OUT (the device tool brings them back).
#
# Steps:
#   env      ncu/compute-sanitizer versions, nsys (absent on the lent H200), the NVTX binding the worker
#            will use, and whether the metrics kbench asks ncu for exist on this GPU
#   filters  which ncu --nvtx-include syntax catches kbench's ranges (sdpa, N=1024): the regex kbench uses,
#            the escaped exact name, and a bare prefix; a diagnosis if the main run captures nothing
#   run      kbench run (CUDA events) of naive, sdpa, triton-fa2 at N=4096 B2 H16 d128: the medians
#   ncu      kbench profile --ncu of the same, --compare naive triton-fa2; the raw CSVs copied to $OUT
#   agree    ncu's kernel time per call vs the event medians, within 5 % for calls of 50 us or more
#   torch    kbench profile --torch-profiler of the same (CUDA kernels and a Chrome trace)
#   nsys     kbench profile --nsys: must say in one line that nsys is missing and exit 2
set -u
OUT=${OUT:-/tmp/kbench-device}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 COLUMNS=200
export KBENCH_GIT_COMMIT=${KBENCH_GIT_COMMIT:-unknown}
STEPS=${STEPS:-env filters run ncu agree torch nsys}
CASE=(--n 4096 --d 128 --batch 2 --heads 16)
IMPLS=naive,sdpa,triton-fa2
# triton-fa2's tile shape pinned in both processes: its autotuner picks differently from one process to the
# next (128x64 in the run, 128x128 under ncu on 2026-11-29), and two shapes are two kernels.
PIN=(${PIN:---param config=1})
DATE=$(date -u +%Y%m%d)
NAME=h200-n4096-$DATE
kb() { python3 -m kbench "$@"; echo "[exit $?]"; }
step() { [[ " $STEPS " == *" $1 "* ]]; }

echo "== $(date -u +%FT%TZ) device profile check: $STEPS"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv

if step env; then
  echo "== tools"
  command -v ncu && ncu --version | tail -2
  command -v compute-sanitizer && compute-sanitizer --version | tail -1
  command -v nsys || echo "nsys: not installed"
  python3 -c "import kbench.nvtx as n; print('kbench NVTX binding:', n.backend_name())"
  echo "== the metrics kbench asks for, on this GPU (ncu --query-metrics)"
  ncu --query-metrics > "$OUT/ncu_query_metrics.txt" 2>&1
  python3 - "$OUT/ncu_query_metrics.txt" <<'PY'
import re, sys
from kbench.profilers import ncu
text = open(sys.argv[1]).read()
bases = set(re.findall(r"^(\w+__\w+)", text, re.M))
for metric in ncu.CORE_METRICS + ("sm__pipe_tensor_op_hmma_cycles_active", "sm__pipe_tensor_op_gmma_cycles_active",
                                  "sm__pipe_tensor_cycles_active", "sm__inst_executed_pipe_tensor"):
    base = metric.split(".")[0]
    print(f"  {'ok ' if base in bases else 'MISSING'} {metric}")
PY
  ncu --list-sets > "$OUT/ncu_list_sets.txt" 2>&1
  ncu --list-sections > "$OUT/ncu_list_sections.txt" 2>&1
fi

if step filters; then
  echo "== which --nvtx-include syntax catches kbench's range (sdpa, N=1024, one call)"
  python3 - "$OUT" <<'PY'
import re, subprocess, sys
from pathlib import Path
from kbench import nvtx
from kbench.profilers import common, ncu
out = Path(sys.argv[1])
case = {"n": 1024, "d": 128, "batch": 1, "heads": 1, "dtype": "fp16", "causal": False}
key = ",".join(f"{k}={v}" for k, v in case.items())
name = nvtx.range_name("attention", "sdpa", key)
escaped = re.sub(r"([@,\[\]/*+\\])", r"\\\1", name) + "/"
for label, config in (("kbench's regex", ncu.nvtx_include(name)), ("escaped exact", escaped),
                      ("prefix regex", "regex:kbench.*/")):
    job = {"suite": "attention", "impl": "sdpa", "label": "sdpa", "params": {}, "case": case, "seed": 0, "trials": 1,
           "stop": {"min_samples": 1, "max_samples": 1, "min_time": 0.0, "max_time": 1e9}, "flush_l2": True,
           "cuda_graph": False}
    answers = out / "filters.answers.jsonl"
    argv = ["ncu", "--nvtx", "--nvtx-include", config, "--launch-count", "5", "--metrics", "gpu__time_duration.sum",
            "--csv", "--page", "raw", *common.worker_argv(job, answers)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    kernels = ncu.parse_raw(done.stdout)
    print(f"  {label:<15} {config!r}: {len(kernels)} kernel(s) {[k['name'] for k in kernels]}")
    (out / f"filters-{label.split()[0]}.log").write_text(done.stdout + done.stderr)
PY
fi

if step run; then
  echo "== kbench run: the event medians"
  kb run attention "${CASE[@]}" --impl "$IMPLS" "${PIN[@]}" --out "$OUT/run-n4096.jsonl"
fi

if step ncu; then
  echo "== kbench profile --ncu"
  kb profile --ncu attention "${CASE[@]}" --impl "$IMPLS" "${PIN[@]}" --compare naive "triton-fa2[config=1]" --name "$NAME"
  for csv in results/profiles/"$NAME"-*.raw.csv; do  # labels are made file-safe: triton-fa2_config_1
    label=$(basename "$csv" .raw.csv); label=${label#"$NAME"-}
    cp "$csv" "$OUT/ncu_raw_${DATE}_$label.csv"
    cp "results/profiles/$NAME-$label.log" "$OUT/ncu-$label.log" 2>/dev/null
  done
  cp "results/profiles/$NAME.json" "$OUT/" 2>/dev/null
  ls -la results/profiles/ | grep "$NAME"
fi

if step agree; then
  echo "== ncu's kernel time per call vs kbench's event median (5 %, calls of 50 us or more)"
  python3 scripts/profile_agreement.py "results/profiles/$NAME.json" "$OUT/run-n4096.jsonl" | tee "$OUT/agreement.txt"
  echo "[exit ${PIPESTATUS[0]}]"
fi

if step torch; then
  echo "== kbench profile --torch-profiler"
  kb profile --torch-profiler attention "${CASE[@]}" --impl "$IMPLS" "${PIN[@]}" --name "$NAME-torch"
  cp "results/profiles/$NAME-torch.json" "$OUT/" 2>/dev/null
fi

if step nsys; then
  echo "== kbench profile --nsys (the lent H200 has no nsys: one line, exit 2)"
  kb profile --nsys attention --impl naive
fi
echo "== $(date -u +%FT%TZ) done"
