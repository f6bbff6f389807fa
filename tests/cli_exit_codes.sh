#!/usr/bin/env bash
# Exit codes a script can act on (docs/cli.md "Exit status"): 0 success, 1 a strict comparison differed,
# 2 bad usage, 3 bad input file, 4 device or I/O failure; every failure with one line on stderr. Also
# --opt=value, an option given twice, how numbers are written, the H3S_* variables of the environment, standard
# output that cannot be written, help, and progress lines on stderr only (--quiet, --verbose, H3S_PROGRESS_AFTER).
set -u
. "$(dirname "$0")/check.sh"
# a loaded machine must not turn a failing command's one stderr line into several: stage lines only where a
# check asks for them
export H3S_PROGRESS_AFTER=600

expect() { # code, name, command...
    local want=$1 name=$2
    shift 2
    "$@" >"$dir/out.txt" 2>"$dir/err.txt"
    local got=$?
    if [ "$got" -ne "$want" ]; then
        bad "$name: exit $got, expected $want: $(head -c 300 "$dir/err.txt")"
        return
    fi
    ok
    if [ "$want" -ge 2 ]; then
        if [ "$(wc -l <"$dir/err.txt")" -eq 1 ] && grep -q '^h3strict' "$dir/err.txt"; then ok; else
            bad "$name: expected one h3strict line on stderr: $(cat "$dir/err.txt")"
        fi
    fi
}

m="$dir/m"
in="$dir/in.safetensors"
# ---- 0, and --opt=value means the same as --opt value
expect 0 init "$CLI" init --preset tiny --seed 5 --out "$m" --quiet
expect 0 init-equals "$CLI" init --preset=tiny --seed=5 --out="$dir/m2" --quiet
if cmp -s "$m/diffusion_pytorch_model.safetensors" "$dir/m2/diffusion_pytorch_model.safetensors"; then ok; else
    bad "--opt=value gave another model than --opt value"
fi
expect 0 inputs "$CLI" inputs --model "$m" --seed 7 --batch 2 --out "$in"
expect 0 cotangent "$CLI" cotangent --model="$m" --inputs="$in" --seed=3 --out="$dir/ct.safetensors"
expect 0 forward "$CLI" forward --model "$m" --inputs "$in" --out "$dir/out.safetensors"
expect 0 replay "$CLI" replay --model "$m" --inputs "$in" --out "$dir/replay.json" --no-golden --quiet
expect 0 verify "$CLI" verify --model "$m" --write-manifest "$dir/manifest.json"

# ---- 1: the command ran, and a strict comparison differed; its report is complete
rm -f "$dir/drift.json"
expect 1 replay-plant-drift "$CLI" replay --model "$m" --inputs "$in" --out "$dir/drift.json" --no-golden \
    --plant-drift block.0.attention --quiet
if grep -q '"first_drift":[[:space:]]*"block.0.attention"' "$dir/drift.json" 2>/dev/null; then ok; else
    bad "replay --plant-drift: report missing or first_drift is not block.0.attention"
fi
if grep -q '^replay: .* first drift: block.0.attention$' "$dir/out.txt"; then ok; else bad "replay drift summary line"; fi
expect 1 replay-plant-backward "$CLI" replay --model "$m" --inputs "$in" --out "$dir/drift2.json" --no-golden \
    --plant-drift=block.1.norm1.grad --quiet
sed 's/"[0-9a-f]\{64\}"/"0000000000000000000000000000000000000000000000000000000000000000"/' "$dir/manifest.json" \
    >"$dir/wrong_manifest.json"
cmp -s "$dir/manifest.json" "$dir/wrong_manifest.json" && bad "the wrong manifest is not wrong"
expect 1 verify-manifest-differs "$CLI" verify --model "$m" --manifest "$dir/wrong_manifest.json"
expect 0 verify-manifest-same "$CLI" verify --model "$m" --manifest "$dir/manifest.json"

