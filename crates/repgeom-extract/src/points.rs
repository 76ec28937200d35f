//! The point design by name, and the one rule for "two points files hold the same points".
//!
//! Every front end (the command line's `--pool`/`--points`/`--word-pool`, Python's `pool=`,
//! `points=`, `word_pool=`, a study's `[extract] points` and `word_pool`) turns its names into a
//! [`Pool`] through [`Pool::from_names`], and every comparison of two models (`repgeom
//! compare`, a study's cross pairs) judges its two files through [`same_points`], so a design
//! accepted or refused in one is accepted or refused, with the same words, in all.

use std::collections::BTreeMap;

use crate::extract::Pool;
use crate::words::WordPool;
use crate::{Error, Result};

/// The names `points` takes.
pub const POINTS_NAMES: &str = "tokens, words";

impl Pool {
    /// The design called `pool` (`tokens` or `mean`: one point per sampled position or per
    /// line), `points` (`tokens` or `words`) and `word_pool` (`last` or `mean`, words only;
    /// `None`: [`WordPool::default`]).
    ///
    /// ```
    /// use repgeom_extract::{Pool, WordPool};
    /// assert_eq!(Pool::from_names("tokens", "words", Some("mean")).unwrap(),
    ///            Pool::Words(WordPool::Mean));
    /// assert_eq!(Pool::from_names("mean", "tokens", None).unwrap(), Pool::Mean);
    /// let e = Pool::from_names("tokens", "tokens", Some("last")).unwrap_err();
    /// assert!(e.to_string().contains("word_pool applies to points = words only"));
    /// ```
    pub fn from_names(pool: &str, points: &str, word_pool: Option<&str>) -> Result<Pool> {
        let word_pool = match word_pool {
            None => None,
            Some(w) => Some(WordPool::from_name(w).ok_or_else(|| Error::InvalidParams {
                field: "word_pool",
                reason: format!("{w:?}: expected one of {}", WordPool::NAMES),
            })?),
        };
        match (pool, points) {
            (_, "tokens") if word_pool.is_some() => Err(Error::InvalidParams {
                field: "word_pool",
                reason: "word_pool applies to points = words only".into(),
            }),
            ("tokens", "tokens") => Ok(Pool::Tokens),
            ("mean", "tokens") => Ok(Pool::Mean),
            ("tokens", "words") => Ok(Pool::Words(word_pool.unwrap_or_default())),
            ("mean", "words") => Err(Error::InvalidParams {
                field: "points",
                reason: "pool = mean makes one point per line and points = words one per word: \
                         choose one"
                    .into(),
            }),
            (p, "tokens" | "words") => Err(Error::InvalidParams {
                field: "pool",
                reason: format!("{p:?}: expected one of tokens, mean"),
            }),
            (_, other) => Err(Error::InvalidParams {
                field: "points",
                reason: format!("{other:?}: expected one of {POINTS_NAMES}"),
            }),
        }
    }
}

/// What a points file records about its points, read from the metadata `repgeom extract`
/// writes: the design ([`Pool::design_of`]), the number of points, each point's `positions`
/// entry, the token at each point (token points) and each word's window (word points).
/// Entries a file lacks (written by another tool, or a `.npy` file with no metadata) are not
/// judged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PointsRecord {
    /// The design in words (`None`: the file has no metadata).
    pub design: Option<String>,
    /// Points in the file.
    pub n: usize,
    /// Each point's `[sequence, position]` (words: the word's character span).
    pub positions: Option<Vec<[usize; 2]>>,
    /// Token points: the token id at each point.
    pub tokens: Option<Vec<u32>>,
    /// Word points: the first character of each word's window
    /// ([`repgeom_io::WORD_CONTEXTS_KEY`]).
    pub windows: Option<String>,
}

impl PointsRecord {
    /// A file of `n` points without metadata (nothing but the count is judged).
    pub fn unrecorded(n: usize) -> Self {
        Self {
            design: None,
            n,
            positions: None,
            tokens: None,
            windows: None,
        }
    }

    /// The record of points file `path` of `n` points: its metadata for a `.safetensors` file
    /// ([`PointsRecord::from_metadata`]), nothing but the count for any other (`.npy`, `.npz`).
    pub fn of_file(path: &std::path::Path, n: usize) -> Result<Self> {
        let is_st = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("safetensors"));
        if !is_st {
            return Ok(Self::unrecorded(n));
        }
        Self::from_metadata(&repgeom_io::read_safetensors_metadata(path)?, n)
    }

    /// The record of a file of `n` points with this metadata; a `positions` or `token_ids`
    /// entry that is not what `repgeom extract` writes is an error naming it.
    pub fn from_metadata(meta: &BTreeMap<String, String>, n: usize) -> Result<Self> {
        let design = Pool::design_of(meta);
        let positions = list::<[usize; 2]>(meta, "positions", "pairs", n)?;
        let tokens = if design == Pool::Tokens.design() {
            list::<u32>(meta, "token_ids", "token ids", n)?
        } else {
            None
        };
        Ok(Self {
            design: Some(design),
            n,
            positions,
            tokens,
            windows: meta.get(repgeom_io::WORD_CONTEXTS_KEY).cloned(),
        })
    }
}

