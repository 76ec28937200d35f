//! Every layer's hidden states, the logits and the loss against HuggingFace transformers.

use std::collections::BTreeMap;
use std::path::Path;

use repgeom_extract::{Extractor, Model};

use crate::{PARITY_REL_TOL, copy_fixture, fixture, max_rel_err};

struct Expected {
    ids: Vec<Vec<u32>>,
    tensors: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    meta: BTreeMap<String, String>,
}

fn read_expected(name: &str) -> Expected {
    let bytes = std::fs::read(fixture("expected").join(format!("{name}.safetensors"))).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors = BTreeMap::new();
    let mut ids = Vec::new();
    for (n, v) in st.tensors() {
        let shape = v.shape().to_vec();
        match v.dtype() {
            safetensors::Dtype::I64 => {
                let flat: Vec<u32> = v
                    .data()
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as u32)
                    .collect();
                ids = flat.chunks(shape[1]).map(<[u32]>::to_vec).collect();
            }
            safetensors::Dtype::F32 => {
                let data = v
                    .data()
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                tensors.insert(n, (shape, data));
            }
            other => panic!("unexpected dtype {other:?}"),
        }
    }
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let meta = meta
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    Expected { ids, tensors, meta }
}

/// Runs every fixture sequence and returns the worst relative error per hidden state,
/// of the logits, and of the loss.
fn check_parity(name: &str, dir: &Path) -> (Vec<f64>, f64, f64) {
    let exp = read_expected(name);
    let model = Model::load(dir).unwrap();
    let c = model.config();
    let n_states = c.n_layers + 1;
    let (b, t) = (exp.ids.len(), exp.ids[0].len());
    let mut layer_err = vec![0f64; n_states];
    let mut logit_err = 0f64;
    let mut nll = 0f64;
    for (bi, ids) in exp.ids.iter().enumerate() {
        let fwd = model.forward(ids, true).unwrap();
        assert_eq!(fwd.hidden_states.len(), n_states);
        for (i, h) in fwd.hidden_states.iter().enumerate() {
            let (shape, want) = &exp.tensors[&format!("hidden_states.{i}")];
            assert_eq!(shape, &[b, t, c.hidden_size]);
            let want = &want[bi * t * c.hidden_size..(bi + 1) * t * c.hidden_size];
            layer_err[i] = layer_err[i].max(max_rel_err(h, want));
        }
        let logits = fwd.logits.unwrap();
        let v = c.vocab_size;
        let want = &exp.tensors["logits"].1[bi * t * v..(bi + 1) * t * v];
        logit_err = logit_err.max(max_rel_err(&logits, want));
        for s in 0..t - 1 {
            let row = &logits[s * v..(s + 1) * v];
            let max = row.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x)) as f64;
            let lse = max
                + row
                    .iter()
                    .map(|&x| (x as f64 - max).exp())
                    .sum::<f64>()
                    .ln();
            nll += lse - row[ids[s + 1] as usize] as f64;
        }
    }
    let loss = nll / (b * (t - 1)) as f64;
    let want_loss = f64::from(exp.tensors["loss"].1[0]);
    (layer_err, logit_err, (loss - want_loss).abs() / want_loss)
}

