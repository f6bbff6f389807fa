#!/usr/bin/env bash
# Call 72: where the folded AdaLN dgrad's held 62 us go at M = 64, the one AdaLN row under
# the 0.80 of the copy bandwidth at 3269725 (0.651 lone, 0.688 held; 0.76 / 0.80 at M = 12). For M = 12 and
# 64: every kernel of one `bench_gemm --only 2688 32256 M --phase dgrad` row with its duration, DRAM bytes and grid
# (strict's split kernel and folding pass, the dy rounding, cuBLASLt's kernels), then Nsight Compute's full set on the
# split kernel and the folding pass (their stall reasons and DRAM/L2 figures as raw CSV). From the repository root with
# OUT set, carrying .deps (about 3 minutes):
#   OUT=<dir> bash docs/evidence/gpu/development/adaln64/call72.sh
# The per-kernel durations are taken without flushing the caches between kernels (--cache-control none), so that the
# folding pass reads the partials the split left in L2, as it does outside the profiler.
# Files: kernels_M12.txt, kernels_M64.txt, and per M and kernel the details page and the raw figures, packed in
# ncu.tgz; the summary lines are printed.
set -u
. scripts/dev_call.sh
B=/tmp/b72
dev_build $B bench_gemm || exit 1
dev_elapsed
N=/tmp/b72/ncu
rm -rf "$N" && mkdir -p "$N"
for M in 12 64; do
    timeout 100 ncu --clock-control none --cache-control none \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,launch__grid_size \
        "$B/bench_gemm" --only 2688 32256 $M --phase dgrad --reps 1 --warmup 0 >"$OUT/kernels_M$M.txt" 2>&1
    grep -E "^  [A-Za-z_].*\(|gpu__time_duration|dram__bytes|lts__t_bytes|launch__grid" "$OUT/kernels_M$M.txt" | tail -60
    for k in wg_gemm split_fold; do
        timeout 120 ncu --clock-control none -k regex:$k -c 1 --set full -o "$N/${k}_M$M" \
            "$B/bench_gemm" --only 2688 32256 $M --phase dgrad --reps 1 --warmup 0 >"$N/ncu_${k}_M$M.log" 2>&1
        ncu --import "$N/${k}_M$M.ncu-rep" --page details >"$N/${k}_M${M}_details.txt" 2>&1
        ncu --import "$N/${k}_M$M.ncu-rep" --page raw --csv 2>/dev/null | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
h, u, v = rows[0], rows[1], rows[2]
for i, n in enumerate(h):
    if any(s in n for s in ("stall", "dram__bytes", "dram__throughput", "sm__cycles_active", "gpc__cycles_elapsed.max",
                            "lts__t_sectors", "lts__t_bytes")):
        print(n, u[i], v[i])' >"$N/${k}_M${M}_raw.txt"
        rm -f "$N/${k}_M$M.ncu-rep"
    done
    grep -E "pcsamp_warps_issue_stalled_[a-z_]+ " "$N/wg_gemm_M${M}_raw.txt" | sort -k3 -n -r | head -8
    grep -E "^    Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy" "$N"/*_M${M}_details.txt
    dev_elapsed
done
tar czf "$OUT/ncu.tgz" -C /tmp/b72 ncu
