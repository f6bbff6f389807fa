#!/usr/bin/env bash
# Parallel runs against one process at the CLI on the small preset (docs/ARCHITECTURE.md, "Sequence- and
# tensor-parallel execution"): forward and grad of a 12-item batch (744 packed rows: three 256-row tiles) at every
# (sp, tp) of 2 and 4 ranks, every tensor of every output compared byte for byte with the single process's.
#
#   scripts/parallel_evidence.sh [BUILD_DIR] [OUT.json]     (defaults: build, docs/evidence/parallel_small.json)
#
# Needs a build with the MPI communicator, mpirun and python3.  Exits 1 when any tensor differs.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-docs/evidence/parallel_small.json}
CLI=$build/h3strict
[ -x "$CLI" ] || { echo "no $CLI: build first" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$CLI" init --preset small --seed 5 --out "$dir/small" --quiet >/dev/null
"$CLI" inputs --model "$dir/small" --seed 7 --batch 12 --frames 3 --latent-height 8 --latent-width 8 \
    --out "$dir/in.safetensors" --quiet >/dev/null
"$CLI" cotangent --model "$dir/small" --inputs "$dir/in.safetensors" --seed 3 --out "$dir/ct.safetensors" \
    --quiet >/dev/null
run() { # tag, launcher...
    local tag=$1; shift
    "$@" "$CLI" forward --model "$dir/small" --inputs "$dir/in.safetensors" --out "$dir/fwd.$tag.safetensors" --quiet \
        ${PAR:-} >/dev/null
    "$@" "$CLI" grad --model "$dir/small" --inputs "$dir/in.safetensors" --cotangent "$dir/ct.safetensors" \
        --out "$dir/grad.$tag.safetensors" --quiet ${PAR:-} >/dev/null
}
PAR="" run one env
grids=("2 1" "1 2" "4 1" "2 2" "1 4")
for g in "${grids[@]}"; do
    set -- $g
    PAR="--sp $1 --tp $2" run "sp$1tp$2" mpirun --oversubscribe -np $(($1 * $2))
done
python3 - "$dir" "$out" "$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)" "${grids[@]}" <<'PY'
import hashlib, json, struct, sys
d, out, commit, grids = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def tensors(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    data = b[8 + n:]
    return {k: hashlib.sha256(data[v["data_offsets"][0]:v["data_offsets"][1]]).hexdigest() for k, v in h.items()}
ref = {c: tensors(f"{d}/{c}.one.safetensors") for c in ("fwd", "grad")}
runs, total, differing = [], 0, 0
for g in grids:
    sp, tp = g.split()
    for c in ("fwd", "grad"):
        t = tensors(f"{d}/{c}.sp{sp}tp{tp}.safetensors")
        diff = sorted(k for k in ref[c] if t.get(k) != ref[c][k]) + sorted(k for k in t if k not in ref[c])
        runs.append({"command": "forward" if c == "fwd" else "grad", "sp": int(sp), "tp": int(tp),
                     "tensors": len(ref[c]), "differing": len(diff), "first_differing": diff[0] if diff else None})
        total += len(ref[c])
        differing += len(diff)
report = {"preset": "small", "batch": 12, "packed_rows": 744, "source_commit": commit,
          "command": "scripts/parallel_evidence.sh", "runs": runs,
          "summary": {"tensor_comparisons": total, "differing": differing},
          "single_process_sha256": ref}
json.dump(report, open(out, "w"), indent=1)
open(out, "a").write("\n")
print(f"parallel_evidence: {differing}/{total} tensors differ from one process ({len(runs)} runs) -> {out}")
sys.exit(1 if differing else 0)
PY
