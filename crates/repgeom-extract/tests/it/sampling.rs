//! Dense sampling (`points_per_sequence`) and the bounded loss (`loss_tokens`): which
//! positions are taken, what they cost, and the loss's standard error against an independent
//! computation from the logits.

use std::collections::BTreeMap;

use repgeom_extract::{Error, ExtractParams, Extraction, Extractor, Pool};

use crate::extraction::check_rows_match_forward;
use crate::{corpus, fixture};

/// The loss and its standard error against the same numbers from the logits in f64: f32
/// logits, tiled vs whole.
const LOSS_TOL: f64 = 1e-5;

fn run(
    text: &str,
    n: usize,
    m: usize,
    loss_tokens: Option<usize>,
    loss: bool,
) -> (Extractor, Extraction) {
    let params = ExtractParams {
        seq_len: 16,
        n_points: Some(n),
        seed: 3,
        points_per_sequence: Some(m),
        pool: Pool::Tokens,
        loss,
        loss_tokens,
        batch_size: 4,
        ..Default::default()
    }
    .check()
    .unwrap();
    let ex = Extractor::load(&fixture("gptneox_parallel")).unwrap();
    let out = ex.extract(text, &params, &mut |_| {}).unwrap();
    (ex, out)
}

#[test]
fn dense_sampling_takes_m_distinct_positions_from_each_drawn_sequence() {
    let text = corpus(60);
    for (n, m) in [(25, 4), (24, 4), (30, 15), (10, 2)] {
        let (ex, out) = run(&text, n, m, None, false);
        let what = format!("n_points {n}, points_per_sequence {m}");
        assert_eq!(out.n_points, n, "{what}");
        check_rows_match_forward(&ex, &out, &text, 16);
        let mut per_seq = BTreeMap::<usize, Vec<usize>>::new();
        for &(s, t) in &out.positions {
            per_seq.entry(s).or_default().push(t);
        }
        assert_eq!(per_seq.len(), n.div_ceil(m), "{what}: sequences drawn");
        let counts: Vec<usize> = per_seq.values().map(Vec::len).collect();
        let last = n - (per_seq.len() - 1) * m;
        assert!(
            counts[..counts.len() - 1].iter().all(|&c| c == m) && counts[counts.len() - 1] == last,
            "{what}: {counts:?}"
        );
        for ts in per_seq.values() {
            assert!(
                ts.windows(2).all(|w| w[0] < w[1]),
                "{what}: positions distinct and sorted"
            );
            assert!(
                ts.iter().all(|&t| (1..16).contains(&t)),
                "{what}: position 0 skipped"
            );
        }
        assert_eq!(out.metadata["points_per_sequence"], m.to_string());
        assert_eq!(
            out.metadata["tokens_run"],
            (per_seq.len() * 16).to_string(),
            "{what}"
        );
        // Seeded: the same call takes the same positions.
        assert_eq!(
            run(&text, n, m, None, false).1.positions,
            out.positions,
            "{what}"
        );
    }
}

#[test]
fn density_beyond_the_sequence_or_the_text_is_an_error_naming_the_numbers() {
    let bad = ExtractParams {
        seq_len: 16,
        points_per_sequence: Some(16),
        ..Default::default()
    }
    .check()
    .unwrap_err()
    .to_string();
    assert!(bad.contains("16") && bad.contains("15 positions"), "{bad}");
    let text = corpus(60);
    let params = ExtractParams {
        seq_len: 16,
        n_points: Some(300),
        points_per_sequence: Some(2),
        ..Default::default()
    }
    .check()
    .unwrap();
    let ex = Extractor::load(&fixture("gptneox_parallel")).unwrap();
    let Err(err) = ex.extract(&text, &params, &mut |_| {}) else {
        panic!("300 points at 2 per sequence from 128 sequences must fail");
    };
    assert!(
        matches!(
            err,
            Error::TooSparse {
                needed: 150,
                sequences: 128,
                ..
            }
        ),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("n_points = 300")
            && msg.contains("needs 150 sequences")
            && msg.contains("128 sequences"),
        "{msg}"
    );
}

