#!/usr/bin/env bash
# bench/provider/block_table.py: the README's compact table (--compact) and the default timing table from a synthetic
# bench_block.json: one row per S and B, the forward and forward + backward pairs with their ratios, the deterministic
# provider's forward + backward, "n/a" for a figure the run did not produce, rows ordered by S then B.
set -u
SRC=${H3S_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
PY=${PYTHON:-python3}
H3S_CLI=${H3S_CLI:-unused} # check.sh asks for it; this test runs no CLI
. "$SRC/tests/check.sh"
T=$dir
cat >"$T/b.json" <<'J'
{"table": [
 {"S": 925, "B": 1, "phase": "forward+backward", "strict_ms": 5.45, "provider_ms": 6.73, "ratio": 0.8098,
  "provider_det_ms": 10.65, "ratio_det": 0.5117},
 {"S": 925, "B": 1, "phase": "forward", "strict_ms": 1.63, "provider_ms": 1.96, "ratio": 0.8316},
 {"S": 12, "B": 4, "phase": "forward", "strict_ms": 0.554, "provider_ms": 1.17, "ratio": 0.4735},
 {"S": 12, "B": 4, "phase": "backward", "strict_ms": 1.25, "provider_ms": 4.09, "ratio": 0.3056}
]}
J
"$PY" "$SRC/bench/provider/block_table.py" "$T/b.json" --compact >"$T/out" 2>&1
rc=$?
[ "$rc" = 0 ] && ok || { bad "--compact: exit $rc"; cat "$T/out"; }
[ "$(grep -c '^| [0-9]' "$T/out")" = 2 ] && ok || { bad "one row per S and B"; cat "$T/out"; }
sed -n 3p "$T/out" | grep -qF '| 12 | 4 | 0.554 / 1.17 (0.47x) | n/a | n/a |' && ok ||
    { bad "S = 12 first, its missing forward + backward as n/a"; cat "$T/out"; }
sed -n 4p "$T/out" | grep -qF '| 925 | 1 | 1.63 / 1.96 (0.83x) | 5.45 / 6.73 (0.81x) | 10.65 (0.51x) |' && ok ||
    { bad "the S = 925 row"; cat "$T/out"; }
"$PY" "$SRC/bench/provider/block_table.py" "$T/b.json" --phases forward >"$T/out" 2>&1
[ "$(grep -c '| forward |' "$T/out")" = 2 ] && ! grep -q "backward" "$T/out" && ok || { bad "--phases forward"; cat "$T/out"; }
"$PY" "$SRC/bench/provider/block_table.py" "$T/missing.json" >"$T/out" 2>&1
rc=$?
[ "$rc" != 0 ] && ok || { bad "a missing file: exit 0"; cat "$T/out"; }
finish scripts_block_table
