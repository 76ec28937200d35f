//! A model's analysis, prepared once and run in one place.
//!
//! Every front end (the `repgeom` commands, the study's units, the Python package) has the same
//! per-model work to do before it can measure a layer: the readout subspace of `W_U`, the null
//! bases, then one [`LayerInput`] per layer carrying both. [`ModelContext`] is that work, done
//! once per model. [`ModelPair`] is the same for the two models of a comparison: both contexts
//! (model B's null bases from `seed + 1`), the refusal of a metric whose readout is missing,
//! and the points that are the same input twice, judged once on every layer of both models, so
//! `repgeom compare`, Python's `compare` and the study's cross units give the same rows.
//! [`Pga::run_model`] is the whole Subspace PGA run over a model's layers (the `k` list, the
//! null bases drawn or supplied, the readout decomposed beside the first layer and reused, the
//! bootstrap, the q-values), so `repgeom pga`, `repgeom metrics`, the study and `repgeom.pga`
//! give bit-identical rows for the same options.

use repgeom_linalg::{Mat, MatRef, Par};
use repgeom_null::{NullBases, NullParams};

use crate::calibrate::{CompareSettings, Comparison};
use crate::error::{Error, Result};
pub use crate::input::{BASIS_TOL, NullSource, Readout, basis_from_array, check_readout_basis};
use crate::input::{LayerInput, ReadoutView, check_unembedding, draw_null};
use crate::pga::MemoryEstimate;
pub use crate::pga_metric::{Hooks, ModelInput, ModelLayer, ModelPga, PgaRow};
use crate::registry::PairMetric;

/// The `k` values of a run: the list given (sorted, each once), or `round(f·d)` for a fraction
/// `f` of the hidden size (so that z is comparable across widths).
///
/// ```
/// use repgeom_metrics::analysis::k_values;
/// assert_eq!(k_values(&[100, 25], None, 512).unwrap(), [25, 100]);
/// assert_eq!(k_values(&[], Some(0.1), 512).unwrap(), [51]);
/// assert!(k_values(&[25, 25], None, 512).is_err());
/// ```
pub fn k_values(ks: &[usize], k_frac: Option<f64>, d: usize) -> Result<Vec<usize>> {
    if let Some(f) = k_frac {
        crate::input::check_k_frac(f)?;
        let k = crate::input::k_from_fraction(f, d);
        if !crate::input::k_fits(k, d) {
            return Err(Error::InvalidOption {
                name: "k_frac".into(),
                value: f.to_string(),
                reason: format!("k = round({f} · {d}) = {k} lies outside 0 < k < d = {d}"),
            });
        }
        return Ok(vec![k]);
    }
    let mut sorted = ks.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != ks.len() || sorted.is_empty() {
        return Err(Error::InvalidOption {
            name: "k".into(),
            value: format!("{ks:?}"),
            reason: "give one or more distinct k values".into(),
        });
    }
    Ok(sorted)
}

/// Per-model work shared by every layer: the readout subspace and the null bases, each
/// prepared once, and [`ModelContext::layer`] to make a layer's [`LayerInput`] from them.
#[derive(Debug)]
pub struct ModelContext {
    basis: Option<Mat<f64>>,
    null: Option<NullBases>,
    par: Par,
    memory_budget: Option<u64>,
    device: repgeom_cuda::Device,
}

