"""`python -m h3strict.replay` without diffusers: the verdicts, exit codes and report writing of the per-node
replay on the tiny model, with the provider faked (test_diffusers.py runs the real one, and skips without it).

The fake provider is the strict library itself: its "provider" values are a strict pass's own (so every node is
bitwise equal and within its bound unless a test changes one), its golden those values in float64, and its isolated
node the provider's value.  Each test then removes or alters one value to reach one path of the comparison."""

import json
import os
import types

import pytest
import torch

from h3strict import replay as rp

FLOATS = (torch.float32, torch.float64, torch.bfloat16)


@pytest.fixture(scope="module")
def work(tmp_path_factory, run_cli):
    d = tmp_path_factory.mktemp("provider_replay")
    run = run_cli

    run("init", "--preset", "tiny", "--seed", 5, "--out", d / "m")
    run("inputs", "--model", d / "m", "--seed", 7, "--batch", 2, "--out", d / "in2.safetensors")
    return d


def is_grad(name):
    return name.endswith(".grad") or ".grad_" in name or name.startswith("param.")


class FakeProvider:
    """Replaces the replay's provider (diffusers) with strict passes; `provider` and `golden` edit the values
    (a dict name -> tensor, forward and gradient nodes together) before the replay sees them."""

    def __init__(self, monkeypatch, model_dir, provider=None, golden=None):
        self.model_dir, self.edit_provider, self.edit_golden = str(model_dir), provider, golden
        self.base = None
        monkeypatch.setattr(rp, "_load_provider", lambda d, device: (torch.nn.Module(), self.model_dir))
        monkeypatch.setattr(rp, "_check_provider_dtypes", lambda provider, handle: None)
        monkeypatch.setattr(rp, "_run_provider", self.run)
        monkeypatch.setattr(rp, "_Isolated", FakeIsolated)

    def run(self, model, x, device, backward, ct, offload=False, record_inputs=True):
        if x["hidden_states"].dtype == torch.float64:  # the golden: the provider's module in float64
            values = {k: (v.double() if v.dtype in FLOATS else v.clone()) for k, v in self.base.items()}
            if self.edit_golden:
                self.edit_golden(values)
        else:
            handle = rp.ctypes.c_void_p()
            rp.check(rp.lib.h3s_model_load(rp.path_arg("model_dir", self.model_dir), rp._lib.BACKEND_CPU, 0,
                                           rp.ctypes.byref(handle)))
            try:
                strict = rp._strict_pass(handle, x, backward, ct, keep=True)
            finally:
                rp.lib.h3s_model_free(handle)
            self.base = dict(strict.values)
            values = {k: v.clone() for k, v in self.base.items()}
            if self.edit_provider:
                self.edit_provider(values)
        tap = types.SimpleNamespace(values={}, grad_values={}, inputs={})
        for k, v in values.items():
            (tap.grad_values if is_grad(k) else tap.values)[k] = v
        return tap, None, None


class FakeIsolated:
    def __init__(self, provider, cfg, x, device, golden=False):
        pass

    def run(self, name, pv):
        v = pv.values[name]
        return v.clone(), v.double()


def replay_main(work, out, *extra):
    return rp.main(["--model", str(work / "m"), "--inputs", str(work / "in2.safetensors"), "--out", str(out),
                    "--quiet", *map(str, extra)])


def by_name(report):
    return {n["name"]: n for n in report["nodes"]}


def some_gradient(report):
    return next(n["name"] for n in report["nodes"] if n["name"].endswith(".grad") and n["name"] != "proj_in.grad")


def test_fake_provider_baseline(work, tmp_path, monkeypatch):
    """With the provider's values the strict ones every node is checked, equal and within: exit 0."""
    FakeProvider(monkeypatch, work / "m")
    assert replay_main(work, tmp_path / "r.json", "--backward") == rp.EXIT_OK
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["summary"]["gradient_nodes"] > 0 and rep["summary"]["unchecked"] == 0 and rep["unchecked"] == []
    assert rep["first_drift"] is None and rep["first_grad_drift"] is None and rep["first_unchecked"] is None
    for n in rep["nodes"]:
        assert n["check"] == "within" and n["within_bound"] is True and n["unchecked"] == [], n["name"]
        assert n["reason"] is None, n["name"]


