#!/usr/bin/env bash
# One H3 block, strict CUDA against the ordinary PyTorch path, side by side in one run on one GPU:
# builds bench_gpu_block (cmake -DH3S_CUDA=ON), runs it, runs bench/provider/h3_block_provider.py,
# and writes the combined table with the ratios (strict time / provider time).  From the
# repository root, on a machine with an NVIDIA GPU and PyTorch:
#
#   OUT=/some/dir bash bench/provider/run_gpu_bench.sh
#
# Outputs in $OUT (default ./out/gpu_bench): bench_block.json (both sides and the ratios),
# strict.json, provider.json, bench.log (environment, build, both runs' output), nvidia-smi.txt,
# and with H3S_BENCH_TEST=1 also test_gpu_block.log (the block's invariance test, built and run
# after the benchmarks).  Knobs: H3S_BENCH_REPS (default 15), H3S_BENCH_WARMUP (3),
# H3S_BENCH_BUILD (build dir, default /tmp/h3s-build-bench), H3S_SOURCE_COMMIT (the commit the
# tree was copied from, where there is no .git).  Build dependencies as in scripts/gpu_evidence.sh:
# from the system, or unpacked from the Debian packages in .deps/ when the system lacks them.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$SRC/out/gpu_bench}
BUILD=${H3S_BENCH_BUILD:-/tmp/h3s-build-bench}
REPS=${H3S_BENCH_REPS:-15}
WARMUP=${H3S_BENCH_WARMUP:-3}
JOBS=$(nproc 2>/dev/null || echo 4)
mkdir -p "$OUT"
LOG=$OUT/bench.log
: >"$LOG"
log() { echo "$@" | tee -a "$LOG"; }
START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
log "run_gpu_bench: start $START, source $SRC, build $BUILD, reps $REPS, warm-up $WARMUP"

# ------------------------------------------------------------------ environment
{
    echo "== nvidia-smi"; nvidia-smi 2>&1
    echo "== nvidia-smi -q (clocks, performance, compute mode)"; nvidia-smi -q -d CLOCK,PERFORMANCE,COMPUTE 2>&1 | head -80
} >"$OUT/nvidia-smi.txt" 2>&1
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
NVCC=$(nvcc --version 2>/dev/null | tail -2 | tr '\n' ' ')
GCC_V=$(gcc --version 2>/dev/null | head -1)
if [ -n "${H3S_SOURCE_COMMIT:-}" ]; then
    COMMIT=$H3S_SOURCE_COMMIT
    DIRTY=${H3S_SOURCE_DIRTY:-0}
elif git -C "$SRC" rev-parse --verify -q HEAD >/dev/null 2>&1; then
    COMMIT=$(git -C "$SRC" rev-parse HEAD)
else
    COMMIT=${H3S_SOURCE_COMMIT:-unknown}
fi
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

# ------------------------------------------------------------------ the two sides, one after the other
STRICT_RC=-1
if [ "$BUILD_OK" = 1 ]; then
    log "== strict: $BUILD/bench_gpu_block --reps $REPS --warmup $WARMUP --json strict.json"
    "$BUILD/bench_gpu_block" --reps "$REPS" --warmup "$WARMUP" --json "$OUT/strict.json" 2>&1 | tee -a "$LOG"
    STRICT_RC=${PIPESTATUS[0]}
fi
log "== provider: python3 bench/provider/h3_block_provider.py --reps $REPS --warmup $WARMUP --json provider.json"
PYTHONUNBUFFERED=1 python3 "$SRC/bench/provider/h3_block_provider.py" --reps "$REPS" --warmup "$WARMUP" \
    --json "$OUT/provider.json" 2>&1 | tee -a "$LOG"
PROVIDER_RC=${PIPESTATUS[0]}
log "strict rc=$STRICT_RC, provider rc=$PROVIDER_RC"

if [ "${H3S_BENCH_TEST:-0}" = 1 ] && [ "$BUILD_OK" = 1 ]; then
    "$BUILD/test_gpu_block" >"$OUT/test_gpu_block.log" 2>&1
    log "test_gpu_block rc=$? ($(tail -n 2 "$OUT/test_gpu_block.log" | tr '\n' ' '))"
fi

# ------------------------------------------------------------------ combined table
END=$(date -u +%Y-%m-%dT%H:%M:%SZ)
python3 - "$OUT" "$START" "$END" "$GPU_NAME" "$DRIVER" "$NVCC" "$GCC_V" "$COMMIT" "$REPS" "$WARMUP" <<'PY' 2>&1 | tee -a "$LOG"
import json, sys
out, start, end, gpu, driver, nvcc, gcc, commit, reps, warmup = sys.argv[1:]
def load(name):
    try:
        return json.load(open(f"{out}/{name}"))
    except (OSError, ValueError) as e:
        return {"skipped": f"{name} not written ({e})"}
