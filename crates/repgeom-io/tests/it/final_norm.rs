//! The architecture table against transformers: for every committed tiny checkpoint, the
//! readout folded with the final norm's effective gain, applied to the gain-free normalisation
//! of the final norm's input, gives transformers' readout logits
//! (`fixtures/extract/make_final_norm_reference.py`).

use std::path::{Path, PathBuf};

use repgeom_io::{
    Arch, NormKind, ReadoutOptions, ReadoutPrep, open_checkpoint, read_readout,
    read_readout_prepared,
};

/// Allowed error of a logit, in units of `f32::EPSILON` times the sum of the absolute values
/// of the terms that make it up (`Σ_j |n_j γ_j W_vj| + Σ_j |W_vj β_j| + |b_v|`). transformers
/// rounds each of the d = 32 products and partial sums of its `f32` norm and GEMM once, in an
/// order we do not reproduce, and the folded `W_U diag(γ)` is rounded once more; 4d rounding
/// errors of that sum bound the difference. A wrong gain convention (`w` for `1 + w`) or a
/// missing bias is off by a sizeable fraction of the sum.
const ULPS_OF_ABS_SUM: f64 = 4.0 * 32.0;

/// Every committed tiny checkpoint of `fixtures/extract`, one per family and option.
const VARIANTS: &[&str] = &[
    "gemma2_softcap_window",
    "gemma_mqa_f16",
    "gpt2_tied",
    "gptneox_parallel",
    "gptneox_serial_bf16",
    "llama3_rope",
    "llama_tied",
    "mistral_window",
    "olmo2_qknorm",
    "olmo_clip",
    "phi_partial_rotary",
    "qwen2_bias_bf16",
];

fn extract_fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/extract")
}

/// Reads one f32 tensor of a reference file as (shape, values).
fn reference_tensor(path: &Path, name: &str) -> (Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(name).unwrap();
    assert_eq!(t.dtype(), safetensors::Dtype::F32, "{name}");
    let values = t
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    (t.shape().to_vec(), values)
}

/// The gain-free normalisation of one row: `(h − μ)/√(σ² + ε)` or `h/√(mean h² + ε)`, in f64.
fn normalise(h: &[f32], kind: NormKind, eps: f64) -> Vec<f64> {
    let d = h.len() as f64;
    let h: Vec<f64> = h.iter().map(|&x| f64::from(x)).collect();
    let mean = match kind {
        NormKind::RmsNorm => 0.0,
        _ => h.iter().sum::<f64>() / d,
    };
    let var = h.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / d;
    h.iter().map(|x| (x - mean) / (var + eps).sqrt()).collect()
}

/// Rebuilds `variant`'s reference logits as `n(h) · (W_U diag γ)ᵀ + W_U β + b` from the
/// readout that `read_readout_prepared` folds and the table's norm kind, epsilon, bias and
/// readout bias; returns `None` when every logit is within tolerance, else a line naming the
/// variant and the worst logit.
fn check(variant: &str) -> Option<String> {
    let dir = extract_fixtures().join(variant);
    let reference = extract_fixtures()
        .join("expected/final_norm")
        .join(format!("{variant}.safetensors"));
    let ck = open_checkpoint(&dir).unwrap();
    let arch = Arch::for_config(&ck.config).unwrap();
    let (in_shape, norm_input) = reference_tensor(&reference, "norm_input");
    let (out_shape, logits) = reference_tensor(&reference, "logits");
    let (n, d, v) = (in_shape[0], in_shape[1], out_shape[1]);
    let options = ReadoutOptions {
        vocab_rows: Some(v),
        tensor: None,
    };
    // A weight-less final norm (OLMo-1) has no gain to fold: W_U as stored is the fold.
    let prep = ReadoutPrep {
        options: options.clone(),
        fold_norm: arch.norm_kind != NormKind::BareLayerNorm,
        center: false,
    };
    let folded = match read_readout_prepared(&dir, &prep) {
        Ok(r) => r.matrix,
        Err(e) => return Some(format!("{variant}: {e}")),
    };
    let plain = read_readout(&dir, &options).unwrap().matrix;
    let module = arch.final_norm_in(|t| ck.has_tensor(t));
    let read = |name: &str| ck.read_tensor_f32(name).unwrap().1;
    let beta = (arch.norm_kind == NormKind::LayerNorm).then(|| read(&format!("{module}.bias")));
    let bias = arch.readout_bias.map(read);
    let eps = arch.norm_eps(&ck.config);
    // (error / tolerance, error, tolerance, logit index) of the worst logit
    let mut worst = (0.0f64, 0.0f64, 0.0f64, 0usize);
    for i in 0..n {
        let x = normalise(&norm_input[i * d..(i + 1) * d], arch.norm_kind, eps);
        for t in 0..v {
            let (wf, w) = (folded.row(t), plain.row(t));
            let (mut logit, mut scale) = (0.0f64, 0.0f64);
            for j in 0..d {
                let term = x[j] * f64::from(wf[j]);
                logit += term;
                scale += term.abs();
                if let Some(beta) = &beta {
                    let term = f64::from(w[j]) * f64::from(beta[j]);
                    logit += term;
                    scale += term.abs();
                }
            }
            if let Some(b) = &bias {
                logit += f64::from(b[t]);
                scale += f64::from(b[t]).abs();
            }
            let err = (logit - f64::from(logits[i * v + t])).abs();
            let tol = ULPS_OF_ABS_SUM * f64::from(f32::EPSILON) * scale;
            if err / tol > worst.0 {
                worst = (err / tol, err, tol, i * v + t);
            }
        }
    }
    let (ratio, err, tol, at) = worst;
    (ratio > 1.0).then(|| {
        format!(
            "{variant}: logit {at} ([{}, {}]) is off by {err:.3e} (tolerance {tol:.3e})",
            at / v,
            at % v
        )
    })
}

/// Checks the table's readout tensor, gain convention (Gemma's `1 + w`), final-norm tensor
/// (Phi's `model.final_layernorm`), epsilon and biases against transformers, every family.
#[test]
fn final_norm_fold_reproduces_transformers_logits() {
    let failures: Vec<String> = VARIANTS.iter().filter_map(|v| check(v)).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
