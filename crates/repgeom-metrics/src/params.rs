//! Subspace PGA as a library call: [`PgaParams`] → [`PgaParams::check`] → [`ValidPgaParams`] →
//! [`ValidPgaParams::run`] on an in-memory matrix (faer or ndarray views, `f32` or `f64`: see
//! [`Acts`] and [`Readout`]), with the readout given as `W_U` or as a
//! basis and the null drawn from `(n_null, seed)` unless supplied. Progress callback, label,
//! supplied null bases and several CCR levels are optional extras ([`PgaExtras`]).
//!
//! A call here is one layer through [`Pga::run_model`], the model run behind `repgeom pga` and
//! the Python package (`repgeom metrics` and the study's PGA units run the same engine per layer
//! through the `pga` metric); it adds no computation of its own, so a call here and
//! `repgeom pga` on the same inputs and seeds give identical numbers.

use repgeom_linalg::{Mat, MatRef, Par};
use repgeom_null::{NullBases, NullParams};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::input::NullSource;
pub use crate::input::{Acts, Readout};
use crate::pga::PgaResult;
use crate::pga_metric::{Hooks, ModelInput, ModelLayer, Pga};

/// Unchecked parameters of a Subspace PGA call: the readout's `k` and the null's `n_null`
/// and `seed`, then the one set of PGA options ([`Pga`], written inline: `ccr`, `distance`,
/// `max_pairs`, `max_memory`, `null`, `spectrum_tol`, `bootstrap`). `Default` is the command
/// line's defaults: `k = 100` ([`crate::DEFAULT_K`]), CCR-1, 100 null draws from seed 0, exact
/// (all pairs) and no memory budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PgaParams {
    /// Readout subspace dimension `k` (top-`k` right singular vectors of `W_U`). Ignored when
    /// the readout is given as a basis, whose column count is `k`.
    pub k: usize,
    /// Number of random subspaces in the null (at least 2).
    pub n_null: usize,
    /// Seed of the null draws and of the pair sample (the options' `pair_seed` stays 0: the
    /// pair sample is seeded from here, as every front end does).
    pub seed: u64,
    /// The PGA options: one result per CCR level in `pga.ccr`.
    #[serde(flatten)]
    pub pga: Pga,
}

impl Default for PgaParams {
    fn default() -> Self {
        let null = NullParams::default();
        Self {
            k: crate::DEFAULT_K,
            n_null: null.n_null,
            seed: null.seed,
            pga: Pga::default(),
        }
    }
}

/// [`PgaParams`] that passed [`PgaParams::check`], plus the parallelism to run with.
#[derive(Debug, Clone)]
pub struct ValidPgaParams {
    params: PgaParams,
    par: Par,
}

/// Optional extras of [`ValidPgaParams::run_with`]; `Default` is none of them.
#[derive(Default, Clone, Copy)]
pub struct PgaExtras<'a> {
    /// Null bases to use instead of drawing `n_null` from `seed` (`d × k` each).
    pub null: Option<&'a NullBases>,
    /// Name of the layer in error messages (default `"activations [N, d]"`).
    pub label: Option<&'a str>,
    /// Called once per finished null draw (from worker threads).
    pub on_draw: Option<&'a (dyn Fn() + Sync)>,
}

impl std::fmt::Debug for PgaExtras<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgaExtras")
            .field("null", &self.null.map(NullBases::len))
            .field("label", &self.label)
            .field("on_draw", &self.on_draw.is_some())
            .finish()
    }
}

impl PgaParams {
    /// Validates the parameters (the engine re-checks what depends on the data: `k < d`,
    /// `ccr < min(N, d)`, finite values).
    ///
    /// ```
    /// use repgeom_metrics::params::PgaParams;
    /// assert!(PgaParams { n_null: 1, ..PgaParams::default() }.check().is_err());
    /// assert!(PgaParams::default().check().is_ok());
    /// ```
    pub fn check(self) -> Result<ValidPgaParams> {
        if self.k == 0 {
            return Err(Error::InvalidOption {
                name: "k".into(),
                value: "0".into(),
                reason: "the readout subspace needs at least one dimension".into(),
            });
        }
        NullParams {
            n_null: self.n_null,
            seed: self.seed,
        }
        .check()?;
        crate::Metric::check(&self.pga)?;
        if self.pga.engine.pair_seed != 0 {
            return Err(Error::InvalidOption {
                name: "pair_seed".into(),
                value: self.pga.engine.pair_seed.to_string(),
                reason: "the one-call API seeds the pair sample from `seed`; leave pair_seed at 0"
                    .into(),
            });
        }
        Ok(ValidPgaParams {
            params: self,
            par: Par::rayon(0),
        })
    }
}

