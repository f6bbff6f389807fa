#!/usr/bin/env bash
# Strict attention against PyTorch's scaled_dot_product_attention, side by side in one call on one GPU:
# runs build/bench_attention (strict; BUILD names the build directory) and bench/provider/sdpa_bench.py,
# and writes $OUT/bench_attention.json with a "rows" list (S, B, phase, strict_ms, sdpa_ms = the faster
# SDPA backend, sdpa_backend, strict_tflops, ratio = strict_ms / sdpa_ms) and the source commit.
#
#   BUILD=<build dir> OUT=<dir> bash bench/provider/run_attention_bench.sh
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$SRC/out/attention_bench}
BUILD=${BUILD:-$SRC/build}
mkdir -p "$OUT"
"$BUILD/bench_attention" --json "$OUT/strict_attention.json" || exit 1
python3 "$SRC/bench/provider/sdpa_bench.py" --json "$OUT/sdpa.json" || exit 1
python3 - "$OUT/strict_attention.json" "$OUT/sdpa.json" "$OUT/bench_attention.json" <<'PY'
import json, sys
st, sd = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
rows = []
for r in st["rows"]:
    key = "forward_ms" if r["phase"] == "forward" else "backward_ms"
    cands = [(x[key], x["backend"]) for x in sd["rows"] if x["S"] == r["S"] and x["B"] == r["B"] and key in x]
    best = min(cands) if cands else (None, None)
    rows.append({"S": r["S"], "B": r["B"], "phase": r["phase"], "strict_ms": r["strict_ms"], "sdpa_ms": best[0],
                 "sdpa_backend": best[1], "strict_tflops": r["strict_tflops"],
                 "ratio": r["strict_ms"] / best[0] if best[0] else None})
doc = {"benchmark": "bench_attention", "source_commit": st["source_commit"], "torch": sd["torch"],
       "device": sd["device"], "command": "BUILD=<build> OUT=<dir> bash bench/provider/run_attention_bench.sh",
       "rows": rows, "sdpa_all_backends": sd["rows"]}
json.dump(doc, open(sys.argv[3], "w"), indent=1)
print(f"{'S':>6} {'B':>2} {'phase':9} {'strict_ms':>10} {'sdpa_ms':>9} {'ratio':>6}")
for r in rows:
    print(f"{r['S']:6d} {r['B']:2d} {r['phase']:9} {r['strict_ms']:10.4f} {r['sdpa_ms'] or 0:9.4f} {r['ratio'] or 0:6.2f}")
PY
