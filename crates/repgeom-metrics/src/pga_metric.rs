//! The `pga` registry metric: Subspace PGA of one layer through the engine in [`crate::pga`],
//! with the engine's options, the null and the bootstrap as the metric's options.

use serde::{Deserialize, Serialize};

use repgeom_linalg::{Mat, MatRef, Par};
use repgeom_null::NullBases;

use crate::error::{Error, Result};
use crate::input::LayerInput;
use crate::input::{
    NullSource, Readout, ReadoutView, check_readout_basis, check_unembedding, draw_null,
};
use crate::pga::{
    BootstrapOptions, BootstrapUnit, EngineOptions, NullKind, PgaResult, assign_q_values,
    bootstrap_ci, pga_ccr_sweep_overlapped,
};
use crate::registry::Metric;
use crate::value::{MetricInfo, MetricValue, OptionDoc};

/// Subspace PGA (defined in docs/pga.md): z of the readout's distance preservation against
/// random subspaces, at one or several CCR levels sharing one eigendecomposition.
///
/// The one set of PGA options: the CCR levels, the engine's ([`EngineOptions`], embedded
/// once; written inline as `distance`, `max_pairs`, `pair_seed`, `max_memory`, `null`,
/// `spectrum_tol`) and the sequence bootstrap, so `repgeom pga`'s flags, a study manifest's
/// `[analysis]`, the `pga` metric's JSON and a Python call all fill this struct, and
/// [`Metric::check`] on it is where their rules live. [`Pga::run_model`] runs it over a
/// model's layers; the per-layer metric is a one-layer case of that run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "PgaKeys", into = "PgaKeys")]
pub struct Pga {
    /// CCR levels (principal directions removed first); several levels form a sweep.
    pub ccr: Vec<usize>,
    /// The engine's options: distance, pair sample, memory budget, null (written inline).
    pub engine: EngineOptions,
    /// Percentile bootstrap over sequences (points when the input has no sequence ids), with
    /// the null bases held fixed: rows `pga_z_lo`, `pga_z_hi`, `rho_readout_lo`,
    /// `rho_readout_hi`. Off when `None`.
    pub bootstrap: Option<BootstrapOptions>,
}

impl Default for Pga {
    fn default() -> Self {
        Self {
            ccr: vec![1],
            engine: EngineOptions::default(),
            bootstrap: None,
        }
    }
}

/// [`Pga`] as it is written (JSON, TOML, a manifest's `[analysis]`): every option one flat
/// key, in this order, an unknown key refused with the list of known ones. The conversions
/// both ways name every field, so the compiler keeps this list and the struct in step.
#[derive(Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct PgaKeys {
    ccr: Vec<usize>,
    distance: crate::pga::Distance,
    max_pairs: Option<usize>,
    pair_seed: u64,
    #[serde(deserialize_with = "crate::pga::size_or_bytes")]
    max_memory: Option<u64>,
    bootstrap: Option<BootstrapOptions>,
    null: NullKind,
    spectrum_tol: f64,
}

impl Default for PgaKeys {
    fn default() -> Self {
        Pga::default().into()
    }
}

impl From<Pga> for PgaKeys {
    fn from(p: Pga) -> Self {
        let EngineOptions {
            distance,
            max_pairs,
            pair_seed,
            max_memory,
            null,
            spectrum_tol,
            device: _, // a setting of the run, not a key (see EngineOptions::device)
        } = p.engine;
        Self {
            ccr: p.ccr,
            distance,
            max_pairs,
            pair_seed,
            max_memory,
            bootstrap: p.bootstrap,
            null,
            spectrum_tol,
        }
    }
}

impl From<PgaKeys> for Pga {
    fn from(k: PgaKeys) -> Self {
        Self {
            ccr: k.ccr,
            engine: EngineOptions {
                distance: k.distance,
                max_pairs: k.max_pairs,
                pair_seed: k.pair_seed,
                max_memory: k.max_memory,
                null: k.null,
                spectrum_tol: k.spectrum_tol,
                device: repgeom_cuda::Device::Cpu,
            },
            bootstrap: k.bootstrap,
        }
    }
}

