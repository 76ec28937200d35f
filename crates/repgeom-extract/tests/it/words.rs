//! Word-aligned points (`Pool::Words`): the same words and contexts for models with different
//! tokenizers, each word's state the forward pass's row of its last token (or the mean over
//! its tokens), and the bad inputs.

use repgeom_extract::{
    Error, ExtractParams, Extraction, Extractor, Pool, ValidExtractParams, WordPool, sample_words,
};

use crate::fixture;

/// The fixture text of the word tests (also read by `fixtures/extract/make_word_reference.py`).
pub(crate) fn word_text() -> String {
    std::fs::read_to_string(fixture("words").join("text.txt")).unwrap()
}

/// The two checkpoints of the word tests: GPT-2 with the byte-level BPE tokenizer of every
/// fixture, and the Llama fixture's weights with a SentencePiece-style (Metaspace) tokenizer.
pub(crate) const WORD_MODELS: [&str; 2] = ["gpt2_tied", "words/llama_metaspace"];

pub(crate) fn word_params(pool: WordPool, seed: u64) -> ValidExtractParams {
    ExtractParams {
        seq_len: 40,
        n_points: Some(12),
        seed,
        points_per_sequence: Some(3),
        pool: Pool::Words(pool),
        batch_size: 3,
        ..Default::default()
    }
    .check()
    .unwrap()
}

fn run(name: &str, text: &str, params: &ValidExtractParams) -> (Extractor, Extraction) {
    let ex = Extractor::load(&fixture(name)).unwrap();
    let out = ex.extract(text, params, &mut |_| {}).unwrap();
    (ex, out)
}

#[test]
fn models_with_different_tokenizers_hold_the_same_words_and_contexts() {
    let text = word_text();
    let p = word_params(WordPool::Last, 5);
    let (ea, a) = run(WORD_MODELS[0], &text, &p);
    let (eb, b) = run(WORD_MODELS[1], &text, &p);
    // the tokenizers differ on this text
    assert_ne!(ea.encode(&text).unwrap(), eb.encode(&text).unwrap());
    assert_eq!(a.n_points, 12);
    assert_eq!(a.positions, b.positions);
    for key in [
        "positions",
        "word_contexts",
        "pool",
        "word_pool",
        "text_words",
    ] {
        assert_eq!(a.metadata[key], b.metadata[key], "{key}");
    }
    assert_eq!(a.metadata["pool"], "words");
    assert_eq!(a.metadata["word_pool"], "last");
    assert_eq!(Pool::design_of(&a.metadata), "words (last token)");
    // the points are the text's words, from the sample the library gives without a model
    let s = sample_words(&text, &p).unwrap();
    let chars: Vec<char> = text.chars().collect();
    for (w, &(start, end)) in s.points.iter().zip(&a.positions) {
        assert_eq!(w.word, start..end);
        let word: String = chars[start..end].iter().collect();
        assert!(word.chars().any(char::is_alphanumeric), "{word:?}");
        assert_eq!(word, text[w.word_bytes.clone()]);
    }
    // seeded: another seed, other words; the same seed, the same words
    assert_eq!(run(WORD_MODELS[0], &text, &p).1.positions, a.positions);
    let other = run(WORD_MODELS[0], &text, &word_params(WordPool::Last, 6)).1;
    assert_ne!(other.positions, a.positions);
}

