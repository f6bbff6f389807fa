#!/usr/bin/env bash
# Reliability of the CLI (fail-closed): an output never replaces an input, a model file or anything but a regular
# file; non-finite weights and cotangents and degenerate attention masks are refused; option strings are never cut;
# error lines escape control bytes; JSON files are strict; a file size limit fails a write as a full disk does.
# Each refusal: non-zero exit, one stderr line, the protected file byte-identical afterwards, no temporary left
# (dot-files included).  On the code before these rules every "refuse" below succeeded (exit 0) or hung (the FIFO),
# the seeds/keyframes checks failed, and the file size limit killed the command (SIGXFSZ, exit 153).
set -u
. "$(dirname "$0")/check.sh"
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to edit files"; exit 77; }
# a loaded machine must not turn a refused command's one stderr line into several: no progress stage lines
export H3S_PROGRESS_AFTER=600

run_ok() { # name, command...
    local name=$1; shift
    if timeout 120 "$@" >"$dir/out.txt" 2>"$dir/err.txt"; then ok; else bad "$name exited $? : $(cat "$dir/err.txt")"; fi
}
# exit status of the last refusal must be `code` (docs/cli.md: 2 bad usage, 3 bad input file)
code_is() { # name, code
    if [ "$last_rc" -eq "$2" ]; then ok; else bad "$1 exited $last_rc, expected $2"; fi
}
# refuse: non-zero exit, one stderr line matching `pattern`, `protected` unchanged (compared with a copy taken
# before), no temporary file anywhere under $dir
refuse() { # name, protected-file-or-"", pattern, command...
    local name=$1 protected=$2 pattern=$3; shift 3
    [ -n "$protected" ] && cp -P "$protected" "$dir/.before" 2>/dev/null
    timeout 20 "$@" >"$dir/out.txt" 2>"$dir/err.txt"
    local rc=$?
    last_rc=$rc
    if [ "$rc" -eq 0 ]; then bad "$name succeeded"; return; fi
    [ "$rc" -eq 124 ] && { bad "$name hung"; return; }
    if [ "$(wc -l <"$dir/err.txt")" -ne 1 ]; then bad "$name printed $(wc -l <"$dir/err.txt") stderr lines"; else ok; fi
    if grep -q -- "$pattern" "$dir/err.txt"; then ok; else bad "$name: message lacks '$pattern': $(cat "$dir/err.txt")"; fi
    if [ -n "$protected" ]; then
        if [ -L "$dir/.before" ]; then
            if [ -L "$protected" ] && [ "$(readlink "$protected")" = "$(readlink "$dir/.before")" ]; then ok; else bad "$name replaced the link $protected"; fi
        elif cmp -s "$protected" "$dir/.before"; then ok; else bad "$name changed $protected"; fi
        rm -f "$dir/.before"
    fi
    if find "$dir" -name '.*.tmp-*' | grep -q .; then bad "$name left a temporary file"; else ok; fi
}

run_ok init "$CLI" init --preset tiny --seed 5 --out "$dir/m"
run_ok inputs "$CLI" inputs --model "$dir/m" --seed 7 --batch 2 --out "$dir/in.safetensors"
run_ok cotangent "$CLI" cotangent --model "$dir/m" --inputs "$dir/in.safetensors" --seed 3 --out "$dir/ct.safetensors"
W="$dir/m/diffusion_pytorch_model.safetensors"
IN="$dir/in.safetensors"
CT="$dir/ct.safetensors"
mkdir -p "$dir/sub"
ln -s "$dir" "$dir/dirlink"