impl Pga {
    /// The engine settings these options ask for, with the memory budget `max_memory`, else
    /// `budget` (the run's, e.g. [`LayerInput::memory_budget`]), on the run's `device`
    /// ([`LayerInput::device`]).
    pub fn engine_with(&self, budget: Option<u64>, device: repgeom_cuda::Device) -> EngineOptions {
        EngineOptions {
            max_memory: self.engine.max_memory.or(budget),
            device,
            ..self.engine.clone()
        }
    }

    /// The variant of a row at CCR level `c`: `ccrC` under the Haar null (unchanged from
    /// before the spectrum null existed), `ccrC_spectrum` under the spectrum-matched null.
    pub fn variant(null: NullKind, c: usize) -> String {
        match null {
            NullKind::Haar => format!("ccr{c}"),
            NullKind::Spectrum => format!("ccr{c}_spectrum"),
        }
    }
}

#[typetag::serde(name = "pga")]
impl Metric for Pga {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "pga",
            summary: "Subspace PGA: z of readout vs random-subspace distance preservation (rows pga_z, rho_readout, pga_p_two_sided, pga_p_lower, pga_z_se; with bootstrap also pga_z_lo/hi, rho_readout_lo/hi)",
            source: "Subspace predictive geometric alignment as defined in repgeom's docs/pga.md; CCR after Mu & Viswanath (2018)",
            options: &[
                OptionDoc {
                    name: "ccr",
                    help: "list of CCR levels, e.g. [1, 5, 10] (one variant ccrC per level, sharing the work)",
                },
                OptionDoc {
                    name: "distance",
                    help: "\"cosine\" (default) or \"euclidean\" pairwise distances",
                },
                OptionDoc {
                    name: "max_pairs",
                    help: "estimate each Spearman correlation on a seeded sample of this many pairs (default: all pairs)",
                },
                OptionDoc {
                    name: "pair_seed",
                    help: "seed of the pair sample (default 0)",
                },
                OptionDoc {
                    name: "max_memory",
                    help: "bytes the engine may use; fewer null draws run at once, no number changes (default: half the machine's memory, set by the front end)",
                },
                OptionDoc {
                    name: "bootstrap",
                    help: "{ replicates = B, seed = S, level = 0.95 }: percentile interval over sequences, null bases fixed (default off)",
                },
                OptionDoc {
                    name: "null",
                    help: "\"haar\" (default) or \"spectrum\" (variants ccrC_spectrum, plus pga_captured_variance rows)",
                },
                OptionDoc {
                    name: "spectrum_tol",
                    help: "relative tolerance of the spectrum null on captured variance, in (0, 1); default 0.01",
                },
            ],
            needs_readout: true,
            needs_null: true,
            rotation_invariant: true,
        }
    }

    fn check(&self) -> Result<()> {
        self.engine.check()?;
        if self.ccr.is_empty() {
            return Err(Error::InvalidOption {
                name: "ccr".into(),
                value: "[]".into(),
                reason: "give at least one CCR level".into(),
            });
        }
        if let Some(b) = &self.bootstrap {
            b.check()?;
        }
        let mut sorted = self.ccr.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != self.ccr.len() {
            return Err(Error::InvalidOption {
                name: "ccr".into(),
                value: format!("{:?}", self.ccr),
                reason: "CCR levels must be distinct".into(),
            });
        }
        Ok(())
    }

    /// One layer through [`Pga::run_model`] (the layer's readout basis and null bases
    /// supplied), so the metric and a model's run share one body, the bootstrap included.
    fn compute(&self, input: &LayerInput<'_>) -> Result<Vec<MetricValue>> {
        let basis = input.readout_basis("pga")?;
        let null = input.null("pga")?;
        let run = self.run_model(
            &ModelInput {
                layers: vec![ModelLayer {
                    layer: 0,
                    acts: input.acts(),
                    what: input.what().to_owned(),
                }],
                readout: Readout::Basis(basis),
                ks: vec![basis.ncols()],
                null: NullSource::Given(null),
                sequences: input.sequences(),
                memory_budget: input.memory_budget(),
                device: input.device(),
            },
            input.par(),
            &Hooks::default(),
        )?;
        // Rows in the order the levels were asked for (the run sorts them by level).
        let results: Vec<&PgaResult> = (self.ccr.iter())
            .filter_map(|&c| run.rows.iter().find(|r| r.result.ccr == c))
            .map(|r| &r.result)
            .collect();
        let mut out = Vec::with_capacity(10 * results.len());
        for &r in &results {
            let variant = Self::variant(self.engine.null, r.ccr);
            let summary = r.summary;
            let mut z = MetricValue::new("pga_z", &variant, summary.z)
                .with_null(&summary)
                .with_extra("rho_readout", r.rho_readout)
                .with_extra("k", r.k as f64)
                .with_extra("n_null", r.null_rhos.len() as f64);
            if self.engine.null != NullKind::Haar {
                z = z
                    .with_extra("captured_variance_readout", r.captured_variance_readout)
                    .with_extra("captured_variance_null_mean", r.captured_variance_null_mean)
                    .with_extra("captured_variance_null_sd", r.captured_variance_null_sd);
            }
            out.push(z);
            out.push(
                MetricValue::new("rho_readout", &variant, r.rho_readout)
                    .with_null(&summary)
                    .with_extra("z", summary.z),
            );
            // The other tail and z's null-sampling error, as their own tidy rows so that the
            // columns of existing tables do not change; the report's summary reads
            // `pga_p_two_sided` for its multiple-comparison rule.
            out.push(MetricValue::new("pga_p_two_sided", &variant, r.p_two_sided));
            out.push(MetricValue::new("pga_p_lower", &variant, r.p_lower));
            out.push(MetricValue::new("pga_z_se", &variant, r.z_se));
            if let Some(ci) = r.bootstrap {
                let by_sequence = f64::from(u8::from(ci.unit == BootstrapUnit::Sequences));
                for (name, v) in [
                    ("pga_z_lo", ci.z_lo),
                    ("pga_z_hi", ci.z_hi),
                    ("rho_readout_lo", ci.rho_lo),
                    ("rho_readout_hi", ci.rho_hi),
                ] {
                    out.push(
                        MetricValue::new(name, &variant, v)
                            .with_extra("bootstrap_replicates", ci.replicates as f64)
                            .with_extra("bootstrap_level", ci.level)
                            .with_extra("bootstrap_by_sequence", by_sequence),
                    );
                }
            }
            // What the spectrum null matched: the readout's share of the layer's variance, with
            // the null draws' mean and sd in the null columns. Left out under the Haar null so
            // that existing tables keep their rows (the CLI reports it for both nulls).
            if self.engine.null != NullKind::Haar {
                let mut v = MetricValue::new(
                    "pga_captured_variance",
                    &variant,
                    r.captured_variance_readout,
                );
                v.null_mean = Some(r.captured_variance_null_mean);
                v.null_std = Some(r.captured_variance_null_sd);
                out.push(v);
            }
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------------
// A model's run: every layer, every k, the bootstrap and the q-values.

/// One layer of a model for [`Pga::run_model`].
#[derive(Debug, Clone)]
pub struct ModelLayer<'a> {
    /// The layer's index (the `layer` column).
    pub layer: usize,
    /// Its activations, `N × d`.
    pub acts: MatRef<'a, f32>,
    /// Its name in errors, e.g. `acts.safetensors: hidden_states.3 [2048, 512]`.
    pub what: String,
}

/// The inputs of [`Pga::run_model`] besides the options.
#[derive(Debug, Clone)]
pub struct ModelInput<'a> {
    /// The layers, all of one hidden size `d`.
    pub layers: Vec<ModelLayer<'a>>,
    /// `W_U` or a basis.
    pub readout: Readout<'a>,
    /// The `k` values (see [`k_values`]); ignored for a supplied basis, whose column count is
    /// `k`.
    pub ks: Vec<usize>,
    /// The null bases: drawn for each `k`, or supplied (one `k` only).
    pub null: NullSource<'a>,
    /// The sequence of each point (`positions` metadata) for the bootstrap; `None` resamples
    /// points.
    pub sequences: Option<&'a [usize]>,
    /// The run's memory budget in bytes where the options' `max_memory` is unset (front ends
    /// pass `repgeom_io::default_memory_budget()`); `None`: unlimited.
    pub memory_budget: Option<u64>,
    /// Where the null draws run (`--device`; [`EngineOptions::device`]).
    pub device: repgeom_cuda::Device,
}

