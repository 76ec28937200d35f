//! Labels, train/test splits and stratified cross-validation folds.

use rand::RngCore;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Class labels of the examples (`0..class_names.len()`), with the names used in reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Labels {
    values: Vec<usize>,
    class_names: Vec<String>,
}

impl Labels {
    /// Check that every label names a class and that at least two classes occur.
    pub fn new(values: Vec<usize>, class_names: Vec<String>) -> Result<Self> {
        let n_classes = class_names.len();
        if let Some((index, &label)) = values.iter().enumerate().find(|(_, l)| **l >= n_classes) {
            return Err(Error::LabelOutOfRange {
                index,
                label,
                n_classes,
            });
        }
        let labels = Self {
            values,
            class_names,
        };
        labels.require_two_classes("all", &(0..labels.len()).collect::<Vec<_>>())?;
        Ok(labels)
    }

    /// Labels `0..=max` named by their number, for label files without class names.
    pub fn unnamed(values: Vec<usize>) -> Result<Self> {
        let n = values.iter().max().map_or(0, |m| m + 1);
        Self::new(values, (0..n).map(|c| c.to_string()).collect())
    }

    /// The label of each example.
    pub fn values(&self) -> &[usize] {
        &self.values
    }

    /// Class names, indexed by label.
    pub fn class_names(&self) -> &[String] {
        &self.class_names
    }

    /// Number of examples.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are no examples.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Number of classes (names), present or not.
    pub fn n_classes(&self) -> usize {
        self.class_names.len()
    }

    pub(crate) fn require_two_classes(&self, set: &'static str, idx: &[usize]) -> Result<()> {
        let first = idx.first().map(|&i| self.values[i]);
        match first {
            None => Err(Error::EmptySet {
                set,
                n_examples: self.len(),
            }),
            Some(c) if idx.iter().all(|&i| self.values[i] == c) => Err(Error::SingleClass {
                set,
                class: self.class_names[c].clone(),
            }),
            Some(_) => Ok(()),
        }
    }
}

/// Role of one example in a given split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Used to standardise, cross-validate and fit.
    Train,
    /// Held out for the reported accuracy.
    Test,
}

/// How examples are divided into training and test sets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Split {
    /// A per-class (stratified) random split with `train_frac` and `seed` from the params.
    #[default]
    Stratified,
    /// The given role of each example, in example order.
    Given(Vec<Role>),
}

impl Split {
    /// Parse a split file: one entry per line (`train`/`test`, or `1`/`0` for train/test),
    /// case-insensitive; blank lines and lines starting with `#` are skipped.
    pub fn parse(text: &str) -> Result<Self> {
        let mut roles = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let role = match t.to_ascii_lowercase().as_str() {
                "train" | "1" => Role::Train,
                "test" | "0" => Role::Test,
                _ => {
                    return Err(Error::SplitParse {
                        line: i + 1,
                        found: t.to_owned(),
                    });
                }
            };
            roles.push(role);
        }
        Ok(Self::Given(roles))
    }
}

/// A ChaCha8 stream for one purpose: the split uses stream 0, the folds stream 1, so a
/// given split leaves the folds unchanged.
pub(crate) fn rng(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(stream);
    r
}

/// Fisher–Yates with `next_u64 % (i + 1)`: portable, independent of `rand`'s
/// value-stability policy (the modulo bias is below 2^-40 for any realistic n).
pub(crate) fn shuffle(v: &mut [usize], rng: &mut ChaCha8Rng) {
    for i in (1..v.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// Indices of each class, in example order.
pub(crate) fn by_class(labels: &Labels, idx: &[usize]) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); labels.n_classes()];
    for &i in idx {
        out[labels.values[i]].push(i);
    }
    out
}

/// Train and test indices (each sorted ascending).
pub(crate) fn train_test(
    labels: &Labels,
    split: &Split,
    train_frac: f64,
    seed: u64,
) -> Result<(Vec<usize>, Vec<usize>)> {
    let n = labels.len();
    let (mut train, mut test) = (Vec::new(), Vec::new());
    match split {
        Split::Given(roles) => {
            if roles.len() != n {
                return Err(Error::SplitLength {
                    expected: n,
                    found: roles.len(),
                });
            }
            for (i, r) in roles.iter().enumerate() {
                match r {
                    Role::Train => train.push(i),
                    Role::Test => test.push(i),
                }
            }
        }
        Split::Stratified => {
            let mut r = rng(seed, 0);
            let all: Vec<usize> = (0..n).collect();
            for mut members in by_class(labels, &all) {
                let c = members.len();
                if c == 0 {
                    continue;
                }
                shuffle(&mut members, &mut r);
                let mut n_train = (c as f64 * train_frac).round() as usize;
                if c >= 2 {
                    n_train = n_train.clamp(1, c - 1);
                } else {
                    n_train = 1;
                }
                train.extend_from_slice(&members[..n_train]);
                test.extend_from_slice(&members[n_train..]);
            }
            train.sort_unstable();
            test.sort_unstable();
        }
    }
    if test.is_empty() {
        return Err(Error::EmptySet {
            set: "test",
            n_examples: n,
        });
    }
    labels.require_two_classes("train", &train)?;
    Ok((train, test))
}

/// Stratified fold number (`0..folds`) of each training example (by position in `train`).
/// Each class is shuffled and dealt round-robin, continuing the deal across classes so fold
/// sizes differ by at most one.
pub(crate) fn stratified_folds(
    labels: &Labels,
    train: &[usize],
    folds: usize,
    seed: u64,
) -> Result<Vec<usize>> {
    if train.len() < folds {
        return Err(Error::TooFewForFolds {
            n_train: train.len(),
            folds,
        });
    }
    let mut pos = vec![0usize; labels.len()];
    for (p, &i) in train.iter().enumerate() {
        pos[i] = p;
    }
    let mut r = rng(seed, 1);
    let mut fold_of = vec![0usize; train.len()];
    let mut next = 0usize;
    for mut members in by_class(labels, train) {
        shuffle(&mut members, &mut r);
        for i in members {
            fold_of[pos[i]] = next % folds;
            next += 1;
        }
    }
    Ok(fold_of)
}
