#!/usr/bin/env bash
# Parallel runs at the CLI (docs/cli.md, "Parallel runs"): forward, grad, trajectory and replay under mpirun with
# --sp A --tp B, (A, B) in (2, 1), (1, 2), (3, 1), (2, 2), (4, 1), write files whose tensors (and reports, less the command line and provenance) are byte-identical
# to the single process's, on the tiny preset with 312 packed rows (two 256-row tiles, the second starting inside
# a slice) and with padding rows and an attention mask; a rank with a bad or different input file makes every rank
# exit non-zero with one line and no output; a world that does not match --sp x --tp is refused.
set -u
. "$(dirname "$0")/check.sh"
if [ "${H3S_MPI_BUILT:-OFF}" != "ON" ]; then
    echo "SKIP: this build has no MPI communicator (configure found no Open MPI)"
    exit 77
fi
MPIEXEC=${H3S_MPIEXEC:-$(command -v mpirun || true)}
if [ -z "$MPIEXEC" ]; then
    echo "SKIP: no mpirun"
    exit 77
fi
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to compare the files"; exit 77; }
export H3S_PROGRESS_AFTER=600 OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# under the sanitizers: ASan's checks stay, LeakSanitizer cannot attribute Open MPI's unloaded components (test_sp)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# a bound on every run: a rank left waiting in a collective fails the test instead of hanging it
mpi() { timeout 300 "$MPIEXEC" --oversubscribe "$@"; }

