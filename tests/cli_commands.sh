#!/usr/bin/env bash
# The CLI contract (docs/cli.md): every command on the tiny model, and bad input exits non-zero
# with exactly one line on stderr and never leaves a partial output file.
set -u
. "$(dirname "$0")/check.sh"
# a loaded machine must not turn a failing command's one stderr line into several: stage lines only where a
# check asks for them
export H3S_PROGRESS_AFTER=600

run_ok() { # name, command...
    local name=$1; shift
    if "$@" >"$dir/out.txt" 2>"$dir/err.txt"; then ok; else bad "$name exited $? : $(cat "$dir/err.txt")"; fi
}
# expect failure: exit non-zero, exactly one stderr line starting "h3strict", output file absent
run_fail() { # name, output-file-that-must-not-exist, command...
    local name=$1 outfile=$2; shift 2
    if "$@" >"$dir/out.txt" 2>"$dir/err.txt"; then bad "$name succeeded"; return; fi
    local lines; lines=$(wc -l <"$dir/err.txt")
    if [ "$lines" -ne 1 ]; then bad "$name printed $lines stderr lines: $(cat "$dir/err.txt")"; else ok; fi
    if ! grep -q '^h3strict' "$dir/err.txt"; then bad "$name: stderr line is not an h3strict message"; else ok; fi
    if [ -n "$outfile" ] && [ -e "$outfile" ]; then bad "$name left $outfile behind"; else ok; fi
    # temporaries are dot-files (.<name>.tmp-<pid>-<n>, .<dir>.init-<pid>-<n>): plain ls hides them
    if find "$dir" -name '.*.tmp-*' -o -name '.*.init-*' | grep -q .; then bad "$name left a temporary file"; else ok; fi
}

run_ok version "$CLI" --version
run_ok help "$CLI" --help
run_ok init "$CLI" init --preset tiny --seed 5 --out "$dir/m"
run_ok init-again "$CLI" init --preset tiny --seed 5 --out "$dir/m2"
if cmp -s "$dir/m/diffusion_pytorch_model.safetensors" "$dir/m2/diffusion_pytorch_model.safetensors"; then ok; else bad "init is not byte-reproducible"; fi
run_ok inputs "$CLI" inputs --model "$dir/m" --seed 7 --batch 2 --out "$dir/in.safetensors"
run_ok forward "$CLI" forward --model "$dir/m" --inputs "$dir/in.safetensors" --out "$dir/out.safetensors"
run_ok forward-threads "$CLI" forward --model "$dir/m" --inputs "$dir/in.safetensors" --out "$dir/out1.safetensors" --threads 1
# the tensors (the data area after the header) are byte-equal; the headers differ only in their provenance
data_area() { tail -c +$(($(od -An -t u8 -N 8 "$1" | tr -d ' ') + 9)) "$1"; }
if cmp -s <(data_area "$dir/out.safetensors") <(data_area "$dir/out1.safetensors") && [ -s "$dir/out1.safetensors" ]; then ok; else bad "forward differs between default and 1 thread"; fi
run_ok cotangent "$CLI" cotangent --model "$dir/m" --inputs "$dir/in.safetensors" --seed 3 --out "$dir/ct.safetensors"
run_ok grad "$CLI" grad --model "$dir/m" --inputs "$dir/in.safetensors" --cotangent "$dir/ct.safetensors" --out "$dir/g.safetensors"
run_ok verify "$CLI" verify --model "$dir/m"
run_ok manifest "$CLI" verify --model "$dir/m" --write-manifest "$dir/manifest.json"
run_ok verify-manifest "$CLI" verify --model "$dir/m" --manifest "$dir/manifest.json"
run_ok replay "$CLI" replay --model "$dir/m" --inputs "$dir/in.safetensors" --out "$dir/replay.json"
if grep -q '"first_drift":[[:space:]]*null' "$dir/replay.json"; then ok; else bad "replay reports a drift"; fi
# a found drift is exit 1 (docs/cli.md), with the report written
"$CLI" replay --model "$dir/m" --inputs "$dir/in.safetensors" --out "$dir/replay2.json" --plant-drift block.0.norm2 --no-golden >"$dir/out.txt" 2>"$dir/err.txt"
rc=$?
if [ "$rc" -eq 1 ]; then ok; else bad "replay --plant-drift exited $rc, expected 1"; fi
if grep -q '"first_drift":[[:space:]]*"block.0.norm2"' "$dir/replay2.json"; then ok; else bad "planted drift not found at block.0.norm2"; fi
run_ok trajectory "$CLI" trajectory --model "$dir/m" --seeds 11 --steps 2 --batch 3 --out "$dir/traj.json" --quiet
if tail -n 1 "$dir/out.txt" | grep -q '^strict: 0/8 comparisons differ (1 seeds x 2 steps x 4)$'; then ok; else bad "trajectory summary line: $(tail -n 1 "$dir/out.txt")"; fi

