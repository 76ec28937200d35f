use std::path::Path;

use serde_json::json;

use crate::kernels::row_nll;
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
fn rope_parameters_win_over_the_older_keys() {
    // transformers 5.5 and later (and every family's `standardize_rope_params`) keep
    // `rope_parameters` and fill only its missing keys from `rotary_pct`, `rotary_emb_base`,
    // `rope_theta` and `partial_rotary_factor`: transformers 5.25 builds these two configs
    // with 8 and 4 rotary dimensions, both at theta 500.
    // (family, the older keys, rope_parameters' rotary fraction, the rotary dimensions)
    let cases = [
        (
            "gpt_neox",
            json!({"rotary_pct": 0.25, "rotary_emb_base": 10000}),
            0.5,
            8,
        ),
        (
            "phi",
            json!({"partial_rotary_factor": 0.5, "rope_theta": 10000.0}),
            0.25,
            4,
        ),
    ];
    for (family, older, fraction, dims) in cases {
        let mut cfg = json!({
            "model_type": family, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64,
        });
        cfg.as_object_mut()
            .unwrap()
            .extend(older.as_object().unwrap().clone());
        cfg["rope_parameters"] =
            json!({"partial_rotary_factor": fraction, "rope_theta": 500.0, "rope_type": "default"});
        let c = check_config(cfg).unwrap();
        assert_eq!((c.rotary_dims, c.rope_theta), (dims, 500.0), "{family}");
    }
}

#[test]
fn config_errors_name_the_field() {
    let base = json!({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64});
    let mut scaled = base.clone();
    scaled["rope_scaling"] = json!({"rope_type": "yarn", "factor": 8.0});
    let mut llama3 = base.clone();
    llama3["rope_scaling"] = json!({"rope_type": "llama3", "factor": 8.0});
    let mut gqa = base.clone();
    gqa["num_key_value_heads"] = json!(3);
    let mut missing = base.clone();
    missing.as_object_mut().unwrap().remove("vocab_size");
    let mut odd = base.clone();
    odd["model_type"] = json!("gpt_neox");
    odd["rotary_pct"] = json!(0.2);
    let got: Vec<String> = [scaled, llama3, gqa, missing, odd]
        .into_iter()
        .map(|c| check_config(c).unwrap_err())
        .collect();
    assert_eq!(
        got,
        [
            "config.json: config field rope_parameters: rope_type \"yarn\" is not supported (default, llama3)",
            "config.json: config field rope_parameters: rope_type \"llama3\" needs low_freq_factor",
            "config.json: config field num_key_value_heads: 3 does not divide num_attention_heads 4",
            "config.json: config field vocab_size: missing",
            "config.json: config field rotary_pct: 0.2 gives 3 rotary dims of a head of 16; must be even",
        ]
    );
}

