#!/usr/bin/env bash
# The measurements recorded in docs/PERFORMANCE.md for a GPU machine, in one go:
# discovery, the on-card oracle, the GPU benchmark, then the CPU benchmarks on that host.
# Usage: scripts/measure-gpu-machine.sh [OUTDIR]   (each step's output also lands in OUTDIR)
set -u
out=${1:-${OUT:-/tmp/bankml-measure}}
mkdir -p "$out"
bin=${BANKML:-./bankml}
step() { local name=$1; shift; echo "=== $name: $*"; local t0=$SECONDS; "$@" 2>&1 | tee "$out/$name.txt"; echo "=== $name: exit ${PIPESTATUS[0]}, $((SECONDS - t0)) s"; }
step version "$bin" version
step gpu "$bin" gpu
step verify "$bin" gpu --verify
step bench-gpu "$bin" bench gpu
step bench-kernels "$bin" bench kernels --quick
step bench-model "$bin" bench --shape 1.7b --type q1_0 -p 64 -n 32 -r 2 -t "${BENCH_THREADS:-1,16}"
