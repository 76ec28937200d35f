//! Every layer's hidden states, the logits and the loss against HuggingFace transformers.

use std::collections::BTreeMap;
use std::path::Path;

use repgeom_extract::{Extractor, Model, Precision};

use crate::{PARITY_REL_TOL, copy_fixture, fixture, max_rel_err};

struct Expected {
    ids: Vec<Vec<u32>>,
    tensors: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    meta: BTreeMap<String, String>,
}

fn read_expected(name: &str) -> Expected {
    read_expected_in(&fixture("expected"), name)
}

fn read_expected_in(dir: &Path, name: &str) -> Expected {
    let bytes = std::fs::read(dir.join(format!("{name}.safetensors"))).unwrap();
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
    check_parity_at(read_expected(name), dir, Precision::F32)
}

/// [`check_parity`] against `exp`, the model computing at `precision` on the CPU.
fn check_parity_at(exp: Expected, dir: &Path, precision: Precision) -> (Vec<f64>, f64, f64) {
    let mut model = Model::load(dir).unwrap();
    model.place(None, precision).unwrap();
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

/// Relative errors of `got` against `want` (each entry's difference over `want`'s largest
/// magnitude), sorted: the median and the largest.
fn median_and_max(got: &[f32], want: &[f32]) -> (f64, f64) {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, &x| m.max(f64::from(x).abs()));
    let mut e: Vec<f64> = got
        .iter()
        .zip(want)
        .map(|(&a, &b)| (f64::from(a) - f64::from(b)).abs() / scale.max(f64::MIN_POSITIVE))
        .collect();
    e.sort_by(f64::total_cmp);
    (e[e.len() / 2], e[e.len() - 1])
}

/// Median relative error of `stored` against its reference: the f32 references differ from
/// the stored ones by a median of 6.9e-5 to 9.7e-4 per hidden state and logits.
const STORED_MEDIAN_TOL: f64 = 2e-5;

/// `stored` on the CPU (each bf16/f16 weight multiplies its input rounded to the weight's
/// type, `f32` accumulation; AMX on a CPU that has it) against transformers in f32 with every
/// linear layer's input rounded the same way (`fixtures/extract/make_stored_reference.py`),
/// one sequence at a time and batched: hidden states and logits, and the loss.
///
/// An input within `f32` rounding of a tie of the 16-bit type may round the other way in
/// either implementation (their sums differ in order), so a few entries may differ by a unit
/// of that type's rounding (2^-8 relative for bf16, 2^-11 for f16), carried on by the layers
/// after it: the median error must be within `STORED_MEDIAN_TOL`, the largest within eight
/// such units, the loss within the f32 parity tolerance. Measured here (AMX): the bf16 and
/// llama fixtures within 4.1e-7 everywhere; Gemma's f16 fixture one such flip, 7.6e-4 at most.
#[test]
#[allow(clippy::print_stderr)] // the measured errors, for the docs
fn stored_precision_matches_transformers_with_rounded_linear_inputs() {
    let stored = fixture("expected").join("stored");
    for (name, bits) in [
        ("gptneox_serial_bf16", 8),
        ("qwen2_bias_bf16", 8),
        ("llama_tied", 11),
        ("gemma_mqa_f16", 11),
    ] {
        let max_tol = 8.0 * 2f64.powi(-bits);
        let exp = read_expected_in(&stored, name);
        let mut model = Model::load(&fixture(name)).unwrap();
        model.place(None, Precision::Stored).unwrap();
        let (c, t) = (model.config().clone(), exp.ids[0].len());
        let mut report = Vec::new();
        let mut check = |what: String, got: &[f32], want: &[f32]| {
            let (median, max) = median_and_max(got, want);
            report.push(format!("{what} {median:.0e}/{max:.1e}"));
            assert!(
                median < STORED_MEDIAN_TOL && max < max_tol,
                "{name} at stored, {what}: median {median:.2e}, largest {max:.2e}"
            );
        };
        for (bi, ids) in exp.ids.iter().enumerate() {
            let fwd = model.forward(ids, true).unwrap();
            for (i, h) in fwd.hidden_states.iter().enumerate() {
                let d = c.hidden_size;
                let want = &exp.tensors[&format!("hidden_states.{i}")].1;
                check(format!("{bi}:h{i}"), h, &want[bi * t * d..(bi + 1) * t * d]);
            }
            let v = c.vocab_size;
            let want = &exp.tensors["logits"].1[bi * t * v..(bi + 1) * t * v];
            check(format!("{bi}:logits"), fwd.logits.as_ref().unwrap(), want);
        }
        let seqs: Vec<&[u32]> = exp.ids.iter().map(Vec::as_slice).collect();
        let mut states = Vec::new();
        let nll = model
            .forward_batch(&seqs, true, &mut |_, h| {
                states.push(h.to_vec());
                Ok(())
            })
            .unwrap()
            .unwrap();
        for (i, h) in states.iter().enumerate() {
            check(
                format!("batch:h{i}"),
                h,
                &exp.tensors[&format!("hidden_states.{i}")].1,
            );
        }
        let loss = nll.iter().sum::<f64>() / (seqs.len() * (t - 1)) as f64;
        let want = f64::from(exp.tensors["loss"].1[0]);
        let rel = (loss - want).abs() / want;
        eprintln!(
            "{name} at stored (AMX {}), median/largest: {}; loss {rel:.1e}",
            repgeom_linalg::amx_bf16(),
            report.join(", ")
        );
        assert!(rel < PARITY_REL_TOL, "{name} at stored, loss: {rel:.2e}");
    }
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