# ---- 2: bad usage
"$CLI" >/dev/null 2>&1
[ $? -eq 2 ] && ok || bad "h3strict without a command must exit 2 (after its usage on stderr)"
expect 2 unknown-command "$CLI" frobnicate
expect 2 unknown-option "$CLI" forward --model "$m" --inputs "$in" --out "$dir/x.safetensors" --frobnicate
expect 2 missing-required "$CLI" forward --model "$m" --inputs "$in"
expect 2 missing-value "$CLI" forward --model "$m" --inputs "$in" --out
expect 2 flag-with-value "$CLI" trajectory --out "$dir/t.json" --no-grad=yes
expect 2 bad-number "$CLI" init --preset tiny --seed five --out "$dir/mx"
expect 2 bad-threads "$CLI" forward --model "$m" --inputs "$in" --out "$dir/x.safetensors" --threads=0
expect 2 bad-device "$CLI" forward --model "$m" --inputs "$in" --out "$dir/x.safetensors" --device tpu
expect 2 unknown-preset "$CLI" init --preset huge --seed 1 --out "$dir/mx"
expect 2 odd-latent "$CLI" inputs --model "$m" --seed 1 --latent-height 5 --out "$dir/x.safetensors"
expect 2 quiet-and-verbose "$CLI" forward --model "$m" --inputs "$in" --out "$dir/x.safetensors" --quiet --verbose
expect 2 plant-unknown-node "$CLI" replay --model "$m" --inputs "$in" --out "$dir/x.json" --no-golden \
    --plant-drift block.9.nothing --quiet
[ -e "$dir/x.safetensors" ] || [ -e "$dir/x.json" ] && bad "a usage error left an output file"
# the node to plant a drift in is looked for once the first pass has listed the nodes: no other pass runs for a
# name that is not among them (the passes' own progress lines show how far it went)
"$CLI" replay --model "$m" --inputs "$in" --out "$dir/x.json" --plant-drift block.9.nothing >"$dir/out.txt" \
    2>"$dir/err.txt"
rc=$?
[ $rc -eq 2 ] && grep -q "no node named 'block.9.nothing'" "$dir/err.txt" && ok ||
    bad "plant-unknown-node with progress: exit $rc: $(cat "$dir/err.txt")"
grep -q 'pass 1/4' "$dir/err.txt" && ok || bad "plant-unknown-node: no line of the first pass: $(cat "$dir/err.txt")"
if grep -q 'pass [234]/4' "$dir/err.txt"; then
    bad "plant-unknown-node: refused only after more passes ran: $(cat "$dir/err.txt")"
else ok; fi
# an option given twice is refused, naming it (the last one silently won); so is plot's report given both as its first
# argument and with --report (--report drew the other one)
cp "$in" "$dir/in_other.safetensors"
expect 2 inputs-twice "$CLI" forward --model "$m" --inputs "$in" --inputs "$dir/in_other.safetensors" \
    --out "$dir/x.safetensors"
grep -qF "option --inputs given twice ('$in', then '$dir/in_other.safetensors')" "$dir/err.txt" && ok ||
    bad "--inputs twice: message: $(cat "$dir/err.txt")"
expect 2 out-twice "$CLI" forward --model "$m" --inputs "$in" --out "$dir/x.safetensors" --out="$dir/y.safetensors"
grep -qF "option --out given twice" "$dir/err.txt" && ok || bad "--out twice: message: $(cat "$dir/err.txt")"
expect 2 seed-twice "$CLI" init --preset tiny --seed 1 --seed 2 --out "$dir/mx"
expect 2 flag-twice "$CLI" trajectory --no-grad --steps 1 --no-grad --out "$dir/x.json"
grep -qF "option --no-grad given twice" "$dir/err.txt" && ok || bad "--no-grad twice: message: $(cat "$dir/err.txt")"
expect 2 quiet-twice "$CLI" verify --model "$m" --quiet --quiet
grep -qF "option --quiet given twice" "$dir/err.txt" && ok || bad "--quiet twice: message: $(cat "$dir/err.txt")"
expect 2 plot-report-twice "$CLI" plot "$dir/replay.json" --report "$dir/drift.json" --out "$dir/x.png"
grep -qF "the report is given twice, as the first argument ('$dir/replay.json') and with --report" "$dir/err.txt" &&
    ok || bad "plot REPORT --report OTHER: message: $(cat "$dir/err.txt")"
expect 2 plot-report-option-twice "$CLI" plot --report "$dir/replay.json" --report="$dir/drift.json" \
    --out "$dir/x.png"
