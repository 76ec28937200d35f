use std::path::Path;

use serde_json::json;

use crate::extract::sequence_nll;
use crate::{Error, ExtractParams, Family, ModelConfig, Pool};

fn check_config(cfg: serde_json::Value) -> Result<ModelConfig, String> {
    ModelConfig::from_json(Path::new("config.json"), &cfg).map_err(|e| e.to_string())
}

#[test]
fn pythia_style_config_uses_rotary_pct_and_rotary_emb_base() {
    let c = check_config(json!({
        "model_type": "gpt_neox", "hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 8,
        "intermediate_size": 2048, "rotary_pct": 0.25, "rotary_emb_base": 10000, "vocab_size": 50304,
        "max_position_embeddings": 2048, "use_parallel_residual": true, "hidden_act": "gelu",
        "layer_norm_eps": 1e-5, "tie_word_embeddings": false
    }))
    .unwrap();
    assert_eq!(c, ModelConfig::pythia_70m());
}

#[test]
fn transformers_v5_rope_parameters_are_read() {
    let c = check_config(json!({
        "model_type": "gpt_neox", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64,
        "rope_parameters": {"partial_rotary_factor": 0.5, "rope_theta": 500.0, "rope_type": "default"}
    }))
    .unwrap();
    assert_eq!(
        (c.rotary_dims, c.rope_theta, c.family),
        (8, 500.0, Family::GptNeoX)
    );
}

#[test]
fn config_errors_name_the_field() {
    let base = json!({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64});
    let mut scaled = base.clone();
    scaled["rope_scaling"] = json!({"rope_type": "llama3", "factor": 8.0});
    let mut gqa = base.clone();
    gqa["num_key_value_heads"] = json!(3);
    let mut missing = base.clone();
    missing.as_object_mut().unwrap().remove("vocab_size");
    let mut odd = base.clone();
    odd["model_type"] = json!("gpt_neox");
    odd["rotary_pct"] = json!(0.2);
    let got: Vec<String> = [scaled, gqa, missing, odd]
        .into_iter()
        .map(|c| check_config(c).unwrap_err())
        .collect();
    assert_eq!(
        got,
        [
            "config.json: config field rope_parameters: rope_type \"llama3\" is not supported (only default RoPE)",
            "config.json: config field num_key_value_heads: 3 does not divide num_attention_heads 4",
            "config.json: config field vocab_size: missing",
            "config.json: config field rotary_pct: 0.2 gives 3 rotary dims of a head of 16; must be even",
        ]
    );
}

#[test]
fn unsupported_model_type_lists_architectures() {
    let e = check_config(json!({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
        .unwrap_err();
    assert_eq!(
        e,
        "config.json: unsupported architecture (model_type \"gpt2\", architectures [\"GPT2LMHeadModel\"]); supported: gpt_neox, llama, olmo"
    );
}

#[test]
fn params_check_rejects_out_of_range_values() {
    let bad = |p: ExtractParams| match p.check() {
        Err(Error::InvalidParams { field, .. }) => field,
        other => panic!("expected InvalidParams, got {other:?}"),
    };
    assert_eq!(
        bad(ExtractParams {
            seq_len: 1,
            ..Default::default()
        }),
        "seq_len"
    );
    assert_eq!(
        bad(ExtractParams {
            n_points: Some(0),
            ..Default::default()
        }),
        "n_points"
    );
    assert_eq!(
        bad(ExtractParams {
            n_points: None,
            ..Default::default()
        }),
        "n_points"
    );
    assert!(
        ExtractParams {
            n_points: None,
            pool: Pool::Mean,
            ..Default::default()
        }
        .check()
        .is_ok()
    );
}

#[test]
fn nll_of_uniform_logits_is_log_vocab() {
    const TOL: f64 = 1e-12;
    let v = 7;
    let logits = vec![0.25f32; 3 * v];
    let nll = sequence_nll(&logits, &[1, 2, 3], v);
    assert!((nll - 2.0 * (v as f64).ln()).abs() < TOL, "{nll}");
}
