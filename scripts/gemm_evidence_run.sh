#!/usr/bin/env bash
# One device call for the GEMM issue's evidence, from the repository root on an H200:
#   H3S_SOURCE_COMMIT=<commit> OUT=<dir> bash scripts/gemm_evidence_run.sh
# 1. scripts/gpu_evidence.sh: every GPU test (test_gpu_gemm writes the invariance count),
#    compute-sanitizer, the CLI trajectory and replay on the GPU;
# 2. bench_gemm (full: every shape, phase and M) against cuBLASLt; bench_gemm.log ends with each row's time and
#    nvidia-smi's SM clock, power and temperature every second of the run;
# 3. bench/provider/run_gpu_bench.sh: the release-geometry block against PyTorch.
# $OUT receives at most eight files (the device's return limit): gpu_evidence.json, ctest.log,
# sanitizer.log, gpu_evidence.log, bench_gemm.json, bench_gemm.log, bench_block.json, bench_block.log.
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$SRC/out/gemm_evidence}
W=$(mktemp -d)
export H3S_GEMM_INVARIANCE_JSON=$W/gemm_invariance.json
OUT=$W/ev H3S_GPU_BUILD=/tmp/h3s-build-gpu bash "$SRC/scripts/gpu_evidence.sh" >"$W/ev.txt" 2>&1
echo "gpu_evidence: exit $?"
grep -E "passed|failed|differ|drift|sanitizer" "$W/ev.txt" | tail -25
# The clocks during the run, and when each row was printed, appended to bench_gemm.log: a kernel bound by one
# accumulator chain (the GEMMs at M <= 64) runs at the multiprocessors' clock, so its rows late in a long run can
# read slower than the same rows alone (docs/evidence/gpu/development/gemm_small_m.md).
SMI=""
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 1000 \
        >"$W/clocks.csv" 2>&1 &
    SMI=$!
    trap '[ -n "$SMI" ] && kill "$SMI" 2>/dev/null' EXIT # no sampler left running if the run is cut short
fi
/tmp/h3s-build-gpu/bench_gemm --invariance "$W/gemm_invariance.json" --json "$OUT/bench_gemm.json" 2>&1 |
    while IFS= read -r line; do
        printf '%s\n' "$line"
        printf '%s %s\n' "$(date -u +%H:%M:%S)" "$line" >>"$W/rows.txt"
    done >"$OUT/bench_gemm.log"
rc=${PIPESTATUS[0]}
[ -n "$SMI" ] && kill "$SMI" 2>/dev/null
{
    echo "== each line above with the UTC time it was printed"
    cat "$W/rows.txt" 2>/dev/null
    echo "== nvidia-smi every second during the run"
    cat "$W/clocks.csv" 2>/dev/null || echo "(no nvidia-smi)"
} >>"$OUT/bench_gemm.log"
echo "bench_gemm: exit $rc"
OUT=$W/bb H3S_BENCH_BUILD=/tmp/h3s-build-gpu bash "$SRC/bench/provider/run_gpu_bench.sh" >"$W/bb.txt" 2>&1
echo "run_gpu_bench: exit $?"
tail -25 "$W/bb.txt"
for f in gpu_evidence.json ctest.log sanitizer.log gpu_evidence.log; do cp "$W/ev/$f" "$OUT/" 2>/dev/null; done
cp "$W/bb/bench_block.json" "$OUT/" 2>/dev/null
cp "$W/bb/bench.log" "$OUT/bench_block.log" 2>/dev/null
