#!/usr/bin/env bash
# trajectory --inputs: the user's own request is the rollout and item 0 of the training batch.  A request written
# by `inputs` with the seed and layout of a seeded run must reproduce that run's every compared tensor (so the
# file's values, not seeded ones, are sampled, and its condition rows are found); another request must not; the
# scheduler shifts are options; bad requests exit with their class.
set -u
CLI=${H3S_CLI:?H3S_CLI must name the built h3strict}
PY=$(command -v python3 || true)
[ -n "$PY" ] || { echo "SKIP: python3 is needed to read the reports"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
bad() { fails=$((fails + 1)); echo "FAIL: $*" >&2; }
run() { "$@" >"$dir/out.txt" 2>"$dir/err.txt"; }
m="$dir/m"
run "$CLI" init --preset tiny --seed 5 --out "$m" || bad "init"
# the seeded run's layout: 6 text rows, 2 frames of 4 x 6, 4 audio latents, a first keyframe
run "$CLI" inputs --model "$m" --seed 11 --keyframes first --out "$dir/req11.safetensors" || bad "inputs 11"
run "$CLI" inputs --model "$m" --seed 12 --keyframes first --out "$dir/req12.safetensors" || bad "inputs 12"
run "$CLI" trajectory --model "$m" --seeds 11 --steps 2 --batch 3 --out "$dir/seeded.json" --quiet || bad "seeded run"
# a seed above 2^53 is recorded with all its digits (a double would read 9007199254740992)
run "$CLI" trajectory --model "$m" --seeds 9007199254740993 --steps 1 --batch 2 --no-grad --out "$dir/big.json" \
    --quiet || bad "big seed run"
"$PY" -c 'import json, sys; s = json.load(open(sys.argv[1]))["seeds"][0]["seed"]; sys.exit(s != 9007199254740993)' \
    "$dir/big.json" || bad "the seed above 2^53 was not recorded exactly"
run "$CLI" trajectory --model "$m" --inputs "$dir/req11.safetensors" --seeds 11 --steps 2 --batch 3 \
    --out "$dir/req11.json" --quiet || bad "trajectory --inputs exited $?: $(cat "$dir/err.txt")"
grep -q '^strict: 0/8 comparisons differ (1 seeds x 2 steps x 4)$' "$dir/out.txt" || bad "summary: $(cat "$dir/out.txt")"
run "$CLI" trajectory --model "$m" --inputs="$dir/req12.safetensors" --seeds 11 --steps 2 --batch 3 \
    --out "$dir/req12.json" --quiet || bad "trajectory --inputs (seed 12 request) exited $?"
run "$CLI" trajectory --model "$m" --inputs "$dir/req11.safetensors" --seeds 11 --steps 2 --batch 3 \
    --condition-rows 0 --out "$dir/req11_nocond.json" --quiet || bad "--condition-rows 0 exited $?"
run "$CLI" inputs --model "$m" --seed 12 --keyframes first --batch 2 --out "$dir/batch12.safetensors" || bad "inputs b"
run "$CLI" trajectory --model "$m" --inputs "$dir/req11.safetensors" --batch-inputs "$dir/batch12.safetensors" \
    --seeds 11 --steps 2 --batch 3 --out "$dir/req11_b12.json" --quiet || bad "--batch-inputs exited $?"
run "$CLI" trajectory --model "$m" --seeds 11 --steps 2 --batch 3 --shift-video 1 --shift-audio=1 \
    --out "$dir/shift1.json" --quiet || bad "--shift-video exited $?"
"$PY" - "$dir" <<'PYEOF' || fails=$((fails + 1))
import json, sys
d = sys.argv[1]
def load(n):
    with open(f"{d}/{n}") as f:
        return json.load(f)
def digests(r):
    return [(name, c["sha256_alone"], c["sha256_batch"]) for st in r["seeds"][0]["steps"]
            for grp in ("comparisons", "gradients") for name, c in sorted(st.get(grp, {}).items())]
seeded, req11, req12, nocond, shift1, b12 = (load(n) for n in ("seeded.json", "req11.json", "req12.json",
                                                               "req11_nocond.json", "shift1.json", "req11_b12.json"))
bad = []
if len(digests(seeded)) != 14:
    bad.append(f"seeded report holds {len(digests(seeded))} digests, expected 14")
if digests(req11) != digests(seeded):
    bad.append("the request written for seed 11 does not reproduce the seeded run")
if req11["layout"]["condition_rows"] != 6:
    bad.append(f"condition rows inferred {req11['layout']['condition_rows']}, expected 6")
if not req11["requests"].startswith("the user's request"):
    bad.append("the report does not say the request was the user's")
if any(a == b for a, b in zip(digests(req12), digests(seeded))):
    bad.append("another request gave a digest of the seeded run")
if digests(nocond) == digests(req11):
    bad.append("holding no condition rows fixed changed nothing")
if shift1["shift_video"] != 1 or shift1["seeds"][0]["steps"][1]["t_video"] == seeded["seeds"][0]["steps"][1]["t_video"]:
    bad.append("--shift-video 1 did not change the video timesteps")
# the batch file's requests fill the training batch: the rollout is unchanged, the batch is not
alone = lambda r: [a for _, a, _ in digests(r)]
batch = lambda r: [b for _, _, b in digests(r)]
if alone(b12) != alone(seeded):
    bad.append("--batch-inputs changed the rollout")
if any(x == y for x, y in zip(batch(b12), batch(seeded))):
    bad.append("--batch-inputs did not change the training batch")
if "batch file" not in b12["requests"]:
    bad.append("the report does not say a batch file was used")
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PYEOF
# bad requests: a file for another model (3), a mask (3), too many condition rows (2), --condition-rows alone (2)
run "$CLI" init --preset small --layers 1 --seed 1 --out "$dir/small"
run "$CLI" inputs --model "$dir/small" --seed 1 --out "$dir/small_req.safetensors"
run "$CLI" trajectory --model "$m" --inputs "$dir/small_req.safetensors" --steps 1 --out "$dir/x.json"
[ $? -eq 3 ] || bad "a request for another model: $(cat "$dir/err.txt")"
run "$CLI" inputs --model "$m" --seed 1 --attention-mask --out "$dir/mask_req.safetensors"
run "$CLI" trajectory --model "$m" --inputs "$dir/mask_req.safetensors" --steps 1 --out "$dir/x.json"
[ $? -eq 3 ] || bad "a request with a mask: $(cat "$dir/err.txt")"
run "$CLI" trajectory --model "$m" --inputs "$dir/req11.safetensors" --condition-rows 1000 --steps 1 --out "$dir/x.json"
[ $? -eq 2 ] || bad "--condition-rows 1000: $(cat "$dir/err.txt")"
run "$CLI" trajectory --condition-rows 1 --steps 1 --out "$dir/x.json"
[ $? -eq 2 ] || bad "--condition-rows without --inputs: $(cat "$dir/err.txt")"
run "$CLI" trajectory --batch-inputs "$dir/batch12.safetensors" --steps 1 --out "$dir/x.json"
[ $? -eq 2 ] || bad "--batch-inputs without --inputs: $(cat "$dir/err.txt")"
run "$CLI" inputs --model "$m" --seed 12 --batch 2 --out "$dir/batch_t2va.safetensors"
run "$CLI" trajectory --model "$m" --inputs "$dir/req11.safetensors" --batch-inputs "$dir/batch_t2va.safetensors" \
    --steps 1 --out "$dir/x.json"
[ $? -eq 3 ] || bad "a batch file of another layout: $(cat "$dir/err.txt")"
[ -e "$dir/x.json" ] && bad "a refused trajectory wrote its report"
echo "cli_trajectory_inputs: $fails failed"
[ "$fails" -eq 0 ]
