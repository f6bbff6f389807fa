#!/usr/bin/env bash
# One H3 block, strict CUDA against the ordinary PyTorch path and against PyTorch's deterministic mode, side by side
# in one run on one GPU, at S in {12, 925, 4253, 8349} rows per item and B in {1, 4}: builds bench_gpu_block
# (cmake -DH3S_CUDA=ON), runs it, runs bench/provider/h3_block_provider.py twice (ordinary, then --deterministic:
# a separate process, so CUBLAS_WORKSPACE_CONFIG=:4096:8 is in place before CUDA initialises), and writes the
# combined table with the ratios (strict time / provider time), a PNG plot of the ratios against S and the
# Markdown table (bench/provider/block_combine.py, block_plot.py, block_table.py).  From the repository root, on a
# machine with an NVIDIA GPU and PyTorch:
#
#   OUT=/some/dir bash bench/provider/run_gpu_bench.sh
#
# Outputs in $OUT (default ./out/gpu_bench), five files (six with H3S_BENCH_TEST=1; a device call returns at most
# eight): bench_block.json (all three sides in full and the ratios), bench_block.png, bench_block_tables.txt (the tables of
# block_table.py), bench.log (environment, build, every run's output), nvidia-smi.txt, and with H3S_BENCH_TEST=1
# test_gpu_block.log (the block's invariance test, built and run after the benchmarks).  The sides' own files
# (strict_S<S>.json, one strict process per S; provider.json; provider_det.json; meta.json) go to H3S_BENCH_WORK
# (default a new folder under /tmp); bench_block.json holds their content.  Progress lines show as it goes:
# "[strict] S = .., B = ..: phase", "[provider ordinary] ...", "[provider deterministic] ...".
#
# Knobs: H3S_BENCH_SEQS (default 12,925,4253,8349; 925 alone is the single-S run of earlier versions),
# H3S_BENCH_WORK (the sides' own files, above),
# H3S_BENCH_WEIGHT_GRADS (bf16, the default, or f32: the strict side's seven linear weight gradients, passed to
# bench_gpu_block --weight-grads; the provider's are BF16, the dtype of PyTorch's .grad, so bf16 compares like with
# like; f32 times the library's exact default),
# H3S_BENCH_REPS (default 15), H3S_BENCH_WARMUP (3), H3S_BENCH_DETERMINISTIC (1; 0 skips the deterministic
# provider), H3S_BENCH_BUILD (build dir, default /tmp/h3s-build-bench), H3S_SOURCE_COMMIT (the commit the tree was
# copied from, where there is no .git), H3S_BENCH_DEADLINE_S (default 540: the whole script, build included, ends
# within this many seconds; each side runs under `timeout` with what is left, and a side stopped early keeps the
# (S, B) it finished, since both programs rewrite their JSON after each; bench_block.json then says complete: false).
# Expected on an H200 with the defaults: build about 45 s from scratch, strict about 1 minute, each provider mode
# well under one; about 3-4 minutes in all.  Build dependencies as in scripts/gpu_evidence.sh: from the system, or
# unpacked from the Debian packages in .deps/ when the system lacks them.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$SRC/out/gpu_bench}
BUILD=${H3S_BENCH_BUILD:-/tmp/h3s-build-bench}
REPS=${H3S_BENCH_REPS:-15}
WARMUP=${H3S_BENCH_WARMUP:-3}
SEQS=${H3S_BENCH_SEQS:-12,925,4253,8349}
DET=${H3S_BENCH_DETERMINISTIC:-1}
WGRADS=${H3S_BENCH_WEIGHT_GRADS:-bf16}
case "$WGRADS" in f32 | bf16) ;; *) echo "run_gpu_bench: H3S_BENCH_WEIGHT_GRADS must be f32 or bf16, not '$WGRADS'" >&2; exit 2 ;; esac
DEADLINE_S=${H3S_BENCH_DEADLINE_S:-540}
T_START=$(date +%s)
WORK=${H3S_BENCH_WORK:-$(mktemp -d /tmp/h3s-bench.XXXXXX)}
JOBS=$(nproc 2>/dev/null || echo 4)
mkdir -p "$OUT" "$WORK"
LOG=$OUT/bench.log
: >"$LOG"
log() { echo "$@" | tee -a "$LOG"; }
START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
log "run_gpu_bench: start $START, source $SRC, build $BUILD, work $WORK, S in {$SEQS}, B in {1, 4}, reps $REPS, warm-up $WARMUP, deterministic provider $DET, deadline ${DEADLINE_S}s"