/// Callbacks of [`Pga::run_model`]; `Default` is none.
#[derive(Default, Clone, Copy)]
pub struct Hooks<'a> {
    /// Called once per finished null draw, bootstrap draws included (from worker threads).
    pub on_draw: Option<&'a (dyn Fn() + Sync)>,
    /// Called as each layer starts with `(layer, k)` (two layers may run at once, see
    /// [`Pga::run_model`]).
    pub on_layer: Option<&'a (dyn Fn(usize, usize) + Sync)>,
}

impl std::fmt::Debug for Hooks<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("on_draw", &self.on_draw.is_some())
            .field("on_layer", &self.on_layer.is_some())
            .finish()
    }
}

/// One row of a model's PGA run: a layer at one `k` and CCR level.
#[derive(Debug, Clone, PartialEq)]
pub struct PgaRow {
    /// The layer's index.
    pub layer: usize,
    /// The result, its `q_value` assigned over the whole run.
    pub result: PgaResult,
}

/// What [`Pga::run_model`] returns.
#[derive(Debug)]
pub struct ModelPga {
    /// One row per layer, `k` and CCR level, sorted by `(layer, k, ccr)`.
    pub rows: Vec<PgaRow>,
    /// The readout basis used, with as many columns as the largest `k` (its leading columns
    /// serve every smaller `k`): to save and pass as a basis next time.
    pub readout_basis: Mat<f64>,
    /// The null bases used, one per `k` in increasing order.
    pub null_bases: Vec<NullBases>,
}

