//! Every layer's hidden states, the logits and the loss against HuggingFace transformers.

use std::collections::BTreeMap;

use repgeom_extract::{Extractor, Model};

use crate::{PARITY_REL_TOL, fixture, max_rel_err};

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
fn check_parity(name: &str) -> (Vec<f64>, f64, f64) {
    let exp = read_expected(name);
    let model = Model::load(&fixture(name)).unwrap();
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

fn assert_parity(name: &str, n_states: usize) {
    let (layers, logits, loss) = check_parity(name);
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
}

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
fn tokenizer_matches_python_tokenizers() {
    for name in [
        "gptneox_parallel",
        "gptneox_serial_bf16",
        "llama_tied",
        "olmo_clip",
    ] {
        let exp = read_expected(name);
        let want: Vec<u32> = serde_json::from_str(&exp.meta["text_ids"]).unwrap();
        let ex = Extractor::load(&fixture(name)).unwrap();
        assert_eq!(ex.encode(&exp.meta["text"]).unwrap(), want, "{name}");
    }
}

#[test]
fn olmo_weightless_layernorm_and_clip_qkv_matches_transformers() {
    assert_parity("olmo_clip", 3);
}
