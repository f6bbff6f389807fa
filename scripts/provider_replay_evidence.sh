#!/usr/bin/env bash
# Device evidence for the per-node replay against the provider (docs/numerics/provider.md): the released geometry
# cut to 2 blocks (h3strict init --preset h3-33b --layers 2), batch 2, S in {264, 925, 3160}, forward and backward,
# `python -m h3strict.replay --device cuda --backward`, one report per S:
#
#   OUT=/some/dir bash scripts/provider_replay_evidence.sh [S ...]      (default: 264 925 3160)
#
# writes $OUT/provider_replay_S<S>.json (to be committed as docs/evidence/gpu/provider_replay_S<S>.json), the
# plots $OUT/provider_replay_S<S>.png (when the build has PLplot), $OUT/provider_replay_summary.txt (the README's
# table, in Markdown, over every S this build directory has a report of, from this command or an earlier one) and
# $OUT/provider_replay.log, and $OUT/provider_replay_pytest.log (the package's provider tests, their CUDA variants
# included).  Exit status: 0 when every replay exited 0 and the tests passed, else the first non-zero status.
#
# For a machine without network access.  The build dependencies come from the system or from .deps/*.deb
# (scripts/device_deps.sh).  The Python side needs a CUDA torch already installed (the device's own); diffusers
# 0.42.1 and whatever of its requirements the machine lacks are installed, with no index, from wheels in
# .deps/wheels/, fetched beforehand on a machine with network access:
#
#   python3 -m pip download diffusers==0.42.1 psutil pyyaml packaging --only-binary=:all: --python-version 3.12 \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#       -d .deps/wheels
#   python3 -m pip download accelerate==1.15.0 pytest iniconfig pluggy pygments --no-deps -d .deps/wheels
#
# (accelerate is what lets diffusers load the checkpoint's mixed precision: torch_dtype with its F32 modules kept)
# (the device's Python is 3.12; .deps/ is ignored by git).  The h3strict package is used from the tree
# (PYTHONPATH=python, H3STRICT_LIBRARY=the built library), so nothing else is installed.  The build
# (build-device/) and the model (build-device/provider_model) are kept and reused by a later run, so the S values
# may be spread over several commands.  H3S_SOURCE_COMMIT names the commit (the device copy has no .git).
# Knobs: H3S_PYTHON (the Python with torch, default python3), H3S_WHEELS (default .deps/wheels), H3S_GPU_BUILD,
# H3S_GPU_JOBS, H3S_PYTEST_ARGS (extra pytest arguments, e.g. "-k cuda" for the CUDA variants alone); for a
# rehearsal on a machine without a GPU, H3S_EVIDENCE_DEVICE=cpu H3S_EVIDENCE_PRESET=tiny run the same steps on the
# CPU backend and the tiny preset (2 blocks).
set -u -o pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$SRC/out/provider_replay}
BUILD=${H3S_GPU_BUILD:-$SRC/build-device}
JOBS=${H3S_GPU_JOBS:-$(nproc 2>/dev/null || echo 4)}
PY=${H3S_PYTHON:-python3}
WHEELS=${H3S_WHEELS:-$SRC/.deps/wheels}
# rehearsal on a machine without a GPU: H3S_EVIDENCE_DEVICE=cpu H3S_EVIDENCE_PRESET=tiny (same steps, CPU backend)
DEVICE=${H3S_EVIDENCE_DEVICE:-cuda}
PRESET=${H3S_EVIDENCE_PRESET:-h3-33b}
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(264 925 3160)
mkdir -p "$OUT"
LOG=$OUT/provider_replay.log
log() { echo "$@" | tee -a "$LOG"; }
log "provider_replay_evidence: start $(date -u +%Y-%m-%dT%H:%M:%SZ), source $SRC, commit ${H3S_SOURCE_COMMIT:-unknown}"

# ------------------------------------------------------------------ build (CUDA backend required)
source "$SRC/scripts/device_deps.sh"
CUDA_OPT=ON
[ "$DEVICE" = cuda ] || CUDA_OPT=OFF
if ! cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=$CUDA_OPT "${EXTRA_CMAKE[@]}" \
    >>"$LOG" 2>&1 || ! cmake --build "$BUILD" -j "$JOBS" --target h3strict_cli h3strict_shared >>"$LOG" 2>&1; then
    log "FAIL: the CUDA build failed (see $LOG)"
    exit 4
fi
H=$BUILD/h3strict
LIB=$(ls "$BUILD"/libh3strict.so 2>/dev/null | head -1)
[ -n "$LIB" ] || { log "FAIL: no libh3strict.so in $BUILD"; exit 4; }

# ------------------------------------------------------------------ diffusers from the carried wheels
# (bench/provider/provider_wheels.sh: the machine's own Python with its torch; the two wheels, and only if needed
# their requirements, into a folder on PYTHONPATH)
SITE=/tmp/h3s-provider-site
# shellcheck source=bench/provider/provider_wheels.sh
. "$SRC/bench/provider/provider_wheels.sh"
provider_wheels "$PY" "$WHEELS" "$SITE" 2>>"$LOG" || { log "FAIL: diffusers 0.42.1 / accelerate 1.15.0 (see $LOG)"; exit 4; }
PYV=$PY
if [ "$DEVICE" = cuda ]; then
    "$PYV" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" ||
        { log "FAIL: torch sees no CUDA device"; exit 4; }
    log "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
fi
log "python: $("$PYV" -c 'import sys, torch, diffusers; print(sys.version.split()[0], "torch", torch.__version__, "diffusers", diffusers.__version__)')"