/// Metadata entry `key`, a JSON list of `n` `what`, when the file has it; an entry that does
/// not parse or has another length is an error naming it.
fn list<T: serde::de::DeserializeOwned>(
    meta: &BTreeMap<String, String>,
    key: &'static str,
    what: &str,
    n: usize,
) -> Result<Option<Vec<T>>> {
    let bad = |reason: String| Error::InvalidParams {
        field: key,
        reason: format!("metadata entry `{key}`: {reason}"),
    };
    let Some(text) = meta.get(key) else {
        return Ok(None);
    };
    let v: Vec<T> =
        serde_json::from_str(text).map_err(|e| bad(format!("not a JSON list of {what} ({e})")))?;
    if v.len() != n {
        return Err(bad(format!("{} entries for {n} points", v.len())));
    }
    Ok(Some(v))
}

/// Why two points files do not hold the same points (see [`same_points`]); the front end
/// names the two files or models before it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PointsDiffer {
    /// Different point designs.
    #[error(
        "points of design {a} against points of design {b}: a comparison needs both sides on \
         the same points (the same points and word_pool settings)"
    )]
    Design {
        /// The first file's design.
        a: String,
        /// The second's.
        b: String,
    },
    /// Different numbers of points.
    #[error(
        "{a} points against {b}: a comparison needs the same inputs on both sides (the same \
         corpus, n_points and seed)"
    )]
    Count {
        /// Points of the first file.
        a: usize,
        /// Of the second.
        b: usize,
    },
    /// A point at a different place of the text.
    #[error(
        "point {point} is {a:?} in the first and {b:?} in the second (metadata `positions`): \
         extract both from the same corpus with the same sampling settings; token points are \
         the same inputs only under one tokenizer (with different tokenizers, use points = \
         words)"
    )]
    Positions {
        /// The first point that differs.
        point: usize,
        /// Its entry in the first file.
        a: [usize; 2],
        /// In the second.
        b: [usize; 2],
    },
    /// Token points at the same places that are different tokens: two tokenizers.
    #[error(
        "point {point} is token id {a} in the first and {b} in the second at the same position \
         (metadata `token_ids`): the two tokenize the text differently, so token positions are \
         not the same inputs (with different tokenizers, use points = words)"
    )]
    Tokens {
        /// The first point that differs.
        point: usize,
        /// Its token in the first file.
        a: u32,
        /// In the second.
        b: u32,
    },
    /// Word points read in different windows.
    #[error(
        "the words were read in different windows (metadata `word_contexts`): extract both \
         with the same seq_len, seed and sampling settings"
    )]
    Windows,
}

