#!/usr/bin/env bash
# Provenance (docs/cli.md "Provenance"): every safetensors file a command writes carries __metadata__ and every
# JSON report a "provenance" object, with the version, source commit, command line, backend, device, threads,
# model and the SHA-256 of the model's config and of the files the command read.
set -u
CLI=${H3S_CLI:?H3S_CLI must name the built h3strict}
PY=$(command -v python3 || true)
[ -n "$PY" ] || { echo "SKIP: python3 is needed to read the safetensors headers"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
set -e
"$CLI" init --preset tiny --seed 5 --out "$dir/m" --quiet >/dev/null
"$CLI" init --preset small --layers 1 --seed 5 --out "$dir/small" --quiet >/dev/null
"$CLI" inputs --model "$dir/m" --seed 7 --batch 2 --out "$dir/in.safetensors" >/dev/null
"$CLI" inputs --model "$dir/small" --seed 7 --out "$dir/in_small.safetensors" >/dev/null
"$CLI" cotangent --model "$dir/m" --inputs "$dir/in.safetensors" --seed 3 --out "$dir/ct.safetensors" >/dev/null
"$CLI" forward --model "$dir/m" --inputs "$dir/in.safetensors" --out "$dir/out.safetensors" --threads 1 >/dev/null
"$CLI" grad --model "$dir/m" --inputs "$dir/in.safetensors" --cotangent "$dir/ct.safetensors" \
    --out "$dir/g.safetensors" --threads=2 >/dev/null
"$CLI" grad --model "$dir/m" --inputs "$dir/in.safetensors" --cotangent "$dir/ct.safetensors" \
    --out "$dir/g_split.safetensors" --grad-operands split >/dev/null
"$CLI" replay --model "$dir/m" --inputs "$dir/in.safetensors" --out "$dir/replay.json" --no-golden --quiet >/dev/null
"$CLI" trajectory --model "$dir/m" --seeds 11 --steps 1 --batch 2 --no-grad --out "$dir/traj.json" --quiet >/dev/null
"$CLI" trajectory --seeds 11 --steps 1 --batch 2 --no-grad --out "$dir/traj_builtin.json" --quiet >/dev/null
# a model directory and report names of bytes that are not UTF-8 (0xe9, 0xff): the reports must still be UTF-8
cp -r "$dir/m" "$dir/m$(printf '\351')"
"$CLI" replay --model "$dir/m$(printf '\351')" --inputs "$dir/in.safetensors" --out "$dir/replay$(printf '\377').json" \
    --no-golden --quiet >/dev/null
"$CLI" trajectory --model "$dir/m$(printf '\351')" --seeds 11 --steps 1 --batch 2 --no-grad \
    --out "$dir/traj$(printf '\377').json" --quiet >/dev/null
set +e
"$PY" - "$dir" "$("$CLI" --version)" <<'PYEOF'
import hashlib, json, os, re, struct, sys
d, version_line = sys.argv[1], sys.argv[2]
fails = []
def check(cond, what):
    if not cond:
        fails.append(what)
def meta(name):
    with open(os.path.join(d, name), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)).get("__metadata__", {})
def report(name):
    with open(os.path.join(d, name)) as f:
        return json.load(f).get("provenance", {})
def sha(name):
    with open(os.path.join(d, name), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
version = version_line.split()[-1]
common = ["h3strict_version", "source_commit", "command", "model", "model_config_sha256"]
computed = ["backend", "device", "threads", "grad_operands"]
want = {
    "in.safetensors": common + ["seed"],
    "ct.safetensors": common + ["inputs_sha256", "seed"],
    "out.safetensors": common + computed + ["inputs_sha256"],
    "g.safetensors": common + computed + ["inputs_sha256", "cotangent_sha256"],
}
got = {k: meta(k) for k in want}
got["replay.json"] = report("replay.json")
got["traj.json"] = report("traj.json")
got["traj_builtin.json"] = report("traj_builtin.json")
want["replay.json"] = common + computed + ["inputs_sha256"]
want["traj.json"] = common + computed
want["traj_builtin.json"] = common + computed
for k, keys in want.items():
    for key in keys:
        check(isinstance(got[k].get(key), str) and got[k].get(key) != "", f"{k}: no {key}: {got[k]}")
    if got[k]:
        check(got[k].get("h3strict_version") == version, f"{k}: version {got[k].get('h3strict_version')} != {version}")
        check(re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?|unknown", got[k].get("source_commit", "")) is not None,
              f"{k}: source_commit {got[k].get('source_commit')!r}")
        check(got[k].get("command", "").startswith("h3strict "), f"{k}: command {got[k].get('command')!r}")
# the digests are of the files read, the config digest is the model's
check(got["out.safetensors"].get("inputs_sha256") == sha("in.safetensors"), "forward: inputs_sha256 is not the inputs'")
check(got["g.safetensors"].get("cotangent_sha256") == sha("ct.safetensors"), "grad: cotangent_sha256 is not the cotangent's")
check(got["replay.json"].get("inputs_sha256") == sha("in.safetensors"), "replay: inputs_sha256 is not the inputs'")
digests = {got[k].get("model_config_sha256") for k in want if k != "traj_builtin.json"}
check(len(digests) == 1, f"one model, several config digests: {digests}")
check(meta("in_small.safetensors").get("model_config_sha256") not in digests, "another model, the same config digest")
check(got["traj_builtin.json"].get("model_config_sha256") in digests, "the built-in model is tiny: same config digest")
# what ran, and how
check(got["out.safetensors"].get("threads") == "1", f"forward --threads 1 recorded {got['out.safetensors'].get('threads')}")
check(got["g.safetensors"].get("threads") == "2", f"grad --threads=2 recorded {got['g.safetensors'].get('threads')}")
check(got["out.safetensors"].get("backend") == "cpu-strict", "backend")
check("--threads 1" in got["out.safetensors"].get("command", ""), "forward: the command line is not recorded")
check(got["in.safetensors"].get("seed") == "7", "inputs: seed")
check(meta("g_split.safetensors").get("grad_operands") == "split", "grad --grad-operands split not recorded")
check(got["g.safetensors"].get("grad_operands") != "split", "the default grad operands recorded as split")
# paths of other bytes: every string of the report, the top-level "command" and "model" included, is printable ASCII
# with '?' for each byte outside it (as the provenance writes them), and the whole report is valid UTF-8
for name, keys in ((b"replay\xff.json", ["command"]), (b"traj\xff.json", ["command", "model"])):
    raw = open(os.path.join(os.fsencode(d), name), "rb").read()
    try:
        doc = json.loads(raw.decode("utf-8"))
    except ValueError as e:
        check(False, f"{name!r} is not UTF-8 JSON: {e}")
        continue
    for key in keys:
        v = doc.get(key, "")
        check(re.fullmatch(r"[ -~]*", v) is not None, f"{name!r}: {key} is not printable ASCII: {v!r}")
        check(v == doc.get("provenance", {}).get(key), f"{name!r}: {key} {v!r} is not the provenance's")
    check(f"--model {d}/m? " in doc.get("command", ""), f"{name!r}: command {doc.get('command')!r}")
    check(name.decode("latin-1").replace("\xff", "?") in doc.get("command", ""), f"{name!r}: command lacks the out")
check(json.load(open(os.path.join(d, "traj_builtin.json")))["model"] == "built-in tiny (seed 0)", "built-in model")
for f in fails:
    print("FAIL:", f)
print(f"cli_provenance: {len(want)} files, {len(fails)} failed")
sys.exit(1 if fails else 0)
PYEOF
