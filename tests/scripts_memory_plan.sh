#!/usr/bin/env bash
# scripts/memory_plan.py: the release geometry's plan (docs/ARCHITECTURE.md quotes it), the attention backward's
# workspace in it (its stored dS: one chunk of heads under the CUDA kernels' budget, which must be the budget
# src/cuda/attention.cu uses), and the chunking at a size that fits in one chunk.
set -u
SRC=${H3S_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
PY=${PYTHON:-python3}
H3S_CLI=${H3S_CLI:-unused} # check.sh asks for it; this test runs no CLI
. "$SRC/tests/check.sh"
T=$dir
"$PY" "$SRC/scripts/memory_plan.py" >"$T/out" 2>&1
rc=$?
[ "$rc" = 0 ] && ok || { bad "default plan: exit $rc"; cat "$T/out"; }
grep -qF "of which 4.43 GB the attention backward's workspace (2 chunk(s) of 28 heads)" "$T/out" && ok ||
    { bad "S = 8762: the attention workspace is two chunks of 28 heads"; cat "$T/out"; }
grep -qF '| blocks | inputs only | 7.0 | 0.0 | 82.5 | yes |' "$T/out" && ok || { bad "recompute + inputs only"; cat "$T/out"; }
# the figures docs/ARCHITECTURE.md quotes are this output's
grep -qF '| blocks | inputs only | 7.0 | 0.0 | 82.5 | yes |' "$SRC/docs/ARCHITECTURE.md" && ok ||
    bad "docs/ARCHITECTURE.md quotes another plan"
"$PY" "$SRC/scripts/memory_plan.py" --seq 4253 --batch 4 >"$T/out4" 2>&1
grep -qF "of which 8.48 GB the attention backward's workspace (1 chunk(s) of 56 heads)" "$T/out4" && ok ||
    { bad "S = 4253, B = 4: one chunk of 56 heads"; cat "$T/out4"; }
# the budget is the CUDA kernels' own
cu=$(sed -nE 's/^#define TC_DS_BUDGET_DEFAULT \((8ull|[0-9]+ull) << ([0-9]+)\).*/\1 \2/p' "$SRC/src/cuda/attention.cu")
py=$(sed -nE 's/^DS_BUDGET = ([0-9]+) << ([0-9]+).*/\1 \2/p' "$SRC/scripts/memory_plan.py")
[ -n "$cu" ] && [ "${cu/ull/}" = "$py" ] && ok || bad "DS_BUDGET ($py) is not TC_DS_BUDGET_DEFAULT ($cu)"
finish scripts_memory_plan
