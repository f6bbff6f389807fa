#!/usr/bin/env bash
# The GEMM issue's evidence on an H200, from the repository root, in two stages that each fit one 10-minute call:
#
#   H3S_SOURCE_COMMIT=<commit> OUT=<dir> bash scripts/gemm_evidence_run.sh gemm     # about 10 minutes
#   H3S_SOURCE_COMMIT=<commit> OUT=<dir> bash scripts/gemm_evidence_run.sh rest     # about 8 minutes, same machine
#   H3S_SOURCE_COMMIT=<commit> OUT=<dir> bash scripts/gemm_evidence_run.sh          # both, one after the other
#
# gemm: build everything (H3S_GPU_BUILD, default /tmp/h3s-build-gpu); test_gpu_gemm at full size (every forward and
#   dgrad configuration and the dispatcher on the same rows at every M of the issue, the wgrad configurations against
#   each other), which writes the invariance count; bench_gemm (every shape, phase and M) against cuBLASLt with that
#   count, its log ending with each row's time and nvidia-smi's SM clock, power and temperature every second; every
#   other GPU test (ctest -R gpu -E test_gpu_gemm; H3S_GEMM_CTEST=0 leaves them to the rest stage, which runs them
#   too, so that the stage fits one call when test_gpu_gemm grows).  At 771f708 the stage took 574 s, 504 of them
#   the full test_gpu_gemm (configurations 0-10 on every shape and M): a test that grows further needs its own call.
#   Files: test_gpu_gemm.log, gemm_invariance.json, bench_gemm.json, bench_gemm.log, ctest_gpu.log.
# rest: bench/provider/run_gpu_bench.sh (the release-geometry block against PyTorch) on that build, then
#   scripts/gpu_evidence.sh without test_gpu_gemm's full-size run (compute-sanitizer, the CLI trajectory and
#   replay on the GPU, the provider comparison and the Python package where available).
#   Files: bench_block.json, bench_block.log, bench_block_tables.txt, bench_block.png, and gpu_evidence.tgz (the
#   folder gpu_evidence.sh writes, packed: a lent device returns at most 8 files).
# Each stage prints a summary and exits 0 only when everything it ran passed.
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$SRC/out/gemm_evidence}
STAGE=${1:-all}
BUILD=${H3S_GPU_BUILD:-/tmp/h3s-build-gpu}
case "$STAGE" in gemm | rest | all) ;; *)
    echo "gemm_evidence_run: stage '$STAGE': give gemm, rest or nothing (both)" >&2
    exit 2
    ;;
esac
if [ -e "$OUT" ] && [ -n "$(ls -A "$OUT" 2>/dev/null)" ]; then
    echo "gemm_evidence_run: $OUT exists and is not empty; give an empty or new OUT (nothing is overwritten)" >&2
    exit 2
fi
mkdir -p "$OUT" || exit 2
W=$(mktemp -d)
RC=0
t0=$(date +%s)
log() { echo "gemm_evidence_run: $*"; }

if [ "$STAGE" != rest ]; then
    # dependencies (.deps on a machine without a registry) and the build, as scripts/gpu_evidence.sh does them
    . "$SRC/scripts/device_deps.sh"
    cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON \
        "${EXTRA_CMAKE[@]}" >"$W/build.log" 2>&1 && cmake --build "$BUILD" -j"$(nproc)" >>"$W/build.log" 2>&1 ||
        {
            log "build failed"
            tail -30 "$W/build.log"
            exit 1
        }
    log "build: $(($(date +%s) - t0)) s"
    H3S_GEMM_INVARIANCE_JSON=$OUT/gemm_invariance.json "$BUILD/test_gpu_gemm" >"$OUT/test_gpu_gemm.log" 2>&1 || RC=1
    log "test_gpu_gemm: $(tail -n 1 "$OUT/test_gpu_gemm.log") ($(($(date +%s) - t0)) s)"
    grep row_invariance_differing "$OUT/test_gpu_gemm.log" | tail -n 1
    SMI=""
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 1000 \
            >"$W/clocks.csv" 2>&1 &
        SMI=$!
        trap '[ -n "$SMI" ] && kill "$SMI" 2>/dev/null' EXIT # no sampler left running if the run is cut short
    fi
    "$BUILD/bench_gemm" --reps 10 --warmup 3 --invariance "$OUT/gemm_invariance.json" --json "$OUT/bench_gemm.json" \
        2>&1 | while IFS= read -r line; do
        printf '%s\n' "$line"
        printf '%s %s\n' "$(date -u +%H:%M:%S)" "$line" >>"$W/rows.txt"
    done >"$OUT/bench_gemm.log"
    brc=${PIPESTATUS[0]}
    [ -n "$SMI" ] && kill "$SMI" 2>/dev/null
    {
        echo "== each line above with the UTC time it was printed"
        cat "$W/rows.txt" 2>/dev/null
        echo "== nvidia-smi every second during the run"
        cat "$W/clocks.csv" 2>/dev/null || echo "(no nvidia-smi)"
    } >>"$OUT/bench_gemm.log"
    [ "$brc" = 0 ] || RC=1
    log "bench_gemm: exit $brc ($(($(date +%s) - t0)) s)"
    if [ "${H3S_GEMM_CTEST:-1}" = 0 ]; then # the rest stage's gpu_evidence.sh runs them too
        log "ctest: the other GPU tests left to the rest stage (H3S_GEMM_CTEST=0)"
    else
        (cd "$BUILD" && ctest -R gpu -E test_gpu_gemm --output-on-failure --timeout 300 -V) >"$OUT/ctest_gpu.log" 2>&1 ||
            RC=1
        grep -E "tests passed|tests failed" "$OUT/ctest_gpu.log" | tail -n 1
    fi
    log "stage gemm: $([ $RC = 0 ] && echo passed || echo FAILED) ($(($(date +%s) - t0)) s)"
fi

if [ "$STAGE" != gemm ]; then
    [ -x "$BUILD/test_gpu_gemm" ] || log "no build in $BUILD yet: the benchmark and gpu_evidence.sh build it"
    OUT=$W/bb H3S_BENCH_BUILD=$BUILD bash "$SRC/bench/provider/run_gpu_bench.sh" >"$W/bb.txt" 2>&1 || RC=1
    log "run_gpu_bench: $(tail -n 1 "$W/bb.txt") ($(($(date +%s) - t0)) s)"
    for f in bench_block.json bench_block_tables.txt bench_block.png; do cp "$W/bb/$f" "$OUT/" 2>/dev/null; done
    cp "$W/bb/bench.log" "$OUT/bench_block.log" 2>/dev/null
    H3S_GPU_CTEST_EXCLUDE=test_gpu_gemm H3S_GPU_BUILD=$BUILD OUT=$W/gpu_evidence \
        bash "$SRC/scripts/gpu_evidence.sh" >"$W/ev.txt" 2>&1 || RC=1
    grep -E "tests passed|tests failed|sanitizer|trajectory|replay|python package|all_passed" "$W/ev.txt" | tail -n 20
    tar czf "$OUT/gpu_evidence.tgz" -C "$W" gpu_evidence
    log "stage rest: $([ $RC = 0 ] && echo passed || echo FAILED) ($(($(date +%s) - t0)) s)"
fi
rm -rf "$W"
exit $RC