impl Pga {
    /// How many times [`Pga::run_model`] calls `hooks.on_draw` on `input` (null draws and
    /// bootstrap draws): the length of a progress bar over the run, for every front end.
    ///
    /// ```
    /// use repgeom_linalg::Mat;
    /// use repgeom_metrics::Pga;
    /// use repgeom_metrics::analysis::{ModelInput, ModelLayer, NullSource, Readout};
    /// use repgeom_null::NullParams;
    ///
    /// let (w_u, x) = (Mat::<f32>::zeros(50, 6), Mat::<f32>::zeros(30, 6));
    /// let input = ModelInput {
    ///     layers: vec![ModelLayer { layer: 0, acts: x.as_ref(), what: "toy".into() }],
    ///     readout: Readout::Unembedding(w_u.as_ref()),
    ///     ks: vec![1, 2],
    ///     null: NullSource::Draw(NullParams { n_null: 10, seed: 0 }),
    ///     sequences: None,
    ///     memory_budget: None,
    ///     device: Default::default(),
    /// };
    /// assert_eq!(Pga { ccr: vec![0, 1], ..Pga::default() }.draws(&input), 2 * 2 * 10);
    /// ```
    pub fn draws(&self, input: &ModelInput<'_>) -> u64 {
        let n_null = match &input.null {
            NullSource::Given(n) => n.len(),
            NullSource::Draw(p) => p.n_null,
        };
        let ks = match input.readout {
            Readout::Basis(_) | Readout::NdBasis(_) => 1,
            Readout::Unembedding(_) | Readout::NdUnembedding(_) => input.ks.len(),
        };
        let boot = self.bootstrap.as_ref().map_or(0, |b| b.replicates);
        (input.layers.len() * ks * self.ccr.len() * n_null * (1 + boot)) as u64
    }

    /// One layer's rows: its results at each CCR level, with the bootstrap's intervals when
    /// asked for.
    #[allow(clippy::too_many_arguments)]
    fn layer_rows(
        &self,
        layer: &ModelLayer<'_>,
        basis: MatRef<'_, f64>,
        mut results: Vec<PgaResult>,
        null: &NullBases,
        input: &ModelInput<'_>,
        par: Par,
        on_draw: &(dyn Fn() + Sync),
        engine: &EngineOptions,
    ) -> Result<Vec<PgaRow>> {
        if let Some(boot) = &self.bootstrap {
            let cis = bootstrap_ci(
                layer.acts,
                basis,
                null,
                &self.ccr,
                input.sequences,
                &layer.what,
                par,
                engine,
                boot,
            )?;
            for _ in 0..boot.replicates * self.ccr.len() * null.len() {
                on_draw();
            }
            for (r, ci) in results.iter_mut().zip(cis) {
                r.bootstrap = Some(ci);
            }
        }
        Ok(results
            .into_iter()
            .map(|result| PgaRow {
                layer: layer.layer,
                result,
            })
            .collect())
    }

