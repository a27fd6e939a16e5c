#!/usr/bin/env bash
# triton-fa2 autotuned against SDPA's FLASH and cuDNN backends on the H200 (issue 10), batch x heads
# filling the GPU (B·H·N = 128k tokens), fp16. Every configuration the autotuner can pick is
# checked first (--param config=0..7, odd N, causal and not); then the same kbench run twice
# shows the second process reading the tuning from Triton's cache (tuning_seconds, tuned_here).
#   OUT=/tmp/kbench-device bash scripts/device_fa2_tune.sh
set -u
OUT=${OUT:-/tmp/kbench-device}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 COLUMNS=170 KBENCH_GIT_COMMIT=${KBENCH_GIT_COMMIT:-unknown}
kb() { python3 -m kbench "$@" 2>&1 | grep -v -i warning; }
STEPS=${STEPS:-configs bench again}  # and "sweep": every pinned configuration timed by kbench (SWEEP_SPECS, SWEEP_PARAMS)
# Every index of triton_fa2.CONFIGS, as --param config= takes them (CONFIG_LIST narrows it)
CONFIG_LIST=${CONFIG_LIST:-$(python3 -c "
import ast
tree = ast.parse(open('kernels/attention/triton_fa2.py').read())
configs = next(n.value for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], 'id', '') == 'CONFIGS')
print(','.join(str(i) for i in range(len(configs.elts))))")}
# SPECS (bench, and again's first): specs separated by '|' (as in device_fa2.sh), each
# "N batch heads causal [d]"; PARAMS (default: the TMA and pointer paths side by side)
IFS='|' read -ra specs <<< "${SPECS:-4096 2 16 --no-causal|8192 1 16 --no-causal|16384 1 8 --no-causal|\
4096 2 16 --causal|8192 1 16 --causal|4096 2 16 --no-causal 64|1024 8 16 --no-causal}"
if [[ $STEPS == *configs* ]]; then
  for causal in --no-causal --causal; do
    kb run attention --impl triton-fa2 --baseline triton-fa2 --n 77,1000 --d 128 --dtype fp16 --batch 2 --heads 3 \
       $causal --param config=$CONFIG_LIST --min-time 0.01 --max-time 0.02 --format csv --out "$OUT/fa2-configs.jsonl" > /dev/null
  done
  python3 -c "
import collections, json
rows = [json.loads(l) for l in open('$OUT/fa2-configs.jsonl')]
print('configs:', dict(collections.Counter(r['status'] for r in rows)))
for r in rows:
    if r['status'] != 'OK': print('  ', r['label'], r['case_key'], r['status'], r['reason'][:160])"
fi
if [[ $STEPS == *bench* ]]; then
  for spec in "${specs[@]}"; do
    set -- $spec
    kb run attention --impl sdpa,sdpa-cudnn,triton-fa2 --baseline sdpa-cudnn --n $1 --batch $2 --heads $3 \
       --d ${5:-${D:-128}} $4 --dtype fp16 ${PARAMS:---param tma=0,1} --out "$OUT/fa2-tune.jsonl"
  done
  python3 -c "
import json
for r in (json.loads(l) for l in open('$OUT/fa2-tune.jsonl')):
    if r['impl'] == 'triton-fa2': print(r['label'], r['case_key'], r['status'], {k: (r.get('config') or {}).get(k) for k in ('BLOCK_M', 'BLOCK_N', 'num_warps', 'num_stages', 'tma', 'tuning_seconds', 'tuned_here', 'candidates_ms')})"
fi
if [[ $STEPS == *again* ]]; then
  echo "== bench's first case again in a new process: the tuning must come from Triton's cache (tuned_here False)"
  set -- ${specs[0]}
  kb run attention --impl triton-fa2 --n $1 --batch $2 --heads $3 --d ${5:-${D:-128}} $4 --dtype fp16 \
     --out "$OUT/fa2-again.jsonl" > /dev/null
  python3 -c "
import json
for r in (json.loads(l) for l in open('$OUT/fa2-again.jsonl')):
    print(r['label'], r['status'], r['timing']['stats']['median'] if r.get('timing') else None, r.get('config'))"
fi
if [[ $STEPS == *sweep* ]]; then
  echo "== every configuration pinned, timed by kbench (what the autotuner should have picked)"
  IFS='|' read -ra specs <<< "${SWEEP_SPECS:-4096 2 16 --no-causal|16384 1 8 --no-causal|4096 2 16 --causal}"
  for spec in "${specs[@]}"; do
    set -- $spec
    kb run attention --impl sdpa-cudnn,triton-fa2 --baseline sdpa-cudnn --n $1 --batch $2 --heads $3 --d ${5:-${D:-128}} $4 \
       --dtype fp16 --param config=$CONFIG_LIST ${SWEEP_PARAMS:---param tma=${TMA:-auto}} --out "$OUT/fa2-sweep.jsonl"
  done
fi