impl ModelContext {
    /// Prepares a model of hidden size `d`: the readout subspace of dimension `k` (from `W_U`,
    /// or a supplied basis, checked) and the null bases (drawn for `(d, k)`, or supplied), each
    /// only when given. The decomposition and the null draws run side by side on the current
    /// rayon pool, each bit-identical at any thread count; `par` is the parallelism of the
    /// layers' metrics ([`LayerInput::par`]). `what` names the model in errors.
    ///
    /// ```
    /// use repgeom_linalg::{Mat, Par};
    /// use repgeom_metrics::analysis::{ModelContext, NullSource, Readout};
    /// use repgeom_metrics::{Metric, RankMe};
    /// use repgeom_null::NullParams;
    ///
    /// let w_u = Mat::<f32>::from_fn(50, 6, |i, j| ((i * 13 + j * 7) % 9) as f32 - 4.0);
    /// let acts = Mat::<f32>::from_fn(30, 6, |i, j| ((i * 31 + j * 17) % 11) as f32 - 5.0);
    /// let null = NullSource::Draw(NullParams { n_null: 10, seed: 0 });
    /// let model = ModelContext::new(6, 2, Some(Readout::Unembedding(w_u.as_ref())), Some(null), "toy", Par::Seq)?;
    /// let layer = model.layer(acts.as_ref(), "toy layer 0")?;
    /// assert_eq!(model.basis().unwrap().ncols(), 2);
    /// assert!(!RankMe::default().compute(&layer)?.is_empty());
    /// # Ok::<(), repgeom_metrics::Error>(())
    /// ```
    pub fn new(
        d: usize,
        k: usize,
        readout: Option<Readout<'_>>,
        null: Option<NullSource<'_>>,
        what: &str,
        par: Par,
    ) -> Result<Self> {
        let (mut w_copy, mut basis_copy) = (None, None);
        let readout = readout.map(|r| r.view(&mut w_copy, &mut basis_copy));
        let decompose = || -> Result<Option<Mat<f64>>> {
            match readout {
                None => Ok(None),
                Some(ReadoutView::Basis(b)) => {
                    check_readout_basis(b, d, what)?;
                    Ok(Some(b.to_owned()))
                }
                Some(ReadoutView::Unembedding(w_u)) => {
                    check_unembedding(w_u, d, k, what)?;
                    Ok(Some(repgeom_linalg::readout_subspace(
                        w_u,
                        k,
                        Par::rayon(0),
                    )?))
                }
            }
        };
        let draw = || -> Result<Option<NullBases>> {
            match null {
                None => Ok(None),
                Some(NullSource::Given(n)) => Ok(Some(n.clone())),
                Some(NullSource::Draw(p)) => draw_null(d, k, p, what).map(Some),
            }
        };
        let (basis, null) = rayon::join(decompose, draw);
        Ok(Self {
            basis: basis?,
            null: null?,
            par,
            memory_budget: None,
            device: repgeom_cuda::Device::Cpu,
        })
    }

    /// The memory budget its layers carry ([`LayerInput::with_memory_budget`]); front ends
    /// pass `repgeom_io::default_memory_budget()`.
    pub fn with_memory_budget(mut self, bytes: Option<u64>) -> Self {
        self.memory_budget = bytes;
        self
    }

    /// The device its layers carry ([`LayerInput::with_device`]).
    pub fn with_device(mut self, device: repgeom_cuda::Device) -> Self {
        self.device = device;
        self
    }

