#!/usr/bin/env bash
# CPU accuracy evidence: runs every operator test and the whole-model test with their measured
# errors printed (H3S_TEST_VERBOSE=1) and a per-node replay of the tiny model, and writes
#   $OUT/cpu_accuracy.log   every measured error beside its bound, test by test
#   $OUT/cpu_accuracy.json  pass/fail per test and the whole-model figures quoted in docs/NUMERICS.md
#   $OUT/replay_tiny.json   h3strict replay: every node's SHA-256, repeat/batch equality, golden error
# Usage, from the repository root after building into build/:  OUT=docs/evidence bash scripts/cpu_evidence.sh
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$SRC/docs/evidence}
BUILD=${H3S_BUILD:-$SRC/build}
mkdir -p "$OUT"
LOG=$OUT/cpu_accuracy.log
TESTS="test_linear test_attention test_rmsnorm test_residual test_swiglu test_rope test_timestep test_adaln test_model"
: >"$LOG"
results=""
for t in $TESTS; do
    echo "===== $t" >>"$LOG"
    if H3S_TEST_VERBOSE=1 "$BUILD/$t" >>"$LOG" 2>&1; then s=passed; else s=failed; fi
    results="$results$t=$s "
done
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$BUILD/h3strict" init --preset tiny --seed 5 --out "$W/m" >/dev/null &&
    "$BUILD/h3strict" inputs --model "$W/m" --seed 7 --batch 2 --out "$W/in.safetensors" >/dev/null &&
    "$BUILD/h3strict" replay --model "$W/m" --inputs "$W/in.safetensors" --out "$OUT/replay_tiny.json" >>"$LOG" 2>&1
replay_rc=$?
python3 - "$LOG" "$OUT/cpu_accuracy.json" "$results" "$replay_rc" <<'PY'
import json, re, sys
log, out, results, replay_rc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
text = open(log).read()
def num(pattern):
    m = re.search(pattern, text)
    return [float(x) for x in m.groups()] if m else None
fwd = num(r"forward rel-L2 vs golden: sample ([0-9.e+-]+), audio_sample ([0-9.e+-]+)")
grads = num(r"input-gradient rel-L2: hidden ([0-9.e+-]+), audio ([0-9.e+-]+), encoder ([0-9.e+-]+)")
worst = num(r"parameter gradients: \d+, worst rel-L2 ([0-9.e+-]+)")
tests = dict(r.split("=") for r in results.split())
doc = {
    "command": "OUT=docs/evidence bash scripts/cpu_evidence.sh",
    "tests": tests,
    "whole_model_tiny_vs_fp64_golden": {
        "sample": fwd and fwd[0], "audio_sample": fwd and fwd[1],
        "d_hidden_states": grads and grads[0], "d_audio_hidden_states": grads and grads[1],
        "d_encoder_hidden_states": grads and grads[2], "worst_parameter_gradient": worst and worst[0],
    },
    "replay_exit_code": replay_rc,
    "all_passed": all(v == "passed" for v in tests.values()) and replay_rc == 0,
}
json.dump(doc, open(out, "w"), indent=2)
print(json.dumps(doc["whole_model_tiny_vs_fp64_golden"]), "all_passed:", doc["all_passed"])
sys.exit(0 if doc["all_passed"] else 1)
PY