#[test]
fn unsupported_model_type_lists_architectures() {
    let e = check_config(json!({"model_type": "mamba", "architectures": ["MambaForCausalLM"]}))
        .unwrap_err();
    assert_eq!(
        e,
        "config.json: unsupported architecture (model_type \"mamba\", architectures [\"MambaForCausalLM\"]); supported: gpt_neox, gpt2, llama, mistral, qwen2, olmo, olmo2, phi, gemma, gemma2"
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
    let logits = vec![0.25f32; v];
    let nll = row_nll(&logits, 3);
    assert!((nll - (v as f64).ln()).abs() < TOL, "{nll}");
}

/// A small config of each family, with `extra` merged in.
fn family_config(model_type: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut c = if model_type == "gpt2" {
        json!({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100,
               "n_positions": 64})
    } else {
        json!({"model_type": model_type, "hidden_size": 64, "num_hidden_layers": 4,
               "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
               "max_position_embeddings": 64})
    };
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

#[test]
fn variants_a_family_does_not_implement_are_refused_by_name() {
    let cases = [
        (
            family_config("gpt2", json!({"scale_attn_by_inverse_layer_idx": true})),
            "config field scale_attn_by_inverse_layer_idx: attention scaled by 1 / (layer + 1) is not supported",
        ),
        (
            family_config("gpt2", json!({"add_cross_attention": true})),
            "config field add_cross_attention: cross-attention (an encoder-decoder) is not supported",
        ),
        (
            family_config("phi", json!({"qk_layernorm": true})),
            "config field qk_layernorm: LayerNorm on q and k is not supported",
        ),
        (
            family_config("gemma2", json!({"use_bidirectional_attention": true})),
            "config field use_bidirectional_attention: bidirectional attention is not supported",
        ),
        (
            family_config(
                "gemma2",
                json!({"layer_types": ["sliding_attention", "chunked_attention", "full_attention", "full_attention"]}),
            ),
            "config field layer_types: layer type \"chunked_attention\" is not supported (sliding_attention, full_attention)",
        ),
        (
            family_config("gemma2", json!({"sliding_window": null})),
            "config field sliding_window: layer_types has sliding layers but sliding_window is missing",
        ),
        (
            family_config("gemma2", json!({"hidden_activation": "gelu_accurate"})),
            "config field hidden_activation: activation \"gelu_accurate\" is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu, silu)",
        ),
        (
            family_config(
                "mistral",
                json!({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}),
            ),
            "config field rope_parameters: rope_type \"dynamic\" is not supported (default, llama3)",
        ),
    ];
    for (cfg, want) in cases {
        let got = check_config(cfg).unwrap_err();
        assert_eq!(got, format!("config.json: {want}"));
    }
}

#[test]
fn family_defaults_follow_transformers() {
    let gemma2 = check_config(family_config(
        "gemma2",
        json!({"sliding_window": 8, "head_dim": 32}),
    ))
    .unwrap();
    assert_eq!(
        gemma2.windows,
        [Some(8), None, Some(8), None],
        "sliding on even layers"
    );
    assert_eq!(
        (gemma2.attn_logit_softcap, gemma2.final_logit_softcap),
        (Some(50.0), Some(30.0))
    );
    assert_eq!(
        gemma2.attention_scale,
        1.0 / 16.0,
        "query_pre_attn_scalar 256"
    );
    assert!(gemma2.tie_word_embeddings);
    let qwen = check_config(family_config(
        "qwen2",
        json!({"use_sliding_window": true, "sliding_window": 16, "max_window_layers": 2}),
    ))
    .unwrap();
    assert_eq!(qwen.windows, [None, None, Some(16), Some(16)]);
    assert_eq!(
        (qwen.attention_bias, qwen.attention_out_bias),
        (true, false)
    );
    let qwen_full = check_config(family_config("qwen2", json!({"sliding_window": 16}))).unwrap();
    assert_eq!(
        qwen_full.windows, [None; 4],
        "use_sliding_window defaults to false"
    );
    let mistral = check_config(family_config("mistral", json!({"sliding_window": 16}))).unwrap();
    assert_eq!(mistral.windows, [Some(16); 4]);
    let gpt2 = check_config(family_config("gpt2", json!({}))).unwrap();
    assert_eq!(
        (
            gpt2.intermediate_size,
            gpt2.rotary_dims,
            gpt2.activation,
            gpt2.tie_word_embeddings
        ),
        (256, 0, crate::Activation::GeluTanh, true)
    );
    let phi = check_config(family_config("phi", json!({}))).unwrap();
    assert_eq!(
        (phi.rotary_dims, phi.lm_head_bias, phi.use_parallel_residual),
        (8, true, true)
    );
    let gemma = check_config(family_config("gemma", json!({"hidden_act": "gelu"}))).unwrap();
    assert_eq!(
        gemma.activation,
        crate::Activation::GeluTanh,
        "legacy gelu means tanh"
    );
}

/// The batched loss (tiles of 256 rows × 1024 vocabulary entries, combined per row) against
/// full logits rows from the one-sequence path: three vocabulary tiles, the last partial, and
/// two row blocks, for a plain readout, Phi's `lm_head.bias` and Gemma-2's logit soft-capping.
/// The families with a forward pass are exactly the entries of repgeom-io's architecture
/// table, in the docs' order, and each `model_type` parses to the family whose entry it is.
#[test]
fn every_family_has_one_architecture_table_entry() {
    let families = [
        Family::GptNeoX,
        Family::Gpt2,
        Family::Llama,
        Family::Mistral,
        Family::Qwen2,
        Family::Olmo,
        Family::Olmo2,
        Family::Phi,
        Family::Gemma,
        Family::Gemma2,
    ];
    let table: Vec<&str> = repgeom_io::ARCHS.iter().map(|a| a.model_type).collect();
    assert_eq!(table.join(", "), Family::MODEL_TYPES);
    for f in families {
        assert_eq!(f.arch().model_type, f.model_type());
        let c = check_config(family_config(f.model_type(), json!({}))).unwrap();
        assert_eq!(c.family, f);
    }
}

#[test]
fn tiled_loss_equals_the_loss_of_full_logits_rows() {
    const TOL: f64 = 1e-6;
    let extra = json!({"vocab_size": 2500, "max_position_embeddings": 128,
                       "final_logit_softcapping": 30.0});
    for model_type in ["gpt_neox", "phi", "gemma2"] {
        let cfg = check_config(family_config(model_type, extra.clone())).unwrap();
        let model = crate::Model::random(cfg, 7).unwrap();
        let seqs: Vec<Vec<u32>> = [120u32, 100, 90]
            .iter()
            .map(|&len| (0..len).map(|i| (i * 797 + len * 31) % 2500).collect())
            .collect();
        let batch: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
        let got = model
            .forward_batch(&batch, true, &mut |_, _| Ok(()))
            .unwrap()
            .unwrap();
        for (ids, got) in seqs.iter().zip(got) {
            let logits = model.forward(ids, true).unwrap().logits.unwrap();
            let want: f64 = logits
                .chunks(2500)
                .zip(&ids[1..])
                .map(|(row, &target)| row_nll(row, target))
                .sum();
            let rel = (got - want).abs() / want.abs();
            assert!(
                rel < TOL,
                "{model_type}: tiled {got} vs full rows {want} ({rel:e})"
            );
        }
    }
}

/// Every hidden state and the loss of a batch are bit-identical on 1 and 3 threads, at sizes
/// where faer's products (linear layers, readout tiles) split their work across threads.
#[test]
fn forward_batch_does_not_depend_on_the_thread_count() {
    let cfg = json!({"model_type": "gpt_neox", "hidden_size": 256, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "intermediate_size": 1024, "vocab_size": 3000,
                     "max_position_embeddings": 256});
    let model = crate::Model::random(check_config(cfg).unwrap(), 3).unwrap();
    let seqs: Vec<Vec<u32>> = (0..4u32)
        .map(|s| (0..128).map(|i| (i * 131 + s * 977) % 3000).collect())
        .collect();
    let batch: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut states = Vec::new();
            let nll = model
                .forward_batch(&batch, true, &mut |_, h| {
                    states.extend(h.iter().map(|x| x.to_bits()));
                    Ok(())
                })
                .unwrap()
                .unwrap();
            (states, nll.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
        })
    };
    let (one, three) = (run(1), run(3));
    assert!(
        one.0 == three.0,
        "hidden states differ between 1 and 3 threads"
    );
    assert_eq!(one.1, three.1, "loss differs between 1 and 3 threads");
}