    /// The readout basis (`d × k`), if the model has a readout.
    pub fn basis(&self) -> Option<MatRef<'_, f64>> {
        self.basis.as_ref().map(Mat::as_ref)
    }

    /// The null bases, if drawn or supplied.
    pub fn null(&self) -> Option<&NullBases> {
        self.null.as_ref()
    }

    /// What one [`crate::Pga`] call on a layer of `n` points of this model needs from the
    /// engine's memory, and the budget it runs under; `None` where no budget applies (none
    /// set, or sampled pairs) or the model has no null bases. A front end that runs several
    /// layers at once on one pool sizes them with [`MemoryEstimate::at_once`] (a study's
    /// units of one checkpoint) before it builds any layer's input.
    ///
    /// ```
    /// use repgeom_linalg::{Mat, Par};
    /// use repgeom_metrics::analysis::{ModelContext, NullSource, Readout};
    /// use repgeom_metrics::Pga;
    /// use repgeom_null::NullParams;
    ///
    /// let w_u = Mat::<f32>::from_fn(50, 8, |i, j| ((i * 13 + j * 7) % 9) as f32 - 4.0);
    /// let null = NullSource::Draw(NullParams { n_null: 10, seed: 0 });
    /// let model = ModelContext::new(8, 2, Some(Readout::Unembedding(w_u.as_ref())), Some(null), "toy", Par::Seq)?
    ///     .with_memory_budget(Some(1 << 30));
    /// let (est, budget) = model.pga_memory(&Pga::default(), 300).unwrap();
    /// assert_eq!((est, budget), (repgeom_metrics::pga::memory_estimate(300, 8, 2), 1 << 30));
    /// # Ok::<(), repgeom_metrics::Error>(())
    /// ```
    pub fn pga_memory(&self, pga: &crate::Pga, n: usize) -> Option<(MemoryEstimate, u64)> {
        let null = self.null.as_ref()?;
        let engine = pga.engine_with(self.memory_budget, self.device);
        let est = engine.exact_memory(n, null.d(), null.k(), null.len())?;
        Some((est, engine.max_memory?))
    }

    /// One layer (`N × d`) as a metric input, with the model's readout basis and null bases
    /// attached (each checked against the layer).
    pub fn layer<'a>(
        &'a self,
        acts: MatRef<'a, f32>,
        what: impl Into<String>,
    ) -> Result<LayerInput<'a>> {
        let mut input = LayerInput::new(acts, what, self.par)?
            .with_memory_budget(self.memory_budget)
            .with_device(self.device);
        if let Some(b) = &self.basis {
            input = input.with_readout(b.as_ref())?;
        }
        if let Some(n) = &self.null {
            input = input.with_null(n)?;
        }
        Ok(input)
    }
}

/// Whether any of `metrics` uses the readout, and any the null bases: `(readout, null)`. A
/// front end reads a model's `W_U` only when the first is true.
pub fn pair_needs(metrics: &[Box<dyn PairMetric>]) -> (bool, bool) {
    metrics.iter().fold((false, false), |(r, n), m| {
        let (mr, mn) = m.needs_readout_and_null();
        (r || mr, n || mn)
    })
}

/// Whether any of the per-layer `metrics` uses the readout, and any the null bases:
/// `(readout, null)`; with `readout_given` false, a metric that uses it is refused
/// ([`Error::MissingReadout`], naming the metrics and `how` this front end passes a readout).
///
/// ```
/// use repgeom_metrics::{Metric, Pga, RankMe};
/// let metrics: Vec<Box<dyn Metric>> = vec![Box::new(RankMe::default()), Box::new(Pga::default())];
/// assert_eq!(repgeom_metrics::analysis::needs(&metrics, true, "--readout W_U").unwrap(), (true, true));
/// let err = repgeom_metrics::analysis::needs(&metrics, false, "--readout W_U").unwrap_err();
/// assert_eq!(err.to_string(), "pga needs the readout: pass --readout W_U");
/// ```
pub fn needs(
    metrics: &[Box<dyn crate::registry::Metric>],
    readout_given: bool,
    how: &str,
) -> Result<(bool, bool)> {
    let users: Vec<&str> = (metrics.iter())
        .filter(|m| m.info().needs_readout)
        .map(|m| m.info().name)
        .collect();
    if !users.is_empty() && !readout_given {
        return Err(Error::MissingReadout {
            verb: if users.len() == 1 { "needs" } else { "need" },
            metrics: users.join(", "),
            how: how.to_owned(),
        });
    }
    let needs_null = metrics.iter().any(|m| m.info().needs_null);
    Ok((!users.is_empty(), needs_null))
}

/// One model of a [`ModelPair`], as the front end hands it over.
#[derive(Debug, Clone, Copy)]
pub struct PairModel<'a> {
    /// Every layer of the model the comparison holds (`N × d` each; the same `N` points in the
    /// same order as the other model's), whichever of them are then compared: the points that
    /// are the same input twice are judged on all of them.
    pub layers: &'a [MatRef<'a, f32>],
    /// Dimension of the readout subspace (a supplied basis has its own: its column count).
    pub k: usize,
    /// `W_U` or a basis, when the front end has one (required only if a metric uses it).
    pub readout: Option<Readout<'a>>,
    /// The model's name in errors (a file, a label).
    pub what: &'a str,
}

