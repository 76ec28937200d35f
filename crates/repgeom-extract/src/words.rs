//! Word-aligned points (`Pool::Words`): the words of a text, the character windows the
//! models read them in, and the seeded choice of words, all from the text alone, so that two
//! models given the same text and settings hold the same points whatever their tokenizers.
//!
//! Design (also in `docs/extraction.md`):
//! - A *word* is a segment of the text between Unicode word boundaries (UAX #29) that holds at
//!   least one alphanumeric character.
//! - The words are cut, in order, into *windows*: a window runs from the start of its first
//!   word to the end of its last one and holds as many whole words as fit in `seq_len - 1`
//!   bytes of UTF-8. Byte-level BPE makes at most one token per byte and SentencePiece at most
//!   one per byte plus its leading `▁`, so a window always fits a model's `seq_len` tokens, and
//!   no model ever truncates a window (a tokenizer that makes more is refused, with
//!   [`crate::Error::WindowTooLong`]). Words longer than the budget on their own are left out
//!   (counted in the metadata).
//! - Sampling mirrors the token design's `points_per_sequence`: `M` distinct words from each of
//!   `ceil(n / M)` windows drawn by seed (the last drawn window holds the remainder; `M = 1`:
//!   uniform over all words), and with `skip_first` never the first word of a window (it has
//!   no context).
//! - A model reads the whole window; causal attention makes a word's state depend only on the
//!   characters up to its last token. A token that overlaps the word's span belongs to the
//!   word; a token that straddles the word's end (a SentencePiece `dog.`) is its last token.

use std::ops::Range;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use unicode_segmentation::UnicodeSegmentation;

use crate::extract::{DEFAULT_POINTS_PER_SEQUENCE, ValidExtractParams};
use crate::{Error, Result};

/// How a word's hidden state is read from the hidden states of its tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WordPool {
    /// The state at the word's last token (it has read the whole word).
    #[default]
    Last,
    /// The mean over the word's tokens.
    Mean,
}

impl WordPool {
    /// Every word pool, in the order of [`WordPool::NAMES`].
    pub const ALL: [WordPool; 2] = [WordPool::Last, WordPool::Mean];

    /// The names [`WordPool::from_name`] accepts, for messages.
    pub const NAMES: &'static str = "last, mean";

    /// The name written to the metadata (`word_pool`) and read by the CLI and Python.
    pub fn name(self) -> &'static str {
        match self {
            WordPool::Last => "last",
            WordPool::Mean => "mean",
        }
    }

    /// The word pool called `name` (`last`, `mean`).
    ///
    /// ```
    /// use repgeom_extract::WordPool;
    /// assert_eq!(WordPool::from_name("mean"), Some(WordPool::Mean));
    /// assert_eq!(WordPool::from_name("first"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// One sampled word: its span in the text and the window its models read it in, in
/// characters (Unicode scalar values, as Python indexes a `str`), and the same in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WordPoint {
    /// The word's characters.
    pub word: Range<usize>,
    /// The window's characters: the word is inside it; the model reads all of it.
    pub window: Range<usize>,
    /// The word's bytes in the text.
    pub word_bytes: Range<usize>,
    /// The window's bytes in the text.
    pub window_bytes: Range<usize>,
    /// The window's index among the text's windows.
    pub window_index: usize,
}

/// The words a word-point extraction takes from a text, and how they were found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WordSample {
    /// The sampled words, sorted by position in the text.
    pub points: Vec<WordPoint>,
    /// Words in the text (Unicode word boundaries, at least one alphanumeric character) that
    /// fit a window.
    pub words: usize,
    /// Words left out because one alone is longer than a window (`seq_len - 1` bytes).
    pub words_too_long: usize,
    /// Windows the words make.
    pub windows: usize,
    /// Words taken per drawn window (`points_per_sequence`, or the default lowered until the
    /// text's windows hold enough words).
    pub words_per_window: usize,
}