for f in x.safetensors y.safetensors mx x.json x.png; do [ -e "$dir/$f" ] && bad "a repeated option left $f"; done
# a number's first byte is a digit (or a '-' where the range takes negatives): strtoull would skip the space of
# ' -1' and wrap it to 2^64 - 1; ' 5' and '+5' are refused as well, in every integer and float option
for v in ' -1' ' 5' '+5' '5 '; do
    expect 2 "seed '$v'" "$CLI" init --preset tiny --seed "$v" --out "$dir/mx"
    grep -qF -- "--seed must be a non-negative integer (digits only, at most 18446744073709551615), got '$v'" \
        "$dir/err.txt" && ok || bad "seed '$v': message: $(cat "$dir/err.txt")"
done
expect 2 batch-leading-space "$CLI" inputs --model "$m" --seed 1 --batch ' 2' --out "$dir/x.safetensors"
expect 2 t-video-leading-space "$CLI" inputs --model "$m" --seed 1 --t-video ' 0.5' --out "$dir/x.safetensors"
expect 2 seeds-plus "$CLI" trajectory --seeds 1,+2 --steps 1 --no-grad --out "$dir/x.json"
[ -e "$dir/mx" ] || [ -e "$dir/x.safetensors" ] || [ -e "$dir/x.json" ] && bad "a refused number left an output"
# float ranges are compared as typed (in double): the documented bounds are in; a value too small for a double
# (1e-320) is in [0, 1] and rounds to 0 like any value to its float; one too large is out
expect 0 shift-max "$CLI" trajectory --seeds 1 --steps 2 --batch 2 --no-grad --shift-video 100000 \
    --shift-audio 100000 --out "$dir/ts.json" --quiet
expect 0 shift-half "$CLI" trajectory --seeds 1 --steps 2 --batch 2 --no-grad --shift-video 0.5 --shift-audio 0.5 \
    --out "$dir/ts.json" --quiet
expect 2 shift-below-min "$CLI" trajectory --seeds 1 --steps 1 --no-grad --shift-video 0.00099 --out "$dir/x.json"
grep -qF "must be a number in [0.001, 100000], got '0.00099'" "$dir/err.txt" && ok ||
    bad "shift below the minimum: message: $(cat "$dir/err.txt")"
expect 2 shift-above-max "$CLI" trajectory --seeds 1 --steps 1 --no-grad --shift-audio 100000.01 --out "$dir/x.json"
# the minimum is a number the option takes, but its sigma schedule rounds above 1 in float (a negative timestep):
# refused before any work, saying so (the layout refused it mid-run)
expect 2 shift-min-schedule "$CLI" trajectory --seeds 1 --steps 2 --no-grad --shift-video 0.001 --out "$dir/x.json"
grep -qF -- "--shift-video 0.001: with 2 steps its sigma schedule rounds sigma 0 to 1.00001287, above 1" \
    "$dir/err.txt" && ok || bad "shift 0.001: message: $(cat "$dir/err.txt")"
# a fractional value is plain decimal (digits, '.', an exponent) and compared with its range exactly as typed: one
# that a double rounds onto the bound is still out of range; hexadecimal floats, inf and nan are refused
for v in 1.0000000000000000001 1.00000000000000000000000001 0x1p-1 0x0.8 inf nan infinity .5 +0.5 1e 1e+ 0.5f \
    '0.5 ' 0,5; do
    expect 2 "t-video '$v'" "$CLI" inputs --model "$m" --seed 1 --t-video "$v" --out "$dir/x.safetensors"
    grep -qF -- "--t-video must be a number in [0, 1]" "$dir/err.txt" && ok ||
        bad "t-video '$v': message: $(cat "$dir/err.txt")"
done
expect 2 shift-rounds-onto-max "$CLI" trajectory --seeds 1 --steps 1 --no-grad \
    --shift-audio 100000.0000000000000000001 --out "$dir/x.json"
grep -qF "must be a number in [0.001, 100000], got '100000.0000000000000000001'" "$dir/err.txt" && ok ||
    bad "shift rounding onto the maximum: message: $(cat "$dir/err.txt")"
expect 2 shift-rounds-onto-min "$CLI" trajectory --seeds 1 --steps 1 --no-grad \
    --shift-audio 0.000999999999999999999999 --out "$dir/x.json"
grep -qF "must be a number in [0.001, 100000], got '0.000999999999999999999999'" "$dir/err.txt" && ok ||
    bad "shift rounding onto the minimum: message: $(cat "$dir/err.txt")"
expect 0 t-video-bound-many-digits "$CLI" inputs --model "$m" --seed 1 --t-video 1.000000000000000000000000 \
    --out "$dir/tv.safetensors" --quiet
