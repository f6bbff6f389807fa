# The common part of the CLI test scripts (tests/cli_*.sh), sourced after `set -u`: $CLI is the built h3strict,
# $dir a scratch directory removed on exit; ok and bad count the checks and the failures (bad prints its reason);
# `exits RC WHAT CMD...` checks a command's exit status (its output in $dir/out), `shows PATTERN WHAT` that output;
# `finish NAME` prints the counts and fails when any check did; `tiny_request` makes the tiny model, a request and a
# cotangent (exit 1 when it cannot).
CLI=${H3S_CLI:?H3S_CLI must name the built h3strict}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
checks=0
ok() { checks=$((checks + 1)); }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL: $*" >&2; }
exits() { # rc, what, command...: run the command (its output in $dir/out) and count a check that it exits rc
    local want=$1 what=$2 rc
    shift 2
    "$@" >"$dir/out" 2>&1
    rc=$?
    [ "$rc" = "$want" ] && ok || { bad "$what: exit $rc, not $want"; cat "$dir/out"; }
}
shows() { # pattern, what: count a check that the last output ($dir/out) holds the pattern (grep)
    grep -q -- "$1" "$dir/out" && ok || { bad "$2"; cat "$dir/out"; }
}
finish() { # name
    echo "$1: $checks checks, $fails failed"
    [ "$fails" -eq 0 ]
}
tiny_request() { # the tiny model, a batch-2 request and a cotangent: $dir/m, $dir/in.safetensors, $dir/ct.safetensors
    "$CLI" init --preset tiny --seed 5 --out "$dir/m" --quiet >/dev/null 2>&1 || { echo "FAIL: init"; exit 1; }
    "$CLI" inputs --model "$dir/m" --seed 7 --batch 2 --out "$dir/in.safetensors" --quiet >/dev/null 2>&1 ||
        { echo "FAIL: inputs"; exit 1; }
    "$CLI" cotangent --model "$dir/m" --inputs "$dir/in.safetensors" --seed 3 --out "$dir/ct.safetensors" --quiet \
        >/dev/null 2>&1 || { echo "FAIL: cotangent"; exit 1; }
}
