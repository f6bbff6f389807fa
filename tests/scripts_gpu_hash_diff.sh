#!/usr/bin/env bash
# scripts/gpu_hash_diff.py: equal logs give 0, a changed node gives 1 and names it, a missing or extra node
# gives 1, a log without hashes or a missing file gives 2; the committed GPU log agrees with itself.
set -u
SRC=${H3S_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
PY=${PYTHON:-python3}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
check() { # want_rc description command...
    local want=$1 what=$2
    shift 2
    "$@" >"$T/out" 2>&1
    local rc=$?
    if [ "$rc" != "$want" ]; then
        echo "FAIL: $what: exit $rc, expected $want"
        cat "$T/out"
        fail=1
    fi
}
h1=$(printf 'a%.0s' $(seq 64))
h2=$(printf 'b%.0s' $(seq 64))
h3=$(printf 'c%.0s' $(seq 64))
printf '22: device: x\n22:   input.x                        %s\n22:   grad.temb                      %s  (cross-row)\n' \
    "$h1" "$h2" >"$T/ref.log"
printf '  input.x   %s\n  grad.temb   %s  (cross-row)\n' "$h1" "$h2" >"$T/same.log"
printf '  input.x   %s\n  grad.temb   %s  (cross-row)\n' "$h1" "$h3" >"$T/changed.log"
printf '  input.x   %s\n' "$h1" >"$T/missing.log"
printf '  input.x   %s\n  grad.temb   %s\n  grad.extra   %s\n' "$h1" "$h2" "$h3" >"$T/extra.log"
printf 'no hashes here\n' >"$T/empty.log"
check 0 "equal logs" "$PY" "$SRC/scripts/gpu_hash_diff.py" "$T/same.log" "$T/ref.log"
check 1 "a changed node" "$PY" "$SRC/scripts/gpu_hash_diff.py" "$T/changed.log" "$T/ref.log"
grep -q "differs: grad.temb" "$T/out" || { echo "FAIL: the changed node is not named"; fail=1; }
check 1 "a missing node" "$PY" "$SRC/scripts/gpu_hash_diff.py" "$T/missing.log" "$T/ref.log"
grep -q "missing: grad.temb" "$T/out" || { echo "FAIL: the missing node is not named"; fail=1; }
check 1 "an extra node" "$PY" "$SRC/scripts/gpu_hash_diff.py" "$T/extra.log" "$T/ref.log"
grep -q "new:     grad.extra" "$T/out" || { echo "FAIL: the extra node is not named"; fail=1; }
check 2 "no hashes" "$PY" "$SRC/scripts/gpu_hash_diff.py" "$T/empty.log" "$T/ref.log"
check 2 "a missing file" "$PY" "$SRC/scripts/gpu_hash_diff.py" "$T/nonexistent.log" "$T/ref.log"
check 0 "the committed GPU log against itself" "$PY" "$SRC/scripts/gpu_hash_diff.py" \
    "$SRC/docs/evidence/gpu/ctest.log"
[ "$fail" = 0 ] && echo "scripts_gpu_hash_diff: all checks passed"
exit "$fail"
