#!/usr/bin/env bash
# Call 63: the 5376 -> 28672 forward at M = 33396 (configuration 0; 1.15-1.16x in call 62's settled runs, 1.09-1.11x
# before): is strict's kernel slower at the same clocks, or run at lower clocks at the 700 W cap? One bench_gemm
# process of that row with 100 samples per pass (six passes of about 1.6 s: settling strict, cuBLASLt, then
# strict, cuBLASLt, cuBLASLt, strict) while nvidia-smi samples the SM clock and
# the power every 100 ms; then ncu of both sides' kernels at locked base clocks (time, tensor-pipe activity, L2 and
# memory traffic). From the repository root with OUT set, carrying .deps:
#   OUT=<dir> bash docs/evidence/gpu/development/config_spread/call63.sh
set -u
. scripts/dev_call.sh
B=/tmp/b63
dev_build $B bench_gemm || exit 1
dev_elapsed
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader -lms 100 \
    >"$OUT/smi.txt" 2>&1 &
smi=$!
"$B/bench_gemm" --only 5376 28672 33396 --phase forward --reps 100 --warmup 3 >"$OUT/row.txt" 2>&1
echo "row rc=$?: $(tail -n 1 "$OUT/row.txt")"
kill $smi 2>/dev/null
wait $smi 2>/dev/null
dev_elapsed
timeout 200 ncu --clock-control base -c 4 -k regex:"wg_gemm|nvjet|sm90" \
    --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_bytes.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum \
    "$B/bench_gemm" --only 5376 28672 33396 --phase forward --reps 1 --warmup 0 >"$OUT/ncu.txt" 2>&1
echo "ncu rc=$?"
grep -E "^  [A-Za-z_].*\(|gpu__time|cycles_elapsed|hmma|lts__t_bytes|dram__bytes|inst_executed" "$OUT/ncu.txt" |
    sed -E 's/\(CUtensorMap.*//' | cut -c1-150
dev_elapsed