/// The words an extraction with `params` and `pool` = `Pool::Words` takes from `text` (the
/// `pool` itself is not read): the points without a model, e.g. for a reference. Depends on
/// the text, `seq_len`, `n_points`, `points_per_sequence`, `skip_first` and `seed` only,
/// never on a tokenizer.
///
/// ```
/// use repgeom_extract::{ExtractParams, Pool, WordPool, sample_words};
/// let p = ExtractParams {
///     seq_len: 32,
///     n_points: Some(3),
///     points_per_sequence: Some(1),
///     pool: Pool::Words(WordPool::Last),
///     ..Default::default()
/// }
/// .check()?;
/// let text = "Naïve words, e.g. don't, and 3.14 count; dashes — don't.";
/// let s = sample_words(text, &p)?;
/// assert_eq!(s.points.len(), 3);
/// let chars: Vec<char> = text.chars().collect();
/// for w in &s.points {
///     let word: String = chars[w.word.clone()].iter().collect();
///     assert_eq!(word, text[w.word_bytes.clone()]);
///     assert!(w.window.start < w.word.start, "the first word of a window is skipped");
/// }
/// # Ok::<(), repgeom_extract::Error>(())
/// ```
pub fn sample_words(text: &str, params: &ValidExtractParams) -> Result<WordSample> {
    let p = params.get();
    let budget = p.seq_len - 1;
    let (words, too_long) = segment(text, budget);
    let windows = cut_windows(&words, budget);
    let n = p.n_points.unwrap_or(0);
    let skip = usize::from(p.skip_first);
    let eligible: Vec<usize> = windows
        .iter()
        .map(|w| w.len().saturating_sub(skip))
        .collect();
    let available: usize = eligible.iter().sum();
    let detail = || {
        format!(
            "{} words between Unicode word boundaries{} in {} windows of at most {budget} bytes{}",
            words.len(),
            if too_long > 0 {
                format!(" ({too_long} longer than a window left out)")
            } else {
                String::new()
            },
            windows.len(),
            if p.skip_first {
                ", the first word of each skipped"
            } else {
                ""
            }
        )
    };
    if n > available {
        return Err(Error::TooFewWords {
            requested: n,
            available,
            detail: detail(),
        });
    }
    let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
    // (window, word index inside the window's eligible words)
    let mut picks: Vec<(usize, usize)> = Vec::with_capacity(n);
    let m = match p.points_per_sequence {
        Some(m) => m,
        // the default density, lowered until enough windows hold that many words (at 1, n <=
        // available always fits)
        None => (1..=DEFAULT_POINTS_PER_SEQUENCE)
            .rev()
            .find(|&m| m == 1 || eligible.iter().filter(|&&c| c >= m).count() >= n.div_ceil(m))
            .unwrap_or(1),
    };
    if m <= 1 {
        let mut flat = rand::seq::index::sample(&mut rng, available, n).into_vec();
        flat.sort_unstable();
        let mut starts = Vec::with_capacity(eligible.len());
        let mut acc = 0;
        for &c in &eligible {
            starts.push(acc);
            acc += c;
        }
        for i in flat {
            let w = starts.partition_point(|&s| s <= i) - 1;
            picks.push((w, i - starts[w]));
        }
    } else {
        let candidates: Vec<usize> = (0..windows.len()).filter(|&w| eligible[w] >= m).collect();
        let needed = n.div_ceil(m);
        if needed > candidates.len() {
            return Err(Error::TooSparse {
                n_points: n,
                points_per_sequence: m,
                needed,
                sequences: candidates.len(),
                detail: format!(
                    "only {} windows hold {m} words or more ({}; with word points a lower points_per_sequence lets more windows qualify)",
                    candidates.len(),
                    detail()
                ),
            });
        }
        let mut drawn = rand::seq::index::sample(&mut rng, candidates.len(), needed).into_vec();
        drawn.sort_unstable();
        for (j, &c) in drawn.iter().enumerate() {
            let w = candidates[c];
            let count = if j + 1 == needed { n - j * m } else { m };
            let mut pos = rand::seq::index::sample(&mut rng, eligible[w], count).into_vec();
            pos.sort_unstable();
            picks.extend(pos.into_iter().map(|k| (w, k)));
        }
    }
    let char_at = CharIndex::new(text);
    let points = picks
        .into_iter()
        .map(|(w, k)| {
            let win = &windows[w];
            let word = words[win.start + skip + k].clone();
            let window_bytes = words[win.start].start..words[win.end - 1].end;
            WordPoint {
                word: char_at.get(word.start)..char_at.get(word.end),
                window: char_at.get(window_bytes.start)..char_at.get(window_bytes.end),
                word_bytes: word,
                window_bytes,
                window_index: w,
            }
        })
        .collect();
    Ok(WordSample {
        points,
        words: words.len(),
        words_too_long: too_long,
        windows: windows.len(),
        words_per_window: m,
    })
}

