#!/usr/bin/env bash
# The closing device call of a session: the foundation's main runs and cupy-fa2's
# shared-memory layout ablation, each script writing under $OUT.
set -u
STEPS="seed big dobench isolation" bash scripts/device_check.sh
CORRECT_N=17,255,1000,4096 CORRECT_PARAMS="--param smem_layout=swizzle,pad,plain" \
SPECS="8192 1 16 128 --no-causal" PARAMS="--param smem_layout=swizzle,pad,plain" \
STEPS="correct bench" bash scripts/device_fa2.sh