# ---- bad input: one line, non-zero, no output file
run_fail missing-model "$dir/x.safetensors" "$CLI" forward --model "$dir/nope" --inputs "$dir/in.safetensors" --out "$dir/x.safetensors"
run_fail missing-inputs "$dir/x.safetensors" "$CLI" forward --model "$dir/m" --inputs "$dir/nope.safetensors" --out "$dir/x.safetensors"
head -c 100 "$dir/in.safetensors" >"$dir/trunc.safetensors"
run_fail truncated-inputs "$dir/x.safetensors" "$CLI" forward --model "$dir/m" --inputs "$dir/trunc.safetensors" --out "$dir/x.safetensors"
run_fail model-as-inputs "$dir/x.safetensors" "$CLI" forward --model "$dir/m" --inputs "$dir/m/diffusion_pytorch_model.safetensors" --out "$dir/x.safetensors"
run_fail out-in-missing-dir "" "$CLI" forward --model "$dir/m" --inputs "$dir/in.safetensors" --out "$dir/no/such/dir/x.safetensors"
run_fail bad-option "" "$CLI" forward --model "$dir/m" --frobnicate
run_fail bad-device "$dir/x.safetensors" "$CLI" forward --model "$dir/m" --inputs "$dir/in.safetensors" --out "$dir/x.safetensors" --device tpu
run_fail bad-threads "$dir/x.safetensors" "$CLI" forward --model "$dir/m" --inputs "$dir/in.safetensors" --out "$dir/x.safetensors" --threads 0
run_fail grad-bad-cotangent "$dir/x.safetensors" "$CLI" grad --model "$dir/m" --inputs "$dir/in.safetensors" --cotangent "$dir/out.safetensors.nope" --out "$dir/x.safetensors"
run_fail grad-wrong-cotangent "$dir/x.safetensors" "$CLI" grad --model "$dir/m" --inputs "$dir/in.safetensors" --cotangent "$dir/in.safetensors" --out "$dir/x.safetensors"
run_fail unknown-preset "$dir/mx" "$CLI" init --preset huge --seed 1 --out "$dir/mx"
run_fail bad-seed "$dir/mx" "$CLI" init --preset tiny --seed -4 --out "$dir/mx"
run_fail bad-keyframes "$dir/x.safetensors" "$CLI" inputs --model "$dir/m" --seed 1 --keyframes middle --out "$dir/x.safetensors"
run_fail odd-latent "$dir/x.safetensors" "$CLI" inputs --model "$dir/m" --seed 1 --latent-height 5 --out "$dir/x.safetensors"
echo '{"diffusion_pytorch_model.safetensors": "0000000000000000000000000000000000000000000000000000000000000000"}' >"$dir/badmanifest.json"
run_fail wrong-manifest "" "$CLI" verify --model "$dir/m" --manifest "$dir/badmanifest.json"
# --device cuda: without a GPU (or in a build without CUDA) it must fail with one line and no output; with a GPU
# it must succeed unless this build has no CUDA backend.  (Before, a silent success passed either way.)
has_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then has_gpu=1; fi
if "$CLI" forward --model "$dir/m" --inputs "$dir/in.safetensors" --out "$dir/c.safetensors" --device cuda >/dev/null 2>"$dir/err.txt"; then
    if [ "$has_gpu" -eq 1 ]; then ok; else bad "--device cuda succeeded on a machine without a GPU"; fi
else
    if [ "$(wc -l <"$dir/err.txt")" -eq 1 ] && [ ! -e "$dir/c.safetensors" ]; then ok; else bad "--device cuda failure: $(cat "$dir/err.txt")"; fi
    if [ "$has_gpu" -eq 1 ] && ! grep -q 'no CUDA backend' "$dir/err.txt"; then bad "--device cuda failed with a GPU present: $(cat "$dir/err.txt")"; else ok; fi
fi
finish cli_commands
