#!/usr/bin/env bash
# Measure the cost of the NaN/Inf weight scan at load on a one-block model of the released geometry
# (h3-33b --layers 1: every matrix at release size) and extrapolate to the whole released model by bytes.
# Usage: scripts/finite_cost.sh [BUILD_DIR] [OUT_TXT]   (defaults: build, docs/evidence/finite_cost.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-docs/evidence/finite_cost.txt}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -std=c11 -D_GNU_SOURCE -fopenmp -Iinclude -Isrc scripts/finite_cost.c "$build/libh3strict.a" \
    $(pkg-config --libs libcjson) -lcrypto -lm -o "$work/finite_cost"
"$build/h3strict" init --preset h3-33b --layers 1 --seed 1 --out "$work/m" >/dev/null
{
    echo "source_commit: $(git rev-parse HEAD)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
    echo "command: scripts/finite_cost.sh $build $out"
    echo "model: h3-33b --layers 1 --seed 1 (every matrix at release size), pages in memory after init"
    for t in 1 "$(nproc)"; do OMP_NUM_THREADS=$t "$work/finite_cost" "$work/m"; done
} | tee "$out"
