#!/usr/bin/env bash
# The device work that landed without a GPU run, in priority order, for one device call of
# at most 10 minutes: each step has its own time budget, its log goes to $OUT, and a step
# that fails or runs out of time does not stop the next one.
#   device run:  KBENCH_GIT_COMMIT=<sha> bash scripts/device_queue.sh            (all steps)
#                KBENCH_GIT_COMMIT=<sha> QUEUE="matmul-smoke fa2" bash scripts/device_queue.sh
# See docs/performance.md, "Pending on the device", for what each step proves.
set -u
export OUT=${OUT:-/tmp/kbench-device}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 COLUMNS=160 KBENCH_GIT_COMMIT=${KBENCH_GIT_COMMIT:-unknown}
QUEUE=${QUEUE:-matmul-bench reduce-scan patterns streams matmul-check corpus calibrate fa2 side-stream profile}

STARTED=$SECONDS
DEADLINE=${DEADLINE:-570}  # seconds for all steps: a step that would end past it is skipped, so the pack below runs

step() {  # step NAME SECONDS COMMAND...
  local name=$1 budget=$2
  shift 2
  [[ " $QUEUE " == *" $name "* ]] || return 0
  if (( SECONDS - STARTED + budget > DEADLINE )); then
    echo "== $name: skipped ($(( DEADLINE - SECONDS + STARTED )) s left of DEADLINE=$DEADLINE, it needs $budget)"
    return 0
  fi
  echo "== $(date -u +%T) $name (budget ${budget}s)"
  timeout --kill-after=10 "$budget" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$OUT/$name.log"
  echo "== $name: exit $rc$( [ $rc -eq 124 ] && echo ' (out of time)')"
}

step matmul-smoke 120 env STEPS=smoke bash scripts/device_matmul.sh
# the matmul suite's second call: the wmma-smem tile sweep and fp32; then the CUDA kernels' sweep and sanitizer
step matmul-bench 100 env STEPS=bench BENCH_SIZES="4096 8192" MAIN_IMPLS=none MAIN_DTYPES=fp16 \
     WMMA_SMEM_PARAMS="--param warps=4,8 --param block_k=32,64 --param stages=3,4" bash scripts/device_matmul.sh
step reduce-scan ${RS_BUDGET:-130} env STEPS="${RS_STEPS:-check bench sanitize}" bash scripts/device_reduce_scan.sh
step patterns 50 python3 scripts/patterns_check.py
step streams 60 python3 scripts/streams_check.py
step allreduce 100 bash -c "python3 -m kbench run allreduce --gpus 2 --bytes 12,1000004,1GiB,4GiB --max-time 1 \
     --out \$OUT/allreduce.jsonl; python3 -m kbench run p2p --bytes 1GiB --out \$OUT/p2p.jsonl"
step matmul-check 90 env STEPS="smoke sanitize" SMOKE_IMPLS=tiled-smem,tiled-regblock,wmma,wmma-smem \
     bash scripts/device_matmul.sh
step fa2-tune ${FA2_BUDGET:-200} bash scripts/device_fa2_tune.sh
step fa2 130 env STEPS="correct bench" SPECS="4096 2 16 128 --no-causal" CORRECT_N=17,255,1000,4096 \
     PARAMS="--param block_m=128" CORRECT_PARAMS="--param block_m=128" bash scripts/device_fa2.sh
step side-stream 110 env STEPS="seed big" bash scripts/device_check.sh
step streams-run ${STREAMS_BUDGET:-200} bash -c "python3 -m kbench run streams --bytes 1000000004 --chunks 7 --streams 3 \
     --work 64 --out \$OUT/streams.jsonl; python3 -m kbench run streams --bytes 1GiB --chunks 1,4,16,64 --streams 4 \
     --work 1904 --out \$OUT/streams.jsonl; cp -r results/timelines \$OUT/ 2>/dev/null"
step allreduce-pieces 130 bash -c "python3 -m kbench run allreduce --gpus 2 --bytes 1GiB,4GiB --impl nccl-ring,ring \
     --max-time 1 --out \$OUT/pieces.jsonl; python3 -m kbench run allreduce --gpus 2 --bytes 1GiB,4GiB --impl ring \
     --param pieces=1,2,8,16 --max-time 1 --out \$OUT/pieces.jsonl"
step constant-ncu 90 bash -c "python3 -m kbench profile --ncu patterns --lesson constant --impl constant-cmem,constant-global \
     --n 8192 --set full; cp results/profiles/*.csv results/profiles/*.json \$OUT/ 2>/dev/null; ls -la results/profiles"
step scan-sweep 100 bash -c "python3 -m kbench run scan --n 268435456 --dtype int32 --impl torch-cumsum,blelloch \
     --param staged=0,1 --param items=16,32 --out \$OUT/scan-sweep.jsonl; python3 -m kbench run scan --n 268435456 \
     --dtype int64 --impl torch-cumsum,blelloch --param staged=1 --param items=4,8,16 --out \$OUT/scan-sweep.jsonl"
step scan-ncu 70 bash -c "python3 -m kbench profile --ncu scan --n 268435456 --dtype int32 --impl blelloch,torch-cumsum \
     --param staged=1 --set full --name scan-ncu; cp results/profiles/scan-ncu* \$OUT/; rm -f \$OUT/*.ncu-rep"
step torch-prof 70 bash -c "python3 -m kbench profile --torch-profiler attention --n 4096 --d 128 --batch 2 --heads 16 \
     --impl sdpa,triton-fa2 --name torchprof; cp results/profiles/torchprof* \$OUT/"
step corpus 150 python3 -m pytest -x -q -rA --tb=short tests/test_corpus_gpu.py
step calibrate 40 bash -c "python3 -m kbench calibrate && python3 -m kbench roofline --from results/baselines"
step matmul 500 env STEPS="correct sanitize bench" bash scripts/device_matmul.sh
step profile ${PROFILE_BUDGET:-500} bash scripts/device_profile.sh
# The device returns only a handful of files a call: one archive of every log and record (PACK=0 keeps them loose).
if [[ ${PACK:-1} == 1 ]]; then
  (cd "$OUT" && tar czf /tmp/kbench-out.tgz . && find . -mindepth 1 -delete && mv /tmp/kbench-out.tgz .)
fi