# shellcheck source=bench/provider/bench_common.sh
. "$SRC/bench/provider/bench_common.sh"

# ------------------------------------------------------------------ environment
gpu_environment "$OUT/nvidia-smi.txt"
NVCC=$(nvcc --version 2>/dev/null | tail -2 | tr '\n' ' ')
GCC_V=$(gcc --version 2>/dev/null | head -1)
source_commit
log "gpu: $GPU_NAME, driver $DRIVER; nvcc: $NVCC; gcc: $GCC_V; commit $COMMIT"

# ------------------------------------------------------------------ dependencies
. "$SRC/scripts/device_deps.sh"

# ------------------------------------------------------------------ build
T0=$(date +%s)
TARGETS=(bench_gpu_block)
[ "${H3S_BENCH_TEST:-0}" = 1 ] && TARGETS+=(test_gpu_block)
BUILD_OK=1
cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" \
    >>"$LOG" 2>&1 || BUILD_OK=0
if [ "$BUILD_OK" = 1 ]; then
    cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}" >>"$LOG" 2>&1 || BUILD_OK=0
fi
log "build: ok=$BUILD_OK in $(($(date +%s) - T0))s (${TARGETS[*]})"

# ------------------------------------------------------------------ the three sides, one after the other
# Time limits: what is left of the deadline, keeping room for the runs after each (60 s per provider mode, 20 s for
# the table); caps 300 s for the strict side (all S together), 150 s per provider mode.  rc 124 = stopped by its
# limit (its JSON keeps the (S, B) it finished).
rm -f "$WORK"/strict.json "$WORK"/strict_S*.json "$WORK"/provider.json "$WORK"/provider_det.json "$WORK"/meta.json \
    "$OUT"/bench_block.json "$OUT"/bench_block.png "$OUT"/bench_block_tables.txt
