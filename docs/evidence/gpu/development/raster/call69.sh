#!/usr/bin/env bash
# Branch gemm-map-cache (prepared, not yet run on a GPU): the GEMMs keep the tensor maps they encode
# (h3c_gemm_map_cache; make_map in src/cuda/linear.cu), and bench_gemm records the host's time to issue each product
# ("strict_host_us", "cublas_host_us"). What it is to measure: how much of a lone call's time at M <= 64 is the host's
# work before the kernel (in a lone call the device, idle after the start event, waits for it), and whether keeping
# the maps (two or three driver encodes per launch saved) moves the AdaLN projection's stream fractions (forward 0.747
# / 0.757, dgrad 0.712 / 0.634 at M = 12 / 64 at c093d54; 0.80 is the issue's bar). One device call from the
# repository root with OUT set, carrying .deps (about 3 minutes):
#   OUT=<dir> bash docs/evidence/gpu/development/raster/call69.sh
# build; test_gpu_gemm at small size (its map_cache part: kept maps byte-equal to fresh encodes, found on the second
# lookup, the same y and dx with the cache off and on) plain and under memcheck; bench_gemm on the AdaLN shape and on
# 5376 -> 7168 at M = 12 and 64, every phase, with the cache on and off and, cache on, with --gate (each sample behind
# a clear of the device, so that it times the device alone), twice; the rows' device and host times.
set -u
. scripts/dev_call.sh
B=/tmp/b69
dev_build $B bench_gemm test_gpu_gemm || exit 1
dev_elapsed
H3S_DEV_SAN_TIMEOUT=150 dev_small_test $B memcheck
grep -E "map cache" $OUT/small.log
dev_elapsed
R=/tmp/b69/rows # the rows' JSON files stay on the device; only their archive comes back
rm -rf "$R" && mkdir -p "$R"
# variants: the maps kept (k1) or encoded every time (k0), lone calls; kept, each sample behind the gate (g1: the
# device's time alone)
for rep in 1 2; do
    for v in k1 k0 g1; do
        case $v in k1) opt="--map-cache 1" ;; k0) opt="--map-cache 0" ;; g1) opt="--map-cache 1 --gate" ;; esac
        for shape in "2688 32256" "5376 7168"; do
            for m in 12 64; do
                set -- $shape
                # shellcheck disable=SC2086
                timeout 60 "$B/bench_gemm" --only "$1" "$2" "$m" $opt --json "$R/r${rep}_${v}_${1}x${2}_m$m.json" \
                    >/dev/null 2>&1 || echo "bench_gemm --only $1 $2 $m $opt: rc=$?"
            done
        done
    done
done
python3 scripts/dev_rows.py "$R" s_strm=strict_stream_fraction c_strm=cublas_stream_fraction strict_host_us cublas_host_us
tar czf "$OUT/rows.tgz" -C /tmp/b69 rows
# shellcheck disable=SC2046
tar czf "$OUT/san.tgz" -C "$OUT" $(cd "$OUT" && ls san_*.log) && rm -f "$OUT"/san_*.log
dev_elapsed
