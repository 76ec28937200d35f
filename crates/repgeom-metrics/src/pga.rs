//! Subspace PGA (predictive geometric alignment): does a layer's distance structure survive
//! projection onto the readout subspace of `W_U` better than projection onto random subspaces?
//!
//! For one layer `H` (`N × d`), readout basis $V_k$ and null bases $Q_1..Q_n$:
//! 1. $H_c$ = CCR-`c` of `H` (centre over points, remove the top-`c` principal directions);
//! 2. $d_{full}$ = cosine distances of all pairs of rows of $H_c$; $d_{proj}$ those of $H_c V_k$;
//! 3. $\rho_{readout} = \mathrm{Spearman}(d_{full}, d_{proj})$ over all $N(N-1)/2$ pairs;
//! 4. $\rho_i$ the same with $Q_i$ in place of $V_k$;
//! 5. $z = (\rho_{readout} - \bar\rho)/s_\rho$ (ddof 1), $p = (1 + \#\{\rho_i \ge \rho_{readout}\})/(n+1)$,
//!    with the lower and two-sided tails, $\Delta\rho = \rho_{readout} - \bar\rho$ and the
//!    null-sampling standard error of z, $\sqrt{(1 + z^2/2)/n}$.
//!
//! Euclidean distances replace the cosine ones with [`EngineOptions::distance`];
//! [`assign_q_values`] adds Benjamini–Hochberg q-values over the rows of a run and
//! [`bootstrap_ci`] percentile intervals over resampled sequences.
//!
//! The engine ranks $d_{full}$ once per (layer, CCR) and reuses it for every draw; each draw
//! costs two `f32` GEMMs and one radix sort, and draws run in parallel with a bounded scratch
//! per worker thread.

use rayon::prelude::*;
pub use repgeom_linalg::Distance;
use repgeom_linalg::{
    Mat, MatRef, Par, RankScratch, RankedReference, center_columns, pairwise_distances,
    remove_directions, to_f32,
};
pub use repgeom_null::NullKind;
use repgeom_null::{NullBases, NullSummary};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Fewest points for which PGA is defined: the registry's one limit for every metric.
pub use crate::input::MIN_POINTS;
use crate::input::{check_acts_values, check_basis_shape, check_basis_values, check_enough_points};

/// The result of Subspace PGA on one layer at one CCR level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PgaResult {
    /// Number of points `N`.
    pub n_points: usize,
    /// Hidden size `d`.
    pub d: usize,
    /// Readout subspace dimension `k`.
    pub k: usize,
    /// Number of principal directions removed (CCR-`c`).
    pub ccr: usize,
    /// Spearman correlation of full and readout-projected distances.
    pub rho_readout: f64,
    /// `rho_readout` against the null correlations: their mean and sample standard deviation
    /// (ddof 1), the PGA z-score and the one-sided empirical p-value, as the null crate
    /// summarises every metric's null (serialised flat: `null_mean`, `null_std`, `z`, `p_value`).
    #[serde(flatten)]
    pub summary: NullSummary,
    /// Every null correlation, in draw order.
    pub null_rhos: Vec<f64>,
    /// Pairs each correlation was computed on: all $N(N-1)/2$, or the sample of `--max-pairs`.
    pub n_pairs: usize,
    /// Standard error of `rho_readout` when it is estimated from sampled pairs (else `None`).
    pub rho_se: Option<f64>,
    /// Lower-tail empirical p, $(1 + \#\{\rho_i \le \rho_{readout}\})/(n+1)$.
    #[serde(default)]
    pub p_lower: f64,
    /// Two-sided empirical p: twice the smaller tail, capped at 1 (floor $2/(n+1)$).
    #[serde(default)]
    pub p_two_sided: f64,
    /// $\rho_{readout} - \bar\rho$, the effect size on the correlation scale.
    #[serde(default)]
    pub delta_rho: f64,
    /// Null-sampling standard error of `z`, $\sqrt{(1 + z^2/2)/n}$ (how far `z` moves with
    /// the null seed alone; see [`repgeom_null::z_standard_error`]).
    #[serde(default)]
    pub z_se: f64,
    /// The pairwise distance compared.
    #[serde(default)]
    pub distance: Distance,
    /// Benjamini–Hochberg q-value of `p_two_sided` within its family (the rows of one run at
    /// the same CCR level), set by [`assign_q_values`]; `None` until then.
    #[serde(default)]
    pub q_value: Option<f64>,
    /// Percentile bootstrap interval over resampled sequences, set from [`bootstrap_ci`].
    #[serde(default)]
    pub bootstrap: Option<BootstrapCi>,
    /// The null the readout was compared with ([`EngineOptions::null`]).
    #[serde(default)]
    pub null: NullKind,
    /// Share of the layer's variance (after CCR) captured by the readout subspace.
    #[serde(default)]
    pub captured_variance_readout: f64,
    /// Mean share captured by the null subspaces.
    #[serde(default)]
    pub captured_variance_null_mean: f64,
    /// Sample standard deviation (ddof 1) of the shares captured by the null subspaces.
    #[serde(default)]
    pub captured_variance_null_sd: f64,
}

impl PgaResult {
    /// Builds a result from the readout correlation and the null sample.
    fn from_null(
        (n_points, d, k, ccr): (usize, usize, usize, usize),
        rho_readout: f64,
        null_rhos: Vec<f64>,
        n_pairs: usize,
        rho_se: Option<f64>,
        distance: Distance,
    ) -> Result<Self> {
        let summary = repgeom_null::summarize(rho_readout, &null_rhos)?;
        let tails = repgeom_null::tails(rho_readout, &null_rhos);
        let z_se = repgeom_null::z_standard_error(summary.z, null_rhos.len());
        Ok(Self {
            n_points,
            d,
            k,
            ccr,
            rho_readout,
            summary,
            null_rhos,
            n_pairs,
            rho_se,
            p_lower: tails.p_lower,
            p_two_sided: tails.p_two_sided,
            delta_rho: rho_readout - summary.null_mean,
            z_se,
            distance,
            q_value: None,
            bootstrap: None,
            null: NullKind::Haar,
            captured_variance_readout: f64::NAN,
            captured_variance_null_mean: f64::NAN,
            captured_variance_null_sd: f64::NAN,
        })
    }
}

/// Sets every result's `q_value`: Benjamini–Hochberg over `p_two_sided`, one family per CCR
/// level (all results passed in with the same `ccr`: every layer, and every `k` if there are
/// several). Call it once on all the rows of a run.
pub fn assign_q_values(results: &mut [&mut PgaResult]) {
    let mut levels: Vec<usize> = results.iter().map(|r| r.ccr).collect();
    levels.sort_unstable();
    levels.dedup();
    for c in levels {
        let idx: Vec<usize> = (0..results.len())
            .filter(|&i| results[i].ccr == c)
            .collect();
        let p: Vec<f64> = idx.iter().map(|&i| results[i].p_two_sided).collect();
        for (&i, q) in idx.iter().zip(repgeom_null::benjamini_hochberg(&p)) {
            results[i].q_value = Some(q);
        }
    }
}