strict, prov = load("strict.json"), load("provider.json")
rows = []
if "skipped" not in strict and "skipped" not in prov:
    sb = {b["B"]: b for b in strict["batches"]}
    for pb in prov["batches"]:
        B = pb["B"]
        if B not in sb:
            continue
        s = sb[B]
        for phase, skey, pkey in (("forward", "forward_ms", "forward_ms"), ("backward", "backward_ms", "backward_ms"),
                                  ("forward+backward", "fwd_bwd_ms", "fwd_bwd_ms")):
            st, pt = s[skey]["median"], pb[pkey]["median"]
            rows.append({"B": B, "phase": phase, "strict_ms": st, "provider_ms": pt, "ratio": st / pt,
                         "strict_tflops": s[skey]["tflops"], "provider_tflops": pb[pkey]["tflops"]})
        rows.append({"B": B, "phase": "forward (provider with autograd recording)", "strict_ms": s["forward_ms"]["median"],
                     "provider_ms": pb["forward_grad_ms"]["median"],
                     "ratio": s["forward_ms"]["median"] / pb["forward_grad_ms"]["median"],
                     "strict_tflops": s["forward_ms"]["tflops"], "provider_tflops": pb["forward_grad_ms"]["tflops"]})
side = []
if rows:
    for pb in prov["batches"]:
        s = {b["B"]: b for b in strict["batches"]}.get(pb["B"])
        if not s:
            continue
        e = {"B": pb["B"],
             "weight_grad_elements": s["repeat"]["weight_grad_elements"],
             "strict_weight_grad_differ": s["repeat"]["weight_grad_differ"],
             "provider_weight_grad_differ": pb["repeat"]["weight_grad_differ"],
             "provider_weight_grad_elements": pb["repeat"]["weight_grad_elements"],
             "strict_output_differ": s["repeat"]["output_differ"],
             "provider_output_differ": pb["repeat"]["output_differ"]}
        if "batch_invariance" in pb and "batch_invariance" in s:
            e["item0_elements"] = pb["batch_invariance"]["item0_vs_B1_elements"]
            e["strict_item0_output_differ"] = s["batch_invariance"]["output_differ"]
            e["provider_item0_output_differ"] = pb["batch_invariance"]["output_differ"]
            e["strict_item0_dx_differ"] = s["batch_invariance"]["grad_x_differ"]
            e["provider_item0_dx_differ"] = pb["batch_invariance"]["grad_x_differ"]
        side.append(e)
summary = {
    "what": "one MiniMax-H3 block at release geometry, strict CUDA (bench/bench_gpu_block.c) against plain PyTorch "
            "bf16 (bench/provider/h3_block_provider.py), side by side in one run; ratio = strict time / provider time",
    "command": "OUT=<dir> bash bench/provider/run_gpu_bench.sh",
    "start_utc": start, "end_utc": end,
    "device": {"gpu": gpu, "driver": driver},
    "toolchain": {"nvcc": nvcc.strip(), "gcc": gcc, "torch": prov.get("torch"), "torch_cuda": prov.get("cuda")},
    "source": {"commit": commit},
    "reps": int(reps), "warmup": int(warmup),
    "table": rows,
    "repeat_and_batch": side,
    "strict": strict,
    "provider": prov,
}
json.dump(summary, open(f"{out}/bench_block.json", "w"), indent=2)
if rows:
    print(f"\n{'B':>2}  {'phase':<44} {'strict ms':>10} {'provider ms':>12} {'ratio':>7}")
    for r in rows:
        print(f"{r['B']:>2}  {r['phase']:<44} {r['strict_ms']:>10.2f} {r['provider_ms']:>12.2f} {r['ratio']:>7.2f}")
    for e in side:
        print(f"B = {e['B']}: weight grads first vs last run differ: strict {e['strict_weight_grad_differ']}, "
              f"provider {e['provider_weight_grad_differ']} of {e['weight_grad_elements']}"
              + (f"; item 0 vs B = 1 output differ: strict {e['strict_item0_output_differ']}, provider "
                 f"{e['provider_item0_output_differ']} of {e['item0_elements']}" if "item0_elements" in e else ""))
else:
    print("no table: strict", strict.get("skipped", "ok"), "/ provider", prov.get("skipped", "ok"))
sys.exit(0 if rows else 1)
PY
RC=${PIPESTATUS[0]}
log "run_gpu_bench: end $END, rc=$RC"
exit $RC
