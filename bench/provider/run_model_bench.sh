#!/usr/bin/env bash
# The whole MiniMax-H3 model at release geometry, loaded from one model directory by h3strict (the PyTorch binding,
# h3strict.torch.StrictTransformer) and by diffusers (MiniMaxH3Transformer3DModel.from_pretrained, as
# `python -m h3strict.replay` loads the provider), side by side in one run on one GPU (issue 10, benchmark (b)):
# load time, forward, forward + backward and peak device memory at S about 1133 and 8762 packed rows, B = 1.
# From the repository root, on a machine with an NVIDIA GPU and a CUDA PyTorch:
#
#   OUT=/some/dir [H3S_SOURCE_COMMIT=<commit>] bash bench/provider/run_model_bench.sh
#   (rehearsal without a GPU: bash bench/provider/run_model_bench.sh --device cpu, with H3S_MODEL_PRESET=tiny)
#
# Steps: build the CLI and the shared library (cmake -DH3S_CUDA=ON; the build dependencies as in
# scripts/device_deps.sh), diffusers 0.42.1 and accelerate 1.15.0 from .deps/wheels with no index
# (bench/provider/provider_wheels.sh), `h3strict init --preset h3-33b --layers L --seed 1` (the model directory,
# kept for a later run under H3S_MODEL_ROOT), `h3strict inputs --seed 7 --batch 1` at each S, then
# bench/provider/model_bench.py once per side, each in a process of its own (they never share device memory):
# strict first, then the provider; the model directory's files are read once (cat > /dev/null) before each side,
# so that both load from the page cache.  What each number means is in the header of model_bench.py and in
# docs/evidence/gpu/BENCH.md ("The whole model").
#
# L: H3S_MODEL_LAYERS (default 8), or "auto" (the most that the disk and the GPU memory hold, at most
# H3S_MODEL_AUTO_MAX, default 16).  The release model has 50 blocks (66 GB of BF16 weights), more than the 64 GiB
# disk of the device; a block is 1.29 GB and the rest of the model 1.72 GB, so L = 8 is a 12.1 GB directory.  A
# requested L that the free disk (with 3 GB to spare) or the GPU memory (estimate: twice the weights, for the
# weights and the gradients, plus 3 GB of activations per block and 8 GB) would not hold, or that init could not
# write in the time left (H3S_MODEL_INIT_S_PER_GB, default 5 s per GB, with 30% to spare), is lowered, and the
# log says so.  When the time left cannot write even one block, nothing is initialised or measured, and the log
# names the deadline the requested L would need (it keeps PROVIDER_S + 100 s for the inputs and the two sides, so an
# 8-block run from a fresh machine needs about 380 s).  The L that ran is in bench_model.json ("layers").
#
# S: H3S_MODEL_SEQS (default 1133,8762), each one of the layouts below
# (S = text + frames * (latent_h / 2) * (latent_w / 2) + 2 * audio latents).
#
# Gradients: the strict side hands a BF16 parameter's gradient over in BF16 (the binding's exact_grads=False: the
# F32 gradient rounded once, the .grad bits a torch user receives either way); H3S_MODEL_EXACT_GRADS=1 measures
# exact_grads=True (every gradient in F32, converted by torch to the parameter's dtype).
#
# Outputs in $OUT (default ./out/model_bench), four files (a device call returns at most eight):
# bench_model.json (`rows`: one object per (S, phase) with layers, S, phase, strict_ms, provider_ms, ratio,
# strict_peak_gb, provider_peak_gb and more; source_commit, device, versions, reps; the two sides' own JSON in
# full), bench_model_table.txt (the Markdown table), model_bench.log (environment, build, every step's output) and
# nvidia-smi.txt.  The sides' own files (strict.json, provider.json, meta.json) go to H3S_MODEL_WORK (default a
# new folder under /tmp).  Progress lines ("[strict] S = 1133: forward+backward: ...") show as it goes.
#
# Time: H3S_MODEL_DEADLINE_S (default 560): the whole script ends within this many seconds.  Every step runs under
# `timeout` with what is left of it, keeping room for the steps after it (the provider side is given at least
# H3S_MODEL_PROVIDER_S, default 120 s); each side also gets its own deadline, spreads its time over its phases
# (at most H3S_MODEL_PHASE_S, default 40 s, per (S, phase)) and rewrites its JSON after every phase, so a side
# stopped early keeps what it finished (bench_model.json then says "complete": false).  Expected on an H200 at
# L = 8: build about 1-1.5 min from scratch, init about 1 min, each side 1-2 min; about 5-6 minutes in all.
#
# Profile: H3S_MODEL_PROFILE=1 adds, after each side's timed phases, one forward+backward at the first S under
# torch.profiler (model_bench.py --profile): $OUT/profile_strict.txt and $OUT/profile_provider.txt, each with the
# run's wall time, the device's busy time and the kernels and copies by name, longest total first.
#
# Knobs: H3S_MODEL_DEVICE (cuda; or the first argument --device cpu|cuda), H3S_MODEL_PRESET (h3-33b; tiny for a
# rehearsal), H3S_MODEL_LAYERS, H3S_MODEL_SEQS, H3S_MODEL_REPS (default 5 timed runs at most per phase),
# H3S_MODEL_WARMUP (1), H3S_MODEL_PHASE_S, H3S_MODEL_SAMPLE_MS (the peak-memory sampler's interval, default 2),
# H3S_MODEL_DEADLINE_S, H3S_MODEL_PROVIDER_S, H3S_MODEL_ROOT (model
# directories and inputs, default /tmp/h3s-model-bench; a model directory of the same preset and L is reused),
# H3S_MODEL_BUILD (default /tmp/h3s-build-model), H3S_MODEL_WORK, H3S_PYTHON (python3), H3S_WHEELS (.deps/wheels),
# H3S_PROVIDER_SITE (where the wheels are installed, /tmp/h3s-provider-site), H3S_SOURCE_COMMIT (the commit the
# tree was copied from, where there is no .git).
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
DEVICE=${H3S_MODEL_DEVICE:-cuda}
while [ $# -gt 0 ]; do
    case "$1" in
    --device) DEVICE=${2:-}; shift 2 ;;
    --device=*) DEVICE=${1#--device=}; shift ;;
    *) echo "run_model_bench.sh: unknown argument $1 (only --device cpu|cuda)" >&2; exit 2 ;;
    esac