/// How the engine may spend memory, whether it samples pairs, and which null it draws.
/// `max_memory` changes nothing that is estimated; `max_pairs` changes the exact statistic into
/// an estimate with a stated standard error; `distance` and `null` change the question asked.
///
/// Embedded once, in [`crate::Pga`] (its fields are written inline there); the engine's
/// functions take them from it ([`crate::Pga::engine_with`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineOptions {
    /// Pairwise distance: `cosine` (default) or `euclidean`.
    pub distance: Distance,
    /// Estimate every Spearman correlation on one seeded sample of this many distinct pairs,
    /// shared by the readout and all null draws, instead of all $N(N-1)/2$ pairs (`None`: all;
    /// at least [`MIN_PAIRS`]).
    pub max_pairs: Option<usize>,
    /// Seed of the pair sample (`repgeom pga`, the study and `repgeom.pga` set it to the
    /// null's seed).
    pub pair_seed: u64,
    /// Bytes the engine may use (`None`: the run's budget, which every front end sets to half
    /// the machine's memory, `repgeom_io::default_memory_budget`). Null draws then run on as
    /// many workers as fit (at least one); if not even one fits, the call fails before
    /// allocating and suggests `max_pairs`. Never changes a number. Written as bytes or as a
    /// size (`"4GiB"`, `"512MiB"`, `"1.5GB"`: [`parse_size`], the one parser of sizes of
    /// every front end).
    #[serde(deserialize_with = "size_or_bytes")]
    pub max_memory: Option<u64>,
    /// The null: `haar` (default) or `spectrum`, the draws matched per CCR level from the
    /// Haar bases passed in (see [`repgeom_null::spectrum_matched`]).
    pub null: NullKind,
    /// Relative tolerance of the spectrum-matched null on each draw's captured variance, in
    /// (0, 1) (default [`repgeom_null::DEFAULT_SPECTRUM_TOL`]); unused under Haar.
    pub spectrum_tol: f64,
    /// Where the null draws and the readout's statistic run: the CPU (default) or a CUDA
    /// device, on the same null bases and the same reference ranks (the numbers agree to the
    /// rounding of the `f32` products; docs/gpu.md). A setting of the run, like `max_memory`'s
    /// budget, not of the question: not a PGA key, never in a unit hash
    /// ([`crate::Pga::engine_with`] sets it from [`crate::LayerInput::device`]). Sampled pairs
    /// (`max_pairs`) run on the CPU.
    #[serde(skip)]
    pub device: repgeom_cuda::Device,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            distance: Distance::Cosine,
            max_pairs: None,
            pair_seed: 0,
            max_memory: None,
            null: NullKind::Haar,
            spectrum_tol: repgeom_null::DEFAULT_SPECTRUM_TOL,
            device: repgeom_cuda::Device::Cpu,
        }
    }
}

impl EngineOptions {
    /// The rules of these options: `max_pairs` at least [`MIN_PAIRS`], `spectrum_tol` in
    /// (0, 1).
    pub fn check(&self) -> Result<()> {
        if !(self.spectrum_tol > 0.0 && self.spectrum_tol < 1.0) {
            return Err(Error::InvalidOption {
                name: "spectrum_tol".into(),
                value: self.spectrum_tol.to_string(),
                reason: "the relative tolerance must lie in (0, 1)".into(),
            });
        }
        check_max_pairs(self.max_pairs)
    }
}

/// Parses a size in bytes: a number with an optional unit, binary (`K`/`KiB`, `M`/`MiB`,
/// `G`/`GiB`, `T`/`TiB`) or decimal (`kB`, `MB`, `GB`, `TB`), case-insensitive. The one parser
/// of sizes: `--max-memory`, a manifest's `max_memory` and Python's `max_memory` all read
/// through it.
///
/// ```
/// use repgeom_metrics::parse_size;
/// assert_eq!(parse_size("1MiB"), Ok(1 << 20));
/// assert_eq!(parse_size("4GiB"), Ok(4 << 30));
/// assert_eq!(parse_size("1.5GB"), Ok(1_500_000_000));
/// assert_eq!(parse_size("1048576"), Ok(1 << 20));
/// assert!(parse_size("4QB").is_err());
/// ```
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("bad size {s:?}: expected e.g. 4GiB"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0f64.powi(2),
        "g" | "gib" => 1024.0f64.powi(3),
        "t" | "tib" => 1024.0f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => {
            return Err(format!(
                "bad size unit {other:?} in {s:?}: use B, KiB, MiB, GiB or TiB"
            ));
        }
    };
    Ok((value * mult) as u64)
}

/// `max_memory` as bytes (a number) or a size ([`parse_size`]).
pub(crate) fn size_or_bytes<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Option::<Size>::deserialize(d)? {
        None => Ok(None),
        Some(Size::Bytes(n)) => Ok(Some(n)),
        Some(Size::Text(t)) => parse_size(&t).map(Some).map_err(serde::de::Error::custom),
    }
}

/// Bytes the exact engine needs for `n` points in `d` dimensions with `k`-dimensional
/// projections: `shared` once, plus `per_worker` for each null draw in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryEstimate {
    /// Bytes held once per (layer, CCR): corrected activations and the ranked reference, plus
    /// the transient buffers of ranking the reference.
    pub shared: u64,
    /// Bytes per worker: the sort buffers of one draw (16 bytes a pair) and its projections.
    pub per_worker: u64,
}

impl MemoryEstimate {
    /// Peak bytes with `workers` draws in flight.
    pub fn peak(&self, workers: u64) -> u64 {
        self.shared + workers * self.per_worker
    }

    /// How many calls with this estimate may run at once on one pool of `threads` threads
    /// within `budget`, each free to use every thread: `budget / peak(threads)`, at least one
    /// (a call alone sizes its workers to the budget itself). A call keeps the scratch
    /// buffers of its draws until it returns, so a call that had every thread once holds a
    /// worker's bytes per thread, whatever the other calls do: each counts `peak(threads)`.
    ///
    /// ```
    /// use repgeom_metrics::pga::memory_estimate;
    /// let est = memory_estimate(2048, 512, 100);
    /// assert_eq!(est.at_once(3 * est.peak(16), 16), 3);
    /// assert_eq!(est.at_once(est.peak(2), 16), 1);
    /// ```
    pub fn at_once(&self, budget: u64, threads: usize) -> usize {
        let each = self.peak(threads.max(1) as u64).max(1);
        usize::try_from(budget / each).unwrap_or(usize::MAX).max(1)
    }
}