/// The default density on a text with too few sequences for it: more positions per sequence
/// (up to all of them), said in the metadata; the same request with the density set is an
/// error. (`--n-points 39` on a 40-token text, `--n-points 512` on 2,048 tokens ran before the
/// default became 16 per sequence.)
#[test]
fn the_default_density_rises_on_a_short_text_and_says_so() {
    let ex = Extractor::load(&fixture("gptneox_parallel")).unwrap();
    let text = corpus(60);
    // seq_len 33: 32 positions per sequence (position 0 skipped), default density 16.
    let params = |n: usize, density: Option<usize>| {
        ExtractParams {
            seq_len: 33,
            n_points: Some(n),
            points_per_sequence: density,
            ..Default::default()
        }
        .check()
        .unwrap()
    };
    let fits = ex.extract(&text, &params(30, None), &mut |_| {}).unwrap();
    assert!(!fits.metadata.contains_key("points_per_sequence_note"));
    assert_eq!(fits.metadata["points_per_sequence"], "16");
    let n_seq: usize = fits.metadata["n_sequences"].parse().unwrap();
    // Five points more than 16 per sequence can give: 17 per sequence, and a note saying so.
    let n = n_seq * 16 + 5;
    let out = ex.extract(&text, &params(n, None), &mut |_| {}).unwrap();
    assert_eq!(out.n_points, n);
    assert_eq!(out.metadata["points_per_sequence"], "17");
    let note = &out.metadata["points_per_sequence_note"];
    assert!(
        note.contains("default 16")
            && note.contains("took 17")
            && note.contains("set points_per_sequence"),
        "{note}"
    );
    let mut pos = out.positions.clone();
    pos.dedup();
    assert_eq!(pos.len(), n, "points are distinct");
    // Set by the user, the density is theirs: too few sequences for it stays an error.
    let Err(err) = ex.extract(&text, &params(n, Some(16)), &mut |_| {}) else {
        panic!("an explicit density keeps its error");
    };
    assert!(matches!(err, Error::TooSparse { .. }), "{err}");
}

/// Per-sequence summed negative log-likelihoods from the logits, in f64.
fn nll_from_logits(ex: &Extractor, seq: &[u32]) -> f64 {
    let f = ex.model().forward(seq, true).unwrap();
    let logits = f.logits.unwrap();
    let v = logits.len() / seq.len();
    (0..seq.len() - 1)
        .map(|t| {
            let row: Vec<f64> = logits[t * v..(t + 1) * v]
                .iter()
                .map(|&x| f64::from(x))
                .collect();
            let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = max + row.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
            lse - row[seq[t + 1] as usize]
        })
        .sum()
}

#[test]
fn the_loss_sample_and_its_standard_error_match_the_logits() {
    let text = corpus(60);
    let (ex, all) = run(&text, 10, 1, None, true);
    let ids = ex.encode(&text).unwrap();
    let n_seq = ids.len() / 16;
    let loss = all.loss.unwrap();
    assert_eq!((loss.sequences, loss.tokens), (n_seq, n_seq * 15));
    // Independent: per-sequence means (equal lengths), their mean and sd / sqrt(m).
    let means: Vec<f64> = (0..n_seq)
        .map(|s| nll_from_logits(&ex, &ids[s * 16..(s + 1) * 16]) / 15.0)
        .collect();
    let m = means.len() as f64;
    let mean = means.iter().sum::<f64>() / m;
    let sd = (means.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (m - 1.0)).sqrt();
    assert!(
        (loss.mean - mean).abs() <= LOSS_TOL * mean,
        "{} vs {mean}",
        loss.mean
    );
    assert!(
        (loss.se - sd / m.sqrt()).abs() <= LOSS_TOL * sd,
        "{} vs {}",
        loss.se,
        sd / m.sqrt()
    );
    // A budget beyond the text is every sequence: the same numbers, bit for bit.
    let (_, big) = run(&text, 10, 1, Some(1 << 30), true);
    assert_eq!(big.loss, all.loss);
    // A budget of 40 tokens: ceil(40 / 15) = 3 sequences; the points do not move.
    let (_, few) = run(&text, 10, 1, Some(40), true);
    let l = few.loss.unwrap();
    assert_eq!((l.sequences, l.tokens), (3, 45));
    assert_eq!(few.positions, all.positions);
    // `Extractor::loss` runs the same sample.
    let params = ExtractParams {
        seq_len: 16,
        seed: 3,
        loss: true,
        loss_tokens: Some(40),
        batch_size: 4,
        ..Default::default()
    }
    .check()
    .unwrap();
    assert_eq!(ex.loss(&text, &params, &mut |_| {}).unwrap(), l);
}
