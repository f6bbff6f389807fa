#!/usr/bin/env bash
# Second probe call (same patch, now with configuration 12: the fold's waits and chain restarts at every 256 rows
# without its additions or running total).  bench_gemm at M = 8352 on the five shapes, configurations 0, 9 and 12;
# then, at 5376 -> 7168, M = 8352, ncu's per-instruction stall samples (SASS source page) of configurations 0 and 9.
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
for sh in "${SH[@]}"; do for c in 0 9 12; do run $sh 8352 $c; done; done > $OUT/bench_probe2.txt
cat $OUT/bench_probe2.txt
el
for c in 0 9 12; do
  timeout 90 ncu -k regex:wg_gemm -c 1 --section WarpStateStats --section SourceCounters --import-source no \
    -o /tmp/rep_c$c -f $B/bench_gemm --only 5376 7168 8352 --phase wgrad --wgrad-config $c --reps 1 --warmup 1 > /dev/null 2>&1
  echo "ncu c$c rc=$?"
  ncu -i /tmp/rep_c$c.ncu-rep --page source --csv --print-source sass > $OUT/sass_stalls_c$c.csv 2>&1
  ncu -i /tmp/rep_c$c.ncu-rep --page details > $OUT/ncu_details_c$c.txt 2>&1
  wc -l $OUT/sass_stalls_c$c.csv
done
el
