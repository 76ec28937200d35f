//! Probe configuration: the unchecked [`ProbeParams`] builder and its checked form.

use linfa::ParamGuard;
use ref_cast::{RefCastCustom, ref_cast_custom};
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
    /// L-BFGS iteration cap per fit (either solver).
    pub max_iter: usize,
    /// L-BFGS stops when the largest gradient component falls below this (with
    /// [`Solver::Linfa`]: the stop and convergence test, see [`Solver`]).
    pub tol: f64,
    /// Run the per-fit kernels on the rayon pool (results are identical either way).
    pub parallel: bool,
    /// Also run the random-label control task on every layer (same protocol, labels permuted
    /// with stream 2 of `seed`), for selectivity = accuracy − control accuracy. Doubles the
    /// fitting time.
    pub control: bool,
    /// Which solver runs every fit (CV and final): the in-house L-BFGS (the default) or
    /// linfa-logistic (slower, same objective).
    pub solver: Solver,
}

/// The solver of every fit of the protocol. Both minimise the same objective
/// (`docs/probes.md`) with the same L2 strength and iteration cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Solver {
    /// The in-house L-BFGS over a fused f32 loss/gradient kernel (the default): fast, and
    /// bit-identical at any thread count.
    #[default]
    Lbfgs,
    /// linfa-logistic's multinomial logistic regression (argmin L-BFGS, More–Thuente line
    /// search, f64) on a standardised f64 copy of each fit's rows, with `alpha = n λ`,
    /// `max_iterations = max_iter` and `gradient_tolerance = n · tol` (its loss is a sum).
    /// Much slower; the same test accuracy on the crate's fixtures. linfa-logistic does not
    /// report its iteration count (reported as 0) or why it stopped: a fit counts as
    /// converged when the mean-loss gradient at its solution meets `tol` (the in-house
    /// criterion), else it stops with [`StopReason::LinfaStopped`](crate::StopReason).
    Linfa,
}

impl Solver {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Solver::Lbfgs => "lbfgs",
            Solver::Linfa => "linfa",
        }
    }
}

impl std::fmt::Display for Solver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Solver {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "lbfgs" => Ok(Solver::Lbfgs),
            "linfa" => Ok(Solver::Linfa),
            other => Err(format!("unknown solver {other:?}: use lbfgs or linfa")),
        }
    }
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
            solver: Solver::Lbfgs,
        }
    }
}

/// A [`ProbeParams`] that passed [`ProbeParams::check`] (or linfa's
/// [`ParamGuard::check_ref`], which runs the same checks). [`ProbeParams::check`] also sorts
/// the grid strongest first (the order of the warm starts) and deduplicates it; a borrowed
/// `check_ref` view cannot reorder, so the protocol sorts its own copy when it plans, and
/// both routes fit the same models.
#[derive(Debug, Clone, PartialEq, RefCastCustom)]
#[repr(transparent)]
pub struct ValidProbeParams(pub(crate) ProbeParams);

impl ValidProbeParams {
    /// The checked parameters.
    pub fn params(&self) -> &ProbeParams {
        &self.0
    }

    /// View checked parameters as valid without copying (private: only after [`validate`]).
    #[ref_cast_custom]
    fn from_checked(params: &ProbeParams) -> &Self;

    /// A copy with the grid in protocol order: strongest first, deduplicated.
    pub(crate) fn normalised(&self) -> Self {
        let mut p = self.0.clone();
        normalise_grid(&mut p.grid);
        Self(p)
    }
}

fn normalise_grid(grid: &mut Vec<f64>) {
    grid.sort_by(|a, b| b.total_cmp(a));
    grid.dedup();
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
        validate(&self)?;
        normalise_grid(&mut self.grid);
        Ok(ValidProbeParams(self))
    }
}

/// linfa's parameter check, so the probe composes with linfa like its own models: through
/// it, `ProbeParams` implements [`linfa::traits::Fit`] (checking first) wherever
/// [`ValidProbeParams`] does. `check` is [`ProbeParams::check`]; `check_ref` runs the same
/// checks and borrows the parameters as they are.
impl ParamGuard for ProbeParams {
    type Checked = ValidProbeParams;
    type Error = Error;

    fn check_ref(&self) -> Result<&ValidProbeParams> {
        validate(self)?;
        Ok(ValidProbeParams::from_checked(self))
    }

    fn check(self) -> Result<ValidProbeParams> {
        ProbeParams::check(self)
    }
}

/// Every range check of [`ProbeParams::check`].
fn validate(p: &ProbeParams) -> Result<()> {
    if !(p.train_frac > 0.0 && p.train_frac < 1.0) {
        return Err(invalid(
            "train_frac",
            p.train_frac,
            "must lie strictly between 0 and 1",
        ));
    }
    if p.folds < 2 {
        return Err(invalid("folds", p.folds, "must be at least 2"));
    }
    if p.grid.is_empty() {
        return Err(invalid("grid", &p.grid, "must hold at least one strength"));
    }
    if let Some(bad) = p.grid.iter().find(|l| !(l.is_finite() && **l > 0.0)) {
        return Err(invalid(
            "grid",
            bad,
            "strengths must be finite and positive",
        ));
    }
    if p.max_iter == 0 {
        return Err(invalid("max_iter", p.max_iter, "must be at least 1"));
    }
    if !(p.tol.is_finite() && p.tol > 0.0) {
        return Err(invalid("tol", p.tol, "must be finite and positive"));
    }
    Ok(())
}
