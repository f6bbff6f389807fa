#!/usr/bin/env bash
# GEMM evidence on a machine with an NVIDIA Hopper GPU, from the repository root:
#
#   OUT=<dir> bash scripts/gemm_device.sh [quick|full] [extra ctest regex]
#
# Builds h3strict with the CUDA backend (all cores), runs the GEMM tests (test_gpu_gemm: every
# configuration on the same rows; test_gpu_linear; test_gpu_ops' linear accuracy), then
# bench_gemm side by side with cuBLASLt, and, when ncu is present, profiles the strict forward
# kernel at one shape.  quick: small test shapes, the benchmark at M in {12, 925, 8349}; full:
# the release shapes and every M.  Outputs in $OUT: gemm.log, bench_gemm.json,
# gemm_invariance.json, ncu.txt.  Build dependencies as in scripts/gpu_evidence.sh (.deps/).
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$SRC/out/gemm}
MODE=${1:-full}
EXTRA=${2:-}
BUILD=${H3S_GPU_BUILD:-/tmp/h3s-build-gemm}
mkdir -p "$OUT"
LOG=$OUT/gemm.log
: >"$LOG"
log() { echo "$@" | tee -a "$LOG"; }
log "gemm_device: $(date -u +%Y-%m-%dT%H:%M:%SZ) mode $MODE commit ${H3S_SOURCE_COMMIT:-unknown}"
log "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
. "$SRC/scripts/device_deps.sh"
t0=$(date +%s)
cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON "${EXTRA_CMAKE[@]}" >>"$LOG" 2>&1 ||
    { log "configure failed"; tail -30 "$LOG"; exit 1; }
cmake --build "$BUILD" -j"$(nproc)" >>"$LOG" 2>&1 || { log "build failed"; grep -E "error|Error" "$LOG" | head -30; exit 1; }
log "build: $(($(date +%s) - t0)) s"
rc=0
if [ "$MODE" = quick ]; then export H3S_GPU_TEST_SMALL=1; fi
export H3S_GEMM_INVARIANCE_JSON=$OUT/gemm_invariance.json
for t in test_gpu_gemm test_gpu_linear test_gpu_ops $EXTRA; do
    t1=$(date +%s)
    "$BUILD/$t" >"$OUT/$t.log" 2>&1
    r=$?
    log "$t: exit $r ($(($(date +%s) - t1)) s)"
    grep -E "differ|FAIL|rel_l2|provider|timing|row_invariance" "$OUT/$t.log" | head -60 | tee -a "$LOG"
    [ $r -ne 0 ] && rc=1
done
unset H3S_GPU_TEST_SMALL
bq=""
[ "$MODE" = quick ] && bq="--quick"
t1=$(date +%s)
"$BUILD/bench_gemm" $bq --invariance "$OUT/gemm_invariance.json" --json "$OUT/bench_gemm.json" 2>&1 | tee -a "$LOG"
log "bench_gemm: $(($(date +%s) - t1)) s"
if command -v ncu >/dev/null 2>&1 && [ -n "${H3S_NCU:-}" ]; then
    timeout 120 ncu --clock-control none -k regex:wg_gemm -c 3 --section SpeedOfLight --section Occupancy \
        "$BUILD/bench_gemm" --quick --reps 1 --warmup 0 >"$OUT/ncu.txt" 2>&1
    log "ncu: exit $? ($(grep -c 'wg_gemm' "$OUT/ncu.txt") kernel lines)"
fi
exit $rc