/// The same fixture run as one batch: both sequences at once, and again with the second cut
/// to a prefix (right padding inside the batch). Returns the worst relative error over the
/// hidden states (the prefix compared with the full sequence's first rows: attention is
/// causal) and of the loss of the full batch.
fn check_batched_parity(name: &str) -> (f64, f64) {
    let exp = read_expected(name);
    let model = Model::load(&fixture(name)).unwrap();
    let c = model.config();
    let (b, t, d) = (exp.ids.len(), exp.ids[0].len(), c.hidden_size);
    let seqs: Vec<&[u32]> = exp.ids.iter().map(Vec::as_slice).collect();
    let mut err = 0f64;
    let nll = model
        .forward_batch(&seqs, true, &mut |i, h| {
            let want = &exp.tensors[&format!("hidden_states.{i}")].1;
            err = err.max(max_rel_err(h, want));
            Ok(())
        })
        .unwrap()
        .unwrap();
    let loss = nll.iter().sum::<f64>() / (b * (t - 1)) as f64;
    let want_loss = f64::from(exp.tensors["loss"].1[0]);
    let prefix = 9;
    let ragged = [seqs[0], &seqs[1][..prefix]];
    model
        .forward_batch(&ragged, false, &mut |i, h| {
            let want = &exp.tensors[&format!("hidden_states.{i}")].1;
            assert_eq!(h.len(), 2 * t * d, "padded to the longest sequence");
            err = err.max(max_rel_err(&h[..t * d], &want[..t * d]));
            let (got, want) = (&h[t * d..(t + prefix) * d], &want[t * d..(t + prefix) * d]);
            err = err.max(max_rel_err(got, want));
            Ok(())
        })
        .unwrap();
    (err, (loss - want_loss).abs() / want_loss)
}

#[allow(clippy::print_stderr)] // the measured errors, for the docs
fn assert_parity(name: &str, n_states: usize) {
    let (layers, logits, loss) = check_parity(name, &fixture(name));
    // the figures docs/extraction.md quotes (`cargo test -p repgeom-extract -- --nocapture parity`)
    let states: Vec<String> = layers.iter().map(|e| format!("{e:.1e}")).collect();
    eprintln!(
        "{name}: hidden states {}, logits {logits:.1e}, loss {loss:.1e}",
        states.join(", ")
    );
    assert_eq!(layers.len(), n_states, "{name}: number of hidden states");
    for (i, e) in layers.iter().enumerate() {
        assert!(
            *e < PARITY_REL_TOL,
            "{name}: hidden_states.{i} max relative error {e:.2e}"
        );
    }
    assert!(
        logits < PARITY_REL_TOL,
        "{name}: logits max relative error {logits:.2e}"
    );
    assert!(
        loss < PARITY_REL_TOL,
        "{name}: loss relative error {loss:.2e}"
    );
    let (batched, batched_loss) = check_batched_parity(name);
    assert!(
        batched < PARITY_REL_TOL,
        "{name}: batched hidden states max relative error {batched:.2e}"
    );
    assert!(
        batched_loss < PARITY_REL_TOL,
        "{name}: batched loss relative error {batched_loss:.2e}"
    );
}

/// Every fixture `make_tiny.py` writes, with its number of hidden states (L + 1).
const FIXTURES: [(&str, usize); 12] = [
    ("gptneox_parallel", 4),
    ("gptneox_serial_bf16", 4),
    ("llama_tied", 3),
    ("olmo_clip", 3),
    ("gpt2_tied", 3),
    ("phi_partial_rotary", 3),
    ("gemma2_softcap_window", 4),
    ("gemma_mqa_f16", 3),
    ("qwen2_bias_bf16", 3),
    ("mistral_window", 3),
    ("olmo2_qknorm", 3),
    ("llama3_rope", 3),
];

#[test]
fn gptneox_parallel_residual_sharded_f32_matches_transformers() {
    assert_parity("gptneox_parallel", 4);
}

#[test]
fn gptneox_sequential_residual_bf16_matches_transformers() {
    assert_parity("gptneox_serial_bf16", 4);
}

#[test]
fn llama_gqa_tied_f16_matches_transformers() {
    assert_parity("llama_tied", 3);
}

#[test]
fn olmo_weightless_layernorm_and_clip_qkv_matches_transformers() {
    assert_parity("olmo_clip", 3);
}

#[test]
fn gpt2_learned_positions_conv1d_tied_matches_transformers() {
    assert_parity("gpt2_tied", 3);
}

