"""bench/provider/model_bench.py, the whole-model benchmark's side runner, on the tiny model and the CPU: one side's
JSON is complete and names its phases, `--profile` writes the per-kernel profile's header and tables, and bad
arguments fail with a message.  The GPU figures come from bench/provider/run_model_bench.sh on a device; this only
keeps the runner's code paths working.  The provider side runs when diffusers is importable (CI installs it)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BENCH = os.path.join(ROOT, "bench", "provider", "model_bench.py")
LAYOUT_264 = ["--text", "40", "--frames", "2", "--latent-height", "16", "--latent-width", "24", "--audio-latents",
              "16"]  # 40 + 192 + 32 packed rows, run_model_bench.sh's layout for S = 264


@pytest.fixture(scope="module")
def model(cli, tmp_path_factory):
    work = tmp_path_factory.mktemp("model_bench")
    m = work / "model"
    subprocess.run([cli, "init", "--preset", "tiny", "--layers", "2", "--seed", "1", "--out", str(m)], check=True,
                   capture_output=True)
    inputs = work / "inputs_S264.safetensors"
    subprocess.run([cli, "inputs", "--model", str(m), "--seed", "7", "--batch", "1", *LAYOUT_264, "--out",
                    str(inputs)], check=True, capture_output=True)
    return work, m, inputs


def run_side(side, model, *extra):
    work, m, inputs = model
    out = work / f"{side}.json"
    prof = work / f"profile_{side}.txt"
    r = subprocess.run([sys.executable, BENCH, "side", "--side", side, "--model", str(m), "--inputs",
                        f"264={inputs}", "--device", "cpu", "--reps", "1", "--warmup", "1", "--phase-s", "20",
                        "--profile", str(prof), "--json", str(out), *extra], capture_output=True, text=True,
                       timeout=300)
    return r, out, prof


def check_side(r, out, prof, side):
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(out.read_text())
    assert rep["side"] == side and rep["complete"] is True and rep["stage"] == "done"
    phases = [(x["phase"], x["S"]) for x in rep["results"]]
    assert phases == [("load", None), ("forward", 264), ("forward+backward", 264)]
    assert all(x["ms"] is not None and x["ms"] > 0 for x in rep["results"])
    text = prof.read_text().splitlines()
    assert text[0].startswith(f"# {side}: one forward+backward at S = 264, 2 blocks, device cpu")
    assert text[1].startswith("wall ") and "device busy" in text[1]
    assert any(line.startswith("host side:") for line in text)


def test_strict_side_and_profile(model):
    r, out, prof = run_side("strict", model)
    check_side(r, out, prof, "strict")


def test_provider_side_and_profile(model):
    try:
        import diffusers  # noqa: F401
    except ImportError:
        if os.environ.get("H3S_REQUIRE_DIFFUSERS") == "1":
            raise
        pytest.skip("SKIP: diffusers is not importable")
    r, out, prof = run_side("provider", model)
    check_side(r, out, prof, "provider")


def test_inputs_of_another_length_are_refused(model):
    work, m, inputs = model
    r = subprocess.run([sys.executable, BENCH, "side", "--side", "strict", "--model", str(m), "--inputs",
                        f"925={inputs}", "--device", "cpu", "--json", str(work / "bad.json")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 3
    assert "264 packed rows, the command line says 925" in r.stdout + r.stderr