#[test]
fn text_blocks_cut_only_before_a_line_that_starts_a_word() {
    let text = "one line\ntwo\n\n  three\nfour\n";
    let blocks: Vec<&str> = crate::text_blocks(text, 4).collect();
    assert_eq!(blocks, ["one line\n", "two\n\n  three\n", "four\n"]);
    assert_eq!(blocks.concat(), text);
    assert_eq!(crate::text_blocks("no newline at all", 2).count(), 1);
    assert_eq!(crate::text_blocks("", 2).count(), 0);
}

/// A text with blank lines, indentation, digits, punctuation, non-ASCII words and lines that
/// start with letters, digits and other characters, then a stretch of the trained fixtures'
/// corpus.
fn cut_text() -> String {
    let text = "The quick brown fox jumps over the lazy dog.\n\
                \n\
                  Indented line, with 123 numbers: 4.5 and 67%.\n\
                Naïve café — «quotes» and émojis ✓.\n\
                \tTabbed\n\
                42 starts with digits\n\
                \"Quoted\" line\n\
                last line without newline";
    let corpus = std::fs::read_to_string(trained("neox-sp-d32").join("../../corpus.txt")).unwrap();
    format!("{}\n{}", text.repeat(5), &corpus[..30_000])
}

fn trained(model: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../fixtures/trained/{model}/step0"))
}

