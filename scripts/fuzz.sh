#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser and validator (tests/fuzz/fuzz_*.c) with libFuzzer under ASan + UBSan.
#
#   scripts/fuzz.sh [-t SECONDS] [-r RUNS] [-j PARALLEL] [-o EVIDENCE.json] [TARGET...]
#
# Each target starts from its committed seed corpus (tests/fuzz/corpus/<target>, never modified; the growing
# corpus lives in build-fuzz/corpus/<target>) and runs for SECONDS (default 20), or until RUNS executions when -r
# is given (whichever comes first).  PARALLEL targets run at once (default 1).  Any crash, leak, sanitizer report
# or timeout (an input taking over 10 s) fails the script and leaves the input in build-fuzz/artifacts/.  With -o,
# the per-target figures (execs, crashes, timeouts, coverage in edges, ...) are written as JSON.
# Needs clang with libFuzzer (Debian: clang, libclang-rt-dev).  TARGET is a name such as "config" or "fuzz_config".
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=20 runs="" jobs=1 json=""
while getopts "t:r:j:o:" o; do
    case $o in
    t) seconds=$OPTARG ;;
    r) runs=$OPTARG ;;
    j) jobs=$OPTARG ;;
    o) json=$OPTARG ;;
    *) echo "usage: scripts/fuzz.sh [-t SECONDS] [-r RUNS] [-j PARALLEL] [-o EVIDENCE.json] [TARGET...]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
all=(safetensors config index manifest inputs cotangent cli_args)
# the committed seeds are read, never written: new inputs go to the first corpus directory only
targets=("${@:-${all[@]}}")
targets=("${targets[@]#fuzz_}")

build=build-fuzz
CC=${CC:-clang} cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DH3S_CUDA=OFF -DH3S_FUZZ=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}") >/dev/null

# the fuzzed files are rewritten on every execution: keep them in memory when a tmpfs is there
scratch=$(mktemp -d "$([ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/h3s_fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$build/artifacts" "$build/logs"
export ASAN_OPTIONS=detect_leaks=1:quarantine_size_mb=16:malloc_context_size=10:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

run_one() {
    local t=$1 corpus="$build/corpus/$1" log="$build/logs/$1.log"
    mkdir -p "$corpus" "$scratch/$t"
    rm -f "$build/artifacts/$t-"*
    local extra=()
    [ -n "$runs" ] && extra+=("-runs=$runs")
    local rc=0
    TMPDIR="$scratch/$t" "$build/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
        -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" "${extra[@]}" \
        "$corpus" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
    echo "$rc" >"$build/logs/$t.rc"
}

pids=()
for t in "${targets[@]}"; do
    [ -d "tests/fuzz/corpus/$t" ] || { echo "fuzz: no seed corpus for '$t'" >&2; exit 2; }
    run_one "$t" &
    pids+=($!)
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
done
wait

failed=0
entries=()
for t in "${targets[@]}"; do
    log="$build/logs/$t.log"
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | awk '{print $2}')
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n 1 | awk '{print $2}')
    secs=$(grep -o 'exec/s: [0-9]*' "$log" | tail -n 1 | awk '{print $2}')
    crashes=$(find "$build/artifacts" -name "$t-crash-*" -o -name "$t-leak-*" -o -name "$t-oom-*" | wc -l)
    timeouts=$(find "$build/artifacts" -name "$t-timeout-*" | wc -l)
    rc=$(cat "$build/logs/$t.rc")
    sanitizer=0
    grep -q -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$log" && sanitizer=1
    status=ok
    if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ] || [ "$timeouts" -ne 0 ] || [ "$sanitizer" -ne 0 ] || [ -z "$execs" ]; then
        status=FAILED
        failed=1
    fi
    printf 'fuzz %-12s %s: %s execs, %s crashes, %s timeouts, coverage %s edges (%s features), %s exec/s\n' \
        "$t" "$status" "${execs:-0}" "$crashes" "$timeouts" "${cov:-0}" "${ft:-0}" "${secs:-0}"
    [ "$status" = ok ] || tail -n 30 "$log" >&2
    entries+=("$(printf '    "%s": {"execs": %s, "crashes": %s, "timeouts": %s, "coverage": %s, "features": %s, "exec_per_s": %s, "seed_inputs": %s, "corpus_inputs": %s, "status": "%s"}' \
        "$t" "${execs:-0}" "$crashes" "$timeouts" "${cov:-0}" "${ft:-0}" "${secs:-0}" \
        "$(find "tests/fuzz/corpus/$t" -type f | wc -l)" "$(find "$build/corpus/$t" -type f | wc -l)" "$status")")
done

if [ -n "$json" ]; then
    {
        echo "{"
        echo "  \"source_commit\": \"$(git rev-parse HEAD)$(git diff --quiet HEAD -- src include tests/fuzz CMakeLists.txt || echo '+uncommitted')\","
        echo "  \"command\": \"scripts/fuzz.sh -t $seconds${runs:+ -r $runs} -j $jobs -o $json${*:+ $*}\","
        echo "  \"fuzzer\": \"libFuzzer ($(clang --version | head -n 1)), -fsanitize=fuzzer,address,undefined\","
        echo "  \"seconds_per_target_limit\": $seconds,"
        echo "  \"runs_per_target_limit\": ${runs:-null},"
        echo "  \"coverage_unit\": \"edges (libFuzzer cov: inline 8-bit counters reached)\","
        echo "  \"targets\": {"
        for i in "${!entries[@]}"; do
            sep=,
            [ "$i" -eq $((${#entries[@]} - 1)) ] && sep=
            echo "${entries[$i]}$sep"
        done
        echo "  }"
        echo "}"
    } >"$json"
    echo "fuzz: wrote $json"
fi
exit "$failed"
