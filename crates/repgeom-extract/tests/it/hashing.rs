//! One read of the weights for loading and hashing: `Extractor::load_hashed` gives the hash
//! `repgeom_hub::weights_hash` computes from the files alone, and the model `load` builds.

use repgeom_extract::{ExtractParams, Extractor, Pool};

use crate::{copy_fixture, corpus, fixture};

/// Every family of the fixtures: sharded f32, bf16, f16, tied, biased.
const CHECKPOINTS: [&str; 11] = [
    "gptneox_parallel",
    "gptneox_serial_bf16",
    "llama_tied",
    "llama3_rope",
    "olmo_clip",
    "olmo2_qknorm",
    "gpt2_tied",
    "phi_partial_rotary",
    "gemma2_softcap_window",
    "gemma_mqa_f16",
    "qwen2_bias_bf16",
];

/// The hidden states and loss of the model `load_hashed` builds and of `load`'s on one text
/// (equal bit for bit), and the hash from the load.
fn check(dir: &std::path::Path) -> Option<repgeom_hub::WeightsDigest> {
    let (hashed, digest) = Extractor::load_hashed(dir).unwrap();
    let params = ExtractParams {
        seq_len: 16,
        n_points: Some(20),
        pool: Pool::Tokens,
        loss: true,
        ..Default::default()
    }
    .check()
    .unwrap();
    let text = corpus(12);
    let a = hashed.extract(&text, &params, &mut |_| {}).unwrap();
    let b = Extractor::load(dir)
        .unwrap()
        .extract(&text, &params, &mut |_| {})
        .unwrap();
    assert_eq!(a.hidden_states, b.hidden_states, "{}", dir.display());
    assert_eq!(
        a.loss.map(|l| l.mean.to_bits()),
        b.loss.map(|l| l.mean.to_bits())
    );
    digest
}

#[test]
fn loading_hashes_the_weights_it_reads() {
    for name in CHECKPOINTS {
        let dir = fixture(name);
        let files = repgeom_hub::weights_hash(&dir).unwrap();
        assert_eq!(check(&dir), Some(files), "{name}");
    }
    // model.safetensors beside another weight file: the files' hash covers both, the model
    // reads one, so the load gives no hash (the caller hashes the files apart).
    let tmp = copy_fixture("llama_tied");
    std::fs::copy(
        tmp.path().join("model.safetensors"),
        tmp.path().join("extra.safetensors"),
    )
    .unwrap();
    assert_eq!(check(tmp.path()), None);
}