expect 0 t-video-exponent "$CLI" inputs --model "$m" --seed 1 --t-video 2.5E-1 --out "$dir/tv.safetensors" --quiet
expect 0 t-video-point "$CLI" inputs --model "$m" --seed 1 --t-video 1. --out "$dir/tv.safetensors" --quiet
[ -e "$dir/x.safetensors" ] || [ -e "$dir/x.json" ] && bad "a refused number left an output"
expect 0 t-video-underflow "$CLI" inputs --model "$m" --seed 1 --t-video 1e-320 --out "$dir/tv.safetensors" --quiet
expect 2 t-video-overflow "$CLI" inputs --model "$m" --seed 1 --t-video 1e400 --out "$dir/x.safetensors"
# --seeds: at most 64, refused before anything runs
expect 2 seeds-65 "$CLI" trajectory --seeds "$(seq -s, 1 65)" --steps 1 --no-grad --out "$dir/x.json"
grep -qF -- "--seeds takes at most 64 seeds, got 65" "$dir/err.txt" && ok || bad "65 seeds: message: $(cat "$dir/err.txt")"
expect 0 seeds-64 "$CLI" trajectory --seeds "$(seq -s, 1 64)" --steps 1 --batch 2 --no-grad --out "$dir/t64.json" \
    --quiet
grep -q '^strict: 0/256 comparisons differ (64 seeds' "$dir/out.txt" && ok || bad "64 seeds: $(cat "$dir/out.txt")"
# help: an unknown command is one line and exit 2; a second word is bad usage; help alone and help COMMAND exit 0
expect 2 help-unknown "$CLI" help frobnicate
grep -qx "h3strict: unknown command 'frobnicate' (try --help)" "$dir/err.txt" && ok ||
    bad "help frobnicate: $(cat "$dir/err.txt")"
[ -s "$dir/out.txt" ] && bad "help frobnicate printed the usage on stdout" || ok
expect 2 help-extra "$CLI" help forward extra
grep -qF "unexpected argument 'extra'" "$dir/err.txt" && ok || bad "help forward extra: $(cat "$dir/err.txt")"
expect 2 dash-help-unknown "$CLI" --help frobnicate
expect 0 help-alone "$CLI" help
expect 0 dash-h-command "$CLI" -h forward
grep -q '^usage: h3strict forward' "$dir/out.txt" && ok || bad "-h forward: $(head -n 1 "$dir/out.txt")"
# the common flags take no value, as every flag
for f in --quiet=1 --verbose=yes --help=1; do
    expect 2 "flag $f" "$CLI" forward --model "$m" --inputs "$in" --out "$dir/x.safetensors" "$f"
    grep -qF "option ${f%%=*} takes no value, got '$f'" "$dir/err.txt" && ok || bad "$f: message: $(cat "$dir/err.txt")"
done
# no option takes an empty value
expect 2 empty-out "$CLI" init --preset tiny --seed 1 --out=
grep -qF "option --out needs a value (DIR), got an empty one" "$dir/err.txt" && ok || bad "--out=: $(cat "$dir/err.txt")"
expect 2 empty-model "$CLI" forward --model '' --inputs "$in" --out "$dir/x.safetensors"
[ -e "$dir/x.safetensors" ] && bad "a refused option left an output file"

# ---- size guards: refused before anything is written, with the size in the message
expect 2 inputs-over-limit "$CLI" inputs --model "$m" --seed 1 --frames 1000000 --out "$dir/big.safetensors"
grep -q 'would take 824.0 MiB, over the 512.0 MiB limit' "$dir/err.txt" && ok || bad "size guard message: $(cat "$dir/err.txt")"
expect 2 inputs-over-memory "$CLI" inputs --model "$m" --seed 1 --frames 16777216 --batch 1000 --force \
    --out "$dir/big.safetensors"
grep -q "more than this machine's memory" "$dir/err.txt" && ok || bad "memory guard message: $(cat "$dir/err.txt")"
[ -e "$dir/big.safetensors" ] && bad "a refused inputs request wrote its file" || ok
# a backward whose estimated memory exceeds the machine's (here a 100 kB share) is refused; --force runs it
H3S_MEMORY_LIMIT=100000 expect 2 grad-over-memory "$CLI" grad --model "$m" --inputs "$in" \
    --cotangent "$dir/ct.safetensors" --out "$dir/gm.safetensors"