impl ValidPgaParams {
    /// The checked parameters.
    pub fn params(&self) -> &PgaParams {
        &self.params
    }

    /// Runs GEMMs and decompositions with `par` (default: the current rayon pool). Results do
    /// not depend on it.
    pub fn with_par(mut self, par: Par) -> Self {
        self.par = par;
        self
    }

    /// Subspace PGA of one layer (`N × d`) at the first CCR level of `pga.ccr` against
    /// `n_null` random subspaces drawn from `seed`.
    ///
    /// ```
    /// use repgeom_linalg::Mat;
    /// use repgeom_metrics::params::{PgaParams, Readout};
    /// use repgeom_metrics::Pga;
    ///
    /// // 40 points in 8 dimensions whose distances live in the first two coordinates.
    /// let acts = Mat::<f32>::from_fn(40, 8, |i, j| match j {
    ///     0 => (i as f32 * 0.37).sin(),
    ///     1 => (i as f32 * 0.11).cos(),
    ///     _ => 0.01 * ((i * 7 + j * 3) % 5) as f32,
    /// });
    /// // The readout basis: the first two coordinate axes.
    /// let basis = Mat::<f64>::from_fn(8, 2, |i, j| if i == j { 1.0 } else { 0.0 });
    /// let params = PgaParams { k: 2, n_null: 20, pga: Pga { ccr: vec![0], ..Pga::default() }, ..PgaParams::default() }.check()?;
    /// let r = params.run(acts.as_ref(), Readout::Basis(basis.as_ref()))?;
    /// assert_eq!((r.n_points, r.d, r.k, r.null_rhos.len()), (40, 8, 2, 20));
    /// assert!(r.rho_readout > r.summary.null_mean);
    /// # Ok::<(), repgeom_metrics::Error>(())
    /// ```
    ///
    /// The same call on ndarray arrays (`f32` or `f64`; row-major views are read in place):
    ///
    /// ```
    /// use ndarray::Array2;
    /// use repgeom_metrics::params::{PgaParams, Readout};
    /// use repgeom_metrics::Pga;
    ///
    /// let acts = Array2::<f64>::from_shape_fn((40, 8), |(i, j)| match j {
    ///     0 => (i as f64 * 0.37).sin(),
    ///     1 => (i as f64 * 0.11).cos(),
    ///     _ => 0.01 * ((i * 7 + j * 3) % 5) as f64,
    /// });
    /// let basis = Array2::<f64>::from_shape_fn((8, 2), |(i, j)| if i == j { 1.0 } else { 0.0 });
    /// let params = PgaParams { k: 2, n_null: 20, pga: Pga { ccr: vec![0], ..Pga::default() }, ..PgaParams::default() }.check()?;
    /// let r = params.run(&acts, Readout::NdBasis(basis.view()))?;
    /// // A transposed (column-major) view is copied once and gives the same numbers.
    /// let t = acts.t().to_owned();
    /// let again = params.run(t.t(), Readout::NdBasis(basis.view()))?;
    /// assert_eq!(r.summary.z.to_bits(), again.summary.z.to_bits());
    /// assert!(r.rho_readout > r.summary.null_mean);
    /// # Ok::<(), repgeom_metrics::Error>(())
    /// ```
    pub fn run<'a>(&self, acts: impl Into<Acts<'a>>, readout: Readout<'_>) -> Result<PgaResult> {
        let mut all = self.run_with(acts, readout, &PgaExtras::default())?;
        Ok(all.remove(0))
    }

    /// [`ValidPgaParams::run`] with the optional extras: the readout basis used and one result
    /// per CCR level of `pga.ccr`, in that order (each with its bootstrap interval when
    /// `pga.bootstrap` asks for one).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use repgeom_linalg::Mat;
    /// use repgeom_metrics::params::{PgaExtras, PgaParams, Readout};
    /// use repgeom_metrics::Pga;
    ///
    /// let acts = Mat::<f64>::from_fn(30, 6, |i, j| ((i * 31 + j * 17) % 11) as f64 - 5.0);
    /// let w_u = Mat::<f32>::from_fn(50, 6, |i, j| ((i * 13 + j * 7) % 9) as f32 - 4.0);
    /// let pga = Pga { ccr: vec![0, 1], ..Pga::default() };
    /// let params = PgaParams { k: 2, n_null: 10, pga, ..PgaParams::default() }.check()?;
    /// let draws = AtomicUsize::new(0);
    /// let extras = PgaExtras {
    ///     label: Some("toy layer"),
    ///     on_draw: Some(&|| {
    ///         draws.fetch_add(1, Ordering::Relaxed);
    ///     }),
    ///     ..PgaExtras::default()
    /// };
    /// let rs = params.run_with(acts.as_ref(), Readout::Unembedding(w_u.as_ref()), &extras)?;
    /// assert_eq!(rs.iter().map(|r| r.ccr).collect::<Vec<_>>(), [0, 1]);
    /// assert_eq!(draws.load(Ordering::Relaxed), 20);
    /// # Ok::<(), repgeom_metrics::Error>(())
    /// ```
    pub fn run_with<'a>(
        &self,
        acts: impl Into<Acts<'a>>,
        readout: Readout<'_>,
        extras: &PgaExtras<'_>,
    ) -> Result<Vec<PgaResult>> {
        Ok(self.run_one(acts, readout, extras)?.1)
    }

    /// [`Self::run_with`] on `W_U` (`V × d`), whose readout basis (top-`k` right singular
    /// vectors) is computed beside the layer's preparation and null draws (see
    /// [`crate::pga::pga_ccr_sweep_overlapped`]: the same results as computing it first). Returns
    /// the basis with the results, so that the next layers of the model pass it as
    /// [`Readout::Basis`]. `W_U` is checked before any work starts.
    ///
    /// ```
    /// use repgeom_linalg::Mat;
    /// use repgeom_metrics::params::{PgaExtras, PgaParams, Readout};
    ///
    /// let acts = Mat::<f32>::from_fn(30, 6, |i, j| ((i * 31 + j * 17) % 11) as f32 - 5.0);
    /// let w_u = Mat::<f32>::from_fn(50, 6, |i, j| ((i * 13 + j * 7) % 9) as f32 - 4.0);
    /// let params = PgaParams { k: 2, n_null: 10, ..PgaParams::default() }.check()?;
    /// let (basis, first) = params.run_overlapped(acts.as_ref(), w_u.as_ref(), &PgaExtras::default())?;
    /// let again = params.run_with(acts.as_ref(), Readout::Basis(basis.as_ref()), &PgaExtras::default())?;
    /// assert_eq!(first, again);
    /// # Ok::<(), repgeom_metrics::Error>(())
    /// ```
    pub fn run_overlapped<'a>(
        &self,
        acts: impl Into<Acts<'a>>,
        w_u: MatRef<'_, f32>,
        extras: &PgaExtras<'_>,
    ) -> Result<(Mat<f64>, Vec<PgaResult>)> {
        self.run_one(acts, Readout::Unembedding(w_u), extras)
    }

    /// One layer through the library's one PGA run ([`Pga::run_model`]): the activations in
    /// `f32`, the readout as faer views, these parameters as the [`Pga`] options. Returns the
    /// readout basis used and one result per CCR level, in the order asked.
    fn run_one<'a>(
        &self,
        acts: impl Into<Acts<'a>>,
        readout: Readout<'_>,
        extras: &PgaExtras<'_>,
    ) -> Result<(Mat<f64>, Vec<PgaResult>)> {
        let mut converted = None;
        let acts = acts.into().as_f32(&mut converted);
        let (mut w_copy, mut basis_copy) = (None, None);
        let readout = Readout::from(readout.view(&mut w_copy, &mut basis_copy));
        let mut pga = self.params.pga.clone();
        pga.engine.pair_seed = self.params.seed;
        let levels = &self.params.pga.ccr;
        let input = ModelInput {
            layers: vec![ModelLayer {
                layer: 0,
                acts,
                what: extras.label.map_or_else(
                    || format!("activations [{}, {}]", acts.nrows(), acts.ncols()),
                    str::to_owned,
                ),
            }],
            readout,
            ks: vec![self.params.k],
            null: match extras.null {
                Some(null) => NullSource::Given(null),
                None => NullSource::Draw(NullParams {
                    n_null: self.params.n_null,
                    seed: self.params.seed,
                }),
            },
            sequences: None,
            memory_budget: None,
            device: repgeom_cuda::Device::Cpu,
        };
        let hooks = Hooks {
            on_draw: extras.on_draw,
            on_layer: None,
        };
        let run = pga.run_model(&input, self.par, &hooks)?;
        let mut rows = run.rows;
        let results = levels
            .iter()
            .map(|&c| {
                let at = rows
                    .iter()
                    .position(|r| r.result.ccr == c)
                    .expect("one row per level");
                rows.swap_remove(at).result
            })
            .collect();
        Ok((run.readout_basis, results))
    }
}