impl EngineOptions {
    /// How many pairs of `n` points the engine samples under these options: `max_pairs`
    /// where it is below all `n(n−1)/2` pairs, `None` where the exact engine runs on all of
    /// them. The one place that decides which engine a layer gets.
    ///
    /// ```
    /// use repgeom_metrics::pga::EngineOptions;
    /// let opts = EngineOptions { max_pairs: Some(10_000), ..Default::default() };
    /// assert_eq!(opts.sampled_pairs(300), Some(10_000)); // of 44,850 pairs
    /// assert_eq!(opts.sampled_pairs(100), None); // 4,950 pairs: all of them, exactly
    /// assert_eq!(EngineOptions::default().sampled_pairs(300), None);
    /// ```
    pub fn sampled_pairs(&self, n: usize) -> Option<usize> {
        self.max_pairs
            .filter(|&m| m < repgeom_linalg::condensed_len(n))
    }

    /// The memory the exact engine needs under these options for `n` points in `d`
    /// dimensions and `draws` null bases of dimension `k` (the spectrum null adds its
    /// covariance and a level's matched bases), or `None` where the options sample pairs
    /// (`max_pairs` below all `n(n−1)/2`): the budget limits only the exact engine.
    ///
    /// ```
    /// use repgeom_metrics::pga::{EngineOptions, memory_estimate};
    /// let opts = EngineOptions::default();
    /// assert_eq!(opts.exact_memory(300, 64, 8, 100), Some(memory_estimate(300, 64, 8)));
    /// let sampled = EngineOptions { max_pairs: Some(10_000), ..Default::default() };
    /// assert_eq!(sampled.exact_memory(300, 64, 8, 100), None);
    /// ```
    pub fn exact_memory(
        &self,
        n: usize,
        d: usize,
        k: usize,
        draws: usize,
    ) -> Option<MemoryEstimate> {
        if self.sampled_pairs(n).is_some() {
            return None;
        }
        let mut est = memory_estimate(n, d, k);
        if self.null == NullKind::Spectrum {
            // The covariance and its eigenvectors (f64), and the matched bases of one level in
            // f64 and f32.
            let (d, k, draws) = (d as u64, k as u64, draws as u64);
            est.shared += 16 * d * d + 12 * d * k * draws;
        }
        Some(est)
    }
}

/// Memory needed by the exact engine (see [`MemoryEstimate`]).
pub fn memory_estimate(n: usize, d: usize, k: usize) -> MemoryEstimate {
    let (n, d, k) = (n as u64, d as u64, k as u64);
    let pairs = n * n.saturating_sub(1) / 2;
    let block = n * 256 * 4;
    // centred + corrected f64, f32 copy and normalised copy, ranked reference (u32 a pair),
    // and, while ranking the reference, its distances (4) and sort buffers (16 a pair).
    let shared = n * d * (8 + 8 + 4 + 4) + pairs * 4 + pairs * 20 + block;
    let per_worker = pairs * 16 + n * k * 8 + block;
    MemoryEstimate { shared, per_worker }
}

/// Checks the inputs shared by every PGA call. `what` names the layer for messages, e.g.
/// `"run.safetensors: hidden_states.3 [300, 64]"`.
pub fn validate_inputs(acts: MatRef<'_, f32>, basis: MatRef<'_, f64>, what: &str) -> Result<()> {
    check_enough_points(acts.nrows(), what)?;
    check_basis_shape(acts.nrows(), acts.ncols(), basis, what)?;
    check_acts_values(acts, what, Par::Seq)?;
    check_basis_values(basis, what)
}

/// Subspace PGA of one layer at each CCR level in `ccrs`, sharing the centring and one
/// eigendecomposition (for the largest CCR) across levels.
///
/// `par` sets the parallelism: with `Par::Seq` everything runs on this thread; otherwise the
/// null draws run on the current rayon pool. Results are identical either way.
/// `on_draw` is called once per finished null draw (for progress bars).
pub fn pga_ccr_sweep(
    acts: MatRef<'_, f32>,
    readout_basis: MatRef<'_, f64>,
    null: &NullBases,
    ccrs: &[usize],
    what: &str,
    par: Par,
    on_draw: &(dyn Fn() + Sync),
) -> Result<Vec<PgaResult>> {
    pga_ccr_sweep_with(
        acts,
        readout_basis,
        null,
        ccrs,
        what,
        par,
        on_draw,
        &EngineOptions::default(),
    )
}

/// [`pga_ccr_sweep`] under a memory budget and, optionally, on sampled pairs.
pub fn pga_ccr_sweep_with(
    acts: MatRef<'_, f32>,
    readout_basis: MatRef<'_, f64>,
    null: &NullBases,
    ccrs: &[usize],
    what: &str,
    par: Par,
    on_draw: &(dyn Fn() + Sync),
    opts: &EngineOptions,
) -> Result<Vec<PgaResult>> {
    validate_inputs(acts, readout_basis, what)?;
    sweep_validated(acts, readout_basis, null, ccrs, what, par, on_draw, opts)
}

/// [`pga_ccr_sweep_with`] with the readout basis computed by `readout` (for instance the
/// top-`k` right singular vectors of `W_U`) while the layer is prepared (centring, CCR, the
/// ranked full-space distances) and the first CCR level's null draws run: the readout's
/// decomposition is sequential, and the draws use the cores it leaves idle. Returns that
/// basis with the results, for the next layers of the same model.
///
/// The results are those of computing the basis first and calling [`pga_ccr_sweep_with`]:
/// the two pieces of work are independent. Only the Haar null on all pairs overlaps them;
/// the spectrum null needs the readout before its draws, and sampled pairs are cheap to
/// prepare, so there `readout` simply runs first. With `Par::Seq` everything runs on this
/// thread, `readout` first.
///
/// ```
/// use repgeom_linalg::{Mat, Par, readout_subspace};
/// use repgeom_metrics::pga::{EngineOptions, pga_ccr_sweep_overlapped, pga_ccr_sweep_with};
/// use repgeom_null::{NullBases, NullParams};
///
/// let acts = Mat::<f32>::from_fn(40, 6, |i, j| ((i * 7 + j * 3) % 11) as f32 + 0.1 * j as f32);
/// let w_u = Mat::<f32>::from_fn(30, 6, |i, j| ((i * 5 + j * 2) % 7) as f32 - 3.0);
/// let null = NullBases::draw(6, 2, &NullParams { n_null: 10, seed: 0 }.check().unwrap()).unwrap();
/// let opts = EngineOptions::default();
/// let (basis, overlapped) = pga_ccr_sweep_overlapped(
///     acts.as_ref(),
///     || readout_subspace(w_u.as_ref(), 2, Par::Seq).map_err(repgeom_metrics::Error::from),
///     &null, &[0, 1], "demo", Par::rayon(2), &|| {}, &opts,
/// ).unwrap();
/// let first = pga_ccr_sweep_with(
///     acts.as_ref(), basis.as_ref(), &null, &[0, 1], "demo", Par::rayon(2), &|| {}, &opts,
/// ).unwrap();
/// assert_eq!(overlapped, first);
/// ```
pub fn pga_ccr_sweep_overlapped<E: From<Error> + Send>(
    acts: MatRef<'_, f32>,
    readout: impl FnOnce() -> std::result::Result<Mat<f64>, E> + Send,
    null: &NullBases,
    ccrs: &[usize],
    what: &str,
    par: Par,
    on_draw: &(dyn Fn() + Sync),
    opts: &EngineOptions,
) -> std::result::Result<(Mat<f64>, Vec<PgaResult>), E> {
    check_enough_points(acts.nrows(), what)?;
    check_acts_values(acts, what, par)?;
    // The readout's own error type is carried past the engine's: parked here, and the engine
    // sees a placeholder that it only passes on.
    let failed: std::sync::Mutex<Option<E>> = std::sync::Mutex::new(None);
    let pending = || {
        readout().map_err(|e| {
            *failed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e);
            Error::Cancelled
        })
    };
    let run = sweep(
        acts,
        Readout::Pending(Box::new(pending)),
        null,
        ccrs,
        what,
        par,
        on_draw,
        opts,
    );
    let parked = failed
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match (run, parked) {
        (_, Some(e)) => Err(e),
        (Ok((basis, results)), None) => {
            Ok((basis.expect("a pending readout is returned"), results))
        }
        (Err(e), None) => Err(e.into()),
    }
}

