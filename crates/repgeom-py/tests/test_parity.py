"""repgeom.pga equals `repgeom pga --format json` bit for bit on the committed fixtures."""

import csv
import json
import os

import numpy as np
import pytest

import repgeom
from conftest import PGA, ROOT, cli_rows, run_cli

ACTS = "fixtures/pga/acts.npy"
READOUT = "fixtures/pga/readout.npy"
NULL = "fixtures/pga/null_bases.npy"


CLI_RUN_SETTINGS = {"k_policy": "fixed", "readout_fold_norm": 0, "readout_center": 0}


def check(py_results, cli: list[dict]) -> None:
    """Every field of every CLI row equals the Python result's attribute exactly."""
    assert len(py_results) == len(cli)
    for r, row in zip(py_results, cli):
        for key, value in row.items():
            if key in CLI_RUN_SETTINGS:
                # Columns that record CLI flags the Python call does not have; at their defaults.
                assert value == CLI_RUN_SETTINGS[key], f"{key}: cli {value!r}"
                continue
            got = getattr(r, key)
            if key == "rho_se" and got is None:
                got = 0.0  # the CLI writes 0 for an exact run's missing standard error
            assert got == value, f"{key}: python {got!r} != cli {value!r}"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_supplied_null_and_ccr_sweep_match_the_cli(acts, readout, null):
    cli = cli_rows("pga", "--acts", ACTS, "--readout", READOUT, "-k", "8", "--null-bases", NULL, "--ccr", "0,1,3")
    py = repgeom.pga(acts, readout, k=8, null_bases=null, ccr=[0, 1, 3], progress=False)
    check(py, cli)
    # Paths in, as on the command line, give the same results.
    check(repgeom.pga(PGA / "acts.npy", PGA / "readout.npy", k=8, null_bases=PGA / "null_bases.npy",
                      ccr=[0, 1, 3], progress=False), cli)


def test_drawn_null_matches_the_cli(acts, readout):
    cli = cli_rows("pga", "--acts", ACTS, "--readout", READOUT, "-k", "8", "--n-null", "12", "--seed", "7")
    py = repgeom.pga(acts, readout, k=8, n_null=12, seed=7, progress=False)
    check(py, cli)
    assert [r.layer for r in py] == [0, 1, 2]


def test_sampled_pairs_match_the_cli(acts, readout):
    cli = cli_rows("pga", "--acts", ACTS, "--readout", READOUT, "-k", "8", "--n-null", "10", "--max-pairs", "5000")
    py = repgeom.pga(acts, readout, k=8, n_null=10, max_pairs=5000, progress=False)
    check(py, cli)
    assert all(r.n_pairs == 5000 and r.rho_se > 0 for r in py)


def test_spectrum_null_matches_the_cli(acts, readout):
    cli = cli_rows("pga", "--acts", ACTS, "--readout", READOUT, "-k", "8", "--n-null", "10", "--null", "spectrum")
    py = repgeom.pga(acts, readout, k=8, n_null=10, null="spectrum", progress=False)
    check(py, cli)
    assert all(r.null == "spectrum" for r in py)
    with pytest.raises(repgeom.InvalidInputError, match="null"):
        repgeom.pga(acts, readout, k=8, n_null=10, null="uniform", progress=False)


def test_one_layer_gives_one_result(acts, readout):
    cli = cli_rows("pga", "--acts", ACTS, "--readout", READOUT, "-k", "8", "--n-null", "10", "--layers", "1")
    r = repgeom.pga(acts[1], readout, k=8, n_null=10, progress=False)
    assert isinstance(r, repgeom.PgaResult)
    # A lone [N, d] array is layer 0; the numbers are those of the file's layer 1.
    cli[0]["layer"] = 0
    check([r], cli)


def test_null_bases_equal_the_cli_saved_bases(tmp_path):
    out = tmp_path / "null.npy"
    cli_rows("pga", "--acts", ACTS, "--readout", READOUT, "-k", "8", "--n-null", "5", "--seed", "3",
             "--save-null-bases", str(out))
    assert np.array_equal(repgeom.null_bases(64, 8, 5, seed=3), np.load(out))


