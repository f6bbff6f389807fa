# shellcheck shell=bash
# Sourced by the benchmark drivers (run_gpu_bench.sh, run_model_bench.sh): the time limit of a step under the run's
# deadline, the GPU's description and the source commit.

# limit NEEDED_AFTER CAP: seconds a step may take, at most CAP, leaving NEEDED_AFTER seconds of the deadline for
# the steps after it (at least 10).  Reads T_START (the run's start, epoch seconds) and DEADLINE_S.
limit() {
    local left=$((T_START + DEADLINE_S - $(date +%s) - $1))
    [ "$left" -gt "$2" ] && left=$2
    [ "$left" -lt 10 ] && left=10
    echo "$left"
}

# gpu_environment FILE: nvidia-smi's report and its clocks, performance and compute-mode sections into FILE; sets
# GPU_NAME and DRIVER (empty without nvidia-smi).
gpu_environment() {
    {
        echo "== nvidia-smi"; nvidia-smi 2>&1
        echo "== nvidia-smi -q (clocks, performance, compute mode)"; nvidia-smi -q -d CLOCK,PERFORMANCE,COMPUTE 2>&1 | head -80
    } >"$1" 2>&1
    # shellcheck disable=SC2034  # set for the caller
    GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    # shellcheck disable=SC2034  # set for the caller
    DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
}

# source_commit: sets COMMIT to H3S_SOURCE_COMMIT when given (a device copy of the tree has no .git), else the
# checkout's HEAD, marked "(modified)" when tracked files differ from it; "unknown" without either.  Reads SRC.
source_commit() {
    if [ -n "${H3S_SOURCE_COMMIT:-}" ]; then
        COMMIT=$H3S_SOURCE_COMMIT
    elif git -C "$SRC" rev-parse --verify -q HEAD >/dev/null 2>&1; then
        COMMIT=$(git -C "$SRC" rev-parse HEAD)
        [ -n "$(git -C "$SRC" status --porcelain --untracked-files=no 2>/dev/null)" ] && COMMIT="$COMMIT (modified)"
    else
        COMMIT=unknown
    fi
}
