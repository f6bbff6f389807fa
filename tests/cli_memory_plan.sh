#!/usr/bin/env bash
# grad --recompute and --param-grads (docs/cli.md#grad): --recompute blocks writes the same gradient bytes as
# --recompute none (the default); --param-grads none writes the three input gradients only, a glob writes the input
# gradients and exactly the parameters it matches, each with the bytes of the full run; the default output is the
# one without the options; a glob that matches nothing, or a bad --recompute, is bad usage (exit 2, one line, no
# output file); --verbose reports the memory estimate and the measured peaks.  trajectory and replay with
# --recompute blocks write the report they write without it.
set -u
. "$(dirname "$0")/check.sh"

tiny_request
grad() { # grad OUT [options...]
    local out=$1
    shift
    "$CLI" grad --model "$dir/m" --inputs "$dir/in.safetensors" --cotangent "$dir/ct.safetensors" --out "$dir/$out" \
        --quiet "$@"
}
for run in "full" "none --recompute none" "blocks --recompute blocks" "all --param-grads all" \
    "inputs --param-grads none" "inputs_rc --param-grads none --recompute blocks" \
    "block0 --param-grads transformer_blocks.0.*" "norms --param-grads *norm*.weight --recompute=blocks"; do
    set -f
    # shellcheck disable=SC2086
    set -- $run
    set +f
    name=$1
    shift
    if grad "$name.safetensors" "$@" >"$dir/out_$name.txt" 2>"$dir/err.txt"; then ok
    else bad "grad $*: $(cat "$dir/err.txt")"; fi
done
# stdout names the number of parameter gradients written
grep -q "3 input gradients and 52 parameter gradients" "$dir/out_blocks.txt" && ok || bad "blocks: $(cat "$dir/out_blocks.txt")"
grep -q "3 input gradients and 0 parameter gradients" "$dir/out_inputs.txt" && ok || bad "none: $(cat "$dir/out_inputs.txt")"
# the tensors (not the provenance header, which records the command line) compared byte for byte
if python3 - "$dir" <<'PY'
import fnmatch, json, struct, sys
d = sys.argv[1]
def tensors(name):
    b = open(f"{d}/{name}.safetensors", 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)
    return list(h), {k: b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]] for k, v in h.items()}
order, full = tensors("full")
inputs = ["hidden_states", "audio_hidden_states", "encoder_hidden_states"]
bad = []
def same(name, want):
    o, t = tensors(name)
    if sorted(o) != sorted(want): bad.append(f"{name}: {len(o)} tensors, expected {len(want)}")
    for k in want:
        if t.get(k) != full[k]: bad.append(f"{name}: {k} differs from the full run")
params = [k for k in order if k not in inputs]
assert len(params) == 52, len(params)
same("none", order); same("blocks", order); same("all", order)
same("inputs", inputs); same("inputs_rc", inputs)
same("block0", inputs + [k for k in params if fnmatch.fnmatchcase(k, "transformer_blocks.0.*")])
norms = [k for k in params if fnmatch.fnmatchcase(k, "*norm*.weight")]
same("norms", inputs + norms)
if not 0 < len(norms) < 52: bad.append(f"{len(norms)} norm weights")
# the default file's layout (tensor order, dtypes, shapes, offsets) is the one --recompute blocks and
# --param-grads all write: only the recorded command line differs
def header(name):
    b = open(f"{d}/{name}.safetensors", 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)
    return json.dumps(h), b[8 + n:]
for name in ("none", "blocks", "all"):
    if header(name) != header("full"): bad.append(f"{name}: header layout or data bytes differ from the default")
print("\n".join(bad), file=sys.stderr)
sys.exit(1 if bad else 0)
PY
then ok; else bad "gradient files differ (above)"; fi
# bad usage: one line, exit 2, no output
for args in "--param-grads nothing.matches*" "--recompute layers" "--recompute"; do
    set -f
    # shellcheck disable=SC2086
    grad bad.safetensors $args >/dev/null 2>"$dir/err.txt"
    rc=$?
    set +f
    if [ $rc -eq 2 ] && [ "$(wc -l <"$dir/err.txt")" -eq 1 ] && [ ! -e "$dir/bad.safetensors" ]; then ok
    else bad "grad $args: exit $rc, $(cat "$dir/err.txt")"; fi
done
grad bad.safetensors --param-grads 'nothing.matches*' >/dev/null 2>"$dir/err.txt"
grep -q "matches no parameter" "$dir/err.txt" && ok || bad "no-match message: $(cat "$dir/err.txt")"
# trajectory and replay with --recompute blocks: the same report (its provenance and command, which record the
# command line, left out)
"$CLI" trajectory --out "$dir/t_none.json" --steps 2 --seeds 11 --batch 2 --quiet >/dev/null 2>&1 || bad "trajectory"
"$CLI" trajectory --out "$dir/t_blocks.json" --steps 2 --seeds 11 --batch 2 --recompute blocks --quiet \
    >/dev/null 2>"$dir/err.txt" || bad "trajectory --recompute blocks: $(cat "$dir/err.txt")"
"$CLI" replay --model "$dir/m" --inputs "$dir/in.safetensors" --out "$dir/r_none.json" --quiet >/dev/null 2>&1 ||
    bad "replay"
"$CLI" replay --model "$dir/m" --inputs "$dir/in.safetensors" --out "$dir/r_blocks.json" --recompute blocks \
    --quiet >/dev/null 2>"$dir/err.txt" || bad "replay --recompute blocks: $(cat "$dir/err.txt")"
if python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def load(n):
    r = json.load(open(f"{d}/{n}.json")); r.pop("provenance", None); r.pop("command", None); return r
ok = load("t_none") == load("t_blocks") and load("r_none") == load("r_blocks")
ok = ok and len(json.dumps(load("r_none"))) > 1000
sys.exit(0 if ok else 1)
PY
then ok; else bad "trajectory or replay report differs with --recompute blocks"; fi
"$CLI" replay --model "$dir/m" --inputs "$dir/in.safetensors" --out "$dir/r_bad.json" --recompute all \
    >/dev/null 2>"$dir/err.txt"
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <"$dir/err.txt")" -eq 1 ] && [ ! -e "$dir/r_bad.json" ]; then ok
else bad "replay --recompute all: exit $rc, $(cat "$dir/err.txt")"; fi
# --verbose: the estimate and the measured peaks
"$CLI" grad --model "$dir/m" --inputs "$dir/in.safetensors" --cotangent "$dir/ct.safetensors" \
    --out "$dir/v.safetensors" --recompute blocks --verbose >/dev/null 2>"$dir/err.txt"
if grep -q "memory: estimated .* measured: model tensors peaked at .* host peak resident set" "$dir/err.txt"; then ok
else bad "--verbose memory line missing: $(cat "$dir/err.txt")"; fi
finish cli_memory_plan
