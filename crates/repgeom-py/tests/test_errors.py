"""Every error class, with the command line's messages; Ctrl-C; the registry and plugins."""

import builtins
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import repgeom
from repgeom import _native
from conftest import PGA, ROOT, run_cli


def test_error_hierarchy():
    assert issubclass(repgeom.InvalidInputError, builtins.ValueError)
    assert issubclass(repgeom.FileNotFoundError, builtins.FileNotFoundError)
    assert issubclass(repgeom.IOError, builtins.OSError)
    for cls in [repgeom.InvalidInputError, repgeom.FileNotFoundError, repgeom.IOError, repgeom.InternalError]:
        assert issubclass(cls, repgeom.Error)


def test_missing_file_carries_the_cli_message(monkeypatch):
    monkeypatch.chdir(ROOT)
    with pytest.raises(repgeom.FileNotFoundError) as e:
        repgeom.pga("fixtures/pga/nope.npy", "fixtures/pga/readout.npy", k=8, progress=False)
    cli = run_cli("pga", "--acts", "fixtures/pga/nope.npy", "--readout", "fixtures/pga/readout.npy", check=False)
    assert cli.returncode != 0
    assert str(e.value) in cli.stderr


def test_bad_k_carries_the_cli_message(acts, monkeypatch):
    monkeypatch.chdir(ROOT)
    with pytest.raises(repgeom.InvalidInputError) as e:
        repgeom.pga(acts, "fixtures/pga/readout.npy", k=64, progress=False)
    cli = run_cli("pga", "--acts", "fixtures/pga/acts.npy", "--readout", "fixtures/pga/readout.npy", "-k", "64", check=False)
    tail = str(e.value).split(" (", 1)[1]  # the activations are named differently; the readout part matches
    assert "k = 64 must satisfy 0 < k < d = 64" in str(e.value) and tail in cli.stderr


def test_a_metric_without_its_readout_is_refused_as_on_the_cli(acts):
    with pytest.raises(repgeom.InvalidInputError, match="pga needs the readout: pass readout=W_U"):
        repgeom.metrics(acts, names=["pga", "rankme"], progress=False)
    cli = run_cli("metrics", "--acts", "fixtures/pga/acts.npy", "--metric", "pga", check=False)
    assert "pga needs the readout: pass --readout W_U" in cli.stderr


def test_value_errors(acts, readout):
    bad = acts[0].copy()
    bad[5, 3] = np.nan
    with pytest.raises(ValueError, match=r"non-finite value \(NaN or Inf\) at row 5, column 3"):
        repgeom.pga(bad, readout, k=8, progress=False)
    with pytest.raises(repgeom.InvalidInputError, match="shape mismatch"):
        repgeom.pga(acts[0][:, :32], readout, k=8, progress=False)
    with pytest.raises(repgeom.InvalidInputError, match="not numeric"):
        repgeom.pga(np.array([["a", "b"]] * 5), readout, k=8, progress=False)
    with pytest.raises(repgeom.InvalidInputError, match="unknown metric \"nope\"; known metrics: .*rankme"):
        repgeom.metric("nope", acts)
    # the registry's one parser: names the metric and the unknown option
    with pytest.raises(repgeom.InvalidInputError, match="invalid option rankme.*unknown field `no_such_option`"):
        repgeom.metric("rankme", acts, no_such_option=1)


def test_io_error_for_a_directory(tmp_path):
    d = tmp_path / "dir.npy"
    d.mkdir()
    with pytest.raises(repgeom.IOError):
        repgeom.read_activations(d)


def test_panics_become_internal_error():
    with pytest.raises(repgeom.InternalError, match="deliberate panic"):
        _native._panic_for_tests()