/// The engine behind [`pga_ccr_sweep_with`], once the inputs are valid.
fn sweep_validated(
    acts: MatRef<'_, f32>,
    readout_basis: MatRef<'_, f64>,
    null: &NullBases,
    ccrs: &[usize],
    what: &str,
    par: Par,
    on_draw: &(dyn Fn() + Sync),
    opts: &EngineOptions,
) -> Result<Vec<PgaResult>> {
    let (_, results) = sweep(
        acts,
        Readout::Given(readout_basis),
        null,
        ccrs,
        what,
        par,
        on_draw,
        opts,
    )?;
    Ok(results)
}

/// The readout basis of a sweep: given, or computed while the first level is prepared.
enum Readout<'a> {
    Given(MatRef<'a, f64>),
    Pending(Box<dyn FnOnce() -> Result<Mat<f64>> + Send + 'a>),
}

/// [`sweep_validated`] on a given or pending readout basis; returns the basis if it was
/// pending. The activations are valid; a pending basis is checked once it is computed.
fn sweep(
    acts: MatRef<'_, f32>,
    readout: Readout<'_>,
    null: &NullBases,
    ccrs: &[usize],
    what: &str,
    par: Par,
    on_draw: &(dyn Fn() + Sync),
    opts: &EngineOptions,
) -> Result<(Option<Mat<f64>>, Vec<PgaResult>)> {
    let (n, d, k) = (acts.nrows(), acts.ncols(), null.k());
    let basis_shape = |basis: MatRef<'_, f64>| -> Result<()> {
        if null.d() != d || basis.ncols() != k {
            return Err(Error::ShapeMismatch {
                what: format!("{what}: null bases against the readout basis"),
                left: format!("null bases [{}, {}, {}]", null.len(), null.d(), null.k()),
                right: format!("readout basis [{d}, {}]", basis.ncols()),
            });
        }
        Ok(())
    };
    if let Readout::Given(basis) = &readout {
        basis_shape(basis.as_ref())?;
    }
    let max_c = ccrs.iter().copied().max().unwrap_or(0);
    if max_c >= n.min(d) {
        return Err(Error::InvalidOption {
            name: "ccr".into(),
            value: max_c.to_string(),
            reason: format!(
                "cannot remove {max_c} principal directions from {n} points in {d} dimensions ({what})"
            ),
        });
    }
    let total_pairs = repgeom_linalg::condensed_len(n);
    check_max_pairs(opts.max_pairs)?;
    let sample = opts
        .sampled_pairs(n)
        .map(|m| sample_pairs(n, m, opts.pair_seed));
    let workers = match (opts.exact_memory(n, d, k, null.len()), opts.max_memory) {
        (Some(est), Some(budget)) => {
            let fit = budget.saturating_sub(est.shared) / est.per_worker.max(1);
            if fit == 0 {
                return Err(Error::MemoryBudget {
                    what: what.into(),
                    needed: est.peak(1),
                    budget,
                    pairs: total_pairs,
                });
            }
            Some(fit as usize)
        }
        _ => None,
    };
    // Opened before any work, so a missing driver or device fails first. Sampled pairs stay
    // on the CPU (their engine is not the exact one the device runs).
    let gpu = match sample {
        None => opts.device.open()?,
        Some(_) => None,
    };
    let gpu = gpu.as_deref();
    let haar32: &[Mat<f32>] = match opts.null {
        NullKind::Haar => null.bases_f32(),
        NullKind::Spectrum => &[],
    };
    // A given readout basis in `f32`, so that even the first level's draws can take it along.
    let given32 = match &readout {
        Readout::Given(basis) => Some(to_f32(basis.as_ref(), Par::Seq)),
        Readout::Pending(_) => None,
    };
    let correct = |centred: &Mat<f64>, directions: &Option<Mat<f64>>, c: usize| {
        stage(gpu, "pga: CCR removal (CPU)", || match (directions, c) {
            (Some(u), c) if c > 0 => {
                remove_directions(centred.as_ref(), u.as_ref().subcols(0, c), par)
            }
            _ => centred.clone(),
        })
    };
    // Everything up to the first level's null draws needs no readout basis. Under the Haar
    // null on all pairs, a pending basis is computed beside it.
    let overlap = opts.null == NullKind::Haar && sample.is_none() && par != Par::Seq;
    let prepare = || -> Result<_> {
        let centred = stage(gpu, "pga: centring (CPU)", || center_columns(acts, par));
        let directions = if max_c > 0 {
            Some(
                stage(gpu, "pga: CCR directions (CPU)", || {
                    repgeom_linalg::top_principal_directions(centred.as_ref(), max_c, par)
                })?
                .directions,
            )
        } else {
            None
        };
        let first = match (overlap, ccrs.first()) {
            (true, Some(&c)) => {
                let corrected = correct(&centred, &directions, c);
                let label = format!("{what} after CCR-{c}");
                Some(with_workers(workers, || {
                    let level = Level::new(corrected.as_ref(), c, opts.distance, &label, par, gpu)?;
                    let readout = given32.as_ref().map(Mat::as_ref);
                    let draws = level.null_draws(haar32, readout, gpu, par, on_draw)?;
                    Ok((level, draws))
                })?)
            }
            _ => None,
        };
        Ok((centred, directions, first))
    };
    let (given, pending) = match readout {
        Readout::Given(basis) => (Some(basis), None),
        Readout::Pending(f) => (None, Some(f)),
    };
    let (computed, (centred, directions, mut first)) = match pending {
        None => (None, prepare()?),
        Some(f) if overlap => {
            let (basis, prepared) = rayon::join(f, prepare);
            (Some(basis?), prepared?)
        }
        Some(f) => {
            let basis = f()?;
            (Some(basis), prepare()?)
        }
    };
    let readout_basis = match (&computed, given) {
        (Some(basis), _) => {
            check_basis_shape(n, d, basis.as_ref(), what)?;
            basis_shape(basis.as_ref())?;
            check_basis_values(basis.as_ref(), what)?;
            basis.as_ref()
        }
        (None, given) => given.expect("a readout basis is given or computed"),
    };
    let readout32 = match given32 {
        Some(basis) => basis,
        None => to_f32(readout_basis, Par::Seq),
    };
    let results = ccrs
        .iter()
        .map(|&c| {
            let label = format!("{what} after CCR-{c}");
            if let Some((level, draws)) = first.take() {
                let mut result = level.finish(readout32.as_ref(), draws, gpu)?;
                result.null = opts.null;
                return Ok(result);
            }
            let corrected = correct(&centred, &directions, c);
            // The captured shares come from the projections the engine computes anyway (the
            // same formula under both nulls, so the readout's share does not depend on it).
            let matched = match opts.null {
                NullKind::Haar => None,
                NullKind::Spectrum => {
                    let tol = opts.spectrum_tol;
                    let m = repgeom_null::spectrum_matched(
                        null,
                        corrected.as_ref(),
                        readout_basis,
                        tol,
                        par,
                    )
                    .map_err(|e| null_error(e, &label))?;
                    Some(m.bases)
                }
            };
            let null32 = matched.as_ref().map_or(haar32, |m| m.bases_f32());
            let mut result = match &sample {
                Some(pairs) => pga_sampled(
                    corrected.as_ref(),
                    readout32.as_ref(),
                    null32,
                    c,
                    opts.distance,
                    pairs,
                    &label,
                    par,
                    on_draw,
                ),
                None => with_workers(workers, || {
                    let level = Level::new(corrected.as_ref(), c, opts.distance, &label, par, gpu)?;
                    let draws =
                        level.null_draws(null32, Some(readout32.as_ref()), gpu, par, on_draw)?;
                    level.finish(readout32.as_ref(), draws, gpu)
                }),
            }?;
            result.null = opts.null;
            Ok(result)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((computed, results))
}

/// A null-sampling error with the layer it happened on.
fn null_error(e: repgeom_null::Error, label: &str) -> Error {
    Error::NullOnLayer {
        what: label.to_owned(),
        error: e,
    }
}

/// The fewest pairs a sampled Spearman correlation may use (`max_pairs`): the one threshold
/// of the engine, [`crate::Pga`]'s check and every front end.
pub const MIN_PAIRS: usize = 3;

/// Checks a `max_pairs` setting against [`MIN_PAIRS`].
pub fn check_max_pairs(max_pairs: Option<usize>) -> Result<()> {
    match max_pairs {
        Some(m) if m < MIN_PAIRS => Err(Error::InvalidOption {
            name: "max_pairs".into(),
            value: m.to_string(),
            reason: format!("at least {MIN_PAIRS} pairs are needed for a correlation"),
        }),
        _ => Ok(()),
    }
}

/// Settings of [`bootstrap_ci`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BootstrapOptions {
    /// Bootstrap replicates `B` (at least 2; 1000 or more for a stable 95% interval).
    pub replicates: usize,
    /// Seed: replicate `r` resamples with ChaCha8 stream `r` of this seed.
    pub seed: u64,
    /// Coverage of the percentile interval (default 0.95).
    pub level: f64,
}

impl BootstrapOptions {
    /// At least 2 replicates, and a coverage strictly between 0 and 1: checked before any
    /// work (by [`crate::Pga`]'s check) and again by [`bootstrap_ci`].
    pub fn check(&self) -> Result<()> {
        if self.replicates < 2 {
            return Err(Error::InvalidOption {
                name: "bootstrap".into(),
                value: self.replicates.to_string(),
                reason: "at least 2 replicates are needed for an interval (1000 or more for a stable 95% one)".into(),
            });
        }
        if !(self.level > 0.0 && self.level < 1.0) {
            return Err(Error::InvalidOption {
                name: "bootstrap level".into(),
                value: self.level.to_string(),
                reason: "the coverage must lie strictly between 0 and 1".into(),
            });
        }
        Ok(())
    }
}

impl Default for BootstrapOptions {
    fn default() -> Self {
        Self {
            replicates: 200,
            seed: 0,
            level: 0.95,
        }
    }
}

/// What the bootstrap resampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BootstrapUnit {
    /// Whole sequences (every point of a drawn sequence enters together).
    Sequences,
    /// Single points (no sequence ids: understates the spread when points of one sequence are
    /// correlated).
    Points,
}