# ------------------------------------------------------------------ model: released geometry, 2 blocks
M=$BUILD/provider_model_$PRESET
KEEP=$BUILD/provider_replay_$PRESET  # every report of this build, so the summary covers earlier commands too
if [ ! -f "$M/config.json" ]; then
    log "init: $PRESET --layers 2 --seed 1"
    "$H" init --preset "$PRESET" --layers 2 --seed 1 --out "$M" >>"$LOG" 2>&1 || { log "FAIL: init"; exit 4; }
fi

# S = text + frames * (latent_h / 2) * (latent_w / 2) + 2 * audio latents
layout() {
    case "$1" in
    264) echo "--text 40 --frames 2 --latent-height 16 --latent-width 24 --audio-latents 16" ;;
    925) echo "--text 101 --frames 3 --latent-height 24 --latent-width 42 --audio-latents 34" ;;
    3160) echo "--text 80 --frames 3 --latent-height 48 --latent-width 84 --audio-latents 28" ;;
    *) return 1 ;;
    esac
}

status=0
for S in "${SIZES[@]}"; do
    if ! opts=$(layout "$S"); then
        log "FAIL: no layout for S = $S (264, 925 or 3160)"
        [ "$status" = 0 ] && status=2
        continue
    fi
    IN=$OUT/inputs_S$S.safetensors
    # shellcheck disable=SC2086
    if ! "$H" inputs --model "$M" --seed 7 --batch 2 $opts --out "$IN" 2>>"$LOG" | tee -a "$LOG"; then
        log "FAIL: inputs S = $S"
        [ "$status" = 0 ] && status=3
        continue
    fi
    R=$OUT/provider_replay_S$S.json
    start=$(date +%s)
    PYTHONPATH=$SRC/python${PYTHONPATH:+:$PYTHONPATH} H3STRICT_LIBRARY=$LIB "$PYV" -m h3strict.replay --model "$M" --inputs "$IN" --out "$R" \
        --device "$DEVICE" --backward 2>>"$LOG" | tee -a "$LOG"
    rc=${PIPESTATUS[0]}
    log "replay S = $S: exit $rc in $(($(date +%s) - start)) s"
    [ "$rc" = 0 ] || { [ "$status" = 0 ] && status=$rc; }
    rm -f "$IN"
    [ -f "$R" ] && "$H" plot "$R" --out "$OUT/provider_replay_S$S.png" >>"$LOG" 2>&1
    [ -f "$R" ] && mkdir -p "$KEEP" && cp "$R" "$KEEP/"
done

# ------------------------------------------------------------------ the package's provider tests, CUDA variants included
# (python/tests/test_diffusers.py on the tiny preset: the isolated promises and a planted fault on the GPU)
if ! "$PYV" -c "import pytest" >/dev/null 2>&1; then
    ptw=$(ls "$WHEELS"/pytest-*.whl "$WHEELS"/iniconfig-*.whl "$WHEELS"/pluggy-*.whl "$WHEELS"/pygments-*.whl 2>/dev/null)
    # shellcheck disable=SC2086
    [ -n "$ptw" ] && "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" $ptw \
        >>"$LOG" 2>&1 && export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
fi
if "$PYV" -c "import pytest" >/dev/null 2>&1; then
    (cd "$(mktemp -d)" && PYTHONPATH=$SRC/python${PYTHONPATH:+:$PYTHONPATH} H3STRICT_LIBRARY=$LIB H3S_CLI=$H \
        H3S_REQUIRE_DIFFUSERS=1 "$PYV" -m pytest -q -rs -p no:cacheprovider ${H3S_PYTEST_ARGS:-} \
        "$SRC/python/tests/test_diffusers.py") \
        >"$OUT/provider_replay_pytest.log" 2>&1
    rc=$?
    log "pytest python/tests/test_diffusers.py (CPU and CUDA variants): exit $rc, $(tail -1 "$OUT/provider_replay_pytest.log")"
    [ "$rc" = 0 ] || { [ "$status" = 0 ] && status=1; }
else
    log "pytest: not installed and no pytest wheels in $WHEELS: the package's provider tests did not run"
fi

# ------------------------------------------------------------------ the README's table
"$PYV" - "$KEEP" 264 925 3160 >"$OUT/provider_replay_summary.txt" <<'EOF'
import json, os, sys
out, sizes = sys.argv[1], sys.argv[2:]
print("| S | nodes: forward + gradients | first drift from the provider | first isolated drift | over the bound "
      "| broken promises | largest isolated error: strict / provider | largest gradient error: strict / provider |")
print("|---|---|---|---|---|---|---|---|")
for s in sizes:
    p = os.path.join(out, f"provider_replay_S{s}.json")
    if not os.path.exists(p):
        print(f"| {s} | no report | | | | | | |")
        continue
    r = json.load(open(p))
    iso = [n["isolated"] for n in r["nodes"] if "isolated" in n]
    grads = [n for n in r["nodes"] if "isolated" not in n]
    def largest(ns, key):
        return f"{max((float(n[key]) for n in ns), default=float('nan')):.2e}"
    sm = r["summary"]
    print(f"| {r['sequence_rows']} | {sm['forward_nodes']} + {sm['gradient_nodes']} | {r['first_drift'] or 'none'} | "
          f"{r['first_isolated_drift'] or 'none'} | {sm['over_bound']} | {sm['broken_promises']} | "
          f"{largest(iso, 'golden_rel_l2')} / {largest(iso, 'provider_rel_l2')} | "
          f"{largest(grads, 'golden_rel_l2')} / {largest(grads, 'provider_rel_l2')} |")
EOF
log "summary: $OUT/provider_replay_summary.txt"
cat "$OUT/provider_replay_summary.txt" | tee -a "$LOG"
log "provider_replay_evidence: end $(date -u +%Y-%m-%dT%H:%M:%SZ), status $status"
exit "$status"
