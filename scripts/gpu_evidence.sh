#!/usr/bin/env bash
# GPU evidence: configure and build h3strict with the strict CUDA backend, run every GPU test
# (ctest -R gpu), run compute-sanitizer (memcheck, racecheck, synccheck; initcheck for
# information) on the small GPU tests, record the device and toolchain, and write a JSON
# summary.  Run it on a machine with an NVIDIA GPU, from the repository root:
#
#   OUT=/some/dir bash scripts/gpu_evidence.sh
#
# Outputs in $OUT (default ./out/gpu_evidence): gpu_evidence.json (summary), gpu_evidence.log
# (environment and build), ctest.log (every GPU test's output), sanitizer.log (all sanitizer
# runs), nvidia-smi.txt, python_cuda.log (python/tests against this build).  Exit status 0 only
# when every GPU test passed (none skipped), every required sanitizer run was clean and the Python
# tests, when run, passed.
#
# Build dependencies (pkg-config, cJSON, OpenSSL headers) come from the system; when one is
# missing and .deps/ holds Debian packages of them (a machine with no registry access), they
# are unpacked under /tmp and used from there.  On the lent device machine: carry `.deps` (an
# ignored folder holding libcjson1, libcjson-dev, pkgconf, pkgconf-bin, libpkgconf3, libssl-dev and
# libssl3 .debs, fetched with `apt-get download`) and pass H3S_SOURCE_COMMIT=<commit> (the copy
# there has no .git).  Environment knobs: H3S_GPU_BUILD (build dir), H3S_GPU_JOBS,
# H3S_SAN_TIMEOUT (seconds per sanitizer run, default 100; 300 for racecheck of test_gpu_gemm),
# H3S_GPU_CTEST_EXCLUDE (a ctest -E regex of GPU tests
# to leave out of the full-size run, e.g. test_gpu_gemm, whose full size takes about 8 minutes; the sanitizer runs
# still run every test at small size; the summary records the regex and the tests left out are not in "tests"),
# H3S_SAN_EXCLUDE (an extended regex matched against "TOOL TEST": those sanitizer runs are left out, e.g. "racecheck
# test_gpu_gemm", the slowest at about 4 minutes, where the GEMM kernels are unchanged since a run with it; the
# summary records the regex and each run left out, with no exit code),
# H3S_GPU_PYTHON=0 (leave the Python tests out), H3S_PROVIDER_SITE (where .deps/wheels' diffusers is installed when
# the machine has none, default /tmp/h3s-site).
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$SRC/out/gpu_evidence}
BUILD=${H3S_GPU_BUILD:-/tmp/h3s-build-gpu}
JOBS=${H3S_GPU_JOBS:-$(nproc 2>/dev/null || echo 4)}
mkdir -p "$OUT"
LOG=$OUT/gpu_evidence.log
: >"$LOG"
log() { echo "$@" | tee -a "$LOG"; }
START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
log "gpu_evidence: start $START, source $SRC, build $BUILD"
log "command: OUT=$OUT bash scripts/gpu_evidence.sh"

# ------------------------------------------------------------------ environment
{
    echo "== uname"; uname -a
    echo "== nvidia-smi"; nvidia-smi 2>&1
    echo "== nvidia-smi -q (clocks, persistence, compute mode)"; nvidia-smi -q -d CLOCK,PERFORMANCE,COMPUTE 2>&1 | head -80
} >"$OUT/nvidia-smi.txt" 2>&1
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
NVCC=$(nvcc --version 2>/dev/null | tail -2 | tr '\n' ' ')
CMAKE_V=$(cmake --version 2>/dev/null | head -1)
GCC_V=$(gcc --version 2>/dev/null | head -1)
# The device machine receives a copy of the working tree without .git: the caller may pass the
# commit it copied (H3S_SOURCE_COMMIT, H3S_SOURCE_DIRTY).
if [ -n "${H3S_SOURCE_COMMIT:-}" ]; then
    COMMIT=$H3S_SOURCE_COMMIT
    DIRTY=${H3S_SOURCE_DIRTY:-0}
elif git -C "$SRC" rev-parse --verify -q HEAD >/dev/null 2>&1; then
    COMMIT=$(git -C "$SRC" rev-parse HEAD)
    DIRTY=$(git -C "$SRC" status --porcelain 2>/dev/null | grep -cv '^??')
else
    COMMIT=${H3S_SOURCE_COMMIT:-unknown}
    DIRTY=${H3S_SOURCE_DIRTY:-0}
fi
log "gpu: $GPU_NAME, driver $DRIVER"
log "nvcc: $NVCC"
log "cmake: $CMAKE_V; gcc: $GCC_V; commit $COMMIT ($DIRTY modified tracked files)"