# ---- 1. an output that is an input or lies in the model directory
refuse fwd-out-is-model "$W" "model directory" "$CLI" forward --model "$dir/m" --inputs "$IN" --out "$W"
code_is fwd-out-is-model 2
refuse fwd-out-is-inputs "$IN" "input file" "$CLI" forward --model "$dir/m" --inputs "$IN" --out "$IN"
refuse fwd-out-dotdot "$IN" "input file" "$CLI" forward --model "$dir/m" --inputs "$IN" --out "$dir/sub/../in.safetensors"
refuse fwd-out-via-link "$IN" "input file" "$CLI" forward --model "$dir/m" --inputs "$IN" --out "$dir/dirlink/in.safetensors"
refuse grad-out-is-cotangent "$CT" "input file" "$CLI" grad --model "$dir/m" --inputs "$IN" --cotangent "$CT" --out "$CT"
refuse grad-out-is-inputs "$IN" "input file" "$CLI" grad --model "$dir/m" --inputs "$IN" --cotangent "$CT" --out "$IN"
refuse replay-out-is-inputs "$IN" "input file" "$CLI" replay --model "$dir/m" --inputs "$IN" --out "$IN" --no-golden
refuse cotangent-out-is-inputs "$IN" "input file" "$CLI" cotangent --model "$dir/m" --inputs "$IN" --seed 1 --out "$IN"
refuse inputs-into-model "" "model directory" "$CLI" inputs --model "$dir/m" --seed 1 --out "$dir/m/x.safetensors"
[ -e "$dir/m/x.safetensors" ] && bad "inputs wrote into the model" || ok
refuse config-as-out "$dir/m/config.json" "model directory" "$CLI" forward --model "$dir/m" --inputs "$IN" --out "$dir/m/config.json"
refuse trajectory-into-model "" "model directory" "$CLI" trajectory --model "$dir/m" --steps 1 --seeds 1 --out "$dir/m/r.json" --quiet
refuse manifest-into-model "" "model directory" "$CLI" verify --model "$dir/m" --write-manifest "$dir/m/manifest.json"
if [ "$(ls -A "$dir/m" | sort | tr '\n' ' ')" = "config.json diffusion_pytorch_model.safetensors " ]; then ok; else bad "model directory now holds: $(ls -A "$dir/m")"; fi
run_ok verify-after "$CLI" verify --model "$dir/m"
# a snapshot whose files are links into a cache's blobs/ (the Hugging Face layout), and one whose transformer/ is a
# link to a directory elsewhere: the files the links reach are the model's too
mkdir -p "$dir/hf/blobs" "$dir/hf/snap" "$dir/hf2/store" "$dir/hf2/snap"
cp "$dir/m/config.json" "$dir/hf/blobs/cfg" && cp "$W" "$dir/hf/blobs/w"
ln -s ../blobs/cfg "$dir/hf/snap/config.json" && ln -s ../blobs/w "$dir/hf/snap/diffusion_pytorch_model.safetensors"
cp "$dir/m/config.json" "$W" "$dir/hf2/store/" && ln -s ../store "$dir/hf2/snap/transformer"
refuse fwd-out-is-blob "$dir/hf/blobs/w" "model's file" "$CLI" forward --model "$dir/hf/snap" --inputs "$IN" --out "$dir/hf/blobs/w"
code_is fwd-out-is-blob 2
refuse manifest-is-blob "$dir/hf/blobs/cfg" "model's file" "$CLI" verify --model "$dir/hf/snap" --write-manifest "$dir/hf/blobs/cfg"
refuse fwd-out-in-linked-transformer "$dir/hf2/store/config.json" "model directory" "$CLI" forward --model "$dir/hf2/snap" --inputs "$IN" --out "$dir/hf2/store/config.json"
run_ok verify-blobs "$CLI" verify --model "$dir/hf/snap"
run_ok verify-linked-transformer "$CLI" verify --model "$dir/hf2/snap"
run_ok fwd-beside-blobs "$CLI" forward --model "$dir/hf/snap" --inputs "$IN" --out "$dir/hf/blobs/out.safetensors"
# a long output name that the file system takes (252 bytes) is written: its temporary name keeps a shorter part of it
long=$(printf 'o%.0s' $(seq 1 240)).safetensors
run_ok long-name "$CLI" forward --model "$dir/m" --inputs "$IN" --out "$dir/$long"
if [ -f "$dir/$long" ]; then ok; else bad "long-name: no output"; fi
rm -f "$dir/$long"
longdir=$(printf 'd%.0s' $(seq 1 250))
run_ok long-init "$CLI" init --preset tiny --seed 5 --out "$dir/$longdir"
run_ok long-init-again "$CLI" init --preset tiny --seed 6 --out "$dir/$longdir"
rm -rf "${dir:?}/$longdir"
# verify: --manifest and --write-manifest exclude each other (the manifest to check is never replaced), and the
# manifest's output is checked before the model is read (a broken model still gets the output's refusal)
run_ok write-manifest "$CLI" verify --model "$dir/m" --write-manifest "$dir/man.json"
refuse verify-both "$dir/man.json" "exclude each other" "$CLI" verify --model "$dir/m" --manifest "$dir/man.json" --write-manifest "$dir/man.json"
code_is verify-both 2
mkdir -p "$dir/mb" && cp "$dir/m/config.json" "$dir/mb/" && head -c 100 "$W" >"$dir/mb/diffusion_pytorch_model.safetensors"
refuse manifest-before-verify "" "model directory" "$CLI" verify --model "$dir/mb" --write-manifest "$dir/mb/man.json"
code_is manifest-before-verify 2
# a manifest that leaves config.json out does not pass (a changed config would go unnoticed)
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d.pop('config.json'); json.dump(d, open(sys.argv[2], 'w'))" "$dir/man.json" "$dir/man_noconfig.json"
refuse manifest-without-config "" "config.json is not listed" "$CLI" verify --model "$dir/m" --manifest "$dir/man_noconfig.json"
code_is manifest-without-config 1