@pytest.mark.parametrize("missing", ["provider", "golden"])
def test_gradient_without_provider_or_golden_value_is_unchecked(work, tmp_path, monkeypatch, capsys, missing):
    """Defect 1: a gradient node whose provider or golden value is missing passed silently (within_bound null, not
    over the bound, exit 0); it is now listed as unchecked, with the reason, and the run exits 3."""
    target = "block.0.ffn_down.grad"
    drop = (lambda values: values.pop(target))
    FakeProvider(monkeypatch, work / "m", **{missing: drop})
    code = replay_main(work, tmp_path / "r.json", "--backward")
    assert code == 3, code  # rp.EXIT_UNCHECKED
    rep = json.loads((tmp_path / "r.json").read_text())  # the report is complete and written
    node = by_name(rep)[target]
    assert node["within_bound"] is None and node["check"] == "unchecked" and node["unchecked"] == ["chained"]
    assert f"no {missing} value" in node["reason"]
    assert rep["unchecked"] == [target] and rep["first_unchecked"] == target and rep["summary"]["unchecked"] == 1
    err = capsys.readouterr().err
    assert "could not be checked" in err and target in err


def test_forward_without_provider_value_is_unchecked_not_a_crash(work, tmp_path, monkeypatch):
    """The same for a forward node: chained and isolated unchecked (the isolated run needs the provider's value)."""
    target = "block.1.swiglu"
    FakeProvider(monkeypatch, work / "m", provider=lambda values: values.pop(target))
    assert replay_main(work, tmp_path / "r.json") == 3
    node = by_name(json.loads((tmp_path / "r.json").read_text()))[target]
    assert node["unchecked"] == ["chained", "isolated"] and node["isolated"]["check"] == "unchecked"
    assert "no provider value" in node["isolated"]["reason"]


def test_a_drift_wins_over_unchecked(work, tmp_path, monkeypatch):
    """A node over its bound and another unchecked: the comparison differed, exit 1 (the report lists both)."""
    over = "block.1.ffn_down"

    def provider(values):
        values.pop("block.0.ffn_down.grad")
        values[over] = values[over] * 1.05  # the provider near the golden, strict 5% away from both

    def golden(values):
        values[over] = values[over] * 1.05
    FakeProvider(monkeypatch, work / "m", provider=provider, golden=golden)
    assert replay_main(work, tmp_path / "r.json", "--backward") == rp.EXIT_DIFFER
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["unchecked"] == ["block.0.ffn_down.grad"] and rep["over_bound"] == [over]
    assert "over the bound" in by_name(rep)[over]["reason"]


def test_bound_requires_a_finite_strict_error():
    """Defect 2: with an infinite provider error the bound was infinite and any strict error passed, inf too."""
    for bound in (rp.FORWARD_BOUND, rp.GRADIENT_BOUND):
        assert rp._bound(float("inf"), float("inf"), bound)[1] is False
        assert rp._bound(float("nan"), float("inf"), bound)[1] is False
        assert rp._bound(float("nan"), 0.1, bound)[1] is False
        assert rp._bound(float("inf"), 0.1, bound)[1] is False
        assert rp._bound(0.5, float("inf"), bound) == (float("inf"), True)
        assert rp._bound(1e-4, 0.0, bound)[1] is True
        assert rp._bound(None, 0.1, bound) == (None, None)