def test_read_activations_keeps_the_cli_layer_numbers(acts):
    layers = repgeom.read_activations(PGA / "acts.npy", layers=[0, 2])
    assert list(layers) == [0, 2]
    assert np.array_equal(layers[2], acts[2])


def test_metrics_match_the_cli(acts):
    cli = cli_rows("metrics", "--acts", ACTS, "--metric", "rankme", "--metric", "isotropy")
    py = repgeom.metrics(acts, names=["rankme", "isotropy"], progress=False)
    assert len(py) == len(cli)
    for got, row in zip(py, cli):
        assert (got["layer"], got["metric"], got["variant"]) == (row["layer"], row["metric"], row["variant"])
        assert got["value"] == row["value"]


def test_metric_with_options_and_dataframe(acts, readout):
    rows = repgeom.metric("pga", acts, readout, k=8, n_null=10, ccr=[0, 1], progress=False)
    assert {(r["metric"], r["variant"]) for r in rows} >= {("pga_z", "ccr0"), ("pga_z", "ccr1")}
    pd = pytest.importorskip("pandas")
    df = rows.to_pandas()
    assert isinstance(df, pd.DataFrame) and len(df) == len(rows)


def test_pga_results_to_dict_and_dataframes(acts, readout, null):
    res = repgeom.pga(acts, readout, k=8, null_bases=null, progress=False)
    d = res[0].to_dict()
    for col in ["layer", "n_points", "d", "k", "ccr", "rho_readout", "null_mean", "null_std", "z", "p_value",
                "null_rhos", "n_pairs", "rho_se"]:
        assert col in d
    assert res.layer(2).layer == 2
    columns = res.to_dict()
    assert columns["layer"] == [0, 1, 2]
    pd = pytest.importorskip("pandas")
    df = res.to_pandas()
    assert list(df["layer"]) == [0, 1, 2] and df["z"].tolist() == [r.z for r in res]


def test_compare_diagonal(acts):
    rows = repgeom.compare(acts, acts[::-1].copy(), metrics=["cka_linear"], diagonal=True, progress=False)
    assert [(r["layer"], r["other_layer"]) for r in rows] == [(0, 0), (1, 1), (2, 2)]
    # Layer 1 is compared with itself (the middle of the reversed stack): CKA 1.
    assert abs(rows[1]["value"] - 1.0) < 1e-9


def test_calibrated_compare_matches_the_cli(acts, tmp_path):
    """The permutation null and the aggregates over layer pairs: the same draws, values and
    p-values from Python as from `repgeom compare --n-perm --aggregate`."""
    b = acts[::-1].copy()
    np.save(tmp_path / "b.npy", b)
    cli = cli_rows("compare", "--a", ACTS, "--b", str(tmp_path / "b.npy"), "--metric", "cka_linear",
                   "--metric", "mutual_knn", "--n-perm", "20", "--aggregate", "max", "--aggregate", "hungarian")
    py = repgeom.compare(acts, b, metrics=["cka_linear", "mutual_knn"], n_perm=20,
                         aggregates=["max", "hungarian"], progress=False)
    assert len(py) == len(cli) == 3 * 3 * 2 + 2 * 2

    def key(r):
        agg = r.get("aggregate") or ""
        layers = (None, None) if agg else (r["layer"], r["other_layer"])
        return (*layers, agg, r["metric"], r["variant"])

    want = {key(r): r for r in cli}
    for r in py:
        w = want[key(r)]
        for col in ("value", "null_mean", "null_std", "p_value", "p_two_sided", "z", "tau"):
            if w.get(col) is not None:
                assert r[col] == pytest.approx(w[col], rel=1e-12, abs=1e-12), (key(r), col)
    agg = [r for r in py if r.get("aggregate")]
    assert {r["aggregate"] for r in agg} == {"max", "hungarian"}
    # Layer 1 of a is layer 1 of the reversed stack: the best pair is an identity, CKA 1.
    assert all(r["value"] >= 1.0 - 1e-9 for r in agg if r["aggregate"] == "max" and r["metric"] == "cka_linear")
    with pytest.raises(repgeom.InvalidInputError, match="n_perm"):
        repgeom.compare(acts, b, metrics=["cka_linear"], n_perm=0, aggregates=["max"], progress=False)