AFTER_STRICT=$((DET == 1 ? 140 : 80))
STRICT_RC=-1
if [ "$BUILD_OK" = 1 ]; then
    # one process per S (strict_S<S>.json each), so that a failure at one S (the binary exits on the first
    # operator error) leaves the others; the block's parameters are re-made per process (device fills, fast)
    STRICT_END=$(($(date +%s) + $(limit "$AFTER_STRICT" 300)))
    STRICT_RC=""
    for S in ${SEQS//,/ }; do
        T=$((STRICT_END - $(date +%s)))
        if [ "$T" -lt 10 ]; then
            log "== strict S = $S: skipped, the strict side's time is spent"
            STRICT_RC="$STRICT_RC S$S:skipped"
            continue
        fi
        log "== strict S = $S (limit ${T}s): bench_gpu_block --seqs $S --reps $REPS --warmup $WARMUP --weight-grads $WGRADS --json strict_S$S.json"
        timeout -k 10 "$T" "$BUILD/bench_gpu_block" --seqs "$S" --reps "$REPS" --warmup "$WARMUP" \
            --weight-grads "$WGRADS" --json "$WORK/strict_S$S.json" 2>&1 | tee -a "$LOG"
        STRICT_RC="$STRICT_RC S$S:${PIPESTATUS[0]}"
    done
    STRICT_RC=${STRICT_RC# }
fi
T=$(limit $((DET == 1 ? 80 : 20)) 150)
log "== provider, ordinary (limit ${T}s): python3 bench/provider/h3_block_provider.py --seqs $SEQS --reps $REPS --warmup $WARMUP --json provider.json"
PYTHONUNBUFFERED=1 timeout -k 10 "$T" python3 "$SRC/bench/provider/h3_block_provider.py" --seqs "$SEQS" \
    --reps "$REPS" --warmup "$WARMUP" --json "$WORK/provider.json" 2>&1 | tee -a "$LOG"
PROVIDER_RC=${PIPESTATUS[0]}
DET_RC=skipped
if [ "$DET" = 1 ]; then
    T=$(limit 20 150)
    log "== provider, deterministic (limit ${T}s): CUBLAS_WORKSPACE_CONFIG=:4096:8 python3 bench/provider/h3_block_provider.py --deterministic --seqs $SEQS --reps $REPS --warmup $WARMUP --json provider_det.json"
    CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONUNBUFFERED=1 timeout -k 10 "$T" python3 \
        "$SRC/bench/provider/h3_block_provider.py" --deterministic --seqs "$SEQS" --reps "$REPS" --warmup "$WARMUP" \
        --json "$WORK/provider_det.json" 2>&1 | tee -a "$LOG"
    DET_RC=${PIPESTATUS[0]}
fi
log "strict rc=$STRICT_RC (per S), provider rc=$PROVIDER_RC, deterministic provider rc=$DET_RC (124: stopped by its time limit)"

if [ "${H3S_BENCH_TEST:-0}" = 1 ] && [ "$BUILD_OK" = 1 ]; then
    T=$(limit 20 120)
    timeout -k 10 "$T" "$BUILD/test_gpu_block" >"$OUT/test_gpu_block.log" 2>&1
    log "test_gpu_block rc=$? (limit ${T}s; $(tail -n 2 "$OUT/test_gpu_block.log" | tr '\n' ' '))"
fi

# ------------------------------------------------------------------ combined table, plot, Markdown
END=$(date -u +%Y-%m-%dT%H:%M:%SZ)
python3 - "$WORK/meta.json" "$START" "$END" "$GPU_NAME" "$DRIVER" "$NVCC" "$GCC_V" "$COMMIT" "$REPS" "$WARMUP" \
    "$STRICT_RC" "$PROVIDER_RC" "$DET_RC" "$DEADLINE_S" <<'PY'
import json, sys
path, start, end, gpu, driver, nvcc, gcc, commit, reps, warmup, src, prc, drc, deadline = sys.argv[1:]
def code(v):  # an exit status, or a word ("skipped")
    try:
        return int(v)
    except ValueError:
        return v
json.dump({"start_utc": start, "end_utc": end, "device": {"gpu": gpu, "driver": driver},
           "toolchain": {"nvcc": nvcc.strip(), "gcc": gcc}, "source": {"commit": commit},
           "reps": int(reps), "warmup": int(warmup),
           "exit_status": {"strict": code(src), "provider": code(prc), "provider_deterministic": code(drc),
                           "note": "124: stopped by its time limit (the JSON keeps the (S, B) it finished)"},
           "deadline_s": int(deadline)}, open(path, "w"), indent=2)
PY
python3 "$SRC/bench/provider/block_combine.py" "$WORK" --dest "$OUT" --meta "$WORK/meta.json" --seqs "$SEQS" \
    --plot bench_block.png 2>&1 | tee -a "$LOG"
RC=${PIPESTATUS[0]}
if [ -s "$OUT/bench_block.json" ]; then
    python3 "$SRC/bench/provider/block_table.py" "$OUT/bench_block.json" --repeat --sdpa >"$OUT/bench_block_tables.txt" 2>&1
fi
log "run_gpu_bench: end $(date -u +%Y-%m-%dT%H:%M:%SZ), $(($(date +%s) - T_START))s, rc=$RC"
exit $RC