    /// Subspace PGA over a model's layers with these options: for each `k`, the null bases
    /// (drawn from the seed or supplied), then each layer at every CCR level (`W_U`'s readout
    /// subspace decomposed once, for the largest `k`, beside the first layer's preparation and
    /// null draws, and reused after), the bootstrap when asked, and Benjamini–Hochberg
    /// q-values over all rows of the run, one family per CCR level.
    ///
    /// Once the basis is known, layers run two at a time under the Haar null on all pairs
    /// when half the memory budget holds a layer with a worker per thread: each layer's
    /// sequential stages then overlap the other's null draws (on the CPU or the device). The
    /// rows are the same either way, and at any thread count.
    ///
    /// ```
    /// use repgeom_linalg::{Mat, Par};
    /// use repgeom_metrics::Pga;
    /// use repgeom_metrics::analysis::{Hooks, ModelInput, ModelLayer, NullSource, Readout};
    /// use repgeom_null::NullParams;
    ///
    /// let w_u = Mat::<f32>::from_fn(50, 6, |i, j| ((i * 13 + j * 7) % 9) as f32 - 4.0);
    /// let layers: Vec<Mat<f32>> = (0..2)
    ///     .map(|l| Mat::from_fn(30, 6, |i, j| ((i * 31 + j * 17 + l) % 11) as f32 - 5.0))
    ///     .collect();
    /// let input = ModelInput {
    ///     layers: layers.iter().enumerate().map(|(layer, m)| ModelLayer {
    ///         layer, acts: m.as_ref(), what: format!("toy layer {layer}"),
    ///     }).collect(),
    ///     readout: Readout::Unembedding(w_u.as_ref()),
    ///     ks: vec![1, 2],
    ///     null: NullSource::Draw(NullParams { n_null: 10, seed: 0 }),
    ///     sequences: None,
    ///     memory_budget: None,
    ///     device: Default::default(),
    /// };
    /// let run = Pga { ccr: vec![0, 1], ..Pga::default() }.run_model(&input, Par::Seq, &Hooks::default())?;
    /// assert_eq!(run.rows.len(), 2 * 2 * 2); // layers × k × CCR
    /// assert!(run.rows.iter().all(|r| r.result.q_value.is_some()));
    /// assert_eq!(run.readout_basis.ncols(), 2);
    /// # Ok::<(), repgeom_metrics::Error>(())
    /// ```
    pub fn run_model(
        &self,
        input: &ModelInput<'_>,
        par: Par,
        hooks: &Hooks<'_>,
    ) -> Result<ModelPga> {
        self.check()?;
        let Some(first) = input.layers.first() else {
            return Err(Error::InvalidOption {
                name: "layers".into(),
                value: "[]".into(),
                reason: "no layers to analyse".into(),
            });
        };
        let d = first.acts.ncols();
        let (mut w_copy, mut basis_copy) = (None, None);
        let readout = input.readout.view(&mut w_copy, &mut basis_copy);
        let ks = match readout {
            ReadoutView::Basis(b) => {
                check_readout_basis(b, d, &first.what)?;
                vec![b.ncols()]
            }
            ReadoutView::Unembedding(_) => input.ks.clone(),
        };
        let kmax = *ks.iter().max().ok_or_else(|| Error::InvalidOption {
            name: "k".into(),
            value: "[]".into(),
            reason: "give one or more k values".into(),
        })?;
        if ks.len() > 1 && matches!(input.null, NullSource::Given(_)) {
            return Err(Error::InvalidOption {
                name: "k".into(),
                value: format!("{ks:?}"),
                reason: "supplied null bases hold one k; give a single k with them".into(),
            });
        }
        if let ReadoutView::Unembedding(w_u) = readout {
            check_unembedding(w_u, d, kmax, &first.what)?;
        }
        let engine = self.engine_with(input.memory_budget, input.device);
        let on_draw = hooks.on_draw.unwrap_or(&|| {});
        let mut full_basis = match readout {
            ReadoutView::Basis(b) => Some(b.to_owned()),
            ReadoutView::Unembedding(_) => None,
        };
        let mut rows = Vec::new();
        let mut null_bases = Vec::with_capacity(ks.len());
        for &k in &ks {
            let null = match &input.null {
                NullSource::Given(n) => (*n).clone(),
                NullSource::Draw(p) => draw_null(d, k, p.clone(), &first.what)?,
            };
            let mut rest = &input.layers[..];
            while let Some((layer, tail)) = rest.split_first() {
                let Some(full) = &full_basis else {
                    // The readout subspace at the largest k, decomposed beside this layer's
                    // preparation and null draws; its leading k columns serve this k.
                    let ReadoutView::Unembedding(w_u) = readout else {
                        unreachable!("a given basis is kept")
                    };
                    if let Some(f) = hooks.on_layer {
                        f(layer.layer, k);
                    }
                    let decomposed = std::sync::Mutex::new(None);
                    let compute = || {
                        let full = repgeom_linalg::readout_subspace(w_u, kmax, par)?;
                        let basis = full.as_ref().subcols(0, k).to_owned();
                        *decomposed
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(full);
                        Ok::<_, Error>(basis)
                    };
                    let (basis, results) = pga_ccr_sweep_overlapped(
                        layer.acts,
                        compute,
                        &null,
                        &self.ccr,
                        &layer.what,
                        par,
                        on_draw,
                        &engine,
                    )?;
                    full_basis = decomposed
                        .into_inner()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    let rows_here = self.layer_rows(
                        layer,
                        basis.as_ref(),
                        results,
                        &null,
                        input,
                        par,
                        on_draw,
                        &engine,
                    )?;
                    rows.extend(rows_here);
                    rest = tail;
                    continue;
                };
                let basis = full.as_ref().subcols(0, k.min(full.ncols()));
                let run = |layer: &ModelLayer<'_>, engine: &EngineOptions| {
                    if let Some(f) = hooks.on_layer {
                        f(layer.layer, k);
                    }
                    let results = crate::pga::pga_ccr_sweep_with(
                        layer.acts,
                        basis,
                        &null,
                        &self.ccr,
                        &layer.what,
                        par,
                        on_draw,
                        engine,
                    )?;
                    self.layer_rows(layer, basis, results, &null, input, par, on_draw, engine)
                };
                // Two layers at a time where the budget holds both: one layer's sequential
                // stages (centring, CCR, the full-space ranking) run beside the other's null
                // draws instead of leaving cores (or the device) idle. Each layer's numbers
                // do not depend on it.
                match (
                    tail.first(),
                    pair_budget(&engine, &null, layer.acts.nrows(), par),
                ) {
                    (Some(next), Some(half)) => {
                        // The bases' f32 copy first (once per model): a layer that waited on
                        // the other's conversion would block a thread the conversion could use.
                        null.bases_f32();
                        let (a, b) = rayon::join(|| run(layer, &half), || run(next, &half));
                        rows.extend(a?);
                        rows.extend(b?);
                        rest = &tail[1..];
                    }
                    _ => {
                        rows.extend(run(layer, &engine)?);
                        rest = tail;
                    }
                }
            }
            null_bases.push(null);
        }
        assign_q_values(&mut rows.iter_mut().map(|r| &mut r.result).collect::<Vec<_>>());
        rows.sort_by_key(|r| (r.layer, r.result.k, r.result.ccr));
        Ok(ModelPga {
            rows,
            readout_basis: full_basis.expect("the readout was decomposed or given"),
            null_bases,
        })
    }
}

/// The engine options for two layers run side by side, each with half the memory budget,
/// or `None` when they should run one at a time: on one thread, under the spectrum null
/// (its per-level matching holds `d × d` and every draw's bases), on sampled pairs (their
/// draws are cheap beside the rest), or when half the budget does not hold one layer's
/// shared memory and a worker per thread.
fn pair_budget(
    engine: &EngineOptions,
    null: &NullBases,
    n: usize,
    par: Par,
) -> Option<EngineOptions> {
    if par == Par::Seq || engine.null != NullKind::Haar || engine.sampled_pairs(n).is_some() {
        return None;
    }
    let half = match engine.max_memory {
        Some(budget) => {
            // Only where each layer keeps a worker per thread: pairing must not cut the
            // draws' parallelism.
            let est = engine.exact_memory(n, null.d(), null.k(), null.len())?;
            (est.at_once(budget, rayon::current_num_threads()) >= 2).then_some(Some(budget / 2))?
        }
        None => None,
    };
    Some(EngineOptions {
        max_memory: half,
        ..engine.clone()
    })
}
