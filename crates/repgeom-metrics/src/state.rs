//! A streaming accumulator's state as plain named arrays, for a front end to write to a file
//! and read back: the metrics crate does no file I/O, so [`AccumulatorState`] is the boundary.
//! Every array is `f64`, so a state written and read back is bit-identical and a merge of
//! shards read from files equals one pass as exactly as a merge in memory.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// An accumulator as named `f64` arrays, its kind and its token count.
#[derive(Debug, Clone, PartialEq)]
pub struct AccumulatorState {
    /// `covariance` ([`crate::CovarianceAccumulator`]) or `cka`
    /// ([`crate::CkaAccumulator`]).
    pub kind: String,
    /// Tokens seen.
    pub n: u64,
    /// The sums by name: shape (outermost first) and values in C order.
    pub arrays: BTreeMap<String, (Vec<usize>, Vec<f64>)>,
}

impl AccumulatorState {
    /// An empty state of `kind` after `n` tokens.
    pub(crate) fn new(kind: &str, n: u64) -> Self {
        Self {
            kind: kind.into(),
            n,
            arrays: BTreeMap::new(),
        }
    }

    /// Adds array `name` of `shape`.
    pub(crate) fn put(&mut self, name: &str, shape: &[usize], data: Vec<f64>) {
        self.arrays.insert(name.into(), (shape.to_vec(), data));
    }

    /// Checks the kind, before anything is read.
    pub(crate) fn expect_kind(&self, kind: &str, what: &str) -> Result<()> {
        if self.kind != kind {
            return Err(self.bad(
                what,
                format!("holds a `{}` accumulator, not `{kind}`", self.kind),
            ));
        }
        Ok(())
    }

    /// Array `name`, of exactly `shape`, every value finite.
    pub(crate) fn take(&self, name: &str, shape: &[usize], what: &str) -> Result<&[f64]> {
        let Some((s, data)) = self.arrays.get(name) else {
            return Err(self.bad(what, format!("has no array `{name}`")));
        };
        if s != shape || data.len() != shape.iter().product::<usize>() {
            return Err(self.bad(
                what,
                format!("array `{name}` has shape {s:?}, expected {shape:?}"),
            ));
        }
        if let Some(i) = data.iter().position(|v| !v.is_finite()) {
            return Err(self.bad(
                what,
                format!("array `{name}` has a non-finite value at {i}"),
            ));
        }
        Ok(data)
    }

    /// Whether array `name` is present.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.arrays.contains_key(name)
    }

    /// The width of a one-dimensional array `name`.
    pub(crate) fn len_of(&self, name: &str, what: &str) -> Result<usize> {
        match self.arrays.get(name) {
            Some((s, _)) if s.len() == 1 => Ok(s[0]),
            Some((s, _)) => Err(self.bad(
                what,
                format!("array `{name}` has shape {s:?}, expected one dimension"),
            )),
            None => Err(self.bad(what, format!("has no array `{name}`"))),
        }
    }

    fn bad(&self, what: &str, reason: String) -> Error {
        Error::InvalidOption {
            name: "accumulator".into(),
            value: what.into(),
            reason,
        }
    }
}