done
case "$DEVICE" in cuda | cpu) ;; *) echo "run_model_bench.sh: --device must be cuda or cpu" >&2; exit 2 ;; esac
case "${H3S_MODEL_LAYERS:-8}" in auto | [1-9] | [1-9][0-9]) ;; *)
    echo "run_model_bench.sh: H3S_MODEL_LAYERS must be a number of blocks (1-99) or auto" >&2; exit 2 ;; esac
OUT=${OUT:-$SRC/out/model_bench}
PRESET=${H3S_MODEL_PRESET:-h3-33b}
LAYERS=${H3S_MODEL_LAYERS:-8}
SEQS=${H3S_MODEL_SEQS:-1133,8762}
REPS=${H3S_MODEL_REPS:-5}
WARMUP=${H3S_MODEL_WARMUP:-1}
PHASE_S=${H3S_MODEL_PHASE_S:-40}
SAMPLE_MS=${H3S_MODEL_SAMPLE_MS:-2}
DEADLINE_S=${H3S_MODEL_DEADLINE_S:-560}
PROVIDER_S=${H3S_MODEL_PROVIDER_S:-120}
INIT_S_PER_GB=${H3S_MODEL_INIT_S_PER_GB:-5}
case "${H3S_MODEL_PROFILE:-0}" in 0 | "") PROFILE="" ;; 1) PROFILE=1 ;; *)
    echo "run_model_bench.sh: H3S_MODEL_PROFILE must be 0 or 1" >&2; exit 2 ;; esac
