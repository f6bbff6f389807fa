#!/usr/bin/env bash
# --grad-operands (docs/cli.md): bf16 and split are accepted by grad, trajectory and replay; any other
# value is bad usage (exit 2, one line, no output file); the CPU backend multiplies the exact F32 dy,
# so both values give it the same gradient bits.
set -u
. "$(dirname "$0")/check.sh"

tiny_request
for mode in bf16 split; do
    if "$CLI" grad --model "$dir/m" --inputs "$dir/in.safetensors" --cotangent "$dir/ct.safetensors" \
        --out "$dir/g_$mode.safetensors" --grad-operands "$mode" --quiet >/dev/null 2>"$dir/err.txt"; then ok
    else bad "grad --grad-operands $mode: $(cat "$dir/err.txt")"; fi
done
# the tensors (not the provenance header, which records the command) are identical on the CPU
if python3 - "$dir/g_bf16.safetensors" "$dir/g_split.safetensors" <<'PY'
import json, struct, sys
def tensors(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)
    return {k: b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]] for k, v in h.items()}
a, c = tensors(sys.argv[1]), tensors(sys.argv[2])
sys.exit(0 if a == c and len(a) > 0 else 1)
PY
then ok; else bad "CPU gradients differ between --grad-operands bf16 and split"; fi
"$CLI" grad --model "$dir/m" --inputs "$dir/in.safetensors" --cotangent "$dir/ct.safetensors" \
    --out "$dir/g_bad.safetensors" --grad-operands fp8 >/dev/null 2>"$dir/err.txt"
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <"$dir/err.txt")" -eq 1 ] && grep -q "grad-operands" "$dir/err.txt" &&
    [ ! -e "$dir/g_bad.safetensors" ]; then ok; else bad "bad --grad-operands: exit $rc, $(cat "$dir/err.txt")"; fi
"$CLI" trajectory --out "$dir/t.json" --grad-operands=split --steps 1 --seeds 11 --batch 2 --quiet >/dev/null 2>"$dir/err.txt"
rc=$?
if [ $rc -eq 0 ]; then ok; else bad "trajectory --grad-operands=split exited $rc: $(cat "$dir/err.txt")"; fi
finish cli_grad_operands