fn tokenizer_json(model: &str) -> serde_json::Value {
    let path = trained(model).join("tokenizer.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The neox-sp-d32 tokenizer (SentencePiece-style: Metaspace, `▁` prepended to the first word)
/// without its tokens that join a line to the next (`.\nThe`), and the merges that make them.
fn sp_without_joins() -> serde_json::Value {
    let mut t = tokenizer_json("neox-sp-d32");
    let joins = |k: &str| {
        let c: Vec<char> = k.chars().collect();
        c.windows(2)
            .any(|w| w[0] == '\n' && w[1].is_ascii_alphanumeric())
    };
    let model = t["model"].as_object_mut().unwrap();
    let mut vocab = model["vocab"].as_object().unwrap().clone();
    vocab.retain(|k, _| !joins(k));
    let merges: Vec<serde_json::Value> = model["merges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            let (a, b) = match m {
                serde_json::Value::Array(p) => (
                    p[0].as_str().unwrap().to_string(),
                    p[1].as_str().unwrap().to_string(),
                ),
                other => {
                    let s = other.as_str().unwrap();
                    let (a, b) = s.split_once(' ').unwrap();
                    (a.to_string(), b.to_string())
                }
            };
            vocab.contains_key(&a)
                && vocab.contains_key(&b)
                && vocab.contains_key(&format!("{a}{b}"))
        })
        .cloned()
        .collect();
    model.insert("vocab".into(), serde_json::Value::Object(vocab));
    model.insert("merges".into(), serde_json::Value::Array(merges));
    t
}

/// Reads `json`'s pipeline: where `refused` is `None` the text's pieces cut at line starts
/// ([`crate::text_blocks`], blocks of 1 to 4,096 bytes) must tokenise to the whole text's ids;
/// else the tokenizer must be refused with that reason, and where `pieces_differ` cutting it
/// anyway must change the ids (what the refusal is for).
fn check_cuts(name: &str, json: &serde_json::Value, refused: Option<&str>, pieces_differ: bool) {
    use crate::cuts::Cuts;
    let tokenizer: tokenizers::Tokenizer = json.to_string().parse().unwrap();
    let text = cut_text();
    let whole = tokenizer
        .encode(text.as_str(), false)
        .unwrap()
        .get_ids()
        .to_vec();
    let in_pieces = |target: usize, rest: &tokenizers::Tokenizer| {
        let mut ids = Vec::new();
        for (i, block) in crate::text_blocks(&text, target).enumerate() {
            let t = if i == 0 { &tokenizer } else { rest };
            ids.extend_from_slice(t.encode(block, false).unwrap().get_ids());
        }
        ids
    };
    match (Cuts::of(&tokenizer), refused) {
        (Cuts::Lines { rest }, None) => {
            for target in [1, 16, 100, 4096] {
                let rest = rest.as_deref().unwrap_or(&tokenizer);
                assert!(
                    in_pieces(target, rest) == whole,
                    "{name}: blocks of {target} bytes"
                );
            }
        }
        (Cuts::Whole(why), Some(reason)) => {
            assert!(why.contains(reason), "{name}: {why}");
            if pieces_differ {
                assert!(
                    [1, 16, 100, 4096]
                        .iter()
                        .any(|&t| in_pieces(t, &tokenizer) != whole),
                    "{name}: refused, but its pieces have the whole text's ids"
                );
            }
        }
        (cuts, _) => panic!("{name}: {cuts:?}, expected {refused:?}"),
    }
}