MROOT=${H3S_MODEL_ROOT:-/tmp/h3s-model-bench}
BUILD=${H3S_MODEL_BUILD:-/tmp/h3s-build-model}
PY=${H3S_PYTHON:-python3}
WHEELS=${H3S_WHEELS:-$SRC/.deps/wheels}
SITE=${H3S_PROVIDER_SITE:-/tmp/h3s-provider-site}
T_START=$(date +%s)
WORK=${H3S_MODEL_WORK:-$(mktemp -d /tmp/h3s-model-bench-work.XXXXXX)}
JOBS=$(nproc 2>/dev/null || echo 4)
mkdir -p "$OUT" "$WORK" "$MROOT"
LOG=$OUT/model_bench.log
: >"$LOG"
log() { echo "$@" | tee -a "$LOG"; }
START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
log "run_model_bench: start $START, source $SRC, device $DEVICE, preset $PRESET, layers $LAYERS, S in {$SEQS}, reps $REPS, warm-up $WARMUP, phase ${PHASE_S}s, deadline ${DEADLINE_S}s, work $WORK, models $MROOT"

# shellcheck source=bench/provider/bench_common.sh
. "$SRC/bench/provider/bench_common.sh"
rm -f "$WORK"/strict.json "$WORK"/provider.json "$WORK"/meta.json "$OUT"/bench_model.json "$OUT"/bench_model_table.txt \
    "$OUT"/profile_strict.txt "$OUT"/profile_provider.txt

# S = text + frames * (latent_h / 2) * (latent_w / 2) + 2 * audio latents
layout() {
    case "$1" in
    264) echo "--text 40 --frames 2 --latent-height 16 --latent-width 24 --audio-latents 16" ;;       # 40 + 192 + 32
    925) echo "--text 101 --frames 3 --latent-height 24 --latent-width 42 --audio-latents 34" ;;      # 101 + 756 + 68
    1133) echo "--text 77 --frames 4 --latent-height 24 --latent-width 42 --audio-latents 24" ;;      # 77 + 1008 + 48
    3160) echo "--text 80 --frames 3 --latent-height 48 --latent-width 84 --audio-latents 28" ;;      # 80 + 3024 + 56
    8762) echo "--text 128 --frames 8 --latent-height 48 --latent-width 84 --audio-latents 285" ;;    # 128 + 8064 + 570
    *) return 1 ;;
    esac
}

# ------------------------------------------------------------------ environment
GPU_NAME=cpu
DRIVER=
GPU_MIB=0
if [ "$DEVICE" = cuda ]; then
    gpu_environment "$OUT/nvidia-smi.txt"
    GPU_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -dc 0-9)
    GPU_MIB=${GPU_MIB:-0}
fi
source_commit
log "gpu: $GPU_NAME, driver $DRIVER, ${GPU_MIB} MiB; cpus $JOBS; host memory $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}'); commit $COMMIT"

# ------------------------------------------------------------------ build: the CLI and the shared library
# shellcheck source=scripts/device_deps.sh
. "$SRC/scripts/device_deps.sh"
CUDA_OPT=ON
[ "$DEVICE" = cuda ] || CUDA_OPT=OFF
GEN=()
command -v ninja >/dev/null 2>&1 && [ ! -f "$BUILD/CMakeCache.txt" ] && GEN=(-G Ninja)
T0=$(date +%s)
# The build keeps time for the steps after it: 300 s, or three fifths of a shorter deadline (a fixed 300 s left a
# deadline of 300 s only the 10 s floor for the build, which was stopped part-way; on an H200 with 16 cores the
# build takes about 20 s, init about 1 min and the two sides about 1.5 min at L = 8).
RESERVE=$((DEADLINE_S * 3 / 5))
[ "$RESERVE" -gt 300 ] && RESERVE=300
T=$(limit "$RESERVE" 300)
[ "$T" -lt 60 ] && log "build: only ${T}s left for it: H3S_MODEL_DEADLINE_S=$DEADLINE_S keeps ${RESERVE} s for init and the two sides; give a longer deadline (the default is 560), or reuse a built H3S_MODEL_BUILD"
BUILD_OK=1
timeout -k 10 "$T" cmake -S "$SRC" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=$CUDA_OPT \
    "${EXTRA_CMAKE[@]}" >>"$LOG" 2>&1 || BUILD_OK=0