#[test]
fn phi_parallel_block_partial_rotary_lm_head_bias_matches_transformers() {
    assert_parity("phi_partial_rotary", 3);
}

#[test]
fn gemma2_softcaps_sliding_window_post_norms_matches_transformers() {
    assert_parity("gemma2_softcap_window", 4);
}

#[test]
fn gemma_plus_one_rmsnorm_scaled_embedding_mqa_f16_matches_transformers() {
    assert_parity("gemma_mqa_f16", 3);
}

#[test]
fn qwen2_qkv_bias_untied_bf16_matches_transformers() {
    assert_parity("qwen2_bias_bf16", 3);
}

#[test]
fn mistral_sliding_window_matches_transformers() {
    assert_parity("mistral_window", 3);
}

#[test]
fn olmo2_qk_norm_post_norms_matches_transformers() {
    assert_parity("olmo2_qknorm", 3);
}

#[test]
fn llama3_rope_scaling_matches_transformers() {
    assert_parity("llama3_rope", 3);
}

#[test]
fn tokenizer_matches_python_tokenizers() {
    for (name, _) in FIXTURES {
        let exp = read_expected(name);
        let want: Vec<u32> = serde_json::from_str(&exp.meta["text_ids"]).unwrap();
        let ex = Extractor::load(&fixture(name)).unwrap();
        assert_eq!(ex.encode(&exp.meta["text"]).unwrap(), want, "{name}");
    }
}

#[test]
fn fixture_list_names_every_fixture_directory() {
    let dir = fixture("");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            p.join("config.json")
                .is_file()
                .then(|| p.file_name().unwrap().to_string_lossy().into_owned())
        })
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = FIXTURES.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
}

/// Negative controls: with one option switched off in `config.json`, the fixture no longer
/// matches, so the parity tests above do exercise the window, the soft-caps and the RoPE
/// scaling (each is active on the fixture's 16 tokens).
#[test]
fn each_tested_option_changes_the_fixture_output() {
    let cases = [
        ("mistral_window", "sliding_window", serde_json::Value::Null),
        (
            "gemma2_softcap_window",
            "sliding_window",
            serde_json::json!(64),
        ),
        (
            "gemma2_softcap_window",
            "attn_logit_softcapping",
            serde_json::Value::Null,
        ),
        (
            "gemma2_softcap_window",
            "final_logit_softcapping",
            serde_json::Value::Null,
        ),
        (
            "gemma2_softcap_window",
            "query_pre_attn_scalar",
            serde_json::json!(16),
        ),
        (
            "llama3_rope",
            "rope_parameters",
            serde_json::json!({"rope_type": "default", "rope_theta": 10000.0}),
        ),
    ];
    for (name, key, value) in cases {
        let tmp = copy_fixture(name);
        let path = tmp.path().join("config.json");
        let mut cfg: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        cfg[key] = value;
        std::fs::write(&path, serde_json::to_vec(&cfg).unwrap()).unwrap();
        let (layers, logits, _) = check_parity(name, tmp.path());
        let worst = layers.iter().fold(logits, |m, &e| m.max(e));
        assert!(
            worst > 100.0 * PARITY_REL_TOL,
            "{name} with {key} changed still matches (max relative error {worst:.1e})"
        );
    }
}

/// f16/bf16 weight matrices stay in their stored precision (the parity tests above show the
/// arithmetic is still f32): the model holds about its file size, not twice it.
#[test]
fn half_precision_weights_stay_half_in_memory() {
    for name in [
        "gptneox_serial_bf16",
        "qwen2_bias_bf16",
        "gemma_mqa_f16",
        "llama_tied",
        "gptneox_parallel",
    ] {
        let dir = fixture(name);
        let file: u64 = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum();
        let held = Model::load(&dir).unwrap().weight_bytes() as f64;
        assert!(
            held < 1.3 * file as f64,
            "{name}: {held} bytes held for {file} bytes of safetensors"
        );
    }
}