# ---- 2. only a regular file is replaced: a symbolic link, a FIFO, a directory are refused
echo precious >"$dir/target"
ln -s target "$dir/link.safetensors"
refuse out-symlink "$dir/link.safetensors" "symbolic link" "$CLI" forward --model "$dir/m" --inputs "$IN" --out "$dir/link.safetensors"
if [ "$(cat "$dir/target")" = precious ]; then ok; else bad "the link's target changed"; fi
ln -s nowhere "$dir/dangling.json"
refuse out-dangling-symlink "$dir/dangling.json" "symbolic link" "$CLI" trajectory --steps 1 --seeds 1 --out "$dir/dangling.json" --quiet
mkfifo "$dir/fifo"
refuse out-fifo "" "FIFO" "$CLI" trajectory --steps 1 --seeds 1 --out "$dir/fifo" --quiet
code_is out-fifo 2
if [ -p "$dir/fifo" ]; then ok; else bad "the FIFO was replaced"; fi
refuse inputs-fifo "" "regular file" "$CLI" forward --model "$dir/m" --inputs "$dir/fifo" --out "$dir/o.safetensors"
refuse out-directory "" "directory" "$CLI" forward --model "$dir/m" --inputs "$IN" --out "$dir/sub"
if [ -d "$dir/sub" ]; then ok; else bad "the directory was replaced"; fi
# a config.json that is a FIFO is named as such (not as missing), without waiting for a writer
mkdir -p "$dir/mfifo" && cp "$W" "$dir/mfifo/" && mkfifo "$dir/mfifo/config.json"
refuse config-fifo "" "config.json is not a regular file" "$CLI" verify --model "$dir/mfifo"
# init onto a symbolic link to a model directory: named as a link
ln -s m "$dir/mlink"
refuse init-onto-link "" "symbolic link" "$CLI" init --preset tiny --seed 5 --out "$dir/mlink"
if [ -L "$dir/mlink" ]; then ok; else bad "the link was replaced"; fi

# ---- 3. non-finite weights and cotangent
cp -r "$dir/m" "$dir/nan"
python3 - "$dir/nan/diffusion_pytorch_model.safetensors" "$CT" "$dir/ct_nan.safetensors" <<'PY'
import json, struct, sys
def poison(src, dst, name=None):
    b = bytearray(open(src, "rb").read())
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    k = name or sorted(x for x in h if x != "__metadata__")[0]
    e = h[k]
    nan = {"F32": b"\x00\x00\xc0\x7f", "BF16": b"\xc0\x7f", "F64": b"\x00" * 6 + b"\xf8\x7f"}[e["dtype"]]
    at = 8 + n + e["data_offsets"][0]
    b[at:at + len(nan)] = nan
    open(dst, "wb").write(bytes(b))
