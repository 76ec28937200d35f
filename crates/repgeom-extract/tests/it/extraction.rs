//! The sampled points are the forward pass's rows, sampling is seeded, the file round-trips.

use repgeom_extract::{ExtractParams, Extraction, Extractor, Pool};

use crate::{check_extract, corpus, fixture, max_rel_err};

/// Rows are copied, not recomputed: equal up to f32 rounding of identical arithmetic.
const COPY_TOL: f32 = 1e-6;

pub(crate) fn check_rows_match_forward(
    ex: &repgeom_extract::Extractor,
    out: &Extraction,
    text: &str,
    seq_len: usize,
) {
    let ids = ex.encode(text).unwrap();
    let d = out.hidden_size;
    for (p, &(s, t)) in out.positions.iter().enumerate() {
        assert!(t >= 1, "position 0 must be skipped");
        let fwd = ex
            .model()
            .forward(&ids[s * seq_len..(s + 1) * seq_len], false)
            .unwrap();
        assert_eq!(out.token_ids[p], vec![ids[s * seq_len + t]]);
        for (layer, h) in fwd.hidden_states.iter().enumerate() {
            let got = &out.hidden_states[layer][p * d..(p + 1) * d];
            let want = &h[t * d..(t + 1) * d];
            assert!(
                got.iter().zip(want).all(|(a, b)| (a - b).abs() <= COPY_TOL),
                "point {p} layer {layer}"
            );
        }
    }
}

#[test]
fn sampled_rows_are_forward_rows_and_sampling_is_seeded() {
    let text = corpus(40);
    let dir = fixture("gptneox_parallel");
    let (ex, a) = check_extract(&dir, &text, Pool::Tokens, Some(25), 16, 7).unwrap();
    assert_eq!(
        (a.n_points, a.hidden_size, a.hidden_states.len()),
        (25, 32, 4)
    );
    check_rows_match_forward(&ex, &a, &text, 16);
    let (_, b) = check_extract(&dir, &text, Pool::Tokens, Some(25), 16, 7).unwrap();
    assert_eq!(a.positions, b.positions);
    let (_, c) = check_extract(&dir, &text, Pool::Tokens, Some(25), 16, 8).unwrap();
    assert_ne!(
        a.positions, c.positions,
        "another seed samples other positions"
    );
    let loss = a.loss.unwrap();
    let n_seq: usize = a.metadata["n_sequences"].parse().unwrap();
    assert_eq!(loss.tokens, n_seq * 15);
    assert!(loss.mean.is_finite() && loss.mean > 0.0);
}

#[test]
fn mean_pool_is_the_mean_of_the_line_rows_after_position_0() {
    const MEAN_TOL: f32 = 1e-5;
    let text = corpus(3);
    let dir = fixture("llama_tied");
    let (ex, out) = check_extract(&dir, &text, Pool::Mean, None, 64, 0).unwrap();
    assert_eq!(out.n_points, 3);
    let d = out.hidden_size;
    for (i, line) in text.lines().enumerate() {
        let ids = ex.encode(line).unwrap();
        assert_eq!(out.positions[i], (i, ids.len() - 1));
        let fwd = ex.model().forward(&ids, false).unwrap();
        for (layer, h) in fwd.hidden_states.iter().enumerate() {
            for j in 0..d {
                let mean =
                    (1..ids.len()).map(|t| h[t * d + j]).sum::<f32>() / (ids.len() - 1) as f32;
                let got = out.hidden_states[layer][i * d + j];
                assert!(
                    (got - mean).abs() <= MEAN_TOL * (1.0 + mean.abs()),
                    "line {i} layer {layer}"
                );
            }
        }
    }
}