/// The two models of a comparison, prepared once for all its layer pairs and metrics: each
/// model's [`ModelContext`] (the readout where a metric uses it; the null bases where one uses
/// them, model A's drawn from `seed` and model B's from `seed + 1`, independent even at the
/// same width), and the points that are the same input twice (equal rows in every layer of
/// both models: a repeated token in a repeated context), judged once on every layer of both.
/// [`ModelPair::compare`] drops those and runs [`crate::calibrate::compare`]'s work for each metric.
///
/// ```
/// use repgeom_linalg::{Mat, MatRef, Par};
/// use repgeom_metrics::analysis::{ModelPair, PairModel};
/// use repgeom_metrics::calibrate::CompareSettings;
/// use repgeom_metrics::{CkaLinear, PairMetric, layer_pairs};
/// use repgeom_null::NullParams;
///
/// // Point 1 repeats point 0 in layer 0 only (a repeated token at the embedding layer), point
/// // 3 repeats point 2 in every layer (the same input twice).
/// let layers: Vec<Mat<f32>> = (0..2)
///     .map(|l| Mat::from_fn(20, 4, |i, j| {
///         let i = match i { 1 if l == 0 => 0, 3 => 2, _ => i };
///         ((i * 7 + j * 3 + l) % 11) as f32 + (i * j) as f32 * 0.1
///     }))
///     .collect();
/// let views: Vec<MatRef<'_, f32>> = layers.iter().map(Mat::as_ref).collect();
/// let metrics: Vec<Box<dyn PairMetric>> = vec![Box::new(CkaLinear::default())];
/// let side = PairModel { layers: &views, k: 2, readout: None, what: "toy" };
/// let pair = ModelPair::new(&metrics, side, side, NullParams::default(), Par::Seq)?;
/// assert_eq!(pair.duplicates(), [3]);
/// // Layer 0 alone, still judged on both layers: point 1 is kept.
/// let (a, b) = (pair.a().layer(views[0], "A0")?, pair.b().layer(views[0], "B0")?);
/// let out = pair.compare(&metrics, &[&a], &[&b], &layer_pairs(1, 1, false),
///                        &CompareSettings::default(), &mut |_| {})?;
/// assert_eq!(out.pairs[0].value.extra["duplicates_dropped"], 1.0);
/// # Ok::<(), repgeom_metrics::Error>(())
/// ```
#[derive(Debug)]
pub struct ModelPair {
    a: ModelContext,
    b: ModelContext,
    /// Points (ascending) equal to an earlier point in every layer of both models.
    duplicates: Vec<usize>,
    /// Points of every layer.
    n: usize,
}