poison(sys.argv[1], sys.argv[1])
poison(sys.argv[2], sys.argv[3], "sample")
PY
refuse verify-nan-weights "" "NaN" "$CLI" verify --model "$dir/nan"
code_is verify-nan-weights 3
refuse forward-nan-weights "" "NaN" "$CLI" forward --model "$dir/nan" --inputs "$IN" --out "$dir/o.safetensors"
[ -e "$dir/o.safetensors" ] && bad "forward with NaN weights wrote an output" || ok
refuse grad-nan-cotangent "" "not finite" "$CLI" grad --model "$dir/m" --inputs "$IN" --cotangent "$dir/ct_nan.safetensors" --out "$dir/g.safetensors"
code_is grad-nan-cotangent 3
[ -e "$dir/g.safetensors" ] && bad "grad with a NaN cotangent wrote gradients" || ok

# ---- 4. an attention mask that hides every key of item 1's queries
run_ok inputs-mask "$CLI" inputs --model "$dir/m" --seed 7 --batch 2 --attention-mask --out "$dir/inm.safetensors"
run_ok forward-mask "$CLI" forward --model "$dir/m" --inputs "$dir/inm.safetensors" --out "$dir/om.safetensors"
python3 - "$dir/inm.safetensors" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
e = json.loads(b[8:8 + n])["attention_mask"]
B, S = e["shape"][0], e["shape"][-1]
at = 8 + n + e["data_offsets"][0] + S  # item 1
b[at:at + S] = bytes(S)
open(sys.argv[1], "wb").write(bytes(b))
PY
refuse forward-empty-mask "" "item 1" "$CLI" forward --model "$dir/m" --inputs "$dir/inm.safetensors" --out "$dir/om2.safetensors"
code_is forward-empty-mask 3

# ---- 5. option strings are never cut: 40 seeds run 40 seeds; a long bogus --keyframes is refused
seeds=$(seq -s, 1000000000001 1000000000040)
run_ok seeds-40 "$CLI" trajectory --seeds "$seeds" --steps 1 --no-grad --quiet --out "$dir/t40.json"
if grep -q '(40 seeds x 1 steps x 4)' "$dir/out.txt"; then ok; else bad "40 seeds: $(tail -n 1 "$dir/out.txt")"; fi
# the recorded command line is whole; where a value is longer than its provenance slot it says so (a model
# under a 1250-byte path: cheap to run, long to record)
deep="$dir"
for i in 1 2 3 4 5; do deep="$deep/$(printf "p$i%.0s" $(seq 1 120))"; done
mkdir -p "$deep" && cp -r "$dir/m" "$deep/m"
run_ok long-model-path "$CLI" trajectory --model "$deep/m" --seeds 1 --steps 1 --no-grad --quiet --out "$dir/tl.json"
if python3 - "$dir/tl.json" "$deep/m" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert sys.argv[2] in d["command"], "report command cut"
for key in ("command", "model"):
    v = d.get("provenance", {}).get(key, sys.argv[2])
    assert sys.argv[2] in v or "more bytes not recorded" in v, "provenance %s cut silently: %s" % (key, v[-80:])
PY
then ok; else bad "a long command line was cut"; fi
# 63 characters of valid tokens, then BOGUS: a 64-byte buffer kept exactly the valid part
kf="$(printf 'first,%.0s' 1 2 3 4)$(printf 'last,%.0s' 1 2 3 4 5 6 7)lastBOGUS"
refuse keyframes-long "" "keyframes" "$CLI" inputs --model "$dir/m" --seed 1 --keyframes "$kf" --out "$dir/k.safetensors"
[ -e "$dir/k.safetensors" ] && bad "a bogus --keyframes wrote inputs" || ok
longdir="$dir/$(printf 'd%.0s' $(seq 1 200))"
mkdir -p "$longdir/$(printf 'e%.0s' $(seq 1 200))"
longdir="$longdir/$(printf 'e%.0s' $(seq 1 200))"
refuse long-path "" "END.safetensors" "$CLI" forward --model "$dir/m" --inputs "$longdir/$(printf 'f%.0s' $(seq 1 800))END.safetensors" --out "$dir/o.safetensors"

