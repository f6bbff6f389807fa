#!/usr/bin/env bash
# Soak test: a 1000-step dual trajectory with gradients on the tiny model, then 200 forward + backward calls of
# one resident small model, in one process; resident memory sampled at every step / call must stay within the
# stated bounds after warm-up (8 MiB for the trajectory, which also holds its growing report; 4 MiB for the
# resident model), and the same request gives the same bits at the end as at the start.
# Usage: scripts/soak.sh [BUILD_DIR] [OUT.json] [STEPS] [CALLS]
#        (defaults: build, docs/evidence/soak.json, 1000, 200)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-docs/evidence/soak.json}
steps=${3:-1000}
calls=${4:-200}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -std=c11 -D_GNU_SOURCE -fopenmp -Iinclude -Isrc scripts/soak.c "$build/libh3strict.a" \
    $(pkg-config --libs libcjson) -lcrypto -lm -o "$work/soak"
rc=0
"$work/soak" "$work/soak.json" "$steps" "$calls" || rc=$?
python3 - "$work/soak.json" "$out" "$(git rev-parse HEAD)" "scripts/soak.sh $*" <<'PY'
import json, platform, sys
d = json.load(open(sys.argv[1]))
d = {"source_commit": sys.argv[3], "command": sys.argv[4].strip(), "machine": platform.processor() or platform.machine(), **d}
json.dump(d, open(sys.argv[2], "w"), indent=2)
open(sys.argv[2], "a").write("\n")
PY
exit "$rc"