/// A percentile bootstrap interval for `rho_readout` and `z` of one CCR level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BootstrapCi {
    /// Replicates used.
    pub replicates: usize,
    /// What was resampled.
    pub unit: BootstrapUnit,
    /// Coverage of the interval.
    pub level: f64,
    /// Lower end for `rho_readout`.
    pub rho_lo: f64,
    /// Upper end for `rho_readout`.
    pub rho_hi: f64,
    /// Lower end for `z`.
    pub z_lo: f64,
    /// Upper end for `z`.
    pub z_hi: f64,
}

/// Percentile bootstrap intervals of `rho_readout` and `z` at each CCR level of `ccrs`.
///
/// Replicate `r` draws as many sequences as there are, uniformly with replacement (ChaCha8
/// stream `r` of `boot.seed`), stacks their points, and recomputes the whole statistic on
/// them (centring, CCR, distances, readout and every null draw) with the **same** readout
/// basis and null bases. The interval is the `(1 − level)/2` and `(1 + level)/2` quantiles of
/// the `B` replicate values (linear interpolation). `groups[i]` is the sequence of point `i`;
/// `None` resamples points (unit [`BootstrapUnit::Points`]). Identical at any thread count.
/// The result has one interval per entry of `ccrs`, in that order.
pub fn bootstrap_ci(
    acts: MatRef<'_, f32>,
    readout_basis: MatRef<'_, f64>,
    null: &NullBases,
    ccrs: &[usize],
    groups: Option<&[usize]>,
    what: &str,
    par: Par,
    opts: &EngineOptions,
    boot: &BootstrapOptions,
) -> Result<Vec<BootstrapCi>> {
    use rand::{Rng, SeedableRng};
    let n = acts.nrows();
    boot.check()?;
    // Members of each sequence, sequences in order of first appearance.
    let (unit, members): (BootstrapUnit, Vec<Vec<usize>>) = match groups {
        Some(g) => {
            if g.len() != n {
                return Err(Error::ShapeMismatch {
                    what: format!("{what}: sequence ids for the bootstrap"),
                    left: format!("{} sequence ids", g.len()),
                    right: format!("{n} points"),
                });
            }
            let mut index = std::collections::BTreeMap::new();
            let mut members: Vec<Vec<usize>> = Vec::new();
            for (i, &s) in g.iter().enumerate() {
                let slot = *index.entry(s).or_insert_with(|| {
                    members.push(Vec::new());
                    members.len() - 1
                });
                members[slot].push(i);
            }
            (BootstrapUnit::Sequences, members)
        }
        None => (BootstrapUnit::Points, (0..n).map(|i| vec![i]).collect()),
    };
    if members.len() < 2 {
        return Err(Error::InvalidOption {
            name: "bootstrap".into(),
            value: format!("{} sequence", members.len()),
            reason: format!("resampling needs at least 2 sequences ({what})"),
        });
    }
    let d = acts.ncols();
    let mut rhos = vec![Vec::with_capacity(boot.replicates); ccrs.len()];
    let mut zs = vec![Vec::with_capacity(boot.replicates); ccrs.len()];
    for r in 0..boot.replicates {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(boot.seed);
        rng.set_stream(r as u64);
        let rows: Vec<usize> = (0..members.len())
            .flat_map(|_| members[rng.random_range(0..members.len())].iter().copied())
            .collect();
        let sample = Mat::<f32>::from_fn(rows.len(), d, |i, j| acts[(rows[i], j)]);
        let label = format!("{what}, bootstrap replicate {r} ({} points)", rows.len());
        let results = pga_ccr_sweep_with(
            sample.as_ref(),
            readout_basis,
            null,
            ccrs,
            &label,
            par,
            &|| {},
            opts,
        )?;
        for (c, res) in results.iter().enumerate() {
            rhos[c].push(res.rho_readout);
            zs[c].push(res.summary.z);
        }
    }
    let (lo, hi) = ((1.0 - boot.level) / 2.0, (1.0 + boot.level) / 2.0);
    Ok(rhos
        .iter()
        .zip(&zs)
        .map(|(rho, z)| BootstrapCi {
            replicates: boot.replicates,
            unit,
            level: boot.level,
            rho_lo: repgeom_null::quantile(rho, lo),
            rho_hi: repgeom_null::quantile(rho, hi),
            z_lo: repgeom_null::quantile(z, lo),
            z_hi: repgeom_null::quantile(z, hi),
        })
        .collect())
}

