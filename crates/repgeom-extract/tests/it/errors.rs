//! Bad input gives a clear error, never a panic or a wrong number.

use repgeom_extract::{Error, ExtractParams, Extractor, Pool, Precision};

use crate::{check_extract, copy_fixture, corpus, edit_safetensors, fixture};

#[test]
fn unsupported_architecture_is_named() {
    let tmp = copy_fixture("gptneox_serial_bf16");
    let cfg = tmp.path().join("config.json");
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("\"gpt_neox\"", "\"mamba\"");
    std::fs::write(&cfg, text).unwrap();
    let err = check_extract(tmp.path(), &corpus(20), Pool::Tokens, Some(4), 16, 0).unwrap_err();
    assert!(
        matches!(&err, Error::UnsupportedArchitecture { model_type, .. } if model_type == "mamba"),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("mamba")
            && msg.contains("GPTNeoXForCausalLM")
            && msg.contains(
                "supported: gpt_neox, gpt2, llama, mistral, qwen2, olmo, olmo2, phi, gemma, gemma2"
            ),
        "{msg}"
    );
}

#[test]
fn missing_shard_is_named() {
    let tmp = copy_fixture("gptneox_parallel");
    std::fs::remove_file(tmp.path().join("model-00002-of-00002.safetensors")).unwrap();
    let err = check_extract(tmp.path(), &corpus(20), Pool::Tokens, Some(4), 16, 0).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Checkpoint(repgeom_io::Error::MissingShard { .. })
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("model-00002-of-00002.safetensors"),
        "{err}"
    );
}

#[test]
fn directory_without_weights_or_tokenizer_is_named() {
    let tmp = copy_fixture("gptneox_serial_bf16");
    std::fs::remove_file(tmp.path().join("tokenizer.json")).unwrap();
    let err = check_extract(tmp.path(), &corpus(20), Pool::Tokens, Some(4), 16, 0).unwrap_err();
    assert!(
        matches!(&err, Error::MissingFile { path, .. } if path.ends_with("tokenizer.json")),
        "{err:?}"
    );
    std::fs::remove_file(tmp.path().join("model.safetensors")).unwrap();
    let err = check_extract(tmp.path(), &corpus(20), Pool::Tokens, Some(4), 16, 0).unwrap_err();
    assert!(matches!(&err, Error::Checkpoint(_)), "{err:?}");
    assert!(err.to_string().contains("safetensors"), "{err}");
}

#[test]
fn text_shorter_than_one_sequence() {
    let err = check_extract(
        &fixture("gptneox_parallel"),
        "too short",
        Pool::Tokens,
        Some(1),
        32,
        0,
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::TextTooShort { seq_len: 32, tokens } if tokens < 32),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("the text has"), "{err}");
}

#[test]
fn more_points_than_positions() {
    let text = corpus(20);
    let err = check_extract(
        &fixture("gptneox_parallel"),
        &text,
        Pool::Tokens,
        Some(100_000),
        16,
        0,
    )
    .unwrap_err();
    let Error::TooManyPoints {
        requested,
        available,
        ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(*requested, 100_000);
    assert_eq!(
        *available % 15,
        0,
        "15 positions per sequence of 16 (position 0 skipped)"
    );
    assert!(
        err.to_string().contains("position 0 of each skipped"),
        "{err}"
    );
    let err = check_extract(
        &fixture("gptneox_parallel"),
        &corpus(3),
        Pool::Mean,
        Some(4),
        16,
        0,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::TooManyPoints {
                requested: 4,
                available: 3,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn empty_line_in_mean_mode_is_named() {
    let text = "first line\n\nthird line\n";
    let err =
        check_extract(&fixture("gptneox_parallel"), text, Pool::Mean, None, 16, 0).unwrap_err();
    assert!(matches!(err, Error::EmptyLine { line: 2 }), "{err:?}");
}

#[test]
fn sequence_longer_than_the_model_allows() {
    // the fixtures have max_position_embeddings = 64
    let err = check_extract(
        &fixture("gptneox_parallel"),
        &corpus(200),
        Pool::Tokens,
        Some(4),
        65,
        0,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidParams {
                field: "seq_len",
                ..
            }
        ),
        "{err:?}"
    );
}

/// A checkpoint whose weights overflow: the first hidden state read that holds NaN or Inf is
/// named by layer, position and column, before any point is kept or any file written.
#[test]
fn non_finite_hidden_states_are_named() {
    let tmp = copy_fixture("gptneox_parallel");
    let shard = tmp.path().join("model-00001-of-00002.safetensors");
    // Layer 0's MLP output bias infinite in column 3 only: hidden state 1 (after layer 0) is
    // infinite there at every position.
    edit_safetensors(&shard, |name, _, bytes| {
        if name == "gpt_neox.layers.0.mlp.dense_4h_to_h.bias" {
            bytes[12..16].copy_from_slice(&f32::INFINITY.to_le_bytes());
        }
    });
    // With the loss, its pass finds the overflow first: the sequence is named.
    let err = check_extract(tmp.path(), &corpus(40), Pool::Tokens, Some(12), 16, 0).unwrap_err();
    assert!(
        matches!(err, Error::NonFiniteLoss { tokens: 16, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("is not finite"), "{err}");
    // Without it, the points' pass: the hidden state, position and column.
    let params = ExtractParams {
        seq_len: 16,
        n_points: Some(12),
        ..Default::default()
    }
    .check()
    .unwrap();
    let err = Extractor::load(tmp.path())
        .unwrap()
        .extract(&corpus(40), &params, &mut |_| {})
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::NonFinite {
                layer: 1,
                column: 3,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.starts_with("hidden state 1 is not finite"), "{msg}");
    assert!(
        msg.contains("column 3") && msg.contains("overflow"),
        "{msg}"
    );
}

/// At `--dtype stored` an f16 checkpoint's linear inputs are rounded to f16, whose largest
/// value is 65504: a layer whose MLP input grows past it overflows there (and not in f32),
/// and the error says so, with the way out.
#[test]
fn an_f16_overflow_at_stored_is_named_with_the_way_out() {
    let tmp = copy_fixture("llama_tied");
    let file = tmp.path().join("model.safetensors");
    // layer 0's gate and up projections times 256 (exact in f16): the down projection's
    // input, act(gate) · up, reaches millions
    edit_safetensors(&file, |name, dtype, bytes| {
        if name.starts_with("model.layers.0.mlp.") && !name.contains("down") {
            assert_eq!(dtype, safetensors::Dtype::F16, "{name}");
            for v in bytes.chunks_exact_mut(2) {
                let x = half::f16::from_le_bytes([v[0], v[1]]).to_f32() * 256.0;
                v.copy_from_slice(&half::f16::from_f32(x).to_le_bytes());
            }
        }
    });
    let params = |dtype| {
        ExtractParams {
            seq_len: 16,
            n_points: Some(12),
            dtype,
            ..Default::default()
        }
        .check()
        .unwrap()
    };
    let mut ex = Extractor::load(tmp.path()).unwrap();
    ex.extract(&corpus(40), &params(Precision::F32), &mut |_| {})
        .expect("finite in f32");
    ex.place(None, Precision::Stored).unwrap();
    let err = ex
        .extract(&corpus(40), &params(Precision::Stored), &mut |_| {})
        .unwrap_err();
    assert!(matches!(err, Error::NonFinite { layer: 1, .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("the weights' stored precision overflows: try --dtype f32"),
        "{msg}"
    );
}
