#!/usr/bin/env bash
# Call 70: bench_gemm's hold (a host function before each sample's start event that returns once the sample is issued,
# replacing call 69's 256 MiB clear, which left dirty lines in L2 that the timed stream then wrote back) and the held
# times it records at M <= 64 ("strict_device_ms", "strict_device_stream_fraction" and cuBLASLt's): the AdaLN
# projection and 5376 -> 7168 at M = 12 and 64, every phase, twice; then the AdaLN forward and dgrad at M = 64 in
# configurations 2, 3, 6 and 7 (the same bits), to see which streams the weight fastest. From the repository root with
# OUT set, carrying .deps (about 3 minutes):
#   OUT=<dir> bash docs/evidence/gpu/development/raster/call70.sh
set -u
. scripts/dev_call.sh
B=/tmp/b70
dev_build $B bench_gemm || exit 1
dev_elapsed
R=/tmp/b70/rows
rm -rf "$R" && mkdir -p "$R"
for rep in 1 2; do
    for shape in "2688 32256" "5376 7168"; do
        for m in 12 64; do
            set -- $shape
            timeout 60 "$B/bench_gemm" --only "$1" "$2" "$m" --json "$R/r${rep}_dflt_${1}x${2}_m$m.json" \
                >"$R/r${rep}_dflt_${1}x${2}_m$m.log" 2>&1 || echo "bench_gemm --only $1 $2 $m: rc=$?"
        done
    done
    for c in 2 3 6 7; do
        for ph in forward dgrad; do
            timeout 60 "$B/bench_gemm" --only 2688 32256 64 --phase $ph --config $c \
                --json "$R/r${rep}_c${c}_2688x32256_m64_$ph.json" >"$R/r${rep}_c${c}_m64_$ph.log" 2>&1 ||
                echo "bench_gemm --only 2688 32256 64 --phase $ph --config $c: rc=$?"
        done
    done
done
python3 scripts/dev_rows.py "$R" s_strm=strict_stream_fraction c_strm=cublas_stream_fraction \
    s_dev_ms=strict_device_ms c_dev_ms=cublas_device_ms s_dev=strict_device_stream_fraction \
    c_dev=cublas_device_stream_fraction s_host_us=strict_host_us c_host_us=cublas_host_us
tar czf "$OUT/rows.tgz" -C /tmp/b70 rows
dev_elapsed