def test_ctrl_c_interrupts_a_long_call():
    # The child takes Ctrl-C as Python's default handler does even where its launcher ignores
    # SIGINT (a shell's background job ignores it, and the child would inherit that).
    script = textwrap.dedent(
        """
        import signal, sys, numpy as np, repgeom
        signal.signal(signal.SIGINT, signal.default_int_handler)
        rng = np.random.default_rng(0)
        acts = rng.standard_normal((3000, 128)).astype(np.float32)
        w = rng.standard_normal((300, 128)).astype(np.float32)
        print("started", flush=True)
        repgeom.pga(acts, w, k=16, n_null=2000, progress=False)
        print("finished", flush=True)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "started"
    import time

    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)  # the full run would take many minutes
    assert "KeyboardInterrupt" in err and "finished" not in out, err


def test_registry_lists_metrics_with_options_and_sources():
    listed = {m["name"]: m for m in repgeom.list_metrics()}
    assert {"pga", "rankme", "cka_linear"} <= set(listed)
    pga = listed["pga"]
    assert pga["kind"] == "layer" and pga["needs_readout"] and pga["source"]
    assert pga["options"][0]["name"] == "ccr" and pga["options"][0]["default"] == [1]
    assert listed["cka_linear"]["kind"] == "pair"


def test_rust_plugin_metric_shows_up():
    """A metric registered in another Rust crate linked into the module joins the registry."""
    features = _native.build_features()
    if not {"example-plugin", "test-plugin"} & set(features):
        if os.environ.get("REPGEOM_REQUIRE_PLUGIN"):
            pytest.fail("built without a plugin feature, but REPGEOM_REQUIRE_PLUGIN is set")
        pytest.skip("build with `--features test-plugin` (or example-plugin) to link a plugin metric")
    listed = {m["name"]: m for m in repgeom.list_metrics()}
    acts = np.load(PGA / "acts.npy")
    if "test-plugin" in features:
        m = listed["test_plugin_mean_norm"]
        assert m["kind"] == "layer" and m["options"] == [
            {"name": "center", "default": False, "help": "centre over points first (variant centred)"}
        ]
        rows = repgeom.metric("test_plugin_mean_norm", acts[0])
        assert rows[0]["value"] == pytest.approx(np.linalg.norm(acts[0].astype(np.float64), axis=1).mean(), rel=1e-12)
        centred = repgeom.metric("test_plugin_mean_norm", acts[0], center=True)
        assert centred[0]["variant"] == "centred"
    if "example-plugin" in features:
        assert listed["participation_ratio"]["options"][0]["name"] == "normalize"
        rows = repgeom.metric("participation_ratio", acts[0], normalize=True)
        assert rows[0]["variant"] == "normalized" and 0 < rows[0]["value"] <= 1


def test_one_null_draw_is_refused_as_on_the_command_line(monkeypatch):
    """n_null = 1 is refused up front with the library's message (it was raised to 2 silently)."""
    monkeypatch.chdir(ROOT)
    with pytest.raises(repgeom.InvalidInputError) as e:
        repgeom.pga("fixtures/pga/acts.npy", "fixtures/pga/readout.npy", k=8, n_null=1, progress=False)
    assert "n_null" in str(e.value) and "at least 2" in str(e.value)
    cli = run_cli("pga", "--acts", "fixtures/pga/acts.npy", "--readout", "fixtures/pga/readout.npy", "-k", "8", "--n-null", "1", check=False)
    assert cli.returncode != 0 and "at least 2" in cli.stderr


def test_device_is_checked_before_the_inputs_as_on_the_cli(monkeypatch):
    monkeypatch.chdir(ROOT)
    with pytest.raises(repgeom.InvalidInputError, match=r"unknown device `tpu`: expected cpu, cuda"):
        repgeom.pga("fixtures/pga/nope.npy", "fixtures/pga/readout.npy", k=8, device="tpu", progress=False)
    # cuda:99: no machine has it (no driver, or fewer devices); the missing file is never read.
    with pytest.raises(repgeom.InvalidInputError) as e:
        repgeom.pga("fixtures/pga/nope.npy", "fixtures/pga/readout.npy", k=8, device="cuda:99", progress=False)
    cli = run_cli("pga", "--acts", "fixtures/pga/nope.npy", "--readout", "fixtures/pga/readout.npy", "--device", "cuda:99", check=False)
    assert str(e.value).startswith("device cuda:99: ") and str(e.value) in cli.stderr
    with pytest.raises(repgeom.InvalidInputError, match=r"^device cuda:99: "):
        repgeom.metrics("fixtures/pga/nope.npy", names=["rankme"], device="cuda:99", progress=False)
    with pytest.raises(repgeom.InvalidInputError, match=r"unknown device `tpu`"):
        repgeom.metric("rankme", "fixtures/pga/nope.npy", device="tpu", progress=False)
    with pytest.raises(repgeom.InvalidInputError, match=r"^device cuda:99: "):
        repgeom.compare("fixtures/pga/nope.npy", "fixtures/pga/nope.npy", device="cuda:99", progress=False)
    # extract: the device and dtype before the model is looked for (the folder does not exist)
    with pytest.raises(repgeom.InvalidInputError, match=r"^device cuda:99: "):
        repgeom.extract("fixtures/no-such-model", "text", device="cuda:99", progress=False)
    with pytest.raises(repgeom.InvalidInputError, match=r"unknown dtype `bf16`: expected f32, stored"):
        repgeom.extract("fixtures/no-such-model", "text", dtype="bf16", progress=False)