/// The byte spans of `text`'s words (UAX #29 segments with an alphanumeric character) of at
/// most `budget` bytes, and how many longer ones were left out.
fn segment(text: &str, budget: usize) -> (Vec<Range<usize>>, usize) {
    let mut too_long = 0;
    let words = text
        .split_word_bound_indices()
        .filter(|(_, s)| s.chars().any(char::is_alphanumeric))
        .filter_map(|(i, s)| {
            let fits = s.len() <= budget;
            too_long += usize::from(!fits);
            fits.then_some(i..i + s.len())
        })
        .collect();
    (words, too_long)
}

/// Consecutive runs of words (ranges of word indices), each as long as fits in `budget` bytes
/// from its first word's start to its last word's end.
fn cut_windows(words: &[Range<usize>], budget: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let start = words[i].start;
        let mut j = i + 1;
        while j < words.len() && words[j].end - start <= budget {
            j += 1;
        }
        out.push(i..j);
        i = j;
    }
    out
}

/// Byte offset -> character offset of a text.
struct CharIndex {
    /// Byte offset of every character, and the text's length last.
    starts: Vec<usize>,
}

impl CharIndex {
    fn new(text: &str) -> Self {
        let mut starts: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        starts.push(text.len());
        Self { starts }
    }

    /// The character index of byte offset `b` (a character boundary).
    fn get(&self, b: usize) -> usize {
        self.starts.partition_point(|&s| s < b)
    }
}

/// The tokens of a word: the indices of the tokens whose (non-empty) byte span overlaps the
/// word's byte span `word`, all relative to the window's text. Special tokens (empty spans)
/// never belong to a word.
pub(crate) fn word_tokens(offsets: &[(usize, usize)], word: Range<usize>) -> Vec<usize> {
    offsets
        .iter()
        .enumerate()
        .filter(|&(_, &(a, b))| a < b && a < word.end && b > word.start)
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_alphanumeric_segments() {
        let text = "Don't stop: 3.14 apples, naïve café — ok?\n\tNew line";
        let (w, too_long) = segment(text, 100);
        let got: Vec<&str> = w.iter().map(|r| &text[r.clone()]).collect();
        assert_eq!(
            got,
            [
                "Don't", "stop", "3.14", "apples", "naïve", "café", "ok", "New", "line"
            ]
        );
        assert_eq!(too_long, 0);
        let (w, too_long) = segment(text, 4);
        assert_eq!(
            w.len(),
            5,
            "Don't, apples, naïve (6 bytes), café (5 bytes) out"
        );
        assert_eq!(too_long, 4);
    }

    #[test]
    fn windows_hold_whole_words_within_the_budget() {
        let text = "aa bb cc dd ee ff";
        let (w, _) = segment(text, 8);
        let win = cut_windows(&w, 8);
        assert_eq!(win, [0..3, 3..6]);
        for r in win {
            assert!(w[r.end - 1].end - w[r.start].start <= 8);
        }
    }

    #[test]
    fn char_index_counts_scalar_values() {
        let text = "é a—b";
        let c = CharIndex::new(text);
        assert_eq!(c.get(0), 0);
        assert_eq!(c.get(2), 1);
        assert_eq!(c.get(4), 3);
        assert_eq!(c.get(7), 4);
        assert_eq!(c.get(text.len()), 5);
    }

    #[test]
    fn word_tokens_take_overlapping_spans_and_no_special_token() {
        // "<s>", " fox" (with its leading space), "es", "." for the word "foxes" at 1..6
        let offsets = [(0, 0), (0, 4), (4, 6), (6, 7)];
        assert_eq!(word_tokens(&offsets, 1..6), [1, 2]);
        // a token straddling the word's end belongs to it
        assert_eq!(word_tokens(&[(0, 1), (1, 5)], 0..3), [0, 1]);
    }
}
