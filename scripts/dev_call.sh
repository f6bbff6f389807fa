# Sourced by the development calls' scripts (docs/evidence/gpu/development/*/call*.sh), from the repository root with
# OUT set: the build dependencies (scripts/device_deps.sh) and the steps those calls share.
#   dev_build DIR TARGET...        configure a Release CUDA build (-Werror) in DIR and build the targets (build.log)
#   dev_small_test DIR [TOOL...]   test_gpu_gemm at small size, then under each compute-sanitizer TOOL
#                                  (small.log, san_TOOL.log; H3S_DEV_SAN_TIMEOUT seconds each, default 240)
#   dev_row DIR ARGS...            one `bench_gemm --only ARGS` process, its last line after ARGS
#   dev_tables DIR N INVARIANCE    the full bench_gemm table N times back to back (run1.json, run1.log ..., each log
#                                  ending with nvidia-smi's SM clock, power and temperature every second of its run;
#                                  row_invariance_differing from the JSON file INVARIANCE)
#   dev_elapsed                    seconds since the script sourced this file
SRC=$PWD
log() { echo "$@"; }
. scripts/device_deps.sh
DEV_T0=$(date +%s)
mkdir -p "$OUT"
dev_elapsed() { echo "elapsed $(($(date +%s) - DEV_T0))s"; }
dev_build() {
    local dir=$1
    shift
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DH3S_WERROR=ON "${EXTRA_CMAKE[@]}" \
        >"$OUT/build.log" 2>&1 && ninja -C "$dir" -j"$(nproc)" "$@" >>"$OUT/build.log" 2>&1 ||
        { tail -30 "$OUT/build.log"; return 1; }
}
dev_small_test() {
    local dir=$1 t
    shift
    H3S_GPU_TEST_SMALL=1 timeout 90 "$dir/test_gpu_gemm" >"$OUT/small.log" 2>&1
    echo "small rc=$?: $(tail -n 1 "$OUT/small.log")"
    grep -E "FAIL" "$OUT/small.log" | head
    for t in "$@"; do
        H3S_GPU_TEST_SMALL=1 timeout "${H3S_DEV_SAN_TIMEOUT:-240}" compute-sanitizer --tool "$t" "$dir/test_gpu_gemm" \
            >"$OUT/san_$t.log" 2>&1
        echo "$t rc=$?: $(tail -n 1 "$OUT/san_$t.log")"
    done
}
dev_row() {
    local dir=$1
    shift
    echo -n "$*: "
    timeout 20 "$dir/bench_gemm" --only "$@" 2>&1 | tail -n 1
}
dev_tables() {
    local dir=$1 n=$2 inv=$3 i smi
    for i in $(seq 1 "$n"); do
        nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader -l 1 \
            >"$OUT/smi$i.txt" 2>&1 &
        smi=$!
        "$dir/bench_gemm" --reps 10 --warmup 3 --invariance "$inv" --json "$OUT/run$i.json" >"$OUT/run$i.log" 2>&1
        echo "run $i: rc=$? $(head -n 1 "$OUT/run$i.log")"
        kill $smi 2>/dev/null
        wait $smi 2>/dev/null
        cat "$OUT/smi$i.txt" >>"$OUT/run$i.log"
        rm -f "$OUT/smi$i.txt"
        dev_elapsed
    done
}