/// Each point's state is the row of the word's last token (or the mean of its tokens' rows)
/// in a forward pass of its window alone, and its token ids are the tokens covering it.
#[test]
fn word_states_are_the_rows_of_the_words_tokens() {
    const TOL: f32 = 1e-5;
    let text = word_text();
    for name in WORD_MODELS {
        for pool in WordPool::ALL {
            let p = word_params(pool, 5);
            let (ex, out) = run(name, &text, &p);
            let s = sample_words(&text, &p).unwrap();
            let last: Vec<usize> = serde_json::from_str(&out.metadata["word_last_tokens"]).unwrap();
            let d = out.hidden_size;
            for (i, w) in s.points.iter().enumerate() {
                let window = &text[w.window_bytes.clone()];
                let ids = ex.encode(window).unwrap();
                assert!(ids.len() <= 40, "{name}: a window fits seq_len");
                // the word's tokens are a run ending at `last`, and decode to text holding it
                let n_tok = out.token_ids[i].len();
                let first = last[i] + 1 - n_tok;
                assert_eq!(out.token_ids[i], ids[first..=last[i]], "{name} point {i}");
                let fwd = ex.model().forward(&ids, false).unwrap();
                for (layer, h) in fwd.hidden_states.iter().enumerate() {
                    let got = &out.hidden_states[layer][i * d..(i + 1) * d];
                    for j in 0..d {
                        let want = match pool {
                            WordPool::Last => h[last[i] * d + j],
                            WordPool::Mean => {
                                (first..=last[i]).map(|t| h[t * d + j]).sum::<f32>() / n_tok as f32
                            }
                        };
                        assert!(
                            (got[j] - want).abs() <= TOL * (1.0 + want.abs()),
                            "{name} {pool:?} point {i} layer {layer}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn fewer_words_than_points_is_an_error_naming_both() {
    let ex = Extractor::load(&fixture("gpt2_tied")).unwrap();
    let text = "Only five words are here.";
    let params = ExtractParams {
        seq_len: 40,
        n_points: Some(10),
        pool: Pool::Words(WordPool::Last),
        ..Default::default()
    }
    .check()
    .unwrap();
    let Err(err) = ex.extract(text, &params, &mut |_| {}) else {
        panic!("10 words from a text of 5 must fail");
    };
    // one window of five words, its first skipped: four can be sampled
    assert!(
        matches!(
            err,
            Error::TooFewWords {
                requested: 10,
                available: 4,
                ..
            }
        ),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("n_points = 10") && msg.contains("offers 4") && msg.contains("5 words"),
        "{msg}"
    );
}

#[test]
fn word_points_need_n_points() {
    let err = ExtractParams {
        n_points: None,
        pool: Pool::Words(WordPool::Mean),
        ..Default::default()
    }
    .check()
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidParams {
                field: "n_points",
                ..
            }
        ),
        "{err}"
    );
}

/// Windows never exceed `seq_len - 1` bytes, and hold whole words: the same windows whatever
/// the density, so contexts do not depend on how many words are drawn from each.
#[test]
fn windows_are_whole_words_within_the_byte_budget() {
    let text = word_text();
    for (m, n) in [(1, 30), (3, 12), (5, 20)] {
        let p = ExtractParams {
            seq_len: 40,
            n_points: Some(n),
            points_per_sequence: Some(m),
            pool: Pool::Words(WordPool::Last),
            ..Default::default()
        }
        .check()
        .unwrap();
        let s = sample_words(&text, &p).unwrap();
        assert_eq!(s.points.len(), n);
        for w in &s.points {
            assert!(w.window_bytes.len() < 40, "{:?}", w.window_bytes);
            assert!(
                w.window_bytes.start < w.word_bytes.start,
                "first word skipped"
            );
            assert!(w.word_bytes.end <= w.window_bytes.end);
            let before = &text[..w.window_bytes.start];
            assert!(
                before.is_empty() || !before.ends_with(char::is_alphanumeric),
                "a window starts at a word boundary"
            );
        }
        let mut spans: Vec<_> = s.points.iter().map(|w| w.word.clone()).collect();
        spans.dedup();
        assert_eq!(spans.len(), n, "distinct words");
    }
}

/// The committed list of sampled words `make_word_reference.py` reads: `[window_start,
/// window_end, word_start, word_end]` in characters, for `word_params(_, 5)`.
fn committed_points() -> Vec<[usize; 4]> {
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("words").join("points.json")).unwrap())
            .unwrap();
    serde_json::from_value(spec["points"].clone()).unwrap()
}

#[test]
fn word_sample_matches_the_committed_list() {
    let s = sample_words(&word_text(), &word_params(WordPool::Last, 5)).unwrap();
    let got: Vec<[usize; 4]> = s
        .points
        .iter()
        .map(|w| [w.window.start, w.window.end, w.word.start, w.word.end])
        .collect();
    assert_eq!(got, committed_points());
}

/// `expected/words_<name>.safetensors`: each tensor `[n, d]` and the words' token ids.
/// Named f32 tensors, flattened.
type Tensors = Vec<(String, Vec<f32>)>;

fn read_word_expected(name: &str) -> (Tensors, Vec<Vec<u32>>) {
    let file = name.rsplit('/').next().unwrap();
    let bytes =
        std::fs::read(fixture("expected").join(format!("words_{file}.safetensors"))).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let tensors = st
        .tensors()
        .into_iter()
        .map(|(n, v)| {
            let data = v
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            (n, data)
        })
        .collect();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let ids = serde_json::from_str(&meta.metadata().as_ref().unwrap()["token_ids"]).unwrap();
    (tensors, ids)
}

/// Word states against transformers, the word's tokens found there through
/// `offset_mapping`: both pools, every hidden state, both tokenizers.
#[test]
#[allow(clippy::print_stderr)] // the measured errors, for the docs
fn word_states_match_transformers() {
    let text = word_text();
    for name in WORD_MODELS {
        let (want, want_ids) = read_word_expected(name);
        for pool in WordPool::ALL {
            let (_, out) = run(name, &text, &word_params(pool, 5));
            assert_eq!(out.token_ids, want_ids, "{name}: the words' tokens");
            let prefix = match pool {
                WordPool::Last => "last",
                WordPool::Mean => "mean",
            };
            let mut worst = 0f64;
            for (i, h) in out.hidden_states.iter().enumerate() {
                let (_, w) = want
                    .iter()
                    .find(|(n, _)| *n == format!("{prefix}.{i}"))
                    .unwrap_or_else(|| panic!("{name}: {prefix}.{i} missing"));
                let e = crate::max_rel_err(h, w);
                worst = worst.max(e);
                assert!(
                    e < crate::PARITY_REL_TOL,
                    "{name} {prefix}.{i}: max relative error {e:.2e}"
                );
            }
            let n_states = want.iter().filter(|(n, _)| n.starts_with(prefix)).count();
            assert_eq!(out.hidden_states.len(), n_states, "{name}");
            eprintln!("{name} words ({prefix}): worst hidden state {worst:.1e}");
        }
    }
}