def test_probe_separable_classes():
    rng = np.random.default_rng(0)
    labels = np.repeat(["cat", "dog"], 60)
    x = rng.standard_normal((120, 16)).astype(np.float32)
    x[:60, 0] += 6.0
    rows = repgeom.probe(x, labels, folds=2, seed=1)
    # Classes 6 sd apart on one axis: near-perfect, not necessarily perfect on a 2-fold split.
    assert len(rows) == 1 and rows[0]["accuracy"] >= 0.9


@pytest.mark.parametrize("name,dtype", [("gptneox_parallel", "f32"), ("gptneox_serial_bf16", "stored")])
def test_extract_matches_the_cli(tmp_path, name, dtype):
    if not hasattr(repgeom._native, "extract"):
        pytest.skip("built without the extract feature")
    text = "The quick brown fox jumps over the lazy dog. " * 20
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text)
    out = tmp_path / "acts.safetensors"
    model = f"fixtures/extract/{name}"
    run_cli("extract", "--model", model, "--text", str(corpus), "--n-points", "24", "--seq-len", "16",
             "--seed", "2", "--dtype", dtype, "--out", str(out))
    got = repgeom.extract(ROOT / "fixtures" / "extract" / name, text, n_points=24, seq_len=16, seed=2,
                          dtype=dtype, progress=False)
    want = repgeom.read_activations(out)
    assert len(want) == len([k for k in got if k.startswith("hidden_states.")])
    for layer, arr in want.items():
        assert np.array_equal(got[f"hidden_states.{layer}"], arr)
    assert got["positions"].shape == (24, 2)


def test_extract_word_points_match_the_cli(tmp_path):
    if not hasattr(repgeom._native, "extract"):
        pytest.skip("built without the extract feature")
    corpus = ROOT / "fixtures" / "extract" / "words" / "text.txt"
    text = corpus.read_text(encoding="utf-8")
    out = tmp_path / "words.safetensors"
    model = "fixtures/extract/gpt2_tied"
    run_cli("extract", "--model", model, "--text", str(corpus), "--points", "words", "--word-pool", "mean",
            "--n-points", "12", "--seq-len", "40", "--seed", "5", "--out", str(out))
    got = repgeom.extract(ROOT / "fixtures" / "extract" / "gpt2_tied", text, n_points=12, seq_len=40, seed=5,
                          points="words", word_pool="mean", progress=False)
    want = repgeom.read_activations(out)
    for layer, arr in want.items():
        assert np.array_equal(got[f"hidden_states.{layer}"], arr)
    # positions are the words' characters: the text's words
    for start, end in got["positions"]:
        assert any(c.isalnum() for c in text[start:end])
    with pytest.raises(repgeom.InvalidInputError, match="word_pool"):
        repgeom.extract(ROOT / "fixtures" / "extract" / "gpt2_tied", text, n_points=12, seq_len=40,
                        word_pool="first", points="words", progress=False)


def test_extract_missing_checkpoint():
    if not hasattr(repgeom._native, "extract"):
        pytest.skip("built without the extract feature")
    with pytest.raises(repgeom.FileNotFoundError, match="no-such-model"):
        repgeom.extract("no-such-model", "some text", progress=False)


def _tidy_pga(rows, suffix=""):
    """`{(layer, ccr): {z, rho_readout, null_mean, null_std, p_value}}` from tidy pga rows."""
    out = {}
    for r in rows:
        variant = str(r["variant"])
        if not variant.startswith("ccr") or not variant.endswith(suffix):
            continue
        key = (int(r["layer"]), int(variant[3:len(variant) - len(suffix)]))
        entry = out.setdefault(key, {})
        if r["metric"] == "pga_z":
            entry["z"] = float(r["value"])
            for n in ("null_mean", "null_std", "p_value"):
                entry[n] = float(r[n])
        elif r["metric"] == "rho_readout":
            entry["rho_readout"] = float(r["value"])
    return out


