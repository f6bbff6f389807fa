#!/usr/bin/env bash
# Call 61, at c389c4a's sources: the two rows at M >= 925 that the repeated full benchmark
# (../final_c389c4a/repeat/) put over 1.10 by their median ratio, in every configuration the forward/dgrad can be
# forced to, each in three bench_gemm processes (one row each): 7168 -> 5376 forward and dgrad at M = 925 (the
# dispatcher's configurations, 4 forward and 5 dgrad, read 0.117-0.146 ms between runs, cuBLASLt's dgrad 0.112-0.122) and 5376 -> 28672
# forward at M = 33396 (configuration 0, 1.09-1.11x). From the repository root with OUT set, carrying .deps:
#   OUT=<dir> bash docs/evidence/gpu/development/config_spread/call61.sh
set -u
. scripts/dev_call.sh
B=/tmp/b61
dev_build $B bench_gemm || exit 1
dev_elapsed
{
for rep in 1 2 3; do
  for ph in forward dgrad; do
    dev_row $B 7168 5376 925 --phase $ph
    for c in 0 1 4 5 8 9; do dev_row $B 7168 5376 925 --phase $ph --config $c; done
  done
done
} >$OUT/m925.txt 2>&1
cat $OUT/m925.txt
dev_elapsed
{
for rep in 1 2; do
  dev_row $B 5376 28672 33396 --phase forward
  for c in 1 4 5 8 9; do dev_row $B 5376 28672 33396 --phase forward --config $c; done
done
} >$OUT/m33396.txt 2>&1
cat $OUT/m33396.txt
dev_elapsed