impl ModelPair {
    /// Prepares models `a` and `b` for `metrics`: the readouts where a metric uses them (an
    /// error naming those metrics and the model without one when either is missing), the null
    /// bases (`null.n_null` of them) where a metric uses them, model A's from `null.seed` and
    /// model B's from `null.seed + 1`, and the duplicated points over every layer of both.
    /// `par` is the parallelism of the layers' metrics and of the permutation draws.
    pub fn new<'a>(
        metrics: &[Box<dyn PairMetric>],
        a: PairModel<'a>,
        b: PairModel<'a>,
        null: NullParams,
        par: Par,
    ) -> Result<Self> {
        let (needs_readout, needs_null) = pair_needs(metrics);
        for m in [&a, &b] {
            if m.layers.is_empty() {
                return Err(Error::InvalidOption {
                    name: "layers".into(),
                    value: "[]".into(),
                    reason: format!("{}: no layers to compare", m.what),
                });
            }
        }
        let n = a.layers[0].nrows();
        for m in [&a, &b] {
            if let Some(x) = m.layers.iter().find(|x| x.nrows() != n) {
                return Err(Error::ShapeMismatch {
                    what: format!(
                        "{} against {}: a comparison needs the same points",
                        a.what, m.what
                    ),
                    left: format!("N = {n}"),
                    right: format!("N = {}", x.nrows()),
                });
            }
        }
        if needs_readout {
            let missing: Vec<&str> = [&a, &b]
                .into_iter()
                .filter(|m| m.readout.is_none())
                .map(|m| m.what)
                .collect();
            if !missing.is_empty() {
                let users: Vec<&str> = (metrics.iter())
                    .filter(|m| m.needs_readout_and_null().0)
                    .map(|m| m.info().name)
                    .collect();
                return Err(Error::MissingReadouts {
                    metrics: users.join(", "),
                    missing: missing.join(" and "),
                });
            }
        }
        let context = |m: &PairModel<'_>, seed: u64| {
            let readout = m.readout.filter(|_| needs_readout);
            let k = match readout {
                Some(Readout::Basis(basis)) => basis.ncols(),
                Some(Readout::NdBasis(basis)) => basis.ncols(),
                _ => m.k,
            };
            let source = needs_null.then_some(NullSource::Draw(NullParams {
                n_null: null.n_null,
                seed,
            }));
            ModelContext::new(m.layers[0].ncols(), k, readout, source, m.what, par)
        };
        let layers: Vec<MatRef<'_, f32>> = a.layers.iter().chain(b.layers).copied().collect();
        Ok(Self {
            a: context(&a, null.seed)?,
            b: context(&b, null.seed.wrapping_add(1))?,
            duplicates: crate::calibrate::duplicate_rows(&layers),
            n,
        })
    }

    /// The memory budget both models' layers carry ([`ModelContext::with_memory_budget`]).
    pub fn with_memory_budget(self, bytes: Option<u64>) -> Self {
        Self {
            a: self.a.with_memory_budget(bytes),
            b: self.b.with_memory_budget(bytes),
            ..self
        }
    }

    /// Both models' device ([`ModelContext::with_device`]): kernel metrics' permutation nulls
    /// (linear CKA, the distance correlations) run there, and whatever else their layers'
    /// engines run on a device.
    pub fn with_device(self, device: repgeom_cuda::Device) -> Self {
        Self {
            a: self.a.with_device(device),
            b: self.b.with_device(device),
            ..self
        }
    }

    /// Model A's context: [`ModelContext::layer`] makes its layers' inputs.
    pub fn a(&self) -> &ModelContext {
        &self.a
    }

    /// Model B's context (null bases from `seed + 1`).
    pub fn b(&self) -> &ModelContext {
        &self.b
    }

    /// The points (ascending) that are the same input twice, judged on every layer of both
    /// models; each comparison keeps the first copy.
    pub fn duplicates(&self) -> &[usize] {
        &self.duplicates
    }

    /// `metrics` over `pairs` of layers (indices into `a` and `b`, made with [`Self::a`] and
    /// [`Self::b`] from the layers given to [`Self::new`]) with their permutation nulls and
    /// `settings.aggregates`, rows in table order, as a layer × layer table is read (each layer pair's rows metric by metric, then the aggregates)
    /// them, with [`Self::duplicates`] dropped (extra `duplicates_dropped` on every row).
    /// A cell's value does not depend on which other cells are computed, but its null is
    /// computed in the shape of the `a × b` table: pass every layer, as `repgeom compare` does,
    /// for the command line's numbers bit for bit.
    pub fn compare(
        &self,
        metrics: &[Box<dyn PairMetric>],
        a: &[&LayerInput<'_>],
        b: &[&LayerInput<'_>],
        pairs: &[(usize, usize)],
        settings: &CompareSettings,
        on_metric: &mut dyn FnMut(&str),
    ) -> Result<Comparison> {
        if let Some(x) = a.iter().chain(b).find(|x| x.n() != self.n) {
            return Err(Error::ShapeMismatch {
                what: x.what().to_owned(),
                left: format!("{} points", x.n()),
                right: format!("the pair's N = {}", self.n),
            });
        }
        let dups = &self.duplicates;
        crate::calibrate::compare_all(metrics, a, b, pairs, settings, dups, on_metric)
    }
}

#[cfg(test)]
#[path = "analysis_tests.rs"]
mod tests;