@pytest.mark.parametrize(
    "flags, kwargs, metric, analysis, suffix",
    [
        ([], {}, {}, "", ""),
        (
            ["--distance", "euclidean", "--max-pairs", "3000", "--readout-center"],
            {"distance": "euclidean", "max_pairs": 3000, "readout_center": True},
            {"distance": "euclidean", "max_pairs": 3000},
            'distance = "euclidean"\nmax_pairs = 3000\nreadout_center = true',
            "",
        ),
        (
            ["--null", "spectrum", "--max-memory", "67108864"],
            {"null": "spectrum", "max_memory": 67108864},
            {"null": "spectrum", "max_memory": 67108864},
            'null = "spectrum"\nmax_memory = 67108864',
            "_spectrum",
        ),
    ],
)
def test_one_pga_through_every_front_end(acts, readout, tmp_path, flags, kwargs, metric, analysis, suffix):
    """repgeom.pga, `repgeom pga`, `repgeom metrics` and the study (`repgeom sweep`) on one input
    with one set of options: the same numbers, bit for bit."""
    common = ["-k", "8", "--n-null", "12", "--seed", "7"]
    cli = cli_rows("pga", "--acts", ACTS, "--readout", READOUT, "--ccr", "0,2", *common, *flags)
    py = repgeom.pga(acts, readout, k=8, n_null=12, seed=7, ccr=[0, 2], progress=False, **kwargs)
    assert len(py) == len(cli) == 6
    want = {}
    for r, row in zip(py, cli):
        for key in ("layer", "ccr", "z", "rho_readout", "null_mean", "null_std", "p_value", "q_value"):
            assert getattr(r, key) == row[key], key
        want[(row["layer"], row["ccr"])] = {k: row[k] for k in ("z", "rho_readout", "null_mean", "null_std", "p_value")}

    spec = "pga:" + json.dumps({"ccr": [0, 2], "pair_seed": 7, **metric})
    readout_flags = ["--readout-center"] if "--readout-center" in flags else []
    metrics = cli_rows("metrics", "--acts", ACTS, "--readout", READOUT, "--metric", spec, *common, *readout_flags)
    assert _tidy_pga(metrics, suffix) == want

    manifest = tmp_path / "study.toml"
    manifest.write_text(
        "[analysis]\nk = 8\nn_null = 12\nseed = 7\nccr = [0, 2]\nspectral = []\npc_share = 0\nprobe = false\n"
        f"{analysis}\n\n[[model]]\nlabel = \"fixture\"\nfamily = \"fixture\"\nd = 64\nn_layers = 3\n"
        f"readout = \"{ROOT / READOUT}\"\n\n[[model.checkpoint]]\nname = \"final\"\nactivations = \"{ROOT / ACTS}\"\n"
    )
    out = tmp_path / "out"
    run_cli("sweep", "--manifest", str(manifest), "--out", str(out))
    with open(out / "results.csv", newline="") as f:
        study = list(csv.DictReader(f))
    assert _tidy_pga(study, suffix) == want