/// Which tokenizers may cut a text at line starts, and that where one may, the pieces'
/// ids are the whole text's: byte-level BPE (GPT-2's pattern, Llama 3's as a `Split`), and
/// SentencePiece-style BPE whose vocabulary never joins a line to the next (its pieces after
/// the first without the first word's `▁`); refused, with pieces that would differ: a prefix
/// space, a SentencePiece vocabulary with `.\nThe`, a `Prepend` normaliser, a Metaspace that
/// prepends to every segment, an added token holding a newline, a pattern not on the list.
#[test]
fn texts_are_cut_only_where_the_pieces_keep_the_whole_texts_ids() {
    let neox = tokenizer_json("neox-d32");
    check_cuts("neox-d32", &neox, None, false);
    let mut t = neox.clone();
    t["pre_tokenizer"]["add_prefix_space"] = json!(true);
    check_cuts("prefix space", &t, Some("adds a space"), true);
    let mut t = neox.clone();
    t["pre_tokenizer"] = json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "behavior": "Isolated", "invert": false, "pattern": {"Regex":
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"}},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]});
    check_cuts("Llama 3 pattern", &t, None, false);
    t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = json!(r"\S+\s*");
    check_cuts("other pattern", &t, Some("not known to split"), false);
    let mut t = neox.clone();
    t["added_tokens"].as_array_mut().unwrap().push(json!({"id": 600, "content": ".\nThe",
        "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": false}));
    check_cuts("added newline", &t, Some("holds a newline"), true);

    let sp = tokenizer_json("neox-sp-d32");
    check_cuts("neox-sp-d32", &sp, Some("joins a line to the next"), true);
    let clean = sp_without_joins();
    check_cuts("neox-sp-d32 without joins", &clean, None, false);
    let mut t = clean.clone();
    t["pre_tokenizer"]["prepend_scheme"] = json!("always");
    check_cuts("Metaspace always", &t, Some("every segment"), true);
    let mut t = clean.clone();
    t["pre_tokenizer"]["prepend_scheme"] = json!("never");
    t["normalizer"] = json!({"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]});
    check_cuts("Prepend", &t, Some("Prepend"), true);
    t["normalizer"]["normalizers"]
        .as_array_mut()
        .unwrap()
        .remove(0);
    check_cuts("Replace", &t, None, false);
}

/// `Extractor::encode` on a pool of several threads (pieces side by side) and the stream's
/// blocks give the ids of one whole-text tokenisation: every fixture checkpoint's tokenizer,
/// the trained ones (neox-sp-d32 is read whole), and a copy of neox-sp-d32 whose tokenizer
/// cuts (its pieces after the first are read without the first word's `▁`).
#[test]
fn encoding_and_streaming_give_the_whole_texts_ids() {
    let corpus = std::fs::read_to_string(trained("neox-sp-d32").join("../../corpus.txt")).unwrap();
    assert!(corpus.len() > crate::STREAM_BLOCK_BYTES + 2 * crate::ENCODE_PIECE_BYTES);
    let copy = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(trained("neox-sp-d32").join(f), copy.path().join(f)).unwrap();
    }
    std::fs::write(
        copy.path().join("tokenizer.json"),
        sp_without_joins().to_string(),
    )
    .unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/extract");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|d| d.join("tokenizer.json").exists())
        .collect();
    assert!(dirs.len() >= 8, "only {} fixtures", dirs.len());
    dirs.extend([
        trained("neox-d32"),
        trained("neox-sp-d32"),
        copy.path().to_path_buf(),
    ]);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    for dir in &dirs {
        let ex = crate::Extractor::load(dir).unwrap();
        let tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
        let whole = tokenizer
            .encode(corpus.as_str(), false)
            .unwrap()
            .get_ids()
            .to_vec();
        let cut = ex.cuts_at_lines().is_ok();
        let sp = dir.ends_with("neox-sp-d32/step0");
        assert_eq!(cut, !sp, "{}: {:?}", dir.display(), ex.cuts_at_lines());
        pool.install(|| {
            assert!(
                ex.encode(&corpus).unwrap() == whole,
                "{}: encode",
                dir.display()
            );
            let models = [(&ex, &[][..])];
            let mut streamed = Vec::new();
            let mut start = 0;
            for block in crate::extract::stream_blocks(&models, &corpus) {
                streamed.extend(crate::extract::block_ids(&models, block, start).unwrap());
                start += block.len();
            }
            assert!(streamed == whole, "{}: stream", dir.display());
        });
    }
}

/// `dtype`: its two names, a settings key written only when not f32, and the one rule that an
/// extraction's dtype is the precision the model was placed at (refused before any work
/// otherwise); on the CPU `stored` computes bf16 products (the points move by the rounding
/// of the linear layers' inputs) and says so in the metadata.
#[test]
fn dtype_names_and_the_placement_rule() {
    use crate::Precision;
    for (name, p) in [("f32", Precision::F32), ("stored", Precision::Stored)] {
        assert_eq!(name.parse::<Precision>().unwrap(), p);
        assert_eq!(p.name(), name);
        assert_eq!(serde_json::to_value(p).unwrap(), json!(name));
    }
    let e = "bf16".parse::<Precision>().unwrap_err().to_string();
    assert!(
        e.contains("unknown dtype `bf16`: expected f32, stored"),
        "{e}"
    );
    let f32_json = serde_json::to_value(ExtractParams::default()).unwrap();
    assert!(f32_json.get("dtype").is_none(), "{f32_json}");
    let stored = ExtractParams {
        dtype: Precision::Stored,
        n_points: Some(16),
        seq_len: 32,
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(&stored).unwrap()["dtype"],
        json!("stored")
    );
    let back: ExtractParams = serde_json::from_value(json!({"dtype": "stored"})).unwrap();
    assert_eq!(back.dtype, Precision::Stored);
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(40);
    let mut ex = crate::Extractor::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/extract/gptneox_serial_bf16"),
    )
    .unwrap();
    // a model placed at f32 (as loaded) refuses to extract at `stored`, before running anything
    let e = ex
        .extract(&text, &stored.clone().check().unwrap(), &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("stored asked for, but the model was placed on cpu at f32"),
        "{e}"
    );
    let f32_params = ExtractParams {
        dtype: Precision::F32,
        ..stored.clone()
    };
    let a = ex
        .extract(&text, &f32_params.check().unwrap(), &mut |_| {})
        .unwrap();
    ex.place(None, Precision::Stored).unwrap();
    let b = ex
        .extract(&text, &stored.check().unwrap(), &mut |_| {})
        .unwrap();
    assert_eq!(b.metadata["dtype"], "stored");
    assert!(!a.metadata.contains_key("dtype"), "f32 on the CPU: no key");
    assert_eq!(a.positions, b.positions);
    let last = a.hidden_states.len() - 1;
    let (x, y) = (&a.hidden_states[last], &b.hidden_states[last]);
    let scale = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let moved = x.iter().zip(y).fold(0f32, |m, (p, q)| m.max((p - q).abs())) / scale;
    assert!(
        moved > 1e-4 && moved < 5e-2,
        "stored moved the points by {moved}"
    );
}
