#!/usr/bin/env bash
# Call 73: the folded AdaLN dgrad's split in the modes of h3c_gemm_split_mode (bit 0: the folding pass adds each
# partial as the split stores it, arrival flags; bit 1: the balanced persistent grid; bit 2: 64 x 128 items for
# configuration 3), which call 72 motivates: at M = 64 the split kernel took 50 us with L2 at 86% of its throughput
# (447 MB through L2: the weight, dy read once per 64 output columns, the partials) and the folding pass 8 us after it.
# Checks the bits first (test_gpu_gemm at small size: every mode against mode 0; then the AdaLN shape at full size at
# M <= 64), then one `bench_gemm --only 2688 32256 M --phase dgrad --split-mode X` process per (M, mode), twice.
# Calls 74, 76 and 77 ran it again with MODES set ("0 1 4 5", "0 1 5", "0 1") after changes to the patch
# (adaln64.md).
# It runs on main's tree at 3f8ee8d with adaln-split-flags.patch applied (`git apply
# docs/evidence/gpu/development/adaln64/adaln-split-flags.patch`; the patch is the state of call 77, see adaln64.md).
# From the repository root with OUT set, carrying .deps (about 5 minutes):
#   OUT=<dir> bash docs/evidence/gpu/development/adaln64/call73.sh
set -u
. scripts/dev_call.sh
B=/tmp/b73
dev_build $B bench_gemm test_gpu_gemm || exit 1
dev_elapsed
H3S_DEV_SAN_TIMEOUT=200 H3S_GEMM_MS=1,12,17,33,64 dev_small_test $B memcheck
dev_elapsed
H3S_GEMM_SHAPES=2688x32256 H3S_GEMM_MS=1,12,17,33,64 timeout 150 "$B/test_gpu_gemm" >"$OUT/full_adaln.log" 2>&1
echo "full AdaLN rc=$?: $(grep -E "split modes|row_invariance_differing" "$OUT/full_adaln.log" | tr '\n' ' ')"
grep -E "FAIL" "$OUT/full_adaln.log" | head
dev_elapsed
for rep in 1 2; do
    for M in 12 17 33 64; do
        for mode in ${MODES:-0 1 2 3 4 5 6 7}; do
            echo -n "rep $rep mode $mode "
            dev_row $B 2688 32256 $M --phase dgrad --split-mode $mode --json "$OUT/row_r${rep}_M${M}_m${mode}.json"
        done
    done
    dev_elapsed
done
tar czf "$OUT/rows.tgz" -C "$OUT" $(cd "$OUT" && ls row_*.json) && rm -f "$OUT"/row_*.json