/// Subspace PGA of one layer at one CCR level. See [`pga_ccr_sweep`].
pub fn pga(
    acts: MatRef<'_, f32>,
    readout_basis: MatRef<'_, f64>,
    null: &NullBases,
    ccr: usize,
    what: &str,
    par: Par,
    on_draw: &(dyn Fn() + Sync),
) -> Result<PgaResult> {
    let mut all = pga_ccr_sweep(acts, readout_basis, null, &[ccr], what, par, on_draw)?;
    Ok(all.remove(0))
}

/// `(rho, captured squared norm)` of a level's null draws in draw order, and the readout's
/// when it was computed with them ([`Level::null_draws`]).
type Draws = (Vec<(f64, f64)>, Option<(f64, f64)>);

/// One CCR level of a layer, ready for the exact engine: the ranked full-space distances, the
/// corrected layer in `f32`, and its total squared norm (for the captured shares).
struct Level {
    reference: RankedReference,
    h32: Mat<f32>,
    total_sq: f64,
    ccr: usize,
    label: String,
    distance: Distance,
}

impl Level {
    /// Ranks the full-space distances of the corrected `N × d` matrix: the distances and
    /// their sort on the device when one is given (the rows prepared and the ranks computed
    /// here, by the CPU's own functions), else on the CPU.
    fn new(
        corrected: MatRef<'_, f64>,
        ccr: usize,
        distance: Distance,
        label: &str,
        par: Par,
        gpu: Option<&repgeom_cuda::Gpu>,
    ) -> Result<Self> {
        let what = format!("{label}: full-space distances");
        let reference = match gpu {
            Some(gpu) => {
                let sorted = |rows: MatRef<'_, f32>, sq: Option<&[f32]>| {
                    gpu.timed("pga: full-space distances and sort (device)", || {
                        gpu.reference_words(rows, sq, &what)
                    })
                };
                let words = match distance {
                    Distance::Cosine => {
                        let rows = gpu.timed("pga: rows normalised (CPU)", || {
                            repgeom_linalg::normalize_rows(corrected, label, par)
                        })?;
                        sorted(rows.as_ref(), None)?
                    }
                    Distance::Euclidean => {
                        let (rows, sq) = gpu.timed("pga: rows normalised (CPU)", || {
                            repgeom_linalg::rows_with_sq_norms(corrected, label, par)
                        })?;
                        sorted(rows.as_ref(), Some(&sq))?
                    }
                };
                gpu.timed("pga: full-space ranks (CPU)", || {
                    RankedReference::from_sorted_words(&words, &what, par)
                })?
            }
            None => {
                let full = pairwise_distances(corrected, distance, label, par)?;
                RankedReference::new(&full, &what, par)?
            }
        };
        let (h32, total_sq) = stage(gpu, "pga: f32 copy (CPU)", || {
            (to_f32(corrected, par), squared_norm(corrected, par))
        });
        Ok(Self {
            reference,
            h32,
            total_sq,
            ccr,
            label: label.to_owned(),
            distance,
        })
    }

    fn engine(&self) -> Engine<'_> {
        Engine {
            h: self.h32.as_ref(),
            reference: &self.reference,
            what: &self.label,
            distance: self.distance,
        }
    }

    /// `(rho, captured squared norm)` of every null draw, in draw order: on the device when
    /// one is given (`on_draw` then called once per draw when the device is done), else on
    /// the CPU, where the readout's, when its basis is known, is computed among them (one
    /// more draw on the pool rather than one on its own thread after them; `on_draw` is still
    /// called once per null draw). The readout's is `None` where it is left to
    /// [`Self::finish`].
    fn null_draws(
        &self,
        null: &[Mat<f32>],
        readout: Option<MatRef<'_, f32>>,
        gpu: Option<&repgeom_cuda::Gpu>,
        par: Par,
        on_draw: &(dyn Fn() + Sync),
    ) -> Result<Draws> {
        if let Some(gpu) = gpu {
            let bases: Vec<MatRef<'_, f32>> = null.iter().map(Mat::as_ref).collect();
            let label = format!("{}: projection onto a random subspace", self.label);
            let out = gpu.timed("pga: null draws (device)", || {
                gpu.pga_draws(
                    self.h32.as_ref(),
                    &bases,
                    &self.reference,
                    self.distance,
                    &label,
                )
            })?;
            for _ in &out {
                on_draw();
            }
            return Ok((out, None));
        }
        let (engine, n) = (self.engine(), self.h32.nrows());
        let spaces: Vec<(MatRef<'_, f32>, &str)> = (null.iter())
            .map(|q| (q.as_ref(), "random subspace"))
            .chain(readout.map(|r| (r, "readout subspace")))
            .collect();
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let per_null_draw = || {
            if calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < null.len() {
                on_draw();
            }
        };
        let mut out = over_draws(
            &spaces,
            par,
            &per_null_draw,
            || DrawScratch::new(n),
            |(q, space), scratch| engine.rho(*q, scratch, space),
        )?;
        let readout = readout.and_then(|_| out.pop());
        Ok((out, readout))
    }

    /// The readout's `rho` against the null draws' (from [`Self::null_draws`]).
    fn finish(
        &self,
        readout: MatRef<'_, f32>,
        (draws, computed): Draws,
        gpu: Option<&repgeom_cuda::Gpu>,
    ) -> Result<PgaResult> {
        let (n, d, k) = (self.h32.nrows(), self.h32.ncols(), readout.ncols());
        let (rho_readout, sq_readout) = match (computed, gpu) {
            (Some(done), _) => done,
            (None, Some(gpu)) => gpu.timed("pga: readout draw (device)", || {
                gpu.pga_draws(
                    self.h32.as_ref(),
                    &[readout],
                    &self.reference,
                    self.distance,
                    &format!("{}: projection onto the readout subspace", self.label),
                )
            })?[0],
            (None, None) => {
                self.engine()
                    .rho(readout, &mut DrawScratch::new(n), "readout subspace")?
            }
        };
        let (null_rhos, sq_null): (Vec<f64>, Vec<f64>) = draws.into_iter().unzip();
        let mut r = PgaResult::from_null(
            (n, d, k, self.ccr),
            rho_readout,
            null_rhos,
            repgeom_linalg::condensed_len(n),
            None,
            self.distance,
        )?;
        set_captured(&mut r, self.total_sq, sq_readout, &sq_null);
        Ok(r)
    }
}