grep -q 'this grad needs about .* more than the 97.7 KiB of memory' "$dir/err.txt" && ok ||
    bad "memory estimate message: $(cat "$dir/err.txt")"
[ -e "$dir/gm.safetensors" ] && bad "a refused grad wrote its output" || ok
H3S_MEMORY_LIMIT=100000 expect 0 grad-over-memory-forced "$CLI" grad --model "$m" --inputs "$in" \
    --cotangent "$dir/ct.safetensors" --out "$dir/gm.safetensors" --force --quiet
H3S_MEMORY_LIMIT=100000 expect 2 replay-over-memory "$CLI" replay --model "$m" --inputs "$in" --out "$dir/rm.json"
H3S_MEMORY_LIMIT=100000 expect 2 trajectory-over-memory "$CLI" trajectory --steps 1 --out "$dir/tm.json"
H3S_MEMORY_LIMIT=100000 expect 0 trajectory-forward-only "$CLI" trajectory --steps 1 --no-grad --out "$dir/tm.json" \
    --quiet
# the variables of the environment: set and malformed is refused with one line naming the variable, never ignored
# (a run under a limit the user did not get); H3S_MEMORY_LIMIT takes a binary suffix K, M, G or T
for v in 1.5G 8g -5 0 abc 1e9 ' 5' 5B 18446744073709551616 16777216T; do
    H3S_MEMORY_LIMIT=$v expect 2 "H3S_MEMORY_LIMIT='$v'" "$CLI" replay --model "$m" --inputs "$in" \
        --out "$dir/x.json" --no-golden --quiet
    grep -qF "H3S_MEMORY_LIMIT must be a whole number of bytes above 0" "$dir/err.txt" && ok ||
        bad "H3S_MEMORY_LIMIT='$v': message: $(cat "$dir/err.txt")"
done
H3S_MEMORY_LIMIT=1K expect 2 memory-limit-1K "$CLI" replay --model "$m" --inputs "$in" --out "$dir/x.json" \
    --no-golden --quiet
grep -q 'more than the 1.0 KiB of memory' "$dir/err.txt" && ok || bad "H3S_MEMORY_LIMIT=1K: $(cat "$dir/err.txt")"
H3S_MEMORY_LIMIT=8G expect 0 memory-limit-8G "$CLI" replay --model "$m" --inputs "$in" --out "$dir/rm.json" \
    --no-golden --quiet
for var in H3S_PROGRESS_AFTER H3S_PROGRESS_EVERY; do
    for v in abc -1 1e9 1000000.5 0x10 inf ' 1' 2s; do
        export "$var=$v"
        expect 2 "$var='$v'" "$CLI" verify --model "$m"
        grep -qF "$var must be a number of seconds in [0, 1000000]" "$dir/err.txt" && ok ||
            bad "$var='$v': message: $(cat "$dir/err.txt")"
    done
    export "$var=1e6"
    expect 0 "$var=1e6" "$CLI" verify --model "$m"
    unset "$var"
done
export H3S_PROGRESS_AFTER=600
[ -e "$dir/x.json" ] && bad "a refused environment left an output"

# init checks the free space first; run only where the released geometry (61.7 GiB) cannot fit
avail=$(df --output=avail -B1 "$dir" 2>/dev/null | tail -n 1 | tr -d ' ')
if [ -n "$avail" ] && [ "$avail" -lt 60000000000 ]; then
    expect 4 init-no-space "$CLI" init --preset h3-33b --seed 1 --out "$dir/big_model"
    grep -q 'takes 61.7 GiB; only .* free' "$dir/err.txt" && ok || bad "disk guard message: $(cat "$dir/err.txt")"
    [ -e "$dir/big_model" ] && bad "a refused init wrote its directory" || ok
else
    echo "note: $dir has room for the released geometry; the disk guard is not exercised here"
fi

# ---- 3: bad input files
expect 3 missing-model "$CLI" forward --model "$dir/nope" --inputs "$in" --out "$dir/x.safetensors"
expect 3 missing-inputs "$CLI" forward --model "$m" --inputs "$dir/nope.safetensors" --out "$dir/x.safetensors"
# the same on the CUDA backend: the file is what is wrong, whether or not the build or the machine has a GPU
expect 3 missing-inputs-cuda "$CLI" forward --device cuda --model "$m" --inputs "$dir/nope.safetensors" \
    --out "$dir/x.safetensors"
