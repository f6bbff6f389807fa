#!/usr/bin/env bash
# scripts/ptx_same.py: two synthetic PTX files whose first kernel differs only in register names and numbering is
# "the same" (exit 0); a changed instruction is "different" (exit 1); two instructions swapped are "same
# instructions, other order"; a kernel in one file only is listed (exit 1); --only narrows the comparison; branch
# labels are renumbered (a kernel moved in the file is the same), a changed branch target is not; --old-sub renames
# kernels of the old file; a file without a kernel, a missing file or a bad pattern gives exit 2.
set -u
SRC=${H3S_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
PY=${PYTHON:-python3}
H3S_CLI=${H3S_CLI:-unused} # check.sh asks for it; this test runs no CLI
. "$SRC/tests/check.sh"
T=$dir
kernel() { # name, then the body's lines
    local name=$1
    shift
    printf '.visible .entry %s(\n\t.param .u64 %s_param_0\n)\n{\n\t.reg .b32 \t%%r<9>;\n' "$name" "$name"
    printf '\t%s\n' "$@"
    printf '\tret;\n}\n'
}
{
    echo '// header'
    echo '.version 9.0'
    kernel k_one 'mov.u32 %r1, 5;' 'add.s32 %r2, %r1, 3; // a comment' 'st.global.u32 [%rd1], %r2;'
    kernel k_two 'mov.u32 %r1, 1;' 'mul.lo.s32 %r2, %r1, %r1;'
} >"$T/a.ptx"
{
    echo '.version 9.0'
    kernel k_one 'mov.u32 %r7, 5;' 'add.s32 %r4, %r7, 3;' 'st.global.u32 [%rd3], %r4;'
    kernel k_two 'mov.u32 %r1, 1;' 'mul.lo.s32 %r2, %r1, %r1;'
} >"$T/b.ptx"
"$PY" "$SRC/scripts/ptx_same.py" "$T/a.ptx" "$T/b.ptx" >"$T/out" 2>&1
rc=$?
[ "$rc" = 0 ] && ok || { bad "renamed registers: exit $rc"; cat "$T/out"; }
shows "ptx_same: 2 kernels the same, 0 differ, 0 in one file only" "counts"

{
    echo '.version 9.0'
    kernel k_one 'mov.u32 %r7, 5;' 'sub.s32 %r4, %r7, 3;' 'st.global.u32 [%rd3], %r4;'
    kernel k_two 'mul.lo.s32 %r2, %r1, %r1;' 'mov.u32 %r1, 1;'
    kernel k_three 'ret;'
} >"$T/c.ptx"
exits 1 "a changed kernel" "$PY" "$SRC/scripts/ptx_same.py" "$T/a.ptx" "$T/c.ptx"
shows "differs (different): k_one" "add -> sub not found different"
shows "differs (same instructions, other order): k_two" "the swap"
shows "only in new: k_three" "the kernel in one file only"

"$PY" "$SRC/scripts/ptx_same.py" "$T/a.ptx" "$T/c.ptx" --only 'k_t' >"$T/out" 2>&1
shows "ptx_same: 0 kernels the same, 1 differ, 1 in one file only" "--only"

# branch labels carry the kernel's position in the file: renumbered like registers; a changed branch target is not
{
    echo '.version 9.0'
    kernel k_one 'mov.u32 %r1, 5;' '@%p1 bra $L__BB0_2;' '$L__BB0_2:' 'st.global.u32 [%rd1], %r1;'
} >"$T/l1.ptx"
{
    echo '.version 9.0'
    kernel k_zero 'ret;'
    kernel k_one 'mov.u32 %r1, 5;' '@%p1 bra $L__BB1_2;' '$L__BB1_2:' 'st.global.u32 [%rd1], %r1;'
} >"$T/l2.ptx"
"$PY" "$SRC/scripts/ptx_same.py" "$T/l1.ptx" "$T/l2.ptx" --only 'k_one' >"$T/out" 2>&1
rc=$?
[ "$rc" = 0 ] && ok || { bad "labels renumbered: exit $rc"; cat "$T/out"; }
{
    echo '.version 9.0'
    kernel k_one 'mov.u32 %r1, 5;' '@%p1 bra $L__BB0_3;' '$L__BB0_2:' 'st.global.u32 [%rd1], %r1;' '$L__BB0_3:'
} >"$T/l3.ptx"
exits 1 "a changed branch target" "$PY" "$SRC/scripts/ptx_same.py" "$T/l1.ptx" "$T/l3.ptx"

# --old-sub: kernels renamed by a substitution of the old file (here k_one -> k_uno), parameters included
sed 's/k_one/k_uno/g' "$T/a.ptx" >"$T/r.ptx"
"$PY" "$SRC/scripts/ptx_same.py" "$T/a.ptx" "$T/r.ptx" --old-sub 'k_one' 'k_uno' >"$T/out" 2>&1
rc=$?
[ "$rc" = 0 ] && grep -q "ptx_same: 2 kernels the same, 0 differ, 0 in one file only" "$T/out" && ok ||
    { bad "--old-sub: exit $rc"; cat "$T/out"; }
"$PY" "$SRC/scripts/ptx_same.py" "$T/a.ptx" "$T/r.ptx" >"$T/out" 2>&1
shows "only in new: k_uno" "without --old-sub the renamed kernel is in one file only"
exits 2 "a bad --old-sub pattern" "$PY" "$SRC/scripts/ptx_same.py" "$T/a.ptx" "$T/r.ptx" --old-sub '(' 'x'

echo '.version 9.0' >"$T/empty.ptx"
exits 2 "a file without a kernel" "$PY" "$SRC/scripts/ptx_same.py" "$T/a.ptx" "$T/empty.ptx"
exits 2 "a missing file" "$PY" "$SRC/scripts/ptx_same.py" "$T/a.ptx" "$T/missing.ptx"
exits 2 "one argument" "$PY" "$SRC/scripts/ptx_same.py" "$T/a.ptx"
finish scripts_ptx_same
