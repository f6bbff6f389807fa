#!/usr/bin/env bash
# Per-command help against docs/cli.md: every command that `h3strict --help` lists answers `--help` (and
# `help COMMAND`) with its usage on standard output and exit 0, and its option table in docs/cli.md names exactly
# the options the help text lists (the common options once, in their own table).
set -u
CLI=${H3S_CLI:?H3S_CLI must name the built h3strict}
SRC=${H3S_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
DOC="$SRC/docs/cli.md"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
checks=0
bad() { fails=$((fails + 1)); echo "FAIL: $*" >&2; }
[ -f "$DOC" ] || { echo "FAIL: $DOC is missing"; exit 1; }

"$CLI" --help >"$dir/top.txt" || bad "h3strict --help exited $?"
mapfile -t commands < <(sed -n '/^commands:/,/^$/p' "$dir/top.txt" | grep -oE '^  [a-z]+' | tr -d ' ')
[ "${#commands[@]}" -ge 8 ] || bad "h3strict --help lists ${#commands[@]} commands"

# options in a Markdown table row of one "### name" section of docs/cli.md
doc_options() { # section
    awk -v s="### $1" '$0 == s {on = 1; next} /^##/ {on = 0} on' "$DOC" | grep -E '^\| `--' |
        grep -oE '^\| `--[a-z-]+' | sed 's/^| `//' | sort -u
}
help_options() { # help file
    sed -n '/^options:/,/^$/p' "$1" | grep -oE '^  --[a-z-]+' | tr -d ' ' | sort -u
}
common="--help --quiet --verbose"
for c in "${commands[@]}"; do
    checks=$((checks + 1))
    if ! "$CLI" "$c" --help >"$dir/$c.txt" 2>"$dir/$c.err"; then bad "$c --help exited non-zero"; continue; fi
    [ -s "$dir/$c.err" ] && bad "$c --help wrote to stderr: $(cat "$dir/$c.err")"
    head -n 1 "$dir/$c.txt" | grep -q "^usage: h3strict $c" || bad "$c --help does not start with its usage"
    "$CLI" help "$c" >"$dir/$c.2.txt" || bad "help $c exited non-zero"
    cmp -s "$dir/$c.txt" "$dir/$c.2.txt" || bad "'help $c' differs from '$c --help'"
    "$CLI" "$c" -h >"$dir/$c.3.txt" || bad "$c -h exited non-zero"
    help_options "$dir/$c.txt" >"$dir/$c.help"
    for o in $common; do grep -qx -- "$o" "$dir/$c.help" || bad "$c --help does not list $o"; done
    grep -vxF -e --help -e --quiet -e --verbose "$dir/$c.help" >"$dir/$c.own"
    [ -s "$dir/$c.own" ] || bad "$c --help lists no options of its own"
    doc_options "$c" >"$dir/$c.doc"
    grep -q "^### $c\$" "$DOC" || { bad "docs/cli.md has no '### $c' section"; continue; }
    while read -r o; do bad "$c: $o is in the help text but not in docs/cli.md"; done < <(comm -23 "$dir/$c.own" "$dir/$c.doc")
    while read -r o; do bad "$c: $o is in docs/cli.md but not in the help text"; done < <(comm -13 "$dir/$c.own" "$dir/$c.doc")
done
# the common options' own table, and no section for a command that does not exist
for o in $common; do grep -qE "^ *\| \`$o\` \|" "$DOC" || bad "docs/cli.md does not document the common option $o"; done
while read -r s; do
    printf '%s\n' "${commands[@]}" | grep -qx "$s" || bad "docs/cli.md documents '$s', which h3strict --help does not list"
done < <(sed -n '/^## Commands/,/^## Files/p' "$DOC" | grep -oE '^### [a-z]+' | cut -c5-)
echo "cli_help_docs: ${#commands[@]} commands, $fails failed"
[ "$fails" -eq 0 ]
