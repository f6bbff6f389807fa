#!/usr/bin/env bash
# ctest script test: h3strict's forward against the independent FP64 reference (docs/conformance.md).
# Env: H3S_CLI = the built h3strict binary, H3S_SOURCE_DIR = the source tree.  Exit 77 = skipped.
set -u
PY=/usr/bin/python3
SRC="${H3S_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
HERE="$SRC/tests/conformance"
REF="$HERE/reference.py"
CLI="${H3S_CLI:-$SRC/build/h3strict}"
BOUND="${H3S_CONFORMANCE_BOUND:-0.03}"

if ! [ -x "$PY" ] || ! "$PY" -c "import numpy" >/dev/null 2>&1; then
  echo "SKIP: /usr/bin/python3 lacks numpy (apt-get install python3-numpy)"
  exit 77
fi

fail() { echo "FAIL: $*"; exit 1; }
run() { echo "+ $*"; "$@" || fail "$*"; }

# The reference must be sound before it judges anything.
run "$PY" "$HERE/selftest.py"

[ -x "$CLI" ] || fail "H3S_CLI='$CLI' is not an executable"
# Where the CLI lacks one of these commands (docs/cli.md), say so instead of failing on 'unknown command'.
for c in init inputs forward; do
  if "$CLI" "$c" --help 2>&1 | grep -q "unknown command"; then
    echo "SKIP: $CLI has no '$c' command yet (docs/cli.md); the reference self-test above passed"
    exit 77
  fi
done

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

# Configuration 1: the CLI's defaults.
run "$CLI" init --preset tiny --seed 5 --out "$W/M"
run "$CLI" inputs --model "$W/M" --seed 7 --out "$W/IN.safetensors"
run "$CLI" forward --model "$W/M" --inputs "$W/IN.safetensors" --out "$W/OUT.safetensors"
run "$PY" "$REF" compare --model "$W/M" --inputs "$W/IN.safetensors" --h3strict-out "$W/OUT.safetensors" \
  --bound "$BOUND" --json "$W/compare1.json"

# Configuration 2: batch 2, keyframes first and last, padded to a multiple of 64.
G=(--text 5 --frames 3 --latent-height 4 --latent-width 6 --audio-latents 3 --keyframes first,last --pad-to 64)
run "$CLI" inputs --model "$W/M" --seed 8 --batch 2 "${G[@]}" --out "$W/IN2.safetensors"
run "$PY" "$REF" check-layout --inputs "$W/IN2.safetensors" "${G[@]}"
run "$CLI" forward --model "$W/M" --inputs "$W/IN2.safetensors" --out "$W/OUT2.safetensors"
run "$PY" "$REF" compare --model "$W/M" --inputs "$W/IN2.safetensors" --h3strict-out "$W/OUT2.safetensors" \
  --bound "$BOUND" --json "$W/compare2.json"

# Configuration 3: attention_mask hiding LIVE text rows (different ones per item; docs/model.md 3.6(b): masked rows are
# never attended to, in the token refiner too). The bound alone cannot see a refiner that ignores the mask (on this
# model that moves the outputs by about 1.3e-2 relative), so the sharp check is the invariance: replacing the
# features of the hidden text rows must leave both outputs bitwise unchanged.
G3=(--text 6 --frames 2 --latent-height 4 --latent-width 6 --audio-latents 3 --keyframes last --pad-to 64)
run "$CLI" inputs --model "$W/M" --seed 9 --batch 2 "${G3[@]}" --attention-mask --out "$W/IN3base.safetensors"
run "$PY" "$REF" mask-text --inputs "$W/IN3base.safetensors" --rows 0:1,3 --rows 1:0,4 --out "$W/IN3.safetensors"
run "$PY" "$REF" mask-text --inputs "$W/IN3base.safetensors" --rows 0:1,3 --rows 1:0,4 --perturb-masked 1 \
  --out "$W/IN3p.safetensors"
run "$CLI" forward --model "$W/M" --inputs "$W/IN3.safetensors" --out "$W/OUT3.safetensors"
run "$PY" "$REF" compare --model "$W/M" --inputs "$W/IN3.safetensors" --h3strict-out "$W/OUT3.safetensors" \
  --bound "$BOUND" --json "$W/compare3.json"
run "$CLI" forward --model "$W/M" --inputs "$W/IN3p.safetensors" --out "$W/OUT3p.safetensors"
run "$PY" "$REF" diff-outputs "$W/OUT3.safetensors" "$W/OUT3p.safetensors" --max-rel 0

echo "conformance: 3 configurations passed, 0 failed"
