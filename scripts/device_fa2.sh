#!/usr/bin/env bash
# cupy-fa2 on the H200 in one device call (issue 3): compile, correctness sweep,
# compute-sanitizer, and the benchmark against SDPA measured in the same run.
set -u
OUT=${OUT:-/tmp/kbench-device}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 COLUMNS=160 KBENCH_GIT_COMMIT=${KBENCH_GIT_COMMIT:-unknown}
kb() { python3 -m kbench "$@"; echo "[exit $?]"; }
summary() {  # one line per record: label, case, status, median, TFLOP/s, error, regs/smem/spill
python3 - "$@" <<'PY'
import json, sys
for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line); st = (r.get("timing") or {}).get("stats") or {}; m = r.get("metrics") or {}
        c = r.get("config") or {}; err = (r.get("correctness") or {}).get("max_abs_err")
        res = f"regs={c.get('registers_per_thread')} smem={c.get('dynamic_smem_bytes')} local={c.get('local_bytes_per_thread')}" if "registers_per_thread" in c else ""
        med = f"{st['median']*1e3:9.1f} us" if st else "        -   "
        tf = f"{m['tflops']:7.1f} TF/s" if m.get("tflops") else "      -     "
        print(f"{r['label']:42s} {r['case_key']:52s} {r['status']:7s} {med} {tf} err={err if err is None else f'{err:.1e}'} {res} {r['reason'][:90]}")
PY
}
STEPS=${STEPS:-correct sanitize bench}

if [[ $STEPS == *correct* ]]; then
echo "== correctness: N in {1,17,128,255,256,1000,4096}, d 64/128, fp16/bf16, causal and not, B=3 H=5"
for causal in --no-causal --causal; do
  kb run attention --impl cupy-fa2 --baseline cupy-fa2 --n ${CORRECT_N:-1,17,128,255,256,1000,4096} --d 64,128 --dtype fp16,bf16 \
     --batch 3 --heads 5 $causal ${CORRECT_PARAMS:---param block_m=128,64 --param block_n=64,128} \
     --min-time 0.02 --max-time 0.05 --format csv --out "$OUT/fa2-correct.jsonl" > /dev/null
done
python3 - "$OUT/fa2-correct.jsonl" <<'PY'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("statuses:", dict(collections.Counter((r["label"], r["status"]) for r in rows)))
for r in rows:
    if r["status"] != "OK": print("  ", r["label"], r["case_key"], r["status"], r["reason"][:150])
worst = collections.defaultdict(float)
for r in rows:
    e = (r.get("correctness") or {}).get("max_abs_err")
    if e is not None: worst[r["case"]["dtype"]] = max(worst[r["case"]["dtype"]], e)
print("worst max abs err by dtype:", dict(worst))
PY
fi

if [[ $STEPS == *sanitize* ]]; then
echo "== compute-sanitizer"
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --error-exitcode 9 python3 scripts/fa2_sanitize.py 128 64 4 2>&1 | tail -4
  echo "[$tool exit ${PIPESTATUS[0]}]"
done
fi

if [[ $STEPS == *bench* ]]; then
echo "== benchmark: fp16, B*H*N = 128k tokens; d=128 non-causal at four N, then d=64 and causal"
PARAMS=${PARAMS:---param block_m=128,64 --param block_n=64,128 --param warps=4,8}
SPECS=${SPECS:-"1024 8 16 128 --no-causal|4096 2 16 128 --no-causal|8192 1 16 128 --no-causal|16384 1 8 128 --no-causal|4096 2 16 64 --no-causal|4096 2 16 128 --causal"}
IFS='|' read -ra SPEC_LIST <<< "$SPECS"
for spec in "${SPEC_LIST[@]}"; do
  set -- $spec
  kb run attention --impl sdpa,sdpa-cudnn,triton-fa2,cupy-fa2 --baseline sdpa --n $1 --batch $2 --heads $3 --d $4 $5 \
     $PARAMS --format csv --out "$OUT/fa2-bench.jsonl" > /dev/null
done
summary "$OUT/fa2-bench.jsonl"
fi
