#!/usr/bin/env bash
# Everything the H200 check of the foundation needs, in one device call (see docs/performance.md):
#   device run:  KBENCH_GIT_COMMIT=<sha> bash scripts/device_check.sh
#   a subset:    STEPS="seed big dobench" bash scripts/device_check.sh
# Writes logs and result files under $OUT (the device tool brings them back).
set -u
OUT=${OUT:-/tmp/kbench-device}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 COLUMNS=150
# The copy on the device has no .git: the caller passes the commit it sent.
export KBENCH_GIT_COMMIT=${KBENCH_GIT_COMMIT:-unknown}
STEPS=${STEPS:-env seed big dobench sweep isolation}
kb() { python3 -m kbench "$@"; echo "[exit $?]"; }
step() { [[ " $STEPS " == *" $1 "* ]]; }

echo "== $(date -u +%FT%TZ) device check: $STEPS"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
python3 -c "import torch, triton, typer, rich; print('torch', torch.__version__, 'triton', triton.__version__, 'typer', typer.__version__)"
if step env; then
  kb --version
  kb env
  kb list
fi
if step seed; then
  echo "== seed scenario"
  kb run attention --n 256 --d 128 --out "$OUT/run-n256.jsonl"
  echo "== seed scenario, CUDA-graph replay"
  kb run attention --n 256 --d 128 --cuda-graph --out "$OUT/run-n256-graph.jsonl"
fi
if step big; then
  echo "== N=4096 B=2 H=16"
  kb run attention --n 4096 --d 128 --batch 2 --heads 16 --out "$OUT/run-n4096.jsonl"
fi
if step dobench; then
  echo "== do_bench cross-check"
  python3 scripts/sdpa_do_bench.py 4096
fi
if step sweep; then
  echo "== correctness sweep: odd N, causal and not, both head dims, every dtype"
  for causal in --no-causal --causal; do
    kb run attention --n 1,77,1000,4099 --d 64,128 --dtype fp16,bf16,fp32 $causal --impl triton-fa2,sdpa,naive \
       --min-time 0.05 --max-time 0.2 --format csv --out "$OUT/sweep.jsonl" > /dev/null
  done
  python3 - "$OUT/sweep.jsonl" <<'PY'
import collections, json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
count = collections.Counter((r["impl"], r["status"]) for r in rows)
print("sweep statuses:", dict(count))
for r in rows:
    if r["status"] != "OK":
        print("  ", r["impl"], r["case_key"], r["status"], r["reason"][:120])
worst = collections.defaultdict(float)
for r in rows:
    err = (r.get("correctness") or {}).get("max_abs_err")
    if err is not None:
        key = (r["impl"], r["case"]["dtype"])
        worst[key] = max(worst[key], err)
print("worst max abs error by impl, dtype:", {f"{k[0]}/{k[1]}": f"{v:.2e}" for k, v in sorted(worst.items())})
PY
fi
if step isolation; then
  echo "== isolation: an illegal memory access costs only its row"
  kb run attention --n 1024 --d 128 --impl sdpa,broken-illegal-access,triton-fa2 --kernels scripts/device_fixtures \
     --out "$OUT/isolation.jsonl"
fi