def test_non_finite_provider_error_does_not_pass_a_non_finite_strict_error(work, tmp_path, monkeypatch):
    """Defect 2 through the replay: a golden of zeros gives both errors inf (relative to a zero norm); the node
    passed before, it is now over the bound and the report says why."""
    target = "block.0.o_proj"

    def golden(values):
        values[target] = torch.zeros_like(values[target])
    FakeProvider(monkeypatch, work / "m", golden=golden)
    assert replay_main(work, tmp_path / "r.json") == rp.EXIT_DIFFER
    rep = json.loads((tmp_path / "r.json").read_text())
    node = by_name(rep)[target]
    assert node["golden_rel_l2"] == "inf" and node["provider_rel_l2"] == "inf" and node["bound"] == "inf"
    assert node["within_bound"] is False and node["check"] == "over" and node["over_bound"] == ["chained"]
    assert "not finite" in node["reason"]
    assert rep["over_bound"] == [target]


def test_non_finite_golden_is_unchecked(work, tmp_path, monkeypatch):
    target = "block.0.o_proj"

    def golden(values):
        values[target] = values[target].clone()
        values[target].reshape(-1)[0] = float("nan")
    FakeProvider(monkeypatch, work / "m", golden=golden)
    assert replay_main(work, tmp_path / "r.json") == 3
    node = by_name(json.loads((tmp_path / "r.json").read_text()))[target]
    assert node["check"] == "unchecked" and node["reason"] == "the FP64 golden is not finite"


def test_first_drift_covers_gradient_nodes(work, tmp_path, monkeypatch):
    """Defect 6: a provider whose only difference from strict is in a gradient node: first_drift named no node
    (forward nodes only); it now names the gradient node, in the report's order, as does first_grad_drift."""
    def flip(values, name):
        values[name] = values[name].clone()
        bits = {torch.float32: torch.int32, torch.bfloat16: torch.int16}[values[name].dtype]
        values[name].reshape(-1)[:1].view(bits).bitwise_xor_(1)

    FakeProvider(monkeypatch, work / "m", provider=lambda v: flip(v, "block.1.swiglu.grad"))
    assert replay_main(work, tmp_path / "g.json", "--backward") == rp.EXIT_OK  # within the bound: no failure
    rep = json.loads((tmp_path / "g.json").read_text())
    assert rep["first_drift"] == "block.1.swiglu.grad" and rep["first_grad_drift"] == "block.1.swiglu.grad"
    assert by_name(rep)["block.1.swiglu.grad"]["equal_provider"] is False

    # a forward drift comes first in the order; first_grad_drift still names the gradient node
    FakeProvider(monkeypatch, work / "m", provider=lambda v: (flip(v, "block.1.swiglu.grad"),
                                                              flip(v, "block.1.ffn_down")))
    assert replay_main(work, tmp_path / "f.json", "--backward") == rp.EXIT_OK
    rep = json.loads((tmp_path / "f.json").read_text())
    assert rep["first_drift"] == "block.1.ffn_down" and rep["first_grad_drift"] == "block.1.swiglu.grad"


def minimal_report():
    return {"summary": {"nodes": 0, "forward_nodes": 0, "gradient_nodes": 0, "over_bound": 0, "broken_promises": 0,
                        "unchecked": 0, "differ": False},
            "first_drift": None, "first_isolated_drift": None, "first_unchecked": None, "nodes": []}


def test_os_error_is_exit_4_naming_the_path(work, tmp_path, monkeypatch, capsys):
    """Defect 3: an OSError (here a report name longer than NAME_MAX) escaped main as a traceback (exit 1); now
    one line names the path, exit 4, and nothing is left behind."""
    monkeypatch.setattr(rp, "replay", lambda *a, **k: minimal_report())
    out = tmp_path / ("r" * (os.pathconf(tmp_path, "PC_NAME_MAX") + 1))
    assert replay_main(work, out) == rp.EXIT_DEVICE == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("h3strict.replay: ") and str(out) in err[0], err
    assert os.listdir(tmp_path) == []


def test_unexpected_exception_is_exit_4_with_a_message(work, tmp_path, monkeypatch, capsys):
    """Defect 3: any other exception (a bug) ends in one line naming it and exit 4, not an unreported exit 1."""
    def broken(*a, **k):
        raise KeyError("no such tap")
    monkeypatch.setattr(rp, "replay", broken)
    assert replay_main(work, tmp_path / "r.json") == rp.EXIT_DEVICE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal error: KeyError: 'no such tap'" in err[0] and "test_provider_replay.py" in err[0]
    assert not (tmp_path / "r.json").exists()