# ---- 6. control bytes in a message are escaped (a file name with CR, ESC, VT, FS..RS)
evil="$dir/$(printf 'x\r\033[2K\x0b\x1c\x1d\x1ey').safetensors"
refuse escaped-message "" 'x\\x0d\\x1b\[2K\\x0b\\x1c\\x1d\\x1ey' "$CLI" forward --model "$dir/m" --inputs "$evil" --out "$dir/o.safetensors"
if LC_ALL=C grep -q "$(printf '[\001-\010\013-\037\177]')" "$dir/err.txt"; then bad "raw control bytes on stderr"; else ok; fi
refuse escaped-option "" '\\x0d' "$CLI" trajectory --seeds "$(printf '1\r2')" --out "$dir/o.json"
refuse escaped-command "" 'x\\x1b\[2K\\x7f' "$CLI" "$(printf 'x\033[2K\177')"

# ---- 7. strict JSON: trailing text, a control byte, another class, a repeated name
cp -r "$dir/m" "$dir/j"
cfg="$dir/j/config.json"
cp "$cfg" "$dir/cfg.orig"
{ cat "$dir/cfg.orig"; echo '{"x": 1}'; } >"$cfg"
refuse config-trailing "" "after the JSON value" "$CLI" verify --model "$dir/j"
code_is config-trailing 3
{ cat "$dir/cfg.orig"; printf '\x1c'; } >"$cfg"
refuse config-control "" "control byte 0x1c" "$CLI" verify --model "$dir/j"
sed 's/MiniMaxH3Transformer3DModel/WanTransformer3DModel/' "$dir/cfg.orig" >"$cfg"
refuse config-class "" "WanTransformer3DModel" "$CLI" verify --model "$dir/j"
sed 's/"ffn_dim": \([0-9]*\),/"ffn_dim": \1, "ffn_dim": \1,/' "$dir/cfg.orig" >"$cfg"
refuse config-repeated "" "ffn_dim" "$CLI" verify --model "$dir/j"
cp "$dir/cfg.orig" "$cfg"
run_ok manifest "$CLI" verify --model "$dir/j" --write-manifest "$dir/man.json"
{ cat "$dir/man.json"; echo '[]'; } >"$dir/man2.json"
refuse manifest-trailing "" "after the JSON value" "$CLI" verify --model "$dir/j" --manifest "$dir/man2.json"
# a sharded copy whose index names a tensor twice
python3 - "$dir/j" <<'PY'
import json, os, sys
d = sys.argv[1]
w = "diffusion_pytorch_model.safetensors"
os.rename(os.path.join(d, w), os.path.join(d, "shard-1.safetensors"))
import struct
b = open(os.path.join(d, "shard-1.safetensors"), "rb").read()
n = struct.unpack("<Q", b[:8])[0]
names = [k for k in json.loads(b[8:8 + n]) if k != "__metadata__"]
body = ", ".join('"%s": "shard-1.safetensors"' % k for k in names + names[:1])
open(os.path.join(d, w + ".index.json"), "w").write('{"metadata": {}, "weight_map": {%s}}' % body)
PY
refuse index-repeated "" "more than once" "$CLI" verify --model "$dir/j"
code_is index-repeated 3

# ---- 8. a file size limit (ulimit -f, set plainly: no trap) fails the write as a full disk does: exit 4 with one
# line, the target as it was and no temporary left; killed by SIGXFSZ mid-write (exit 153) it left its temporary
echo precious >"$dir/limited.safetensors"
refuse forward-file-size-limit "$dir/limited.safetensors" "File too large" \
    bash -c 'ulimit -f 1; exec "$@"' sh "$CLI" forward --model "$dir/m" --inputs "$IN" --out "$dir/limited.safetensors"
code_is forward-file-size-limit 4
# init writes a temporary directory .NAME.init-PID-N and renames it over the model it replaces
sha256sum "$W" >"$dir/m.sha256"
refuse init-file-size-limit "" "File too large" bash -c 'ulimit -f 8; exec "$@"' sh "$CLI" init --preset tiny --seed 9 \
    --out "$dir/m"
