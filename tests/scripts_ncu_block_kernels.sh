#!/usr/bin/env bash
# scripts/ncu_block_kernels.py: a synthetic ncu CSV with two backwards gives each one's launches and sums by kind
# (GEMM, attention, the rest) and the rest per kernel, and the forward before the second (the first has none: no
# silu_to_bf16_kernel); a CSV without a backward, or a missing file, gives exit 2; committed development CSVs give
# the figures their notes quote.
set -u
SRC=${H3S_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
PY=${PYTHON:-python3}
H3S_CLI=${H3S_CLI:-unused} # check.sh asks for it; this test runs no CLI
. "$SRC/tests/check.sh"
T=$dir
row() { # id kernel microseconds
    printf '"%s","1","bench_gpu_block","127.0.0.1","%s","1","13","(256, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","%s"\n' \
        "$1" "$2" "$3"
}
{
    echo "program output before the table"
    echo '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
    row 0 "void residual_forward_vec_kernel<8>(long)" "1,000"
    row 1 "void wg::wg_gemm<wg::cfg<128, 256, 4, 0, 0, 0, 0, 1>>(CUtensorMap)" "2,000,000"
    row 2 "attn_tc_dq_kernel(h3c_attn_args)" "500,000"
    row 3 "void fold_partial_kernel<1>(h3c_fold_args)" "30,000"
    row 4 "void fold_partial_kernel<2>(h3c_fold_args)" "12,500"
    row 5 "mul_silu_grad_kernel(long)" "2,500"
    row 6 "silu_to_bf16_kernel(long)" "4,000"
    row 7 "void wg::wg_gemm<wg::cfg<128, 256, 4, 0, 0, 0, 0, 1>>(CUtensorMap)" "100,000"
    row 8 "void residual_forward_vec_kernel<8>(long)" "1,000"
    row 9 "add_f32_vec_kernel(long)" "7,000"
    row 10 "mul_silu_grad_kernel(long)" "3,000"
} >"$T/two.csv"
"$PY" "$SRC/scripts/ncu_block_kernels.py" "$T/two.csv" >"$T/out" 2>&1
rc=$?
[ "$rc" = 0 ] && ok || { bad "two backwards: exit $rc"; cat "$T/out"; }
grep -q "backward 1: 5 launches, 2545 us: GEMM 2000, attention 500, rest 45" "$T/out" && ok ||
    { bad "backward 1's sums"; cat "$T/out"; }
grep -Eq "^    fold_partial_kernel +2 x +42.5 us" "$T/out" && ok || { bad "the rest per kernel"; cat "$T/out"; }
grep -q "backward 2: 2 launches, 10 us: GEMM 0, attention 0, rest 10" "$T/out" && ok ||
    { bad "backward 2's sums"; cat "$T/out"; }
if grep -q "forward 1:" "$T/out"; then
    bad "a forward where no silu_to_bf16_kernel precedes the backward"
    cat "$T/out"
else
    ok
fi
grep -q "forward 2: 3 launches, 105 us: GEMM 100, attention 0, rest 5" "$T/out" && ok ||
    { bad "forward 2's sums"; cat "$T/out"; }
head -2 "$T/two.csv" >"$T/none.csv"
"$PY" "$SRC/scripts/ncu_block_kernels.py" "$T/none.csv" >"$T/out" 2>&1
rc=$?
[ "$rc" = 2 ] && ok || bad "no backward: exit $rc, expected 2"
"$PY" "$SRC/scripts/ncu_block_kernels.py" "$T/missing.csv" >"$T/out" 2>&1
rc=$?
[ "$rc" = 2 ] && ok || bad "a missing file: exit $rc, expected 2"
# the summary of a committed development CSV holds a line its note quotes
quotes() { # csv line what
    "$PY" "$SRC/scripts/ncu_block_kernels.py" "$SRC/docs/evidence/gpu/development/$1" >"$T/out" 2>&1
    grep -q "$2" "$T/out" && ok || { bad "$3"; head -3 "$T/out"; }
}
quotes bwd_aux_78ca8bb/call4_ded8199_ncu_8349.csv \
    "backward 1: 63 launches, 41803 us: GEMM 22324, attention 14888, rest 4592" "the committed CSV's first backward"
quotes bwd_aux_78ca8bb/call4_ded8199_ncu_8349.csv \
    "forward 1: 18 launches, 16165 us: GEMM 10746, attention 4044, rest 1375" "the committed CSV's first forward"
quotes block_elem_0007666/call5_0007666_ncu_8349.csv \
    "forward 1: 19 launches, 15842 us: GEMM 10808, attention 4012, rest 1022" "the second committed CSV's first forward"
quotes block_elem_0007666/call5_0007666_ncu_8349.csv \
    "backward 1: 60 launches, 41303 us: GEMM 22387, attention 14792, rest 4124" \
    "the second committed CSV's first backward"
finish scripts_ncu_block_kernels
