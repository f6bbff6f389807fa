#!/usr/bin/env bash
# Call 78 (prepared, not run: no device was lent): the cluster fold (h3c_gemm_split_cluster; wg::dgrad_xf2/3 for
# configuration 3's 64 x 64 items, wg::dgrad_xft2/3 for the transposed 64 x 16 items of 6 and 7), the folded AdaLN
# dgrad's split at M <= 64 with its partials added in the shared memory of a cluster of three (or two) CTAs instead
# of a workspace and a folding pass (adaln64.md).  test_gpu_gemm at small size (split_cluster: the cluster fold of
# both sizes against the split, M <= 64) plain and under memcheck; the clusters resident at once; then one
# `bench_gemm --only 2688 32256 M --phase dgrad` process per M in 1, 12, 17, 33, 64 without --split-cluster and with
# --split-cluster 2 and 3, twice; then the full-size AdaLN part of test_gpu_gemm.  It runs on main's tree with
# adaln-cluster-fold.patch applied (`git apply docs/evidence/gpu/development/adaln64/adaln-cluster-fold.patch`).
# From the repository root with OUT set, carrying .deps (about 5 minutes):
#   OUT=<dir> bash docs/evidence/gpu/development/adaln64/call78.sh
set -u
. scripts/dev_call.sh
B=/tmp/b78
dev_build $B bench_gemm test_gpu_gemm || exit 1
dev_elapsed
H3S_DEV_SAN_TIMEOUT=150 H3S_GEMM_MS=1,12,17,33,64 dev_small_test $B memcheck
grep -E "cluster fold" "$OUT/small.log"
dev_elapsed
for x in 2 3; do
    timeout 20 "$B/bench_gemm" --only 2688 32256 64 --phase dgrad --split-cluster $x 2>&1 | grep -E "resident at once"
done
for rep in 1 2; do
    for M in 1 12 17 33 64; do
        for x in 0 2 3; do
            echo -n "rep $rep cluster $x "
            if [ $x = 0 ]; then dev_row $B 2688 32256 $M --phase dgrad; else
                dev_row $B 2688 32256 $M --phase dgrad --split-cluster $x; fi
        done
    done
done
dev_elapsed
H3S_GEMM_SHAPES=2688x32256 H3S_GEMM_MS=12,17,33,64 timeout 120 "$B/test_gpu_gemm" >"$OUT/full_adaln.log" 2>&1
echo "full AdaLN rc=$?: $(grep -E "cluster fold|row_invariance_differing|checks" "$OUT/full_adaln.log" | tr '\n' ' ')"
grep -E "FAIL" "$OUT/full_adaln.log" | head -5
dev_elapsed