if [ "$BUILD_OK" = 1 ]; then
    T=$(limit "$RESERVE" 300)
    timeout -k 10 "$T" cmake --build "$BUILD" -j "$JOBS" --target h3strict_cli h3strict_shared >>"$LOG" 2>&1 || BUILD_OK=0
fi
H=$BUILD/h3strict
LIB=$BUILD/libh3strict.so
[ -x "$H" ] && [ -f "$LIB" ] || BUILD_OK=0
log "build: ok=$BUILD_OK in $(($(date +%s) - T0))s (h3strict_cli h3strict_shared, H3S_CUDA=$CUDA_OPT, $BUILD)"

# ------------------------------------------------------------------ diffusers and accelerate from the carried wheels
# shellcheck source=bench/provider/provider_wheels.sh
. "$SRC/bench/provider/provider_wheels.sh"
PROVIDER_OK=1
provider_wheels "$PY" "$WHEELS" "$SITE" 2>>"$LOG" || PROVIDER_OK=0
export PYTHONPATH=$SRC/python${PYTHONPATH:+:$PYTHONPATH}
export H3STRICT_LIBRARY=$LIB
log "python: $("$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -1)"

# ------------------------------------------------------------------ L, the model directory, the inputs
case "$PRESET" in
h3-33b) BLOCK_MB=1291; REST_MB=1723 ;;  # BF16 bytes of one transformer block / of everything else, 1e6 bytes
*) BLOCK_MB=1; REST_MB=1 ;;
esac
MODEL_OK=0
INPUTS=""
if [ "$BUILD_OK" = 1 ]; then
    M=$MROOT/model_${PRESET}_L$LAYERS
    if [ ! -f "$M.complete" ] || [ "$LAYERS" = auto ]; then
        # a model of another L (or an unfinished one) is ours to remove: the disk holds one at a time
        # (init writes into a hidden .model_*.init-* folder first and renames it when done)
        rm -rf "$MROOT"/model_* "$MROOT"/.model_* "$MROOT"/inputs_*
        AVAIL_MB=$(($(df -P -k "$MROOT" | awk 'NR == 2 {print $4}') / 1000))
        DISK_L=$(((AVAIL_MB - 3000 - REST_MB) / BLOCK_MB))
        WANT=$LAYERS
        if [ "$LAYERS" = auto ]; then WANT=${H3S_MODEL_AUTO_MAX:-16}; fi
        L=$WANT
        [ "$DISK_L" -lt "$L" ] && L=$DISK_L
        # the time init may take (what is left, keeping room for the inputs and both sides), at
        # H3S_MODEL_INIT_S_PER_GB seconds per GB written, with 30% to spare
        INIT_T=$(limit $((PROVIDER_S + 100)) 400)
        [ "$INIT_T" -lt 60 ] && log "init: only ${INIT_T}s left for it: H3S_MODEL_DEADLINE_S=$DEADLINE_S keeps $((PROVIDER_S + 100)) s for the inputs and the two sides; give a longer deadline (the default is 560)"
        TIME_L=$(((INIT_T * 10000 / (INIT_S_PER_GB * 13) - REST_MB) / BLOCK_MB))
        [ "$TIME_L" -lt "$L" ] && L=$TIME_L
        if [ "$DEVICE" = cuda ] && [ "$GPU_MIB" -gt 0 ]; then
            GPU_L=$(((GPU_MIB * 1048576 / 1000000 - 8000 - 2 * REST_MB) / (2 * BLOCK_MB + 3000)))
            [ "$GPU_L" -lt "$L" ] && L=$GPU_L
        else
            GPU_L=n/a
        fi
        # below one block by the disk's or the GPU's estimate: one block is tried, as it always was
        [ "$L" -lt 1 ] && [ "$TIME_L" -ge 1 ] && L=1
        log "layers: asked $LAYERS, the disk holds $DISK_L (${AVAIL_MB} MB free under $MROOT), the GPU memory about $GPU_L, init's time (${INIT_T}s at ${INIT_S_PER_GB} s/GB) $TIME_L: L = $L"
        if [ "$L" -lt 1 ]; then
            # not even one block can be written in the time left: say which deadline would do, and spend no more time
            WANT_L=$WANT
            [ "$WANT_L" -gt "$DISK_L" ] && WANT_L=$DISK_L
            [ "$WANT_L" -lt 1 ] && WANT_L=1
            NEED_INIT=$(((REST_MB + WANT_L * BLOCK_MB) * INIT_S_PER_GB * 13 / 10000 + 1))
            NEED=$(($(date +%s) - T_START + NEED_INIT + PROVIDER_S + 100))
            log "init: skipped: ${INIT_T}s cannot write one block at ${INIT_S_PER_GB} s/GB; nothing to measure. $WANT_L blocks need H3S_MODEL_DEADLINE_S of about $NEED (init about ${NEED_INIT}s, $((PROVIDER_S + 100))s kept for the inputs and the two sides)"
            L=0
        fi
        if [ "$L" -ge 1 ]; then
            [ "$LAYERS" != auto ] && [ "$L" != "$LAYERS" ] && log "layers: L lowered from $LAYERS to $L"
            LAYERS=$L
            M=$MROOT/model_${PRESET}_L$LAYERS
            T=$INIT_T
            log "== init (limit ${T}s): h3strict init --preset $PRESET --layers $LAYERS --seed 1 --out $M"
            T0=$(date +%s)
            timeout -k 10 "$T" "$H" init --preset "$PRESET" --layers "$LAYERS" --seed 1 --out "$M" >>"$LOG" 2>&1
            rc=$?
            [ "$rc" = 0 ] && touch "$M.complete"
            log "init: rc=$rc in $(($(date +%s) - T0))s, $(du -sh "$M" 2>/dev/null | cut -f1)$([ "$rc" = 0 ] || echo ": no model, nothing to measure (124: stopped by its time limit)")"
            [ "$rc" = 0 ] || rm -rf "$MROOT"/.model_*
        fi
    else
        log "model: reusing $M"
    fi
    if [ -f "$M.complete" ]; then
        MODEL_OK=1
        for S in ${SEQS//,/ }; do
            if ! opts=$(layout "$S"); then
                log "inputs: no layout for S = $S (264, 925, 1133, 3160 or 8762): skipped"
                continue
            fi
            IN=$MROOT/inputs_S$S.safetensors
            # shellcheck disable=SC2086
            if timeout -k 5 60 "$H" inputs --model "$M" --seed 7 --batch 1 $opts --out "$IN" >>"$LOG" 2>&1; then
                log "inputs: S = $S ($opts) -> $IN"
                INPUTS="$INPUTS${INPUTS:+,}$S=$IN"
            else
                log "inputs: S = $S failed (see the log)"
            fi
        done
    fi
fi

warm_cache() {  # the model's files into the page cache, so both sides load from memory
    local t0
    t0=$(date +%s)
    timeout -k 5 60 cat "$M"/* >/dev/null 2>&1
    log "page cache: $M read in $(($(date +%s) - t0))s"
}

# ------------------------------------------------------------------ the two sides, one after the other
STRICT_RC=skipped
PROVIDER_RC=skipped
if [ "$MODEL_OK" = 1 ] && [ -n "$INPUTS" ]; then
    warm_cache
    T=$(limit $((PROVIDER_S + 25)) 330)
    log "== strict (limit ${T}s): model_bench.py side --side strict --model $M --inputs $INPUTS"
    PYTHONUNBUFFERED=1 timeout -k 10 "$T" "$PY" "$SRC/bench/provider/model_bench.py" side --side strict \
        --model "$M" --inputs "$INPUTS" --device "$DEVICE" --reps "$REPS" --warmup "$WARMUP" --phase-s "$PHASE_S" \
        --sample-ms "$SAMPLE_MS" --exact-grads "${H3S_MODEL_EXACT_GRADS:-0}" --deadline $(($(date +%s) + T - 8)) \
        ${PROFILE:+--profile "$OUT/profile_strict.txt"} --json "$WORK/strict.json" 2>&1 | tee -a "$LOG"
    STRICT_RC=${PIPESTATUS[0]}
    if [ "$PROVIDER_OK" = 1 ]; then
        warm_cache
        T=$(limit 20 400)
        log "== provider (limit ${T}s): model_bench.py side --side provider --model $M --inputs $INPUTS"
        PYTHONUNBUFFERED=1 timeout -k 10 "$T" "$PY" "$SRC/bench/provider/model_bench.py" side --side provider \
            --model "$M" --inputs "$INPUTS" --device "$DEVICE" --reps "$REPS" --warmup "$WARMUP" \
            --phase-s "$PHASE_S" --sample-ms "$SAMPLE_MS" --deadline $(($(date +%s) + T - 8)) \
            ${PROFILE:+--profile "$OUT/profile_provider.txt"} --json "$WORK/provider.json" 2>&1 | tee -a "$LOG"
        PROVIDER_RC=${PIPESTATUS[0]}
    fi
fi
log "strict rc=$STRICT_RC, provider rc=$PROVIDER_RC (0: complete; 1: some phase missing; 3: failed; 124/137: stopped by its time limit, its JSON keeps the phases it finished)"

# ------------------------------------------------------------------ bench_model.json and the table
END=$(date -u +%Y-%m-%dT%H:%M:%SZ)
"$PY" - "$WORK/meta.json" "$START" "$END" "$DEVICE" "$GPU_NAME" "$DRIVER" "$GPU_MIB" "$COMMIT" "$PRESET" \
    "$LAYERS" "$REPS" "$WARMUP" "$PHASE_S" "$DEADLINE_S" "$STRICT_RC" "$PROVIDER_RC" "$BUILD_OK" "$SEQS" <<'PY'
import json, sys
(path, start, end, kind, gpu, driver, mib, commit, preset, layers, reps, warmup, phase_s, deadline, src, prc,
 build_ok, seqs) = sys.argv[1:]
def code(v):  # an exit status, or a word ("skipped")
    try:
        return int(v)
    except ValueError:
        return v
json.dump({"start_utc": start, "end_utc": end, "device_kind": kind,
           "device": {"name": gpu, "driver": driver, "memory_mib": code(mib)},
           "source_commit": commit, "model": {"preset": preset, "layers": code(layers), "seed": 1},
           "layers": code(layers), "seqs": seqs, "inputs": {"seed": 7, "batch": 1},
           "reps": int(reps), "warmup": int(warmup), "phase_s": float(phase_s), "deadline_s": int(deadline),
           "build_ok": build_ok == "1",
           "exit_status": {"strict": code(src), "provider": code(prc),
                           "note": "124/137: stopped by its time limit (its JSON keeps the phases it finished)"}},
          open(path, "w"), indent=2)
PY
"$PY" "$SRC/bench/provider/model_bench.py" combine --strict "$WORK/strict.json" --provider "$WORK/provider.json" \
    --meta "$WORK/meta.json" --out "$OUT/bench_model.json" >"$OUT/bench_model_table.txt" 2>>"$LOG"
RC=$?
tee -a "$LOG" <"$OUT/bench_model_table.txt"
log "run_model_bench: end $(date -u +%Y-%m-%dT%H:%M:%SZ), $(($(date +%s) - T_START))s, rc=$RC (0: both sides complete)"
exit $RC
