#!/usr/bin/env bash
# The GEMM issue's evidence on an H200, from the repository root, in two stages that each fit one 10-minute call:
#
#   H3S_SOURCE_COMMIT=<commit> OUT=<dir> bash scripts/gemm_evidence_run.sh gemm     # about 10 minutes
#   H3S_SOURCE_COMMIT=<commit> OUT=<dir> bash scripts/gemm_evidence_run.sh rest     # about 8 minutes, same machine
#   H3S_SOURCE_COMMIT=<commit> OUT=<dir> bash scripts/gemm_evidence_run.sh          # both, one after the other
#
# or with the gemm stage in two calls, each well inside the 10 minutes (the second needs the first's invariance file,
# e.g. carried in the working tree under out/, which git ignores; at c093d54 gemm-a took 356 s with the build, gemm-b
# 254 s with its own build on a fresh machine, H3S_GEMM_CTEST=0; at c389c4a 254 s and 184 s):
#
#   H3S_SOURCE_COMMIT=<commit> OUT=<dir> bash scripts/gemm_evidence_run.sh gemm-a   # about 6 minutes
#   H3S_GEMM_INVARIANCE_A=<gemm-a's gemm_invariance_a.json> H3S_SOURCE_COMMIT=<commit> OUT=<dir> \
#       bash scripts/gemm_evidence_run.sh gemm-b                                      # about 4 minutes
#
# gemm: build everything (H3S_GPU_BUILD, default /tmp/h3s-build-gpu); test_gpu_gemm at full size (every forward and
#   dgrad configuration and the dispatcher on the same rows at every M of the issue, the wgrad configurations against
#   each other), which writes the invariance count; bench_gemm (every shape, phase and M) against cuBLASLt with that
#   count, its log ending with each row's time and nvidia-smi's SM clock, power and temperature every second; every
#   other GPU test (ctest -R gpu -E test_gpu_gemm; H3S_GEMM_CTEST=0 leaves them to the rest stage, which runs them
#   too, so that the stage fits one call when test_gpu_gemm grows).  At 771f708 the stage took 574 s, 504 of them
#   the full test_gpu_gemm (configurations 0-10 on every shape and M): a test that grows further needs its own call.
#   Files: test_gpu_gemm.log, gemm_invariance.json, bench_gemm.json, bench_gemm.log, ctest_gpu.log.
# gemm-a: the build and test_gpu_gemm at full size on the shapes 5376x7168, 7168x5376 and 5376x28672 (every part of
#   the test, H3S_GEMM_SHAPES).  Files: test_gpu_gemm_a.log, gemm_invariance_a.json.
# gemm-b: the build (nothing to do on gemm-a's machine), test_gpu_gemm on 14336x5376 and 2688x32256, then
#   gemm_invariance.json: the two parts' counts added, once the parts are found to cover the five shapes at every M
#   between them (else the stage fails), then bench_gemm and the other GPU tests as the gemm stage does.  Files:
#   test_gpu_gemm_b.log, gemm_invariance_b.json, gemm_invariance.json, bench_gemm.json, bench_gemm.log, ctest_gpu.log.
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
case "$STAGE" in gemm | gemm-a | gemm-b | rest | all) ;; *)
    echo "gemm_evidence_run: stage '$STAGE': give gemm, gemm-a, gemm-b, rest or nothing (gemm and rest)" >&2
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

# the five full-size shapes, and the two halves of the split gemm stage
ALL_SHAPES=5376x7168,7168x5376,5376x28672,14336x5376,2688x32256
SHAPES_A=5376x7168,7168x5376,5376x28672
SHAPES_B=14336x5376,2688x32256
if [ "$STAGE" = gemm-b ]; then
    A=${H3S_GEMM_INVARIANCE_A:-}
    if [ -z "$A" ] || [ ! -f "$A" ]; then
        echo "gemm_evidence_run: gemm-b needs H3S_GEMM_INVARIANCE_A=<gemm-a's gemm_invariance_a.json>" >&2
        exit 2
    fi
fi

# test_gpu_gemm at full size on SHAPES (all when empty): LOG, the invariance file JSON
run_test() {
    local shapes=$1 log=$2 json=$3
    H3S_GEMM_SHAPES=$shapes H3S_GEMM_INVARIANCE_JSON=$json "$BUILD/test_gpu_gemm" >"$log" 2>&1 || RC=1
    log "test_gpu_gemm${shapes:+ on $shapes}: $(tail -n 1 "$log") ($(($(date +%s) - t0)) s)"
    grep row_invariance_differing "$log" | tail -n 1
}

# gemm-a's and gemm-b's invariance files added into one, which says whether they cover every shape at every M
merge_invariance() {
    python3 - "$1" "$2" "$3" "$ALL_SHAPES" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
shapes = set(sys.argv[4].split(","))
run = [set(filter(None, x.get("shapes", "").split(","))) for x in (a, b)]
whole = not a["small"] and not b["small"] and a.get("all_m") and b.get("all_m") and run[0] | run[1] == shapes
out = {
    "row_invariance_differing": a["row_invariance_differing"] + b["row_invariance_differing"],
    "compared_elements": a["compared_elements"] + b["compared_elements"],
    "small": False,
    "all_shapes": bool(whole),
    "shapes": ",".join(sorted(run[0] | run[1])),
    "all_m": bool(a.get("all_m") and b.get("all_m")),
    "parts": [a, b],
}
json.dump(out, open(sys.argv[3], "w"))
print("merged invariance: %d differing of %d compared, all shapes and M: %s"
      % (out["row_invariance_differing"], out["compared_elements"], out["all_shapes"]))
sys.exit(0 if whole else 1)
PY
}

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
    case "$STAGE" in
    gemm-a) run_test "$SHAPES_A" "$OUT/test_gpu_gemm_a.log" "$OUT/gemm_invariance_a.json" ;;
    gemm-b)
        run_test "$SHAPES_B" "$OUT/test_gpu_gemm_b.log" "$OUT/gemm_invariance_b.json"
        if [ -f "$OUT/gemm_invariance_b.json" ]; then
            merge_invariance "$A" "$OUT/gemm_invariance_b.json" "$OUT/gemm_invariance.json" || RC=1
        else
            RC=1
        fi
        ;;
    *) run_test "" "$OUT/test_gpu_gemm.log" "$OUT/gemm_invariance.json" ;;
    esac
fi
if [ "$STAGE" = gemm ] || [ "$STAGE" = gemm-b ] || [ "$STAGE" = all ]; then
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
    log "stage $STAGE: $([ $RC = 0 ] && echo passed || echo FAILED) ($(($(date +%s) - t0)) s)"
elif [ "$STAGE" = gemm-a ]; then
    log "stage gemm-a: $([ $RC = 0 ] && echo passed || echo FAILED) ($(($(date +%s) - t0)) s)"
fi

if [ "$STAGE" = rest ] || [ "$STAGE" = all ]; then
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
