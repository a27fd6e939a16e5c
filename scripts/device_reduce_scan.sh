#!/usr/bin/env bash
# The reduction and scan suites on the H200 in one device call (issue 5): correctness at
# n in {0, 1, 31, 32, 1000, 2^20 + 3, 2^28}, compute-sanitizer on small n, and the
# benchmarks against cupy.sum / torch.cumsum measured in the same run.
#   STEPS="check bench sweep sanitize" OUT=/tmp/kbench-device bash scripts/device_reduce_scan.sh
# (sweep: blelloch's --param variants, each against torch.cumsum in the same run)
set -u
OUT=${OUT:-/tmp/kbench-device}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 COLUMNS=160 KBENCH_GIT_COMMIT=${KBENCH_GIT_COMMIT:-unknown}
STEPS=${STEPS:-check bench sanitize}  # in this order: the sanitizer last
if [[ $STEPS == *check* ]]; then
  echo "== correctness"
  python3 scripts/reduce_scan_check.py 2>&1 | grep -v -i warning | grep -v ": OK" ; echo "[check exit ${PIPESTATUS[0]}]"
fi
if [[ $STEPS == *bench* ]]; then
  echo "== benchmark: 2^28 elements"
  python3 -m kbench run reduction --n 268435456 --dtype fp32,fp16,int32 --out "$OUT/reduction.jsonl" 2>&1 | grep -v -i warning
  python3 -m kbench run scan --n 268435456 --dtype int32,int64,fp32 --out "$OUT/scan.jsonl" 2>&1 | grep -v -i warning
  python3 -m kbench run scan --n 268435456 --dtype int32 --exclusive --out "$OUT/scan.jsonl" 2>&1 | grep -v -i warning
fi
if [[ $STEPS == *sweep* ]]; then
  echo "== blelloch's variants against torch.cumsum: tile state, block size, look-back order"
  python3 -m kbench run scan --n 268435456 --dtype int32,int64 --impl torch-cumsum,blelloch --param state=split,packed \
     --param threads=128,256 --param lookback=late,early --out "$OUT/scan-variants.jsonl" 2>&1 | grep -v -i warning
fi
if [[ $STEPS == *sanitize* ]]; then
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 python3 scripts/reduce_scan_check.py small 2>&1 | grep -v ": OK" | tail -6
    echo "[$tool exit ${PIPESTATUS[0]}]"
  done
fi
