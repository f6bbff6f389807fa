#!/usr/bin/env bash
# Every reference to a Markdown file in a tracked file (README, docs, code comments, tests, scripts) names a file
# that is in the tree. A reference is resolved against the citing file's directory, then the repository root; a
# bare file name may also name the one tracked file of that name elsewhere. Addresses (https://...) are not
# references into the tree.
set -u
SRC=${H3S_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$SRC" || exit 1
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -t files < <(git ls-files)
else
    mapfile -t files < <(find . -type f -not -path './build*' -not -path './.git/*' | sed 's#^\./##')
fi
[ "${#files[@]}" -gt 10 ] || { echo "FAIL: found only ${#files[@]} files under $SRC"; exit 1; }

declare -A base_count=()
for f in "${files[@]}"; do
    b=$(basename "$f")
    base_count[$b]=$((${base_count[$b]:-0} + 1))
done

fails=0
refs=0
for f in "${files[@]}"; do
    [ -f "$f" ] || continue
    dir=$(dirname "$f")
    # Addresses (scheme://...) and shell variables standing for a directory ($SRC/...) are stripped first.
    while IFS= read -r ref; do
        [ -n "$ref" ] || continue
        refs=$((refs + 1))
        r=${ref#./}
        if [ -f "$dir/$r" ] || [ -f "$r" ]; then continue; fi
        if [[ $r != */* ]] && [ "${base_count[$r]:-0}" -eq 1 ]; then continue; fi
        echo "FAIL: $f cites $ref, which is not in the tree"
        fails=$((fails + 1))
    done < <(sed -E 's#[a-zA-Z]+://[^ )>"]*##g; s#[$][{]?[A-Za-z_][A-Za-z0-9_]*[}]?/##g' "$f" 2>/dev/null | grep -aoE '[A-Za-z0-9_./~-]*[A-Za-z0-9_-]\.md\b' |
        sort -u)
done
echo "docs_refs: ${#files[@]} files, $refs references, $fails missing"
[ "$refs" -gt 20 ] || { echo "FAIL: expected more than 20 references, found $refs"; exit 1; }
[ "$fails" -eq 0 ]