if grep -q "nope.safetensors" "$dir/err.txt"; then ok; else bad "missing inputs on cuda: the line does not name the file: $(cat "$dir/err.txt")"; fi
head -c 100 "$in" >"$dir/trunc.safetensors"
expect 3 truncated-inputs "$CLI" forward --model "$m" --inputs "$dir/trunc.safetensors" --out "$dir/x.safetensors"
expect 3 config-as-inputs "$CLI" forward --model "$m" --inputs "$m/config.json" --out "$dir/x.safetensors"
expect 3 model-as-inputs "$CLI" forward --model "$m" --inputs "$m/diffusion_pytorch_model.safetensors" \
    --out "$dir/x.safetensors"
expect 3 inputs-as-cotangent "$CLI" grad --model "$m" --inputs "$in" --cotangent "$in" --out "$dir/x.safetensors"
# a cotangent of another batch: named with both shapes, before the forward runs
"$CLI" inputs --model "$m" --seed 7 --out "$dir/in1.safetensors" --quiet >/dev/null
"$CLI" cotangent --model "$m" --inputs "$dir/in1.safetensors" --seed 3 --out "$dir/ct1.safetensors" --quiet >/dev/null
expect 3 cotangent-shape "$CLI" grad --model "$m" --inputs "$in" --cotangent "$dir/ct1.safetensors" \
    --out "$dir/x.safetensors"
grep -qF "cotangent $dir/ct1.safetensors: 'sample' is [1, 12, 24], but the output 'sample' of $in is [2, 12, 24]" \
    "$dir/err.txt" && ok || bad "cotangent shape message: $(cat "$dir/err.txt")"
"$CLI" init --preset small --layers 1 --seed 1 --out "$dir/small" --quiet >/dev/null
expect 3 inputs-of-another-model "$CLI" forward --model "$dir/small" --inputs "$in" --out "$dir/x.safetensors"
printf '{"num_layers": 2}' >"$dir/badcfg.json"
mkdir -p "$dir/badmodel" && cp "$dir/badcfg.json" "$dir/badmodel/config.json"
cp "$m/diffusion_pytorch_model.safetensors" "$dir/badmodel/"
expect 3 bad-config "$CLI" verify --model "$dir/badmodel"
expect 3 missing-manifest "$CLI" verify --model "$m" --manifest "$dir/nope.json"
[ -e "$dir/x.safetensors" ] && bad "a bad input left an output file"

# ---- 4: device or I/O failure
expect 4 output-dir-missing "$CLI" forward --model "$m" --inputs "$in" --out "$dir/no/such/dir/x.safetensors"
expect 4 report-dir-missing "$CLI" replay --model "$m" --inputs "$in" --out "$dir/no/such/r.json" --no-golden --quiet
if "$CLI" forward --model "$m" --inputs "$in" --out "$dir/c.safetensors" --device cuda >/dev/null 2>"$dir/err.txt"; then
    ok # a GPU is here: the CUDA path ran (tests/gpu cover it)
else
    expect 4 cuda-without-gpu "$CLI" forward --model "$m" --inputs "$in" --out "$dir/c.safetensors" --device cuda
fi

# standard output that cannot be written (a full disk, here /dev/full) fails the command: exit 4, one line, where it
# would have exited 0 or 1; a command that failed already keeps its code and its line
full() { # code, name, command...: the command with its standard output on /dev/full
    local want=$1 name=$2
    shift 2
    "$@" >/dev/full 2>"$dir/err.txt"
    local got=$?
    [ "$got" -eq "$want" ] && [ "$(wc -l <"$dir/err.txt")" -eq 1 ] && ok ||
        bad "$name >/dev/full: exit $got, expected $want with one line: $(cat "$dir/err.txt")"
}
if [ -w /dev/full ]; then
    full 4 verify-full "$CLI" verify --model "$m"
    grep -qx "h3strict verify: cannot write standard output: No space left on device (i/o error)" "$dir/err.txt" &&
        ok || bad "verify >/dev/full: message: $(cat "$dir/err.txt")"
    full 4 help-full "$CLI" --help
    grep -qx "h3strict: cannot write standard output: No space left on device (i/o error)" "$dir/err.txt" && ok ||
        bad "--help >/dev/full: message: $(cat "$dir/err.txt")"
    full 4 command-help-full "$CLI" forward --help
    full 4 version-full "$CLI" --version
    full 4 replay-drift-full "$CLI" replay --model "$m" --inputs "$in" --out "$dir/drift3.json" --no-golden \
        --plant-drift block.0.attention --quiet
    full 3 verify-missing-full "$CLI" verify --model "$dir/nope"
    grep -q "cannot write standard output" "$dir/err.txt" && bad "a failed verify named standard output instead" || ok
