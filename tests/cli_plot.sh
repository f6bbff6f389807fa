#!/usr/bin/env bash
# h3strict plot: a replay report (with a planted drift) and a trajectory report drawn to PNG, SVG and PDF; the
# figure depends on the report (the drift is drawn); bad reports and outputs exit with their class and leave no
# file; '%n' in the output path is only a name; a failed write exits 4 with the output untouched; a FIFO or device
# report is refused at once.  Skipped (77) in a build without PLplot, where the command must refuse with exit 4.
set -u
CLI=${H3S_CLI:?H3S_CLI must name the built h3strict}
SRC=${H3S_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
# under LeakSanitizer: the font and module caches of the libraries PLplot uses are not h3strict's leaks
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$SRC/tests/lsan_plot.supp:print_suppressions=0"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
bad() { fails=$((fails + 1)); echo "FAIL: $*" >&2; }
"$CLI" init --preset tiny --seed 5 --out "$dir/m" >/dev/null || bad "init"
"$CLI" inputs --model "$dir/m" --seed 7 --batch 2 --out "$dir/in.safetensors" >/dev/null || bad "inputs"
"$CLI" replay --model "$dir/m" --inputs "$dir/in.safetensors" --out "$dir/clean.json" --quiet >/dev/null ||
    bad "replay"
"$CLI" replay --model "$dir/m" --inputs "$dir/in.safetensors" --out "$dir/drift.json" --quiet \
    --plant-drift block.1.attention >/dev/null
"$CLI" trajectory --seeds 11,22 --steps 2 --batch 2 --no-grad --out "$dir/traj.json" --quiet >/dev/null ||
    bad "trajectory"

"$CLI" plot "$dir/clean.json" --out "$dir/clean.png" >"$dir/out.txt" 2>"$dir/err.txt"
rc=$?
if [ $rc -eq 4 ] && grep -q 'no plotting library' "$dir/err.txt"; then
    [ -e "$dir/clean.png" ] && bad "a refused plot wrote its file"
    [ "$fails" -eq 0 ] || exit 1
    echo "SKIP: this build has no plotting library (PLplot); the command refuses with exit 4 as documented"
    exit 77
fi
[ $rc -eq 0 ] || bad "plot of a replay report exited $rc: $(cat "$dir/err.txt")"
grep -q "^wrote $dir/clean.png: replay report" "$dir/out.txt" || bad "plot summary: $(cat "$dir/out.txt")"
png_ok() { # file: PNG signature, IHDR 1200 x 700
    [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] &&
        [ "$(od -An -tu1 -j16 -N8 "$1" | tr -s ' ' | sed 's/^ //')" = "0 0 4 176 0 0 2 188" ]
}
png_ok "$dir/clean.png" || bad "clean.png is not a 1200 x 700 PNG"
"$CLI" plot --report="$dir/drift.json" --out "$dir/drift.png" >/dev/null || bad "plot of the drift report"
png_ok "$dir/drift.png" || bad "drift.png is not a 1200 x 700 PNG"
cmp -s "$dir/clean.png" "$dir/drift.png" && bad "the drift report drew the same figure as the clean one"
"$CLI" plot "$dir/clean.json" --out "$dir/clean2.png" >/dev/null
cmp -s "$dir/clean.png" "$dir/clean2.png" || bad "the same report drew two different figures"
# a node that is not repeat-equal but has no finite error (none recorded) still gets its red cross: the figures of
# two reports that differ only in that flag differ
python3 - "$dir/clean.json" "$dir/noerr_ok.json" "$dir/noerr_bad.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
node = d["nodes"][3]
node["golden_rel_l2"] = None
node["repeat_equal"] = True
json.dump(d, open(sys.argv[2], "w"))
node["repeat_equal"] = False
json.dump(d, open(sys.argv[3], "w"))
PY
"$CLI" plot "$dir/noerr_ok.json" --out "$dir/noerr_ok.png" >/dev/null || bad "plot of a report with a missing error"
"$CLI" plot "$dir/noerr_bad.json" --out "$dir/noerr_bad.png" >/dev/null || bad "plot of a drift without an error"
cmp -s "$dir/noerr_ok.png" "$dir/noerr_bad.png" && bad "a drifted node without a finite error was not drawn"
"$CLI" plot "$dir/traj.json" --out "$dir/traj.png" >"$dir/out.txt" || bad "plot of a trajectory report"
grep -q 'trajectory report' "$dir/out.txt" || bad "trajectory plot summary: $(cat "$dir/out.txt")"
png_ok "$dir/traj.png" || bad "traj.png is not a 1200 x 700 PNG"
"$CLI" plot "$dir/drift.json" --out "$dir/drift.svg" >/dev/null && grep -q '<svg' "$dir/drift.svg" || bad "svg output"
"$CLI" plot "$dir/drift.json" --out "$dir/drift.pdf" >/dev/null && [ "$(head -c 5 "$dir/drift.pdf")" = "%PDF-" ] ||
    bad "pdf output"
# reports whose model directory and name hold bytes that are not UTF-8 (0xe9, 0xff) are drawn: their "command" and
# "model" are written as the provenance's ('?' for such bytes), not raw, which made them invalid JSON for plot (3)
odd_model="$dir/m$(printf '\351')" odd="$(printf '\377')"
cp -r "$dir/m" "$odd_model"
"$CLI" replay --model "$odd_model" --inputs "$dir/in.safetensors" --out "$dir/replay$odd.json" --no-golden --quiet \
    >/dev/null || bad "replay with a model directory of other bytes"
"$CLI" trajectory --model "$odd_model" --seeds 11 --steps 1 --batch 2 --no-grad --out "$dir/traj$odd.json" --quiet \
    >/dev/null || bad "trajectory with a model directory of other bytes"
for r in replay traj; do
    "$CLI" plot "$dir/$r$odd.json" --out "$dir/$r-odd.png" >/dev/null 2>"$dir/err.txt" ||
        bad "plot of the $r report of a model directory of other bytes exited $?: $(cat "$dir/err.txt")"
    png_ok "$dir/$r-odd.png" || bad "$r-odd.png is not a 1200 x 700 PNG"
    python3 -c 'import sys; open(sys.argv[1], "rb").read().decode("utf-8")' "$dir/$r$odd.json" 2>/dev/null ||
        bad "the $r report is not valid UTF-8"
done
# classes: not a report (3), missing report (3), no --out (2), output in a missing directory (4)
echo '{"hello": 1}' >"$dir/other.json"
"$CLI" plot "$dir/other.json" --out "$dir/x.png" 2>/dev/null
[ $? -eq 3 ] || bad "a JSON file that is not a report"
"$CLI" plot "$dir/nope.json" --out "$dir/x.png" 2>/dev/null
[ $? -eq 3 ] || bad "a missing report"
"$CLI" plot "$dir/clean.json" 2>/dev/null
[ $? -eq 2 ] || bad "plot without --out"
"$CLI" plot "$dir/clean.json" --out "$dir/no/such/x.png" 2>/dev/null
[ $? -eq 4 ] || bad "an output in a missing directory"
[ -e "$dir/x.png" ] && bad "a failed plot left its output"
# a '%n' in the output's name or directory is PLplot's family placeholder: the figure must still land under the
# name given (it went to another file, and an empty one took the output's name)
mkdir -p "$dir/d%n"
"$CLI" plot "$dir/clean.json" --out "$dir/a%n.png" >/dev/null 2>"$dir/err.txt" || bad "plot to a%n.png: $(cat "$dir/err.txt")"
png_ok "$dir/a%n.png" || bad "a%n.png is not the 1200 x 700 figure"
cmp -s "$dir/clean.png" "$dir/a%n.png" || bad "a%n.png differs from the same report's clean.png"
[ -e "$dir/a.png" ] && bad "PLplot wrote a.png for a%n.png"
"$CLI" plot "$dir/drift.json" --out "$dir/d%n/f%n.svg" >/dev/null 2>"$dir/err.txt" || bad "plot into d%n/: $(cat "$dir/err.txt")"
grep -q '</svg>' "$dir/d%n/f%n.svg" 2>/dev/null || bad "d%n/f%n.svg is not the SVG figure"
# a write that fails (here the file size limit, as a full disk would: the same failed write(2)) exits 4 and leaves
# the output as it was, whatever the format; SIGXFSZ ignored so that the write fails instead of killing the process
for ext in png svg pdf; do
    echo precious >"$dir/keep.$ext"
    (trap '' XFSZ; ulimit -f 8; exec "$CLI" plot "$dir/clean.json" --out "$dir/keep.$ext") >/dev/null 2>"$dir/err.txt"
    rc=$?
    [ $rc -eq 4 ] || bad "a figure that could not be written ($ext) exited $rc: $(cat "$dir/err.txt")"
    grep -q "^h3strict plot: cannot write the figure .*keep.$ext: File too large" "$dir/err.txt" ||
        bad "the failed write ($ext) is not named: $(cat "$dir/err.txt")"
    [ "$(cat "$dir/keep.$ext")" = precious ] || bad "a failed write replaced keep.$ext"
done
# a report that is not a regular file is refused at once (exit 3): a FIFO without a writer would block, a device
# such as /dev/zero never ends
mkfifo "$dir/fifo.json"
timeout 20 "$CLI" plot "$dir/fifo.json" --out "$dir/f.png" >/dev/null 2>"$dir/err.txt"
rc=$?
[ $rc -eq 124 ] && bad "plot waited on a FIFO report"
[ $rc -eq 3 ] && grep -q 'fifo.json is not a regular file' "$dir/err.txt" || bad "a FIFO report: exit $rc: $(cat "$dir/err.txt")"
timeout 20 "$CLI" plot /dev/zero --out "$dir/f.png" >/dev/null 2>"$dir/err.txt"
rc=$?
[ $rc -eq 3 ] && grep -q '/dev/zero is not a regular file' "$dir/err.txt" || bad "/dev/zero as a report: exit $rc: $(cat "$dir/err.txt")"
[ -e "$dir/f.png" ] && bad "a refused report left a figure"
find "$dir" -name '*.tmp-*' | grep -q . && bad "a temporary file was left behind: $(find "$dir" -name '*.tmp-*')"
echo "cli_plot: $fails failed"
[ "$fails" -eq 0 ]