/// The two files hold the same points in the same order: one design, the same count, the
/// same `positions`, and, for token points, the same token at every position (two tokenizers
/// put different tokens at the same positions, which are then different inputs); for word
/// points, the same windows. What only one file records is not judged.
///
/// ```
/// use std::collections::BTreeMap;
/// use repgeom_extract::{PointsDiffer, PointsRecord, same_points};
/// let meta = |ids: &str| BTreeMap::from([
///     ("pool".to_string(), "tokens".to_string()),
///     ("positions".to_string(), "[[0, 1], [0, 2]]".to_string()),
///     ("token_ids".to_string(), ids.to_string()),
/// ]);
/// let a = PointsRecord::from_metadata(&meta("[5, 9]"), 2).unwrap();
/// let b = PointsRecord::from_metadata(&meta("[5, 7]"), 2).unwrap();
/// assert_eq!(same_points(&a, &a), Ok(()));
/// assert_eq!(same_points(&a, &b), Err(PointsDiffer::Tokens { point: 1, a: 9, b: 7 }));
/// ```
pub fn same_points(a: &PointsRecord, b: &PointsRecord) -> std::result::Result<(), PointsDiffer> {
    if let (Some(da), Some(db)) = (&a.design, &b.design)
        && da != db
    {
        return Err(PointsDiffer::Design {
            a: da.clone(),
            b: db.clone(),
        });
    }
    if a.n != b.n {
        return Err(PointsDiffer::Count { a: a.n, b: b.n });
    }
    if let (Some(pa), Some(pb)) = (&a.positions, &b.positions)
        && let Some(i) = (0..a.n).find(|&i| pa[i] != pb[i])
    {
        return Err(PointsDiffer::Positions {
            point: i,
            a: pa[i],
            b: pb[i],
        });
    }
    if let (Some(ta), Some(tb)) = (&a.tokens, &b.tokens)
        && let Some(i) = (0..a.n).find(|&i| ta[i] != tb[i])
    {
        return Err(PointsDiffer::Tokens {
            point: i,
            a: ta[i],
            b: tb[i],
        });
    }
    if let (Some(wa), Some(wb)) = (&a.windows, &b.windows)
        && wa != wb
    {
        return Err(PointsDiffer::Windows);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `from_names` over every combination the front ends can send.
    #[test]
    fn designs_by_name() {
        let check =
            |pool: &str, points: &str, wp: Option<&str>, want: std::result::Result<Pool, &str>| {
                let got = Pool::from_names(pool, points, wp).map_err(|e| e.to_string());
                match (got, want) {
                    (Ok(g), Ok(w)) => assert_eq!(g, w, "{pool} {points} {wp:?}"),
                    (Err(g), Err(w)) => assert!(g.contains(w), "{pool} {points} {wp:?}: {g}"),
                    (g, w) => panic!("{pool} {points} {wp:?}: {g:?}, expected {w:?}"),
                }
            };
        check("tokens", "tokens", None, Ok(Pool::Tokens));
        check("mean", "tokens", None, Ok(Pool::Mean));
        check("tokens", "words", None, Ok(Pool::Words(WordPool::Last)));
        check(
            "tokens",
            "words",
            Some("last"),
            Ok(Pool::Words(WordPool::Last)),
        );
        check(
            "tokens",
            "words",
            Some("mean"),
            Ok(Pool::Words(WordPool::Mean)),
        );
        check("mean", "words", None, Err("choose one"));
        check(
            "tokens",
            "tokens",
            Some("mean"),
            Err("applies to points = words only"),
        );
        check(
            "mean",
            "tokens",
            Some("last"),
            Err("applies to points = words only"),
        );
        check("max", "tokens", None, Err("expected one of tokens, mean"));
        check(
            "tokens",
            "lines",
            None,
            Err("expected one of tokens, words"),
        );
        check(
            "tokens",
            "words",
            Some("first"),
            Err("expected one of last, mean"),
        );
    }

    fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Each way two files can differ, judged in order; what only one records is not judged.
    #[test]
    fn the_same_points_rule() {
        let tokens = |pos: &str, ids: &str| {
            meta(&[("pool", "tokens"), ("positions", pos), ("token_ids", ids)])
        };
        let words = |ctx: &str| {
            meta(&[
                ("pool", "words"),
                ("word_pool", "last"),
                ("positions", "[[0, 3], [4, 9]]"),
                ("token_ids", "[[1], [2, 3]]"),
                ("word_contexts", ctx),
            ])
        };
        let rec = |m: &BTreeMap<String, String>, n| PointsRecord::from_metadata(m, n).unwrap();
        let a = rec(&tokens("[[0, 1], [0, 2]]", "[5, 9]"), 2);
        let check =
            |x: &PointsRecord, y: &PointsRecord, want: std::result::Result<(), PointsDiffer>| {
                assert_eq!(same_points(x, y), want);
            };
        check(&a, &a, Ok(()));
        check(&a, &PointsRecord::unrecorded(2), Ok(()));
        check(
            &a,
            &PointsRecord::unrecorded(3),
            Err(PointsDiffer::Count { a: 2, b: 3 }),
        );
        check(
            &a,
            &rec(&tokens("[[0, 1], [1, 2]]", "[5, 9]"), 2),
            Err(PointsDiffer::Positions {
                point: 1,
                a: [0, 2],
                b: [1, 2],
            }),
        );
        check(
            &a,
            &rec(&tokens("[[0, 1], [0, 2]]", "[6, 9]"), 2),
            Err(PointsDiffer::Tokens {
                point: 0,
                a: 5,
                b: 6,
            }),
        );
        let w = rec(&words("[0, 0]"), 2);
        check(
            &a,
            &w,
            Err(PointsDiffer::Design {
                a: "tokens".into(),
                b: "words (last token)".into(),
            }),
        );
        // words: other tokens are expected (other tokenizers), other windows are not
        let mut other_tokens = words("[0, 0]");
        other_tokens.insert("token_ids".into(), "[[7, 8], [9]]".into());
        check(&w, &rec(&other_tokens, 2), Ok(()));
        check(&w, &rec(&words("[0, 4]"), 2), Err(PointsDiffer::Windows));
        // malformed entries are named
        let e = PointsRecord::from_metadata(&tokens("[[0, 1]]", "[5, 9]"), 2).unwrap_err();
        assert!(
            e.to_string()
                .contains("`positions`: 1 entries for 2 points"),
            "{e}"
        );
        let e = PointsRecord::from_metadata(&tokens("[[0, 1], [0, 2]]", "five"), 2).unwrap_err();
        assert!(e.to_string().contains("`token_ids`"), "{e}");
    }
}
