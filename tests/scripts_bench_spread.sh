#!/usr/bin/env bash
# scripts/bench_spread.py: three synthetic bench_gemm runs of the same rows give each row's ratios, median and spread,
# the rows over the bar per run and by the median (at M >= --min-m only); --json writes them and refuses an existing
# file; runs of other rows, an unreadable file or a single run give exit 2.
set -u
SRC=${H3S_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
PY=${PYTHON:-python3}
H3S_CLI=${H3S_CLI:-unused} # check.sh asks for it; this test runs no CLI
. "$SRC/tests/check.sh"
T=$dir
run() { # file, then ratio of row A (M = 925), row B (M = 4253), row C (M = 64)
    printf '{"source_commit": "abc", "rows": [\n' >"$1"
    printf '{"shape": "5376x7168", "phase": "forward", "M": 925, "ratio": %s},\n' "$2" >>"$1"
    printf '{"shape": "5376x7168", "phase": "dgrad", "M": 4253, "ratio": %s},\n' "$3" >>"$1"
    printf '{"shape": "2688x32256", "phase": "dgrad", "M": 64, "ratio": %s}\n]}\n' "$4" >>"$1"
}
run "$T/r1.json" 1.05 1.12 1.40
run "$T/r2.json" 1.11 1.13 1.45
run "$T/r3.json" 1.07 1.09 1.20
"$PY" "$SRC/scripts/bench_spread.py" "$T/r1.json" "$T/r2.json" "$T/r3.json" --json "$T/s.json" >"$T/out" 2>&1
rc=$?
[ "$rc" = 0 ] && ok || { bad "three runs: exit $rc"; cat "$T/out"; }
shows "over 1.1 per run: \[1, 2, 0\]; by the median: 1" "counts over the bar"
shows "median over: 5376x7168 dgrad M = 4253: 1.120" "the row over by its median"
shows "over in 1 of 3 runs: 5376x7168 forward M = 925" "a row over in one run"
shows "2688x32256" "the M = 64 row is listed"
grep -q "over in .* 2688x32256" "$T/out" && { bad "the M = 64 row counted against the bar"; cat "$T/out"; } || ok
"$PY" -c "
import json, sys
d = json.load(open('$T/s.json'))
r = {(x['shape'], x['phase'], x['M']): x for x in d['rows']}
a = r[('5376x7168', 'forward', 925)]
sys.exit(0 if d['over_per_run'] == [1, 2, 0] and d['over_by_median'] == 1 and a['median'] == 1.07
         and abs(a['spread'] - 0.06) < 1e-9 and d['source_commits'] == ['abc'] * 3 else 1)
" && ok || { bad "the JSON"; cat "$T/s.json"; }
exits 2 "an existing --json file" "$PY" "$SRC/scripts/bench_spread.py" "$T/r1.json" "$T/r2.json" --json "$T/s.json"
"$PY" "$SRC/scripts/bench_spread.py" "$T/r1.json" "$T/r2.json" --bar 1.12 --min-m 1000 >"$T/out" 2>&1
shows "at M >= 1000 (1 rows): over 1.12 per run: \[0, 1\]" "--bar and --min-m"

printf '{"rows": [{"shape": "5376x7168", "phase": "forward", "M": 925, "ratio": 1.0}]}\n' >"$T/other.json"
exits 2 "runs of other rows" "$PY" "$SRC/scripts/bench_spread.py" "$T/r1.json" "$T/other.json"
exits 2 "a missing file" "$PY" "$SRC/scripts/bench_spread.py" "$T/r1.json" "$T/missing.json"
echo 'not json' >"$T/bad.json"
exits 2 "a file that is not JSON" "$PY" "$SRC/scripts/bench_spread.py" "$T/r1.json" "$T/bad.json"
exits 2 "one run" "$PY" "$SRC/scripts/bench_spread.py" "$T/r1.json"
finish scripts_bench_spread