# tensors of two safetensors files (metadata aside), or two JSON reports less command and provenance
cat >"$dir/same.py" <<'PY'
import json, struct, sys
def tensors(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return h, b[8 + n:]
def report(p):
    d = json.load(open(p))
    for k in ("command", "provenance"):
        d.pop(k, None)
    return d
a, b = sys.argv[1], sys.argv[2]
x, y = (report(a), report(b)) if a.endswith(".json") else (tensors(a), tensors(b))
if x != y:
    print("differ:", a, b)
    sys.exit(1)
PY
same() { if python3 "$dir/same.py" "$1" "$2"; then ok; else bad "$3: $2 differs from $1"; fi; }

cd "$dir" || exit 1
"$CLI" init --preset tiny --seed 5 --out tiny >/dev/null || { echo "FAIL: init"; exit 1; }
"$CLI" inputs --model tiny --seed 7 --batch 12 --out in.safetensors >/dev/null || exit 1
"$CLI" inputs --model tiny --seed 9 --batch 3 --pad-to 16 --attention-mask --out pad.safetensors >/dev/null || exit 1
"$CLI" inputs --model tiny --seed 8 --batch 12 --out other.safetensors >/dev/null || exit 1
for f in in pad; do
    "$CLI" cotangent --model tiny --inputs $f.safetensors --seed 3 --out ct_$f.safetensors >/dev/null || exit 1
    "$CLI" forward --model tiny --inputs $f.safetensors --out fwd_$f.safetensors --quiet >/dev/null || exit 1
    "$CLI" grad --model tiny --inputs $f.safetensors --cotangent ct_$f.safetensors --out grad_$f.safetensors \
        --quiet >/dev/null || exit 1
done
"$CLI" trajectory --out traj.json --seeds 11 --steps 2 --batch 3 --quiet >/dev/null
[ -s traj.json ] || exit 1
"$CLI" replay --model tiny --inputs in.safetensors --out replay.json --quiet >/dev/null || exit 1

for grid in "2 1" "1 2" "3 1" "2 2" "4 1"; do
    set -- $grid
    sp=$1 tp=$2 np=$(($1 * $2)) tag="sp$1tp$2"
    for f in in pad; do
        if mpi -np $np "$CLI" forward --model tiny --inputs $f.safetensors --out fwd_$f.$tag.safetensors --sp $sp \
            --tp $tp --quiet >/dev/null 2>err.txt; then
            same fwd_$f.safetensors fwd_$f.$tag.safetensors "forward $f --sp $sp --tp $tp"
        else bad "forward $f --sp $sp --tp $tp: $(cat err.txt)"; fi
        if mpi -np $np "$CLI" grad --model tiny --inputs $f.safetensors --cotangent ct_$f.safetensors \
            --out grad_$f.$tag.safetensors --sp $sp --tp $tp --quiet >/dev/null 2>err.txt; then
            same grad_$f.safetensors grad_$f.$tag.safetensors "grad $f --sp $sp --tp $tp"
        else bad "grad $f --sp $sp --tp $tp: $(cat err.txt)"; fi
    done
    if mpi -np $np "$CLI" trajectory --out traj.$tag.json --seeds 11 --steps 2 --batch 3 --sp $sp --tp $tp \
        --quiet >out.txt 2>err.txt; then
        same traj.json traj.$tag.json "trajectory --sp $sp --tp $tp"
        # rank 0 alone prints the summary
        if [ "$(grep -c '^strict:' out.txt)" -eq 1 ]; then ok; else bad "trajectory printed $(grep -c '^strict:' out.txt) summaries"; fi
    else bad "trajectory --sp $sp --tp $tp: $(cat err.txt)"; fi
    if mpi -np $np "$CLI" replay --model tiny --inputs in.safetensors --out replay.$tag.json --sp $sp --tp $tp \
        --quiet >/dev/null 2>err.txt; then
        same replay.json replay.$tag.json "replay --sp $sp --tp $tp"
    else bad "replay --sp $sp --tp $tp: $(cat err.txt)"; fi
done

# A failing rank: each rank's exit status is recorded by a shell around it (so mpirun does not end the others
# first); every one must be non-zero, one line on stderr in all, no output.
fail_case() { # name, expected message pattern, rank-0 inputs, rank-1 inputs, extra args...
    local name=$1 pattern=$2 in0=$3 in1=$4; shift 4
    rm -f rc.* o.safetensors
    mpi -np 1 sh -c '"$@"; echo $? > rc.$OMPI_COMM_WORLD_RANK' sh "$CLI" forward --model tiny --inputs "$in0" \
        --out o.safetensors --quiet "$@" : -np 1 sh -c '"$@"; echo $? > rc.$OMPI_COMM_WORLD_RANK' sh "$CLI" forward \
        --model tiny --inputs "$in1" --out o.safetensors --quiet "$@" >out.txt 2>err.txt
    for r in 0 1; do
        if [ -s rc.$r ] && [ "$(cat rc.$r)" -ne 0 ]; then ok; else bad "$name: rank $r exited $(cat rc.$r 2>/dev/null)"; fi
    done
    local lines; lines=$(wc -l <err.txt)
    if [ "$lines" -eq 1 ] && grep -qE "$pattern" err.txt; then ok; else bad "$name: stderr was: $(cat err.txt)"; fi
    if [ -e o.safetensors ]; then bad "$name left an output"; else ok; fi
    if find . -name '.*.tmp-*' | grep -q .; then bad "$name left a temporary file"; else ok; fi
}
head -c 100 in.safetensors >bad.safetensors
fail_case "bad file on rank 1" '^h3strict forward: rank 1: bad.safetensors: .*' in.safetensors bad.safetensors --sp 2
if [ "$(cat rc.1)" = 3 ] && [ "$(cat rc.0)" = 3 ]; then ok; else bad "a bad input file exits 3 on every rank"; fi
fail_case "bad file on rank 0" '^h3strict forward: rank 0: bad.safetensors: ' bad.safetensors in.safetensors --sp 2
fail_case "other inputs on rank 1" "^h3strict forward: rank 1: inputs file differs from rank 0's" in.safetensors \
    other.safetensors --sp 2
# under --tp the model's set-up is collective (its weight slices go all-to-all): a rank whose file is bad must not
# leave the other waiting there
fail_case "bad file on rank 1, --tp 2" '^h3strict forward: rank 1: bad.safetensors: .*' in.safetensors bad.safetensors \
    --tp 2
fail_case "bad file on rank 0, --sp 2 --tp 1 x 2 ranks" '^h3strict forward: rank 0: bad.safetensors: ' bad.safetensors \
    in.safetensors --tp 2
fail_case "world of 2, --sp 3" '^h3strict forward: mpirun started 2 ranks but --sp 3 x --tp 1 = 3' in.safetensors \
    in.safetensors --sp 3

# --tp beyond the model's heads: every rank refuses while loading (exit 2), one line, no output
rm -f o.safetensors
mpi -np 4 "$CLI" forward --model tiny --inputs in.safetensors --out o.safetensors --tp 4 --quiet >out.txt 2>err.txt
rc=$?
if [ $rc -eq 2 ] && [ "$(grep -c '^h3strict' err.txt)" -eq 1 ] && grep -q 'tp 4 exceeds the heads (3)' err.txt; then ok
else bad "--tp 4 on 3 heads exited $rc: $(cat err.txt)"; fi
[ -e o.safetensors ] && bad "--tp 4 on 3 heads wrote an output"
# more ranks than packed rows: refused on every rank before the pass (exit 3), one line, no output
"$CLI" inputs --model tiny --seed 7 --text 1 --frames 1 --latent-height 2 --latent-width 2 --audio-latents 1 \
    --out small.safetensors >/dev/null || exit 1
rm -f o.safetensors
mpi -np 5 "$CLI" forward --model tiny --inputs small.safetensors --out o.safetensors --sp 5 --quiet >out.txt 2>err.txt
rc=$?
if [ $rc -eq 3 ] && [ "$(grep -c '^h3strict' err.txt)" -eq 1 ] && grep -q '4 packed rows cannot be cut into 5' err.txt; then
    ok
else bad "--sp 5 on 4 rows exited $rc: $(cat err.txt)"; fi
[ -e o.safetensors ] && bad "--sp 5 on 4 rows wrote an output"
# the same for the passes a trajectory runs (tensor parallel over 4 ranks, 3 heads): one line, exit 2
mpi -np 4 "$CLI" trajectory --model tiny --seeds 11 --steps 1 --batch 2 --no-grad --tp 4 --out t.json --quiet \
    >out.txt 2>err.txt
rc=$?
if [ $rc -eq 2 ] && [ "$(grep -c '^h3strict' err.txt)" -eq 1 ] && grep -q 'tp 4 exceeds the heads (3)' err.txt; then ok
else bad "trajectory --tp 4 on 3 heads exited $rc: $(cat err.txt)"; fi
[ -e t.json ] && bad "trajectory --tp 4 on 3 heads wrote a report"

# the memory guard is judged on each rank (its own memory) and agreed: a rank that refuses makes every rank refuse,
# one line, exit 2, instead of leaving the others waiting
rm -f rc.* g.safetensors
mpi -np 1 sh -c '"$@"; echo $? > rc.$OMPI_COMM_WORLD_RANK' sh "$CLI" grad --model tiny --inputs in.safetensors \
    --cotangent ct_in.safetensors --out g.safetensors --sp 2 --quiet : -np 1 sh -c \
    'H3S_MEMORY_LIMIT=1000 "$@"; echo $? > rc.$OMPI_COMM_WORLD_RANK' sh "$CLI" grad --model tiny \
    --inputs in.safetensors --cotangent ct_in.safetensors --out g.safetensors --sp 2 --quiet >out.txt 2>err.txt
if [ "$(cat rc.0 2>/dev/null)" = 2 ] && [ "$(cat rc.1 2>/dev/null)" = 2 ] && [ "$(wc -l <err.txt)" -eq 1 ] &&
    grep -q '^h3strict grad: rank 1: this grad needs about .* more than the 1000 bytes of memory' err.txt; then ok
else bad "memory refused on rank 1: exits $(cat rc.0 2>/dev/null)/$(cat rc.1 2>/dev/null): $(cat err.txt)"; fi
[ -e g.safetensors ] && bad "the refused grad wrote an output"

# a parallel run on the CUDA backend is refused (exit 4) before anything starts
"$CLI" forward --model tiny --inputs in.safetensors --out o.safetensors --sp 2 --device cuda >out.txt 2>err.txt
rc=$?
if [ $rc -eq 4 ] && [ "$(wc -l <err.txt)" -eq 1 ] && grep -q 'strict CPU backend only' err.txt; then ok
else bad "--sp 2 --device cuda exited $rc: $(cat err.txt)"; fi

# without mpirun, --sp 2 is refused (usage, exit 2) with one line
"$CLI" forward --model tiny --inputs in.safetensors --out o.safetensors --sp 2 >out.txt 2>err.txt
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <err.txt)" -eq 1 ] && grep -q 'needs 2 ranks: run it under mpirun -np 2' err.txt; then ok
else bad "--sp 2 alone exited $rc: $(cat err.txt)"; fi
[ -e o.safetensors ] && bad "--sp 2 alone wrote an output"

finish cli_parallel
