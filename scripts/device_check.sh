#!/usr/bin/env bash
# Everything the H200 check needs, in one device call (see docs/performance.md):
#   device run:  bash scripts/device_check.sh
# Writes logs and result files under $OUT (the device tool brings them back).
set -u
OUT=${OUT:-/tmp/kbench-device}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=150
kb() { python3 -m kbench "$@"; echo "[exit $?]"; }

echo "== $(date -u +%FT%TZ) device check"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
python3 -c "import torch, triton, typer, rich; print('torch', torch.__version__, 'triton', triton.__version__, 'typer', typer.__version__)"
kb --version
kb env
kb list
echo "== seed scenario"
kb run attention --n 256 --d 128 --out "$OUT/run-n256.jsonl"
echo "== seed scenario, CUDA-graph replay"
kb run attention --n 256 --d 128 --cuda-graph --out "$OUT/run-n256-graph.jsonl"
echo "== N=4096 B=2 H=16"
kb run attention --n 4096 --d 128 --batch 2 --heads 16 --out "$OUT/run-n4096.jsonl"
echo "== do_bench cross-check"
python3 scripts/sdpa_do_bench.py 4096
echo "== correctness sweep: odd N, causal, both head dims, fp16/bf16"
kb run attention --n 1,77,1000 --d 64,128 --dtype fp16,bf16 --causal --impl triton-fa2,sdpa,naive \
   --max-time 0.3 --format csv --out "$OUT/sweep.jsonl" > "$OUT/sweep.csv"; cut -d, -f2,4,5,6,15 "$OUT/sweep.csv"
echo "== isolation: an illegal memory access costs only its row"
kb run attention --n 1024 --d 128 --impl sdpa,broken-illegal-access,triton-fa2 --kernels scripts/device_fixtures \
   --out "$OUT/isolation.jsonl"
