//! Probe configuration: the unchecked [`ProbeParams`] builder and its checked form.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Default L2 grid (strengths `λ` of the mean-loss objective, see `docs/probes.md`).
pub const DEFAULT_GRID: [f64; 5] = [1.0, 1e-1, 1e-2, 1e-3, 1e-4];

/// Unchecked probe configuration. Build with struct update syntax from `Default`, then
/// call [`ProbeParams::check`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProbeParams {
    /// Share of each class put in the training set when no split is given.
    pub train_frac: f64,
    /// Stratified cross-validation folds on the training set used to choose the L2 strength.
    pub folds: usize,
    /// Candidate L2 strengths `λ` (objective: mean cross-entropy + `λ/2 ‖W‖²`).
    pub grid: Vec<f64>,
    /// Seed of the split and fold assignment (ChaCha8).
    pub seed: u64,
    /// L-BFGS iteration cap per fit.
    pub max_iter: usize,
    /// L-BFGS stops when the largest gradient component falls below this.
    pub tol: f64,
    /// Run the per-fit kernels on the rayon pool (results are identical either way).
    pub parallel: bool,
    /// Also run the random-label control task on every layer (same protocol, labels permuted
    /// with stream 2 of `seed`), for selectivity = accuracy − control accuracy. Doubles the
    /// fitting time.
    pub control: bool,
}

impl Default for ProbeParams {
    fn default() -> Self {
        Self {
            train_frac: 0.8,
            folds: 3,
            grid: DEFAULT_GRID.to_vec(),
            seed: 0,
            max_iter: 100,
            tol: 1e-4,
            parallel: true,
            control: true,
        }
    }
}

/// A [`ProbeParams`] that passed [`ProbeParams::check`]; the grid is sorted strongest first
/// (the order used for warm starts) and deduplicated.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidProbeParams(pub(crate) ProbeParams);

impl ValidProbeParams {
    /// The checked parameters.
    pub fn params(&self) -> &ProbeParams {
        &self.0
    }
}

fn invalid(name: &'static str, value: impl std::fmt::Debug, reason: &'static str) -> Error {
    Error::InvalidParam {
        name,
        value: format!("{value:?}"),
        reason,
    }
}

impl ProbeParams {
    /// Validate every field.
    pub fn check(mut self) -> Result<ValidProbeParams> {
        if !(self.train_frac > 0.0 && self.train_frac < 1.0) {
            return Err(invalid(
                "train_frac",
                self.train_frac,
                "must lie strictly between 0 and 1",
            ));
        }
        if self.folds < 2 {
            return Err(invalid("folds", self.folds, "must be at least 2"));
        }
        if self.grid.is_empty() {
            return Err(invalid(
                "grid",
                &self.grid,
                "must hold at least one strength",
            ));
        }
        if let Some(bad) = self.grid.iter().find(|l| !(l.is_finite() && **l > 0.0)) {
            return Err(invalid(
                "grid",
                bad,
                "strengths must be finite and positive",
            ));
        }
        if self.max_iter == 0 {
            return Err(invalid("max_iter", self.max_iter, "must be at least 1"));
        }
        if !(self.tol.is_finite() && self.tol > 0.0) {
            return Err(invalid("tol", self.tol, "must be finite and positive"));
        }
        self.grid.sort_by(|a, b| b.total_cmp(a));
        self.grid.dedup();
        Ok(ValidProbeParams(self))
    }
}