#[test]
fn written_file_is_read_back_by_repgeom_io() {
    let text = corpus(40);
    let (_, out) = check_extract(
        &fixture("gptneox_serial_bf16"),
        &text,
        Pool::Tokens,
        Some(10),
        16,
        0,
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("acts.safetensors");
    out.write(&path).unwrap();
    let acts = repgeom_io::read_activations(&path, None).unwrap();
    assert_eq!(acts.layers.len(), 4);
    for (i, l) in acts.layers.iter().enumerate() {
        assert_eq!((l.layer, l.acts.rows, l.acts.cols), (i, 10, 32));
        assert_eq!(l.acts.data, out.hidden_states[i]);
    }
    let keys: Vec<&str> = out.metadata.keys().map(String::as_str).collect();
    for k in [
        "format",
        "convention",
        "model",
        "revision",
        "seed",
        "seq_len",
        "n_points",
        "skip_first",
        "pool",
        "positions",
        "token_ids",
        "loss",
    ] {
        assert!(keys.contains(&k), "metadata key {k} missing from {keys:?}");
    }
    assert_eq!(out.metadata["format"], "repgeom.activations.v1");
    assert_eq!(out.metadata["model"], "gptneox_serial_bf16");
    let positions: Vec<[usize; 2]> = serde_json::from_str(&out.metadata["positions"]).unwrap();
    assert_eq!(positions.len(), 10);
}

/// Runs one extraction with the given batch size (loss on).
fn extract_batched(
    name: &str,
    text: &str,
    pool: Pool,
    n_points: Option<usize>,
    batch_size: usize,
) -> Extraction {
    let params = ExtractParams {
        seq_len: 16,
        n_points,
        pool,
        loss: true,
        batch_size,
        ..Default::default()
    }
    .check()
    .unwrap();
    Extractor::load(&fixture(name))
        .unwrap()
        .extract(text, &params, &mut |_| {})
        .unwrap()
}

#[test]
fn batch_size_changes_nothing_but_rounding() {
    // f32 rounding of differently blocked products: far below the parity tolerance.
    const BATCH_TOL: f64 = 1e-5;
    let text = corpus(40);
    let cases = [
        ("gptneox_parallel", Pool::Tokens, Some(30)),
        ("gemma2_softcap_window", Pool::Tokens, Some(30)),
        // lines of different lengths: batches are padded on the right
        ("llama_tied", Pool::Mean, Some(7)),
        ("phi_partial_rotary", Pool::Mean, None),
    ];
    for (name, pool, n) in cases {
        let one = extract_batched(name, &text, pool, n, 1);
        for batch in [3, 8] {
            let many = extract_batched(name, &text, pool, n, batch);
            assert_eq!(one.positions, many.positions, "{name} batch {batch}");
            assert_eq!(one.token_ids, many.token_ids, "{name} batch {batch}");
            for (i, (a, b)) in one
                .hidden_states
                .iter()
                .zip(&many.hidden_states)
                .enumerate()
            {
                let e = max_rel_err(b, a);
                assert!(e < BATCH_TOL, "{name} batch {batch} state {i}: {e:.1e}");
            }
            let (la, lb) = (one.loss.unwrap(), many.loss.unwrap());
            assert_eq!(la.tokens, lb.tokens);
            assert!(
                (la.mean - lb.mean).abs() < BATCH_TOL * la.mean,
                "{name} batch {batch}: loss {} vs {}",
                la.mean,
                lb.mean
            );
        }
    }
}

#[test]
fn mean_pool_loss_counts_only_real_tokens() {
    let text = corpus(5);
    let ex = Extractor::load(&fixture("llama_tied")).unwrap();
    let tokens: usize = text
        .lines()
        .map(|l| ex.encode(l).unwrap().len().min(16) - 1) // lines cut to --seq-len 16
        .sum();
    let out = extract_batched("llama_tied", &text, Pool::Mean, None, 8);
    assert_eq!(out.loss.unwrap().tokens, tokens);
}

#[test]
fn batch_over_the_memory_budget_names_the_size_that_fits() {
    let ex = Extractor::load(&fixture("gptneox_parallel")).unwrap();
    let need = |b| ex.model().activation_bytes(b, 16);
    let params = ExtractParams {
        seq_len: 16,
        n_points: Some(4),
        batch_size: 8,
        memory_budget: Some(need(3)),
        ..Default::default()
    }
    .check()
    .unwrap();
    let err = ex.extract(&corpus(20), &params, &mut |_| {}).unwrap_err();
    assert!(
        matches!(
            err,
            repgeom_extract::Error::BatchTooLarge {
                batch_size: 8,
                fits: 3,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("--batch-size 3 fits"), "{err}");
}