def test_report_name_at_name_max_is_written(tmp_path):
    """Defect 3: the temporary file was named after the target plus 14 bytes, so a target name near NAME_MAX
    could not be written; it now has a short name of its own in the target's directory."""
    out = tmp_path / ("r" * os.pathconf(tmp_path, "PC_NAME_MAX"))
    rp._write_atomic(str(out), {"a": 1})
    assert json.loads(out.read_text()) == {"a": 1} and os.listdir(tmp_path) == [out.name]


@pytest.mark.parametrize("text", ["²", "1,²", "٠", "1,٣", "0x1", "+1", "-0"])
def test_blocks_refuses_non_ascii_digits(text):
    """Defect 3: str.isdigit takes "²" (then int() raised ValueError: a traceback) and "٠" (taken as block 0)."""
    with pytest.raises(rp.ReplayError) as e:
        rp._parse_blocks(text, 2)
    assert e.value.code == rp.EXIT_USAGE and "--blocks" in str(e.value)
    assert rp._parse_blocks(" 1 ,0", 2) == [0, 1]


def test_blocks_superscript_through_main_is_a_usage_error(work, tmp_path, capsys):
    assert replay_main(work, tmp_path / "r.json", "--blocks", "²") == rp.EXIT_USAGE
    assert "--blocks: '²' is not a comma-separated list" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("threads", ["0", "1025", "100000", "٣"])
def test_threads_out_of_range_is_a_usage_error(tmp_path, capsys, threads):
    """Defect 4: --threads had no upper bound; 1 to 1024, else exit 2 with a message, before anything is read."""
    code = rp.main(["--model", str(tmp_path / "no-model"), "--inputs", str(tmp_path / "no-inputs"), "--out",
                    str(tmp_path / "r.json"), "--threads", threads, "--quiet"])
    assert code == rp.EXIT_USAGE
    err = capsys.readouterr().err
    assert "--threads" in err and ("between 1 and 1024" in err or "invalid" in err), err


def test_threads_bound_in_the_function():
    with pytest.raises(rp.ReplayError) as e:
        rp.replay("no-model", "no-inputs", threads=1025)
    assert e.value.code == rp.EXIT_USAGE and "between 1 and 1024" in str(e.value)
    assert rp._check_threads(1024) == 1024 and rp._check_threads(1) == 1


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_report_mode_follows_the_umask(tmp_path, umask):
    """Defect 5: the report kept mkstemp's mode 0600; it now has 0666 less the umask, as a new file would."""
    old = os.umask(umask)
    try:
        rp._write_atomic(str(tmp_path / "r.json"), {"a": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o666 & ~umask


def test_replaced_report_keeps_its_mode(tmp_path):
    """A report written over an existing file keeps that file's permission bits (a private 0600 report stays
    private), as the library's writers do."""
    target = tmp_path / "r.json"
    target.write_text("{}")
    target.chmod(0o600)
    rp._write_atomic(str(target), {"a": 1})
    assert target.stat().st_mode & 0o7777 == 0o600 and json.loads(target.read_text()) == {"a": 1}


def test_planted_fault_with_the_fake_provider(work, tmp_path, monkeypatch):
    """The comparison loop's isolated path: a bit planted in a promised node is a broken promise (exit 1)."""
    FakeProvider(monkeypatch, work / "m")
    assert replay_main(work, tmp_path / "r.json", "--plant-fault", "pack") == rp.EXIT_DIFFER
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["broken_promises"] == ["pack"] and rep["first_isolated_drift"] == "pack"
    assert rep["first_isolated_difference"] == "pack" and rep["over_bound"] == [] and rep["unchecked"] == []
    iso = by_name(rep)["pack"]["isolated"]
    assert iso["promise_kept"] is False and iso["first_differing_row"] == 0 and iso["check"] == "within"