/// `f()`, its wall time accounted under `name` in the device's profile (`REPGEOM_CUDA_PROFILE`)
/// when a device runs the draws; on the CPU just `f()`.
fn stage<R>(gpu: Option<&repgeom_cuda::Gpu>, name: &'static str, f: impl FnOnce() -> R) -> R {
    match gpu {
        Some(gpu) => gpu.timed(name, f),
        None => f(),
    }
}

/// Runs `f` on a rayon pool of at most `workers` threads (the current pool when `None` or
/// when the current pool is no larger). Results do not depend on the pool size.
fn with_workers<T: Send>(
    workers: Option<usize>,
    f: impl FnOnce() -> Result<T> + Send,
) -> Result<T> {
    match workers {
        Some(w) if w < rayon::current_num_threads() => {
            match rayon::ThreadPoolBuilder::new().num_threads(w).build() {
                Ok(pool) => pool.install(f),
                Err(_) => f(),
            }
        }
        _ => f(),
    }
}

/// `m` distinct pairs `(i, j)`, `i < j < n`, uniformly at random without replacement
/// (Floyd's algorithm over condensed indices), in condensed order.
pub fn sample_pairs(n: usize, m: usize, seed: u64) -> Vec<(u32, u32)> {
    use rand::{Rng, SeedableRng};
    let total = repgeom_linalg::condensed_len(n) as u64;
    let m = (m as u64).min(total);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut chosen = std::collections::BTreeSet::new();
    for j in (total - m)..total {
        let t = rng.random_range(0..=j);
        if !chosen.insert(t) {
            chosen.insert(j);
        }
    }
    chosen.into_iter().map(|p| pair_of_index(n, p)).collect()
}

/// Inverse of the condensed pair index.
fn pair_of_index(n: usize, p: u64) -> (u32, u32) {
    let nf = n as f64;
    let pf = p as f64;
    // Row i starts at i*n - i(i+1)/2; solve the quadratic, then correct rounding.
    let disc = ((2.0 * nf - 1.0).powi(2) - 8.0 * pf).max(0.0).sqrt();
    let mut i = ((2.0 * nf - 1.0 - disc) / 2.0).floor().max(0.0) as u64;
    let n64 = n as u64;
    let start = |i: u64| i * n64 - i * (i + 1) / 2;
    while i > 0 && start(i) > p {
        i -= 1;
    }
    while i + 2 < n64 && start(i + 1) <= p {
        i += 1;
    }
    let j = p - start(i) + i + 1;
    (i as u32, j as u32)
}

/// Row-normalised copy in row-major order (for per-pair dot products).
fn normalized_rows_major<T: Copy + Into<f64> + Sync>(
    x: MatRef<'_, T>,
    what: &str,
) -> Result<Vec<f32>> {
    let xn = repgeom_linalg::normalize_rows(x, what, Par::Seq)?;
    let (n, d) = (xn.nrows(), xn.ncols());
    let mut out = vec![0.0f32; n * d];
    for j in 0..d {
        for i in 0..n {
            out[i * d + j] = xn[(i, j)];
        }
    }
    Ok(out)
}

/// Rows in row-major order for per-pair distances: normalised for cosine, as they are for
/// Euclidean.
fn sample_rows_major<T: Copy + Into<f64> + Sync>(
    x: MatRef<'_, T>,
    distance: Distance,
    what: &str,
) -> Result<Vec<f32>> {
    match distance {
        Distance::Cosine => normalized_rows_major(x, what),
        Distance::Euclidean => {
            let (n, d) = (x.nrows(), x.ncols());
            let mut out = vec![0.0f32; n * d];
            for j in 0..d {
                for i in 0..n {
                    out[i * d + j] = x[(i, j)].into() as f32;
                }
            }
            Ok(out)
        }
    }
}

fn sampled_distances(
    rows: &[f32],
    dim: usize,
    pairs: &[(u32, u32)],
    distance: Distance,
    out: &mut Vec<f32>,
) {
    out.clear();
    out.extend(pairs.iter().map(|&(i, j)| {
        let a = &rows[i as usize * dim..(i as usize + 1) * dim];
        let b = &rows[j as usize * dim..(j as usize + 1) * dim];
        match distance {
            Distance::Cosine => {
                let dot: f64 = a
                    .iter()
                    .zip(b)
                    .map(|(x, y)| f64::from(*x) * f64::from(*y))
                    .sum();
                (1.0 - dot as f32).clamp(0.0, 2.0)
            }
            Distance::Euclidean => {
                let sq: f64 = a
                    .iter()
                    .zip(b)
                    .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
                    .sum();
                sq.sqrt() as f32
            }
        }
    }));
}

/// Per-worker buffers of the sampled engine.
type SampledScratch = (RankScratch, Vec<f32>);