else
    echo "note: no writable /dev/full here; failed writes to standard output are not exercised"
fi

# ---- progress: stderr only; quick stages silent by default, every stage with --verbose, none with --quiet
H3S_PROGRESS_AFTER=60 "$CLI" forward --model "$m" --inputs "$in" --out "$dir/o1.safetensors" >"$dir/o1.out" 2>"$dir/o1.err"
[ -s "$dir/o1.err" ] && bad "a quick forward printed progress: $(cat "$dir/o1.err")" || ok
"$CLI" forward --model "$m" --inputs "$in" --out "$dir/o2.safetensors" --verbose >"$dir/o2.out" 2>"$dir/o2.err"
for stage in "loading model" "reading and validating" "forward" "writing"; do
    if grep -qE "^h3strict forward: ${stage}.*: done in [0-9]+\.[0-9]+ s$" "$dir/o2.err"; then ok; else
        bad "--verbose: no '$stage ... done in N s' line on stderr: $(cat "$dir/o2.err")"
    fi
done
cmp -s <(sed 's/o1\.safetensors/OUT/' "$dir/o1.out") <(sed 's/o2\.safetensors/OUT/' "$dir/o2.out") && ok ||
    bad "--verbose changed standard output"
H3S_PROGRESS_AFTER=0 "$CLI" grad --model "$m" --inputs "$in" --cotangent "$dir/ct.safetensors" \
    --out "$dir/g.safetensors" >/dev/null 2>"$dir/g.err"
grep -q '^h3strict grad: backward ...$' "$dir/g.err" && grep -q '^h3strict grad: backward: done in' "$dir/g.err" && ok ||
    bad "H3S_PROGRESS_AFTER=0 did not announce the backward: $(cat "$dir/g.err")"
# a stage that knows its fraction (init counts the bytes written) estimates the time left
H3S_PROGRESS_AFTER=0 H3S_PROGRESS_EVERY=0.1 "$CLI" init --preset small --seed 1 --out "$dir/small_p" >/dev/null \
    2>"$dir/i.err"
grep -qE '^h3strict init: writing small model \([0-9.]+ MiB\) to .*: [0-9]+ s so far, [0-9]+% done, about [0-9]+ s left$' \
    "$dir/i.err" && ok || bad "init progress has no fraction and estimate: $(head -c 600 "$dir/i.err")"
# forward and backward count their nodes
"$CLI" inputs --model "$dir/small_p" --seed 1 --frames 8 --latent-height 16 --latent-width 16 --text 64 --batch 2 \
    --out "$dir/small_in.safetensors" >/dev/null
"$CLI" cotangent --model "$dir/small_p" --inputs "$dir/small_in.safetensors" --seed 1 \
    --out "$dir/small_ct.safetensors" >/dev/null
H3S_PROGRESS_AFTER=0 H3S_PROGRESS_EVERY=0 "$CLI" grad --model "$dir/small_p" --inputs "$dir/small_in.safetensors" \
    --cotangent "$dir/small_ct.safetensors" --out "$dir/small_g.safetensors" >/dev/null 2>"$dir/gp.err"
grep -qE '^h3strict grad: backward: [0-9]+ s so far, [0-9]+% done, about [0-9]+ s left$' "$dir/gp.err" && ok ||
    bad "the backward reports no fraction: $(head -c 600 "$dir/gp.err")"
"$CLI" trajectory --seeds 11 --steps 1 --batch 2 --no-grad --out "$dir/t.json" >"$dir/t.out" 2>"$dir/t.err"
grep -qE '^h3strict trajectory: seed 11: step 1/1 .*\[[0-9.]+ s' "$dir/t.err" && ok || bad "trajectory progress: $(cat "$dir/t.err")"
grep -q 'h3strict trajectory' "$dir/t.out" && bad "trajectory progress reached stdout" || ok
"$CLI" trajectory --seeds 11 --steps 1 --batch 2 --no-grad --out "$dir/t.json" --quiet >/dev/null 2>"$dir/tq.err"
[ -s "$dir/tq.err" ] && bad "trajectory --quiet printed: $(cat "$dir/tq.err")" || ok

finish cli_exit_codes