code_is init-file-size-limit 4
left=$(find "$dir" -name '.*.init-*')
if [ -n "$left" ]; then bad "init under a file size limit left $left"; else ok; fi
sha256sum -c --quiet "$dir/m.sha256" && ok || bad "init under a file size limit changed the model it was to replace"
refuse init-new-file-size-limit "" "File too large" bash -c 'ulimit -f 8; exec "$@"' sh "$CLI" init --preset tiny \
    --seed 9 --out "$dir/m_new"
code_is init-new-file-size-limit 4
if [ -e "$dir/m_new" ] || find "$dir" -name '.*.init-*' | grep -q .; then
    bad "init of a new model under a file size limit left a directory"
else ok; fi

# ---- 9. SIGINT, SIGTERM, SIGHUP or SIGUSR1 mid-write: the process ends by that signal (128 + its number), the
# temporaries it was writing are gone and the target is as it was.  An init of one released-size block writes 2.9 GB
# over about a minute: each signal comes once its temporary weights file inside the temporary directory holds data.
# Before the CLI took these signals every one of them left .m_sig.init-PID-N (and the weights temporary in it).
start_big_init() { # signal to give its default action back (a script's background job starts with SIGINT ignored)
    env --default-signal="$1" "$CLI" init --preset h3-33b --layers 1 --seed 3 --out "$dir/m_sig" --quiet \
        >/dev/null 2>"$dir/err.txt" &
    pid=$!
    local t
    tmpw=""
    for t in $(seq 1 600); do
        tmpw=$(find "$dir" -path '*/.m_sig.init-*/.*.tmp-*' -size +1k 2>/dev/null | head -n 1)
        [ -n "$tmpw" ] && return 0
        sleep 0.05
    done
    bad "init --out m_sig: no temporary weights file with data after 30 s"
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 1
}
# after a kill by `sig` (number `num`): the exit status, nothing left, the target as it was (new or model)
ended_clean() { # signal name, number, target state, exit status
    local sig=$1 num=$2 state=$3 rc=$4 left
    if [ "$rc" -eq $((128 + num)) ]; then ok; else bad "init killed by SIG$sig exited $rc, expected $((128 + num))"; fi
    left=$(find "$dir" -name '.m_sig.init-*' -o -name '.*.tmp-*')
    if [ -z "$left" ]; then ok; else bad "init killed by SIG$sig left $left"; fi
    if [ "$state" = model ]; then
        sha256sum -c --quiet "$dir/m_sig.sha256" && ok || bad "init killed by SIG$sig changed the model it was to replace"
    elif [ -e "$dir/m_sig" ]; then bad "init of a new model killed by SIG$sig left $dir/m_sig"; else ok; fi
}
sig_mid_init() { # signal name, number, target state: new or model
    local sig=$1 num=$2 state=$3 rc
    rm -rf "$dir/m_sig"
    [ "$state" = model ] && cp -r "$dir/m" "$dir/m_sig" && sha256sum "$dir/m_sig"/* >"$dir/m_sig.sha256"
    start_big_init "$sig" || return
    kill -s "$sig" "$pid"
    wait "$pid"
    rc=$?
    ended_clean "$sig" "$num" "$state" "$rc"
}
sig_mid_init TERM 15 new
sig_mid_init INT 2 model
sig_mid_init HUP 1 new
sig_mid_init USR1 10 model
rm -rf "$dir/m_sig"
# a signal ignored when the command starts stays ignored (nohup): SIGHUP mid-write leaves it running; SIGTERM then ends
# it as above
trap '' HUP
if start_big_init TERM; then
    trap - HUP
    kill -HUP "$pid"
    sleep 0.5
    if kill -0 "$pid" 2>/dev/null; then ok; else bad "a SIGHUP ignored at the start ended init"; fi
    kill -TERM "$pid"
    wait "$pid"
    ended_clean TERM 15 new $?
fi
trap - HUP
rm -rf "$dir/m_sig" "$dir/m_sig.sha256"

finish cli_reliability
