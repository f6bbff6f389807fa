#!/usr/bin/env bash
# Where the weight-gradient GEMM loses time: a timing probe on the H200, in one device call from the repository
# root, carrying .deps.  The probe patch (wgrad-layout-probe.patch, applied to a copy, built with -DH3C_WGRAD_PROBE)
# adds forced wgrad configurations 7-11 that compute wrong values and exist only to be timed:
#   7  128 x 192 fold, A read K-major (dy's bytes taken as an [N, M] matrix: the cost of the MN-major A in 0);
#   8  128 x 192, no fold, K-major A;   9  128 x 192, no fold, MN-major A (0 without the fold);
#   10 128 x 256, no fold, MN-major A;  11 128 x 256, no fold, K-major A.
# Configurations 0-6 are the tree's.  M is a multiple of 8 (8352, 4256, 33400) so that the K-major reading is legal.
# Then bench_gemm --only K N M --phase wgrad --wgrad-config C, one process per line; ncu's tensor-pipe activity for
# configurations 0 and 7 at 5376 -> 7168, M = 8352.
set -u
SRC=$PWD; log(){ echo "$@"; }; . scripts/device_deps.sh
P=/tmp/p16; B=/tmp/b16; T0=$(date +%s)
el(){ echo "elapsed $(( $(date +%s) - T0 ))s"; }
rm -rf $P; mkdir -p $P $OUT; cp -r CMakeLists.txt cmake include src tests bench python scripts pyproject.toml $P/
(cd $P && patch -p1 -s < $SRC/docs/evidence/gpu/development/wgrad_layout/wgrad-layout-probe.patch) || exit 1
cmake -S $P -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON -DCMAKE_CUDA_FLAGS=-DH3C_WGRAD_PROBE \
    "${EXTRA_CMAKE[@]}" > $OUT/build.log 2>&1
ninja -C $B -j16 bench_gemm >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
el
SH=("5376 7168" "7168 5376" "5376 28672" "14336 5376" "2688 32256")
run(){ echo -n "$1 $2 $3 w$4${5:+ $5}: "; timeout ${6:-20} $B/bench_gemm --only $1 $2 $3 --phase wgrad --wgrad-config $4 ${5:-} 2>&1 | tail -n 1; }
{
for sh in "${SH[@]}"; do for c in 0 6 7 8 9 10 11; do run $sh 8352 $c; done; done
for sh in "${SH[@]}"; do for c in 0 4 6 7; do run $sh 4256 $c; done; done
for sh in "5376 7168" "7168 5376" "5376 28672"; do for c in 0 6; do run $sh 8352 $c --dw-bf16; done; done
} > $OUT/bench_probe.txt
el
if [ $(( $(date +%s) - T0 )) -le 330 ]; then
  for sh in "${SH[@]}"; do for c in 2 6 7; do run $sh 33400 $c "" 30; done; done >> $OUT/bench_probe.txt
fi
el
for c in ${NCU_CONFIGS:-0 7}; do
  timeout 60 ncu -k regex:wg_gemm -c 1 --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_sectors.sum,sm__warps_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum \
    $B/bench_gemm --only 5376 7168 8352 --phase wgrad --wgrad-config $c --reps 1 --warmup 1 > $OUT/ncu_c$c.txt 2>&1
  echo "ncu c$c rc=$?"; grep -E "hmma|lts__t|warps_active|duration" $OUT/ncu_c$c.txt
done
el
