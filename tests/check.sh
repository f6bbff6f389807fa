# The common part of the CLI test scripts (tests/cli_*.sh), sourced after `set -u`: $CLI is the built h3strict,
# $dir a scratch directory removed on exit; ok and bad count the checks and the failures (bad prints its reason);
# `finish NAME` prints the counts and fails when any check did.
CLI=${H3S_CLI:?H3S_CLI must name the built h3strict}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
checks=0
ok() { checks=$((checks + 1)); }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL: $*" >&2; }
finish() { # name
    echo "$1: $checks checks, $fails failed"
    [ "$fails" -eq 0 ]
}