/// The engine on a sample of pairs: every correlation is estimated on the same pairs.
fn pga_sampled(
    corrected: MatRef<'_, f64>,
    readout: MatRef<'_, f32>,
    null: &[Mat<f32>],
    ccr: usize,
    distance: Distance,
    pairs: &[(u32, u32)],
    what: &str,
    par: Par,
    on_draw: &(dyn Fn() + Sync),
) -> Result<PgaResult> {
    let (n, d, k) = (corrected.nrows(), corrected.ncols(), readout.ncols());
    let full_rows = sample_rows_major(corrected, distance, what)?;
    let mut full = Vec::new();
    sampled_distances(&full_rows, d, pairs, distance, &mut full);
    drop(full_rows);
    let reference = RankedReference::new(
        &full,
        &format!("{what}: full-space distances (sampled)"),
        par,
    )?;
    let h32 = to_f32(corrected, par);
    let rho = |basis: MatRef<'_, f32>, scratch: &mut SampledScratch, space: &str| {
        let label = format!("{what}: projection onto the {space}");
        let projected = repgeom_linalg::project_f32(h32.as_ref(), basis, Par::Seq);
        let rows = sample_rows_major(projected.as_ref(), distance, &label)?;
        sampled_distances(&rows, k, pairs, distance, &mut scratch.1);
        let rho = reference.spearman(&scratch.1, &mut scratch.0, &label)?;
        Ok::<(f64, f64), Error>((rho, squared_norm(projected.as_ref(), Par::Seq)))
    };
    let (rho_readout, sq_readout) =
        rho(readout, &mut SampledScratch::default(), "readout subspace")?;
    let draws = over_draws(null, par, on_draw, SampledScratch::default, |q, scratch| {
        rho(q.as_ref(), scratch, "random subspace")
    })?;
    let (null_rhos, sq_null): (Vec<f64>, Vec<f64>) = draws.into_iter().unzip();
    let mut r = PgaResult::from_null(
        (n, d, k, ccr),
        rho_readout,
        null_rhos,
        pairs.len(),
        Some(spearman_standard_error(rho_readout, pairs.len())),
        distance,
    )?;
    set_captured(&mut r, squared_norm(corrected, par), sq_readout, &sq_null);
    Ok(r)
}

/// Standard error of a Spearman correlation estimated from `m` sampled pairs, treating the
/// pairs as independent: Fisher's $z$ has variance $1.06/(m-3)$ (Fieller, Hartley & Pearson
/// 1957), and the delta method gives $\mathrm{SE}(\hat\rho) \approx (1-\rho^2)\sqrt{1.06/(m-3)}$.
pub fn spearman_standard_error(rho: f64, m: usize) -> f64 {
    (1.0 - rho * rho) * (1.06 / (m as f64 - 3.0).max(1.0)).sqrt()
}

/// Computes `rho` for every null draw (a basis, or a pair of bases for cross-model nulls), in
/// draw order: on this thread with `Par::Seq`, else on the current rayon pool with one scratch
/// (from `init`) per worker. Either way the results are identical; `on_draw` is called after
/// each draw, and a panic in it (a front end's cancel) stops the other workers too.
pub(crate) fn over_draws<D: Sync, S: Send, T: Send>(
    null: &[D],
    par: Par,
    on_draw: &(dyn Fn() + Sync),
    init: impl Fn() -> S + Sync + Send,
    rho: impl Fn(&D, &mut S) -> Result<T> + Sync + Send,
) -> Result<Vec<T>> {
    // A panic in `on_draw` (how a front end cancels, e.g. on Ctrl-C) must stop the other
    // workers too: rayon would otherwise finish every remaining draw before propagating it. The
    // payload is parked, the draw turns into an error (which stops `collect` early), and the
    // original panic resumes once the workers are done.
    let parked: std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>> = Default::default();
    let one = |scratch: &mut S, q: &D| {
        let r = rho(q, scratch);
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(on_draw)) {
            let mut slot = parked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            slot.get_or_insert(payload);
            return Err(Error::Cancelled);
        }
        r
    };
    let out = match par {
        Par::Seq => {
            let mut scratch = init();
            null.iter().map(|q| one(&mut scratch, q)).collect()
        }
        _ => {
            // Scratch buffers (tens of MB each) are pooled and handed from draw to draw:
            // rayon's `map_init` would build a new one for every split of the work, and each
            // new buffer costs page faults and zeroing. Which draw gets which buffer does not
            // change any result.
            let pool: std::sync::Mutex<Vec<S>> = std::sync::Mutex::new(Vec::new());
            let lock = || {
                pool.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            };
            // One draw per piece of work. Otherwise rayon cuts the draws into runs that it
            // splits further only for threads that steal early; a layer whose draws start
            // while the pool is busy elsewhere (`repgeom pga` runs two layers side by side)
            // keeps runs of many draws, and at its end the other threads wait while one
            // works through its run: 0.4-0.6 s of one idle core per 4-layer run at 2
            // threads (cores busy 1.90 before, 1.96 after). A draw costs milliseconds, a
            // piece of rayon's work microseconds.
            null.par_iter()
                .with_max_len(1)
                .map(|q| {
                    let mut scratch = lock().pop().unwrap_or_else(&init);
                    let r = one(&mut scratch, q);
                    lock().push(scratch);
                    r
                })
                .collect()
        }
    };
    let payload = parked
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(payload) = payload {
        std::panic::resume_unwind(payload);
    }
    out
}

/// Per-worker buffers: the radix-sort words (two `u64` per pair).
struct DrawScratch {
    rank: RankScratch,
}

impl DrawScratch {
    fn new(_n: usize) -> Self {
        Self {
            rank: RankScratch::default(),
        }
    }
}

struct Engine<'a> {
    h: MatRef<'a, f32>,
    reference: &'a RankedReference,
    what: &'a str,
    distance: Distance,
}

impl Engine<'_> {
    /// Spearman of the full-space distances with those inside `basis`'s span, and the
    /// squared norm of the projection (the variance the span captures, up to the total).
    fn rho(
        &self,
        basis: MatRef<'_, f32>,
        scratch: &mut DrawScratch,
        space: &str,
    ) -> Result<(f64, f64)> {
        let label = format!("{}: projection onto the {space}", self.what);
        let projected = repgeom_linalg::project_f32(self.h, basis, Par::Seq);
        let rho = repgeom_linalg::spearman_of_distances(
            self.reference,
            projected.as_ref(),
            self.distance,
            &mut scratch.rank,
            &label,
            Par::Seq,
        )?;
        Ok((rho, squared_norm(projected.as_ref(), Par::Seq)))
    }
}

/// Sum of squares of every entry, accumulated in `f64`: each column's sum in order, then the
/// columns' sums in order. The columns run on the current rayon pool unless `par` is
/// `Par::Seq`; each sum has one order, so the bits do not depend on the thread count.
fn squared_norm<T: Copy + Into<f64> + Sync>(m: MatRef<'_, T>, par: Par) -> f64 {
    let column = |j: usize| {
        m.col(j).iter().fold(0.0, |s, &v| {
            let v: f64 = v.into();
            s + v * v
        })
    };
    let columns = repgeom_linalg::map_in_order(m.ncols(), par, column);
    columns.into_iter().fold(0.0, |s, c| s + c)
}

/// Sets the captured-variance fields of `r` from the squared norms of the readout's and the
/// draws' projections and that of the corrected layer.
fn set_captured(r: &mut PgaResult, total: f64, readout: f64, null: &[f64]) {
    let share = |v: f64| if total > 0.0 { v / total } else { f64::NAN };
    let c = repgeom_null::CapturedVariance {
        readout: share(readout),
        null: null.iter().map(|&v| share(v)).collect(),
    };
    r.captured_variance_readout = c.readout;
    r.captured_variance_null_mean = c.null_mean();
    r.captured_variance_null_sd = c.null_sd();
}

#[cfg(test)]
#[path = "pga_tests.rs"]
mod tests;