# ------------------------------------------------------------------ dependencies
. "$SRC/scripts/device_deps.sh"

# ------------------------------------------------------------------ build
T0=$(date +%s)
BUILD_OK=1
cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" \
    >>"$LOG" 2>&1 || BUILD_OK=0
if [ "$BUILD_OK" = 1 ]; then cmake --build "$BUILD" -j "$JOBS" >>"$LOG" 2>&1 || BUILD_OK=0; fi
BUILD_S=$(($(date +%s) - T0))
log "build: ok=$BUILD_OK in ${BUILD_S}s"
if [ "$BUILD_OK" = 1 ]; then
    # the kernels' resource use (registers, spills) as the toolchain reports it
    for o in "$BUILD"/CMakeFiles/h3s_cuda_kernels.dir/src/cuda/*.o; do
        [ -e "$o" ] && cuobjdump -res-usage "$o" 2>/dev/null | grep -E "Function|REG" | sed 's/^/  /' >>"$LOG"
    done
fi

# ------------------------------------------------------------------ GPU tests
CTEST_OK=0
if [ "$BUILD_OK" = 1 ]; then
    EXCL=${H3S_GPU_CTEST_EXCLUDE:-}
    [ -n "$EXCL" ] && log "ctest: leaving out of the full-size run: $EXCL (H3S_GPU_CTEST_EXCLUDE)"
    (cd "$BUILD" && ctest -R gpu ${EXCL:+-E "$EXCL"} --output-on-failure --timeout 300 -V) >"$OUT/ctest.log" 2>&1 &&
        CTEST_OK=1
    grep -E "Test +#[0-9]+:|tests passed|tests failed" "$OUT/ctest.log" | tee -a "$LOG"
fi

# ------------------------------------------------------------------ compute-sanitizer
SAN_LOG=$OUT/sanitizer.log
: >"$SAN_LOG"
SAN_RESULTS=""
run_san() { # tool test required [seconds: the limit, default H3S_SAN_TIMEOUT or 100]
    local tool=$1 test=$2 req=$3 lim=${4:-${H3S_SAN_TIMEOUT:-100}} rc t0
    if [ -n "${H3S_SAN_EXCLUDE:-}" ] && [[ "$tool $test" =~ $H3S_SAN_EXCLUDE ]]; then
        log "sanitizer $tool $test: left out (H3S_SAN_EXCLUDE)"
        SAN_RESULTS="$SAN_RESULTS{\"tool\": \"$tool\", \"test\": \"$test\", \"required\": $req, \"left_out\": true, \"exit_code\": null},"
        return
    fi
    t0=$(date +%s)
    local from=$(($(wc -l <"$SAN_LOG") + 1)) # this run's part of the shared log starts here
    echo "===== compute-sanitizer --tool $tool $test (H3S_GPU_TEST_SMALL=1)" >>"$SAN_LOG"
    (cd "$BUILD" && H3S_GPU_TEST_SMALL=1 timeout "$lim" compute-sanitizer --tool "$tool" --error-exitcode 3 \
        "./$test") >>"$SAN_LOG" 2>&1
    rc=$?
    local summary
    # from this run's lines only: a run stopped by its limit prints no summary, and must not show the previous one's
    summary=$(tail -n +"$from" "$SAN_LOG" | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|checks, .* failed" | tail -2 |
        tr '\n' ' ' | tr -d '"')
    [ -n "$summary" ] || summary="no summary (stopped at the ${lim} s limit or before its end)"
    log "sanitizer $tool $test: rc=$rc ($(($(date +%s) - t0))s) $summary"
    SAN_RESULTS="$SAN_RESULTS{\"tool\": \"$tool\", \"test\": \"$test\", \"required\": $req, \"exit_code\": $rc, \"seconds\": $(($(date +%s) - t0)), \"summary\": \"$summary\"},"
}
if [ "$BUILD_OK" = 1 ] && command -v compute-sanitizer >/dev/null 2>&1; then
    run_san memcheck test_gpu_runtime true
    run_san memcheck test_gpu_ops true
    run_san racecheck test_gpu_ops true
    run_san synccheck test_gpu_ops true
    run_san memcheck test_gpu_block true
    run_san memcheck test_gpu_gemm true
    # racecheck is the slowest tool: test_gpu_gemm at small size took 154 s under it at 771f708 (every configuration
    # 0-10 on seven shapes), 176 s at c093d54 (0-11 and the raster settings)
    run_san racecheck test_gpu_gemm true "${H3S_SAN_TIMEOUT:-300}"
    run_san synccheck test_gpu_gemm true
    run_san initcheck test_gpu_ops false
else
    log "sanitizer: not run (build failed or compute-sanitizer missing)"
fi

# ------------------------------------------------------------------ the provider (optional)
# diffusers 0.42.1 for the provider comparison below and the Python package's replay tests: the machine's own, else the
# wheels in .deps/wheels when they are there (bench/provider/provider_wheels.sh; nothing is fetched).
if [ "$BUILD_OK" = 1 ] && ! python3 -c "import diffusers" >/dev/null 2>&1 && [ -d "$SRC/.deps/wheels" ]; then
    # shellcheck source=bench/provider/provider_wheels.sh
    . "$SRC/bench/provider/provider_wheels.sh"
    saved_pythonpath=${PYTHONPATH-}
    if ! provider_wheels python3 "$SRC/.deps/wheels" "${H3S_PROVIDER_SITE:-/tmp/h3s-site}" 2>>"$LOG"; then
        export PYTHONPATH=$saved_pythonpath # what it installed does not shadow the machine's packages
        log "provider: not available"
    fi
fi

# ------------------------------------------------------------------ the CLI on the GPU
# The main job's dual trajectory with --device cuda, and a per-node replay (repeat, batch,
# golden, first drift) of a padded fl2va request; then, where diffusers is importable, the
# provider comparison of tests/conformance/diffusers_compare.py on the same tiny model.
CLI_OK=0
CLI_JSON="{}"
if [ "$BUILD_OK" = 1 ]; then
    H=$BUILD/h3strict
    W=$(mktemp -d)
    {
        "$H" trajectory --device cuda --out "$OUT/trajectory_cuda.json" --quiet >"$W/traj.txt" 2>&1
        echo "trajectory rc=$?"; cat "$W/traj.txt"
        "$H" init --preset tiny --seed 5 --out "$W/m" && \
        "$H" inputs --model "$W/m" --seed 8 --batch 2 --text 5 --frames 3 --latent-height 4 --latent-width 6 \
            --audio-latents 3 --keyframes first,last --pad-to 64 --out "$W/in.safetensors" && \
        "$H" replay --device cuda --model "$W/m" --inputs "$W/in.safetensors" --out "$OUT/replay_cuda.json" >"$W/replay.txt" 2>&1
        echo "replay rc=$?"; cat "$W/replay.txt"
    } >>"$LOG" 2>&1
    TRAJ_LINE=$(tail -n 1 "$W/traj.txt")
    REPLAY_LINE=$(tail -n 1 "$W/replay.txt" 2>/dev/null)
    log "cli trajectory --device cuda: $TRAJ_LINE"
    log "cli replay --device cuda: $REPLAY_LINE"
    if echo "$TRAJ_LINE" | grep -q '^strict: 0/48 comparisons differ' && echo "$REPLAY_LINE" | grep -q 'first drift: none'; then
        CLI_OK=1
    fi
    PROVIDER="not run (diffusers not importable)"
    if python3 -c "import diffusers, torch" >/dev/null 2>&1; then
        "$H" forward --device cuda --model "$W/m" --inputs "$W/in.safetensors" --out "$W/out_cuda.safetensors" >>"$LOG" 2>&1
        "$H" forward --model "$W/m" --inputs "$W/in.safetensors" --out "$W/out_cpu.safetensors" >>"$LOG" 2>&1
        python3 "$SRC/tests/conformance/diffusers_compare.py" --model "$W/m" --inputs "$W/in.safetensors" \
            --h3strict-out "$W/out_cuda.safetensors" --device cuda --json "$OUT/provider_cuda.json" >>"$LOG" 2>&1
        P1=$?
        python3 "$SRC/tests/conformance/diffusers_compare.py" --model "$W/m" --inputs "$W/in.safetensors" \
            --h3strict-out "$W/out_cpu.safetensors" --device cuda --json "$OUT/provider_cpu.json" >>"$LOG" 2>&1
        P2=$?
        PROVIDER="diffusers_compare rc: cuda-strict $P1, cpu-strict $P2"
        log "provider: $PROVIDER"
    fi
    CLI_JSON="{\"trajectory_cuda\": \"$TRAJ_LINE\", \"replay_cuda\": \"$REPLAY_LINE\", \"provider\": \"$PROVIDER\", \"ok\": $([ $CLI_OK = 1 ] && echo true || echo false)}"
    rm -rf "$W"
fi

# ------------------------------------------------------------------ the Python package on the GPU
# python/tests against this build (the package from the source tree, the library and the CLI from the build): the
# binding's CUDA tests and, with diffusers, the replay against the provider on CUDA. H3S_GPU_PYTHON=0 leaves it out.
PY_JSON='{"run": false, "reason": "not run"}'
if [ "$BUILD_OK" = 1 ] && [ "${H3S_GPU_PYTHON:-1}" = 1 ]; then
    if python3 -c "import torch, pytest" >/dev/null 2>&1; then
        t0=$(date +%s)
        PW=$(mktemp -d)
        (cd "$PW" && PYTHONPATH="$SRC/python${PYTHONPATH:+:$PYTHONPATH}" H3STRICT_LIBRARY="$BUILD/libh3strict.so" \
            H3S_CLI="$BUILD/h3strict" python3 -m pytest -q -p no:cacheprovider -rs "$SRC/python/tests") \
            >"$OUT/python_cuda.log" 2>&1
        prc=$?
        rm -rf "$PW"
        PY_LINE=$(tail -n 1 "$OUT/python_cuda.log" | tr -d '"')
        psecs=$(($(date +%s) - t0))
        log "python package on the GPU: rc=$prc (${psecs}s) $PY_LINE"
        PY_JSON="{\"run\": true, \"exit_code\": $prc, \"seconds\": $psecs, \"summary\": \"$PY_LINE\"}"
    else
        log "python package on the GPU: not run (python3 lacks torch or pytest)"
        PY_JSON='{"run": false, "reason": "python3 lacks torch or pytest"}'
    fi
fi

# ------------------------------------------------------------------ summary
END=$(date -u +%Y-%m-%dT%H:%M:%SZ)
python3 - "$OUT" "$START" "$END" "$GPU_NAME" "$DRIVER" "$NVCC" "$CMAKE_V" "$GCC_V" "$COMMIT" "$DIRTY" "$BUILD_OK" \
    "$BUILD_S" "[${SAN_RESULTS%,}]" "$CTEST_OK" "$CLI_JSON" "${H3S_GPU_CTEST_EXCLUDE:-}" "$PY_JSON" \
    "${H3S_SAN_EXCLUDE:-}" <<'PY'
import json, re, sys
(out, start, end, gpu, driver, nvcc, cmake_v, gcc_v, commit, dirty, build_ok, build_s, san, ctest_ok, cli, excl, py,
 san_excl) = sys.argv[1:]
cli, py = json.loads(cli), json.loads(py)
tests = []
try:
    text = open(out + "/ctest.log", errors="replace").read()
except OSError:
    text = ""
for m in re.finditer(r"Test\s+#\d+:\s+(\S+)\s+\.*\s*(\*+)?([^\n]*?)\s+([0-9.]+)\s+sec", text):
    name, word, secs = m.group(1), m.group(3).strip(), float(m.group(4))
    status = "passed" if word == "Passed" else ("skipped" if word.startswith(("Skipped", "Not Run")) else "failed")
    tests.append({"name": name, "status": status, "seconds": secs, "ctest": word})
san = json.loads(san)
ok = (build_ok == "1" and ctest_ok == "1" and len(tests) > 0 and all(t["status"] == "passed" for t in tests)
      and all(s["exit_code"] == 0 for s in san if s["required"] and not s.get("left_out"))
      and any(not s.get("left_out") for s in san) and cli.get("ok") is True
      and (not py.get("run") or py.get("exit_code") == 0))
summary = {
    "what": "h3strict strict CUDA backend: GPU tests and compute-sanitizer",
    "command": "OUT=<dir> bash scripts/gpu_evidence.sh",
    "start_utc": start, "end_utc": end,
    "device": {"gpu": gpu, "driver": driver},
    "toolchain": {"nvcc": nvcc.strip(), "cmake": cmake_v, "gcc": gcc_v,
                  "cuda_flags": "CUDA_ARCHITECTURES 90, --fmad=false -prec-div=true -prec-sqrt=true -ftz=false",
                  "cublaslt": "not used (own GEMM kernels: wgmma + TMA; mma.sync for split operands)"},
    "source": {"commit": commit, "modified_tracked_files": int(dirty)},
    "build": {"ok": build_ok == "1", "seconds": int(build_s)},
    "tests": tests,
    "ctest_exclude": excl or None,
    "sanitizer": san,
    "sanitizer_exclude": san_excl or None,
    "cli": cli,
    "python": py,
    "all_passed": ok,
}
json.dump(summary, open(out + "/gpu_evidence.json", "w"), indent=2)
print(json.dumps({"tests": [(t["name"], t["status"], t["seconds"]) for t in tests],
                  "sanitizer": [(s["tool"], s["test"], s["exit_code"]) for s in san], "python": py,
                  "all_passed": ok}))
sys.exit(0 if ok else 1)
PY
RC=$?
log "gpu_evidence: end $END, all_passed rc=$RC"
exit $RC