def test_k_list_k_frac_and_bootstrap_match_the_cli(acts, readout):
    """The options repgeom.pga gained with the library's model run: a k list, k_frac and the
    bootstrap (points: an array records no sequences), as `repgeom pga` spells them."""
    cli = cli_rows("pga", "--acts", ACTS, "--readout", READOUT, "-k", "4,8", "--n-null", "10")
    py = repgeom.pga(acts, readout, k=[8, 4], n_null=10, progress=False)
    assert [(r.layer, r.k) for r in py] == [(row["layer"], row["k"]) for row in cli]
    assert [r.z for r in py] == [row["z"] for row in cli]
    frac = repgeom.pga(acts, readout, k_frac=0.125, n_null=10, progress=False)
    assert [r.z for r in frac] == [row["z"] for row in cli if row["k"] == 8]
    cli = cli_rows("pga", "--acts", ACTS, "--readout", READOUT, "-k", "8", "--n-null", "10",
                   "--bootstrap", "3", "--bootstrap-seed", "2")
    py = repgeom.pga(acts, readout, k=8, n_null=10, bootstrap=3, bootstrap_seed=2, progress=False)
    assert [(r.bootstrap["z_lo"], r.bootstrap["z_hi"]) for r in py] == [(row["z_lo"], row["z_hi"]) for row in cli]
    with pytest.raises(repgeom.InvalidInputError, match="readout_fold_norm"):
        repgeom.pga(acts, readout, k=8, readout_fold_norm=True, progress=False)


def test_defaults_are_the_libraries_and_the_cli():
    """The signatures' defaults come from the libraries (``_native.DEFAULTS``), which the
    command line's flags read too."""
    import inspect

    d = repgeom._native.DEFAULTS
    for fn in (repgeom.pga, repgeom.metrics, repgeom.compare):
        params = inspect.signature(fn).parameters
        assert params["k"].default == d["k"], fn.__name__
        assert params["n_null"].default == d["n_null"], fn.__name__
    assert f"[default: {d['k']}]" in run_cli("pga", "--help").stdout
    if "n_points" in d:  # built with extraction
        params = inspect.signature(repgeom.extract).parameters
        assert (params["n_points"].default, params["seq_len"].default) == (d["n_points"], d["seq_len"])
        assert f"[default: {d['seq_len']}]" in run_cli("extract", "--help").stdout


# The folder of the CPU stand-in for CUDA (`cargo xtask gpu stand-in`), under which
# `device="cuda"` runs the device path on the CPU; CI sets it.
STAND_IN = os.environ.get("REPGEOM_CUDA_STAND_IN")


@pytest.mark.skipif(not STAND_IN, reason="needs REPGEOM_CUDA_STAND_IN, the CPU stand-in for CUDA "
                                         "(`cargo xtask gpu stand-in`); CI sets it")
def test_device_cuda_gives_the_cpus_numbers_on_the_stand_in(acts, readout, null, monkeypatch):
    """`device="cuda"` from Python runs the device path (loaded in this process, found through
    CUDA_HOME) and gives the CPU's numbers: PGA's z within 1e-4 (at N = 300 a swap of two
    near-equal distances moves z by about 1e-6), extraction within 1e-4 relative, CKA's
    permutation null within 1e-9."""
    monkeypatch.setenv("CUDA_HOME", STAND_IN)
    cpu = repgeom.pga(acts, readout, k=8, null_bases=null, progress=False)
    dev = repgeom.pga(acts, readout, k=8, null_bases=null, device="cuda", progress=False)
    assert [r.layer for r in dev] == [r.layer for r in cpu]
    for a, b in zip(cpu, dev):
        assert abs(a.z - b.z) <= 1e-4 and abs(a.rho_readout - b.rho_readout) <= 1e-6
    if hasattr(repgeom._native, "extract"):
        text = "The quick brown fox jumps over the lazy dog. " * 20
        model = ROOT / "fixtures" / "extract" / "llama_tied"
        kw = dict(n_points=24, seq_len=16, seed=2, progress=False)
        want = repgeom.extract(model, text, **kw)
        got = repgeom.extract(model, text, device="cuda", **kw)
        for key, arr in want.items():
            if key.startswith("hidden_states."):
                assert np.max(np.abs(got[key] - arr) / (1 + np.abs(arr))) <= 1e-4, key
    b = acts[::-1].copy()
    kw = dict(metrics=["cka_linear"], n_perm=20, progress=False)
    want = repgeom.compare(acts, b, **kw)
    got = repgeom.compare(acts, b, device="cuda", **kw)
    for x, y in zip(want, got):
        assert x["value"] == y["value"] and abs(x["null_mean"] - y["null_mean"]) <= 1e-9
