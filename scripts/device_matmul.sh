#!/usr/bin/env bash
# The matmul implementations on the H200 in one device call (issue 4): correctness
# sweep on odd and even shapes, compute-sanitizer memcheck on the CUDA kernels,
# and the benchmark against cuBLAS measured in the same run.
#
#   STEPS="correct sanitize bench" OUT=/tmp/kbench-device bash scripts/device_matmul.sh
set -u
OUT=${OUT:-/tmp/kbench-device}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 COLUMNS=160 KBENCH_GIT_COMMIT=${KBENCH_GIT_COMMIT:-unknown}
kb() { python3 -m kbench "$@"; echo "[exit $?]"; }
summary() {  # one line per record: label, case, status, median, TFLOP/s, ratio to cublas, error, regs/smem/spill
python3 - "$@" <<'PY'
import json, sys
rows = [json.loads(line) for path in sys.argv[1:] for line in open(path)]
cublas = {r["case_key"]: (r.get("metrics") or {}).get("tflops") for r in rows if r["impl"] == "cublas" and r["status"] == "OK"}
for r in rows:
    st = (r.get("timing") or {}).get("stats") or {}; m = r.get("metrics") or {}
    c = r.get("config") or {}; err = (r.get("correctness") or {}).get("max_abs_err")
    res = (f"regs={c.get('registers_per_thread')} smem={c.get('dynamic_smem_bytes')} local={c.get('local_bytes_per_thread')}"
           if "registers_per_thread" in c else "")
    med = f"{st['median']*1e3:9.1f} us" if st else "        -   "
    tf = m.get("tflops")
    base = cublas.get(r["case_key"])
    ratio = f"{tf / base:5.2f}x cublas" if tf and base else "     -       "
    tfs = f"{tf:7.1f} TF/s" if tf else "      -     "
    print(f"{r['label']:44s} {r['case_key']:44s} {r['status']:7s} {med} {tfs} {ratio} "
          f"err={err if err is None else f'{err:.1e}'} {res} {r['reason'][:90]}")
PY
}
statuses() {  # counts of (label, status), every non-OK row, worst error by dtype
python3 - "$@" <<'PY'
import collections, json, sys
rows = [json.loads(line) for path in sys.argv[1:] for line in open(path)]
print("statuses:", dict(collections.Counter((r["label"], r["status"]) for r in rows)))
for r in rows:
    if r["status"] not in ("OK",): print("  ", r["label"], r["case_key"], r["status"], r["reason"][:150])
worst = collections.defaultdict(float)
for r in rows:
    e = (r.get("correctness") or {}).get("max_abs_err")
    if e is not None: worst[(r["label"], r["case"]["dtype"])] = max(worst[(r["label"], r["case"]["dtype"])], e)
print("worst max abs err by (label, dtype):", dict(worst))
PY
}
STEPS=${STEPS:-smoke correct sanitize bench}

if [[ $STEPS == *smoke* ]]; then
echo "== smoke: every kernel on odd shapes in one process, quick timings"
python3 scripts/matmul_smoke.py ${SMOKE_IMPLS:-} 2>&1 | grep --line-buffered -v Warning
echo "[smoke exit ${PIPESTATUS[0]}]"
fi
IMPLS=${IMPLS:-cublas,tiled-smem,tiled-regblock,wmma,wmma-smem,triton}

if [[ $STEPS == *correct* ]]; then
# The sweep over shapes, dtypes and tile configurations is the smoke step (one process, seconds);
# this runs the same checks through kbench's workers on odd and even shapes, one process per run.
echo "== correctness through kbench run: odd and even shapes, fp16/bf16/fp32 (each implementation's dtypes; others SKIP)"
for shape in ${SHAPES:-1000,777,333 1024,1024,1024}; do
  IFS=, read -r m n k <<< "$shape"
  kb run matmul --impl "$IMPLS" --baseline cublas --m $m --n $n --k $k --dtype fp16,bf16,fp32 \
     --min-time 0.02 --max-time 0.05 --format csv --out "$OUT/mm-correct.jsonl" > /dev/null
done
statuses "$OUT/mm-correct.jsonl"
fi

if [[ $STEPS == *sanitize* ]]; then
echo "== compute-sanitizer memcheck (and racecheck on the shared-memory kernels)"
compute-sanitizer --tool memcheck --error-exitcode 9 python3 scripts/matmul_sanitize.py 2>&1 | tail -40
echo "[memcheck exit ${PIPESTATUS[0]}]"
compute-sanitizer --tool racecheck --error-exitcode 9 python3 scripts/matmul_sanitize.py tiled-smem,tiled-regblock,wmma-smem 2>&1 | tail -8
echo "[racecheck exit ${PIPESTATUS[0]}]"
fi

if [[ $STEPS == *bench* ]]; then
echo "== benchmark: ${BENCH_SIZES:-4096 8192} cubed, ${MAIN_DTYPES:-fp16,bf16}; fp32 at 4096^3"
for size in ${BENCH_SIZES:-4096 8192}; do
  [[ ${MAIN_IMPLS:-} == none ]] || kb run matmul --impl ${MAIN_IMPLS:-cublas,triton,wmma,wmma-smem} --baseline cublas \
     --m $size --n $size --k $size --dtype ${MAIN_DTYPES:-fp16,bf16} --format csv --out "$OUT/mm-bench.jsonl" > /dev/null
  kb run matmul --impl cublas,wmma-smem --baseline cublas --m $size --n $size --k $size --dtype ${MAIN_DTYPES:-fp16,bf16} \
     ${WMMA_SMEM_PARAMS:---param warps=4,8 --param block_n=128,256 --param stages=3,4} \
     --format csv --out "$OUT/mm-bench.jsonl" > /dev/null
done
kb run matmul --impl cublas,triton,tiled-smem,tiled-regblock --baseline cublas --m 4096 --n 4096 --k 4096 --dtype fp32 \
   --format csv --out "$OUT/mm-bench.jsonl" > /dev/null
summary "$OUT/mm-bench.jsonl"
fi
