"""Hub model ids (`org/name` at a revision) resolve through the HuggingFace cache layout.

The cache is laid out as `huggingface_hub` writes it (`models--org--name/refs/<revision>` holding
a commit, `snapshots/<commit>/<files>`), and the tests run offline (`HF_HUB_OFFLINE=1`), so they
need no server: what a download puts in the cache is the Rust crate's own test suite's business
(`repgeom-hub`, against a local stand-in for the hub).
"""

import shutil

import numpy as np
import pytest

import repgeom
from conftest import ROOT

COMMIT = "0123456789abcdef0123456789abcdef01234567"
MODEL = "tiny-org/tiny-neox"
SOURCE = ROOT / "fixtures" / "extract" / "gptneox_parallel"
D = 32  # hidden size of the tiny GPT-NeoX fixture


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    repo = tmp_path / "models--tiny-org--tiny-neox"
    shutil.copytree(SOURCE, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "step3000").write_text(COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def test_pga_readout_from_a_hub_id_equals_the_local_directory(hub_cache):
    acts = np.random.default_rng(0).standard_normal((40, D)).astype(np.float32)
    local = repgeom.pga(acts, SOURCE, k=4, n_null=8, progress=False)
    hub = repgeom.pga(acts, MODEL, revision="step3000", k=4, n_null=8, progress=False)
    assert hub.to_dict() == local.to_dict()


def test_metric_readout_from_a_hub_id(hub_cache):
    acts = np.random.default_rng(1).standard_normal((40, D)).astype(np.float32)
    local = repgeom.metric("pc_readout_share", acts, SOURCE, k=4, m=2)
    hub = repgeom.metric("pc_readout_share", acts, MODEL, k=4, m=2, revision="step3000")
    assert list(hub) == list(local)


def test_extract_from_a_hub_id_equals_the_local_directory(hub_cache):
    if not hasattr(repgeom._native, "extract"):
        pytest.skip("built without the extract feature")
    text = "The quick brown fox jumps over the lazy dog. " * 20
    local = repgeom.extract(SOURCE, text, n_points=12, seq_len=16, progress=False)
    hub = repgeom.extract(MODEL, text, revision="step3000", n_points=12, seq_len=16, progress=False)
    assert local.keys() == hub.keys()
    for name in local:
        assert np.array_equal(local[name], hub[name])


def test_a_revision_missing_from_the_offline_cache_is_named(hub_cache):
    acts = np.zeros((40, D), dtype=np.float32) + np.arange(D, dtype=np.float32)
    acts[::2] *= -1
    with pytest.raises(repgeom.FileNotFoundError, match="step9999"):
        repgeom.pga(acts, MODEL, revision="step9999", k=4, n_null=8, progress=False)


def test_a_revision_with_a_local_path_or_an_array_is_refused(hub_cache):
    acts = np.random.default_rng(2).standard_normal((40, D)).astype(np.float32)
    with pytest.raises(repgeom.InvalidInputError, match="revision"):
        repgeom.pga(acts, SOURCE, revision="step3000", k=4, n_null=8, progress=False)
    w_u = np.random.default_rng(3).standard_normal((50, D)).astype(np.float32)
    with pytest.raises(repgeom.InvalidInputError, match="revision"):
        repgeom.pga(acts, w_u, revision="step3000", k=4, n_null=8, progress=False)


def test_a_name_that_is_neither_a_path_nor_a_hub_id(hub_cache):
    acts = np.random.default_rng(4).standard_normal((40, D)).astype(np.float32)
    with pytest.raises(repgeom.FileNotFoundError, match="not a hub model id"):
        repgeom.pga(acts, "no/such/dir/readout.npy", k=4, n_null=8, progress=False)
