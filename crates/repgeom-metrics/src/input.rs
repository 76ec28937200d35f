//! What a metric is given: [`LayerInput`] (one layer plus its shared precomputation and
//! caches), [`PairInput`] (two layers of the same points), the activations and readout as a
//! caller hands them over ([`Acts`], [`Readout`]), where the null bases come from
//! ([`NullSource`]), and the checks of those inputs that every run shares (points, finiteness,
//! the readout basis' shape and orthonormality, `W_U`'s width and `k`).
//!
//! This module sits below every metric and every run: it names no metric, no trait of the
//! registry and no driver, so the plugin traits (module `registry`), the engines and the runs
//! (modules `pga`, `calibrate`, `analysis`) all build on it without a circle.

use std::any::Any;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use ndarray::{Array2, ArrayView2};
use repgeom_linalg::{Mat, MatRef, Par, center_columns, first_non_finite, get_or_make};
use repgeom_null::{NullBases, NullParams};

use crate::error::{Error, Result};

/// Fewest points any metric accepts (the unbiased HSIC and rank statistics need 4).
pub const MIN_POINTS: usize = 4;

/// The readout subspace dimension `k` of a run that does not choose one: `repgeom pga`,
/// `metrics` and `compare`'s `--k`, a manifest's models, Python's `k` and [`crate::PgaParams`]
/// all read it from here.
pub const DEFAULT_K: usize = 100;

/// Whether `k` is a readout subspace dimension of a `d`-wide model, `0 < k < d`: the one rule
/// every check of `k` applies (a supplied basis, `W_U` and `k`, `k_frac`, the study's
/// sensitivity `k`s, the front ends' early checks).
///
/// ```
/// assert!(repgeom_metrics::k_fits(100, 512));
/// assert!(!repgeom_metrics::k_fits(0, 512) && !repgeom_metrics::k_fits(512, 512));
/// ```
pub fn k_fits(k: usize, d: usize) -> bool {
    k > 0 && k < d
}

/// A `d × k` readout basis from an array read from a file or passed in (`shape`, row-major
/// `data`): two-dimensional, `d` rows, orthonormal columns ([`check_readout_basis`]). The one
/// reader of a supplied basis for the command line's `--readout-basis` and Python's
/// `readout_is_basis`; `what` names the file or argument in the error.
///
/// ```
/// use repgeom_metrics::analysis::basis_from_array;
/// let axes = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]; // [3, 2]: the first two axes
/// assert_eq!(basis_from_array(&[3, 2], &axes, 3, "basis.npy").unwrap().ncols(), 2);
/// let err = basis_from_array(&[6], &axes, 3, "basis.npy").unwrap_err().to_string();
/// assert!(err.contains("expected [3, k]"), "{err}");
/// ```
pub fn basis_from_array(shape: &[usize], data: &[f64], d: usize, what: &str) -> Result<Mat<f64>> {
    let (rows, cols) = match shape {
        &[rows, cols] if rows * cols == data.len() => (rows, cols),
        _ => {
            return Err(Error::ShapeMismatch {
                what: format!("{what}: readout basis"),
                left: format!("{shape:?}"),
                right: format!("expected [{d}, k] to match the activations' d = {d}"),
            });
        }
    };
    let basis = Mat::<f64>::from_fn(rows, cols, |i, j| data[i * cols + j]);
    check_readout_basis(basis.as_ref(), d, what)?;
    Ok(basis)
}

/// A readout `W_U` as a front end loaded it, checked before any decomposition against the
/// activations' `d` and the `k` asked for, every entry finite: the one check of the command
/// line, Python and the study, its errors naming both inputs, the tensor and its shape
/// ([`Error::ReadoutWidth`], [`Error::ReadoutK`], [`Error::NonFinite`]). The finiteness scan
/// (200 million entries for a 6.9B model's `W_U`) runs on the current rayon pool; the entry it
/// reports is the first in column-major order whatever the pool.
///
/// ```
/// use repgeom_linalg::Mat;
/// let w_u = Mat::<f32>::from_fn(50, 6, |i, j| (i + j) as f32);
/// assert!(repgeom_metrics::check_readout_for(w_u.as_ref(), 6, 2, "acts.npy", "ckpt", "W_U").is_ok());
/// let err = repgeom_metrics::check_readout_for(w_u.as_ref(), 8, 2, "acts.npy", "ckpt", "W_U");
/// assert!(err.unwrap_err().to_string().starts_with("shape mismatch: activations acts.npy have d = 8"));
/// ```
pub fn check_readout_for(
    w_u: MatRef<'_, f32>,
    d: usize,
    k: usize,
    acts: &str,
    readout: &str,
    tensor: &str,
) -> Result<()> {
    let (rows, cols) = (w_u.nrows(), w_u.ncols());
    let named = || (readout.to_owned(), tensor.to_owned());
    if cols != d {
        let (readout, tensor) = named();
        return Err(Error::ReadoutWidth {
            acts: acts.to_owned(),
            d,
            readout,
            tensor,
            rows,
            cols,
        });
    }
    if !k_fits(k, d) {
        let (readout, tensor) = named();
        return Err(Error::ReadoutK {
            k,
            d,
            readout,
            tensor,
            rows,
            cols,
        });
    }
    if let Some((row, col)) = first_non_finite(w_u, Par::rayon(0)) {
        return Err(Error::NonFinite {
            what: format!("{readout} tensor {tensor} [{rows}, {cols}]"),
            row,
            col,
        });
    }
    Ok(())
}

/// A fraction `f` of the hidden size for `k` (`k_frac`): finite and strictly between 0 and 1.
/// The one check of `--k-frac`, Python's `k_frac` and a manifest's `analysis.k_frac`.
///
/// ```
/// assert!(repgeom_metrics::check_k_frac(0.1).is_ok());
/// assert!(repgeom_metrics::check_k_frac(1.0).is_err() && repgeom_metrics::check_k_frac(f64::NAN).is_err());
/// ```
pub fn check_k_frac(f: f64) -> Result<()> {
    if f.is_finite() && f > 0.0 && f < 1.0 {
        return Ok(());
    }
    Err(Error::InvalidOption {
        name: "k_frac".into(),
        value: f.to_string(),
        reason: "the fraction of the hidden size must lie strictly between 0 and 1".into(),
    })
}

/// The `k` of a fraction `f` of the hidden size `d`, `round(f·d)` (halves away from zero), so
/// that z is comparable across widths: the one formula of `k_frac` and of the study's
/// `k_sensitivity`.
///
/// ```
/// assert_eq!(repgeom_metrics::k_from_fraction(0.1, 512), 51);
/// ```
pub fn k_from_fraction(f: f64, d: usize) -> usize {
    (f * d as f64).round() as usize
}

/// One layer's representation plus the shared, per-model precomputation (readout basis, null
/// bases) and lazily cached per-layer work (centring, singular values, CCR-corrected
/// matrices) that several metrics, and every pair the layer is part of, reuse.
///
/// Construction validates once for every metric: at least [`MIN_POINTS`] points, finite values,
/// not all points identical.
#[derive(Debug)]
pub struct LayerInput<'a> {
    acts: MatRef<'a, f32>,
    readout_basis: Option<MatRef<'a, f64>>,
    null: Option<&'a NullBases>,
    sequences: Option<&'a [usize]>,
    what: String,
    par: Par,
    memory_budget: Option<u64>,
    device: repgeom_cuda::Device,
    centred: OnceLock<Mat<f64>>,
    gram_sq: OnceLock<f64>,
    sv_centred: OnceLock<Vec<f64>>,
    sv_raw: OnceLock<Vec<f64>>,
    memo: Mutex<Vec<(MemoKey, Arc<dyn Any + Send + Sync>)>>,
}

/// What [`LayerInput::memo`] keeps a result under: the kind of work, named by the module that
/// does it (a plugin's names start with its metric's name), and its parameters (e.g.
/// `("cosine neighbours", k, centred)`).
pub type MemoKey = (&'static str, usize, bool);

impl<'a> LayerInput<'a> {
    /// Wraps an `N × d` layer. `what` names it in messages, e.g.
    /// `"run.safetensors: hidden_states.3 [300, 64]"`.
    pub fn new(acts: MatRef<'a, f32>, what: impl Into<String>, par: Par) -> Result<Self> {
        let what = what.into();
        let (n, d) = (acts.nrows(), acts.ncols());
        if n < MIN_POINTS {
            return Err(Error::TooFewPoints {
                what,
                n,
                min: MIN_POINTS,
            });
        }
        if d == 0 {
            return Err(Error::InvalidOption {
                name: "d".into(),
                value: "0".into(),
                reason: format!("a representation needs at least one dimension ({what})"),
            });
        }
        if let Some((row, col)) = first_non_finite(acts, par) {
            return Err(Error::NonFinite { what, row, col });
        }
        let constant = (0..d).all(|j| {
            let first = acts[(0, j)];
            (1..n).all(|i| acts[(i, j)] == first)
        });
        if constant {
            return Err(Error::ConstantInput { what, n });
        }
        Ok(Self {
            acts,
            readout_basis: None,
            null: None,
            sequences: None,
            what,
            par,
            memory_budget: None,
            device: repgeom_cuda::Device::Cpu,
            centred: OnceLock::new(),
            gram_sq: OnceLock::new(),
            sv_centred: OnceLock::new(),
            sv_raw: OnceLock::new(),
            memo: Mutex::new(Vec::new()),
        })
    }

    /// Attaches the readout basis `V_k` (`d × k`, orthonormal columns, `0 < k < d`).
    pub fn with_readout(mut self, basis: MatRef<'a, f64>) -> Result<Self> {
        let (n, d) = (self.acts.nrows(), self.acts.ncols());
        check_basis_shape(n, d, basis, &self.what)?;
        check_basis_values(basis, &self.what)?;
        self.readout_basis = Some(basis);
        Ok(self)
    }

    /// Attaches the null bases (`n_null` random `d × k` subspaces; `k` must match the readout
    /// basis when both are given).
    pub fn with_null(mut self, null: &'a NullBases) -> Result<Self> {
        let d = self.acts.ncols();
        let k = self.readout_basis.map_or(null.k(), |b| b.ncols());
        if null.d() != d || null.k() != k {
            return Err(Error::ShapeMismatch {
                what: format!(
                    "{}: null bases against the layer and readout basis",
                    self.what
                ),
                left: format!("null bases [{}, {}, {}]", null.len(), null.d(), null.k()),
                right: format!("d = {d}, k = {k}"),
            });
        }
        self.null = Some(null);
        Ok(self)
    }

    /// Attaches the sequence each point came from (`N` ids, e.g. from
    /// `repgeom_io::read_sequence_ids`), so that resampling metrics resample whole sequences.
    pub fn with_sequences(mut self, ids: &'a [usize]) -> Result<Self> {
        if ids.len() != self.acts.nrows() {
            return Err(Error::ShapeMismatch {
                what: format!("{}: sequence ids", self.what),
                left: format!("{} sequence ids", ids.len()),
                right: format!("{} points", self.acts.nrows()),
            });
        }
        self.sequences = Some(ids);
        Ok(self)
    }

    /// Sets the memory budget (bytes) of engines that hold per-worker buffers (PGA), for
    /// metrics whose own options leave it unset; like [`Self::par`], an execution resource
    /// that never changes a number. Front ends pass `repgeom_io::default_memory_budget()`.
    pub fn with_memory_budget(mut self, bytes: Option<u64>) -> Self {
        self.memory_budget = bytes;
        self
    }

    /// Sets the parallelism of the layer's metrics (the one given to [`Self::new`] until
    /// then): like the memory budget, an execution resource that never changes a number.
    pub fn with_par(mut self, par: Par) -> Self {
        self.par = par;
        self
    }

    /// Sets the device engines that can use one run on (PGA's null draws; `--device`): like
    /// the memory budget, a setting of the run, not of any metric's options.
    pub fn with_device(mut self, device: repgeom_cuda::Device) -> Self {
        self.device = device;
        self
    }

    /// The device set with [`Self::with_device`] (default the CPU).
    pub fn device(&self) -> repgeom_cuda::Device {
        self.device
    }

    /// The memory budget set with [`Self::with_memory_budget`] (`None`: unlimited).
    pub fn memory_budget(&self) -> Option<u64> {
        self.memory_budget
    }

    /// The sequence of each point, when attached with [`Self::with_sequences`].
    pub fn sequences(&self) -> Option<&'a [usize]> {
        self.sequences
    }

    /// The activations (`N × d`, `f32`).
    pub fn acts(&self) -> MatRef<'a, f32> {
        self.acts
    }
    /// Number of points `N`.
    pub fn n(&self) -> usize {
        self.acts.nrows()
    }
    /// Hidden size `d`.
    pub fn d(&self) -> usize {
        self.acts.ncols()
    }
    /// The layer's name for messages.
    pub fn what(&self) -> &str {
        &self.what
    }
    /// The parallelism for GEMMs.
    pub fn par(&self) -> Par {
        self.par
    }
    /// The readout basis if supplied.
    pub fn readout_basis_opt(&self) -> Option<MatRef<'a, f64>> {
        self.readout_basis
    }
    /// The readout basis, or [`Error::MissingInput`] naming `metric`.
    pub fn readout_basis(&self, metric: &str) -> Result<MatRef<'a, f64>> {
        self.readout_basis.ok_or_else(|| Error::MissingInput {
            metric: metric.into(),
            input: "the readout basis (W_U)".into(),
            what: self.what.clone(),
        })
    }
    /// The null bases if supplied.
    pub fn null_opt(&self) -> Option<&'a NullBases> {
        self.null
    }
    /// The null bases, or [`Error::MissingInput`] naming `metric`.
    pub fn null(&self, metric: &str) -> Result<&'a NullBases> {
        self.null.ok_or_else(|| Error::MissingInput {
            metric: metric.into(),
            input: "null bases (random subspaces)".into(),
            what: self.what.clone(),
        })
    }

    /// The activations centred over points, in `f64` (computed once).
    pub fn centred(&self) -> MatRef<'_, f64> {
        get_or_make(&self.centred, || center_columns(self.acts, self.par)).as_ref()
    }

    /// `‖X_cᵀX_c‖²_F` of the centred layer (`tr(K²)` of its linear Gram, linear CKA's
    /// self-similarity), computed once and shared by every pair the layer is part of.
    pub fn centred_gram_frobenius_sq(&self) -> f64 {
        *get_or_make(&self.gram_sq, || {
            let c = self.centred();
            repgeom_linalg::cross_frobenius_sq(c, c, self.par)
        })
    }

    /// CCR-`c` of the layer (centred, its top-`c` principal directions removed, `f64`; see
    /// [`repgeom_linalg::ccr`]), computed once per level and shared by every metric and every
    /// pair that asks for it: `repgeom compare` over L × L layer pairs corrects each layer
    /// once, not once per pair.
    pub fn ccr(&self, c: usize) -> Result<Arc<Mat<f64>>> {
        // The same steps as `repgeom_linalg::ccr`, from the cached centred layer.
        self.memo(("ccr", c, false), || {
            let xc = self.centred();
            Ok(if c == 0 {
                xc.to_owned()
            } else {
                let u = repgeom_linalg::top_principal_directions(xc, c, self.par)?.directions;
                repgeom_linalg::remove_directions(xc, u.as_ref(), self.par)
            })
        })
    }

    /// The layer's result of `make` under `key`, computed once and shared by every pair the
    /// layer is part of and every metric that asks (a higher module's per-layer work, such as
    /// k-NN's neighbour lists: a 7 × 7 table of mutual k-NN searches 14 layers, not 98; a pair
    /// metric's [`crate::PairMetric::warm`] fills it). An error is returned, not kept. The
    /// result lives as long as the layer.
    ///
    /// ```
    /// use repgeom_linalg::{Mat, Par};
    /// use repgeom_metrics::LayerInput;
    /// let x = Mat::<f32>::from_fn(8, 3, |i, j| (i * 3 + j) as f32 % 5.0);
    /// let layer = LayerInput::new(x.as_ref(), "layer 0", Par::Seq).unwrap();
    /// let norm = || Ok(layer.centred().norm_l2());
    /// let once = layer.memo(("my_metric norm", 0, false), norm).unwrap();
    /// let again = layer.memo(("my_metric norm", 0, false), || unreachable!()).unwrap();
    /// assert_eq!(once, again);
    /// ```
    pub fn memo<T: Any + Send + Sync>(
        &self,
        key: MemoKey,
        make: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<T>> {
        let found = |memo: &[(MemoKey, Arc<dyn Any + Send + Sync>)]| {
            memo.iter()
                .find(|(k, _)| *k == key)
                .and_then(|(_, v)| Arc::clone(v).downcast::<T>().ok())
        };
        let lock = || self.memo.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(v) = found(&lock()) {
            return Ok(v);
        }
        // computed without the lock (`make` may use the layer's other caches); a result made
        // meanwhile on another thread wins, so every caller shares one
        let made = Arc::new(make()?);
        let mut memo = lock();
        if let Some(v) = found(&memo) {
            return Ok(v);
        }
        memo.push((key, Arc::clone(&made) as Arc<dyn Any + Send + Sync>));
        Ok(made)
    }

    /// All `min(N, d)` singular values of the centred (`centred = true`) or raw activations,
    /// non-increasing (computed once each).
    pub fn singular_values(&self, centred: bool) -> Result<&[f64]> {
        let cell = if centred {
            &self.sv_centred
        } else {
            &self.sv_raw
        };
        if let Some(v) = cell.get() {
            return Ok(v);
        }
        let values = if centred {
            repgeom_linalg::singular_values(self.centred(), &self.what, self.par)?
        } else {
            let raw = repgeom_linalg::to_f64(self.acts);
            repgeom_linalg::singular_values(raw.as_ref(), &self.what, self.par)?
        };
        Ok(get_or_make::<Vec<f64>>(cell, || values))
    }

    /// Eigenvalues of the covariance $X_c^\top X_c/(N-1)$, non-increasing, padded with zeros
    /// to length `d` ([`Spectrum::covariance_eigenvalues`], callable without the trait).
    pub fn covariance_eigenvalues(&self) -> Result<Vec<f64>> {
        Spectrum::covariance_eigenvalues(self)
    }
}

/// What a spectral metric reads of a layer: the number of points, the width, and the singular
/// values of the points, as given or centred. A [`LayerInput`] has them from its points; a
/// [`crate::CovarianceSpectrum`] from the second moments a [`crate::CovarianceAccumulator`]
/// gathered over any number of tokens. RankMe, α-ReQ, IsoScore and the condition number read
/// nothing else ([`crate::Metric::compute_spectrum`]), so each gives the same value from
/// either.
pub trait Spectrum {
    /// Points (tokens) `N`.
    fn n(&self) -> usize;
    /// Width `d`.
    fn d(&self) -> usize;
    /// The layer's name for messages.
    fn what(&self) -> &str;
    /// All `min(N, d)` singular values of the points (centred first when `centred`),
    /// non-increasing.
    fn singular_values(&self, centred: bool) -> Result<&[f64]>;
    /// Eigenvalues of the covariance $X_c^\top X_c/(N-1)$, non-increasing, padded with zeros
    /// to length `d`.
    fn covariance_eigenvalues(&self) -> Result<Vec<f64>> {
        let denom = (self.n() - 1) as f64;
        let mut out: Vec<f64> = (self.singular_values(true)?.iter())
            .map(|s| s * s / denom)
            .collect();
        out.resize(self.d(), 0.0);
        Ok(out)
    }
}

impl Spectrum for LayerInput<'_> {
    fn n(&self) -> usize {
        LayerInput::n(self)
    }
    fn d(&self) -> usize {
        LayerInput::d(self)
    }
    fn what(&self) -> &str {
        LayerInput::what(self)
    }
    fn singular_values(&self, centred: bool) -> Result<&[f64]> {
        LayerInput::singular_values(self, centred)
    }
}

/// Numerical rank of a non-increasing list of singular values of an `n × d` `f32`-sourced
/// matrix: the count above $\sigma_1 \cdot \max(n, d) \cdot \varepsilon_{f32}$ (NumPy's
/// `matrix_rank` rule with the input's precision).
pub fn numerical_rank(singular_values: &[f64], n: usize, d: usize) -> usize {
    let Some(&top) = singular_values.first() else {
        return 0;
    };
    let tol = top * n.max(d) as f64 * f64::from(f32::EPSILON);
    singular_values.iter().take_while(|&&s| s > tol).count()
}

/// Two representations of the same `N` points (e.g. one layer of each of two models),
/// borrowed: a layer paired with many others keeps its cached work (centring, CCR, singular
/// values) across all its pairs.
#[derive(Debug, Clone, Copy)]
pub struct PairInput<'a> {
    /// The first representation (its readout and null bases, if any, travel with it).
    pub a: &'a LayerInput<'a>,
    /// The second representation.
    pub b: &'a LayerInput<'a>,
}

impl<'a> PairInput<'a> {
    /// Pairs two layers; they must hold the same number of points.
    pub fn new(a: &'a LayerInput<'a>, b: &'a LayerInput<'a>) -> Result<Self> {
        if a.n() != b.n() {
            return Err(Error::ShapeMismatch {
                what: "two representations of the same inputs".into(),
                left: format!("{} [{}, {}]", a.what(), a.n(), a.d()),
                right: format!("{} [{}, {}]", b.what(), b.n(), b.d()),
            });
        }
        Ok(Self { a, b })
    }
    /// `"A vs B"` for messages.
    pub fn what(&self) -> String {
        format!("{} vs {}", self.a.what(), self.b.what())
    }
}

/// Which layers of two models a comparison pairs, as index pairs into their layer lists: all
/// `len_a × len_b` of them, or, with `diagonal`, each layer `i` of A with the layer of B at the
/// nearest relative depth, `j = round(i (len_b − 1) / (len_a − 1))` (halves rounded away from
/// zero). Both `repgeom compare` and the Python `compare` pair layers with this.
///
/// ```
/// use repgeom_metrics::layer_pairs;
/// assert_eq!(layer_pairs(2, 2, false), [(0, 0), (0, 1), (1, 0), (1, 1)]);
/// // 3 layers of A against 5 of B: depths 0, 1/2, 1
/// assert_eq!(layer_pairs(3, 5, true), [(0, 0), (1, 2), (2, 4)]);
/// ```
pub fn layer_pairs(len_a: usize, len_b: usize, diagonal: bool) -> Vec<(usize, usize)> {
    if !diagonal {
        return (0..len_a)
            .flat_map(|i| (0..len_b).map(move |j| (i, j)))
            .collect();
    }
    (0..len_a)
        .map(|i| {
            let j = if len_a <= 1 {
                0
            } else {
                ((i as f64) * (len_b - 1) as f64 / (len_a - 1) as f64).round() as usize
            };
            (i, j)
        })
        .collect()
}

/// Tolerance of [`check_readout_basis`] on `max |BᵀB − I|` (and of supplied null bases):
/// a basis saved as `f64` by `--save-readout-basis` is orthonormal to ~1e-15; one computed in
/// `f32` elsewhere still passes.
pub const BASIS_TOL: f64 = 1e-6;

/// Where a run's null bases come from.
#[derive(Debug, Clone)]
pub enum NullSource<'a> {
    /// `n_null` Haar-random subspaces drawn from `seed`, for each `k`.
    Draw(NullParams),
    /// Bases supplied (`n_null × d × k`; one `k` only).
    Given(&'a NullBases),
}

/// A `d × k` readout basis supplied by the user (`--readout-basis`, `readout_is_basis=True`):
/// `d` rows to match the activations and orthonormal columns to [`BASIS_TOL`]. `what` names it
/// (a file, an argument) in the error.
///
/// ```
/// use repgeom_linalg::Mat;
/// use repgeom_metrics::analysis::check_readout_basis;
///
/// let axes = Mat::<f64>::from_fn(4, 2, |i, j| if i == j { 1.0 } else { 0.0 });
/// assert!(check_readout_basis(axes.as_ref(), 4, "basis.npy").is_ok());
/// let err = check_readout_basis(axes.as_ref(), 5, "basis.npy").unwrap_err();
/// assert!(err.to_string().contains("expected [5, k]"));
/// ```
pub fn check_readout_basis(basis: MatRef<'_, f64>, d: usize, what: &str) -> Result<()> {
    let (rows, cols) = (basis.nrows(), basis.ncols());
    if rows != d || cols == 0 {
        return Err(Error::ShapeMismatch {
            what: format!("{what}: readout basis"),
            left: format!("[{rows}, {cols}]"),
            right: format!("expected [{d}, k] to match the activations' d = {d}"),
        });
    }
    let dev = repgeom_linalg::orthonormal_basis_check(basis);
    if dev.is_nan() || dev > BASIS_TOL {
        return Err(Error::InvalidOption {
            name: "readout basis".into(),
            value: what.to_owned(),
            reason: format!("its columns are not orthonormal (max |BᵀB − I| = {dev:.2e})"),
        });
    }
    Ok(())
}

/// `W_U`'s width against the activations' `d`, `0 < k < d`, and every entry finite (scanned on
/// the current rayon pool; the first offender in column-major order whatever the pool).
pub(crate) fn check_unembedding(
    w_u: MatRef<'_, f32>,
    d: usize,
    k: usize,
    what: &str,
) -> Result<()> {
    if w_u.ncols() != d {
        return Err(Error::ShapeMismatch {
            what: format!("{what} against the readout"),
            left: format!("activations d = {d}"),
            right: format!("W_U [{}, {}]", w_u.nrows(), w_u.ncols()),
        });
    }
    if !k_fits(k, d) {
        return Err(Error::InvalidOption {
            name: "k".into(),
            value: k.to_string(),
            reason: format!("the readout subspace dimension must satisfy 0 < k < d = {d}"),
        });
    }
    if let Some((row, col)) = repgeom_linalg::first_non_finite(w_u, Par::rayon(0)) {
        return Err(Error::NonFinite {
            what: format!("W_U [{}, {}]", w_u.nrows(), w_u.ncols()),
            row,
            col,
        });
    }
    Ok(())
}

pub(crate) fn check_enough_points(n: usize, what: &str) -> Result<()> {
    if n < MIN_POINTS {
        return Err(Error::TooFewPoints {
            what: what.into(),
            n,
            min: MIN_POINTS,
        });
    }
    Ok(())
}

/// The basis' `d` against the activations' (`n × d`), and `0 < k < d`.
pub(crate) fn check_basis_shape(
    n: usize,
    d: usize,
    basis: MatRef<'_, f64>,
    what: &str,
) -> Result<()> {
    if basis.nrows() != d {
        return Err(Error::ShapeMismatch {
            what: format!("{what} against the readout basis"),
            left: format!("activations [{n}, {d}] (d = {d})"),
            right: format!(
                "readout basis [{}, {}] (d = {})",
                basis.nrows(),
                basis.ncols(),
                basis.nrows()
            ),
        });
    }
    let k = basis.ncols();
    if !k_fits(k, d) {
        return Err(Error::InvalidOption {
            name: "k".into(),
            value: k.to_string(),
            reason: format!("the readout subspace dimension must satisfy 0 < k < d = {d} ({what})"),
        });
    }
    Ok(())
}

/// Every activation finite, and no point at the origin.
pub(crate) fn check_acts_values(acts: MatRef<'_, f32>, what: &str, par: Par) -> Result<()> {
    if let Some((row, col)) = first_non_finite(acts, par) {
        return Err(Error::NonFinite {
            what: what.into(),
            row,
            col,
        });
    }
    check_no_zero_rows(acts, what)
}

/// Every entry of the readout basis finite.
pub(crate) fn check_basis_values(basis: MatRef<'_, f64>, what: &str) -> Result<()> {
    if let Some((row, col)) = first_non_finite(basis, Par::Seq) {
        return Err(Error::NonFinite {
            what: format!("readout basis for {what}"),
            row,
            col,
        });
    }
    Ok(())
}

/// A point at the origin has no direction, so its cosine distances are undefined.
pub(crate) fn check_no_zero_rows(acts: MatRef<'_, f32>, what: &str) -> Result<()> {
    match (0..acts.nrows()).find(|&i| acts.row(i).iter().all(|&v| v == 0.0)) {
        Some(row) => Err(Error::Linalg(repgeom_linalg::Error::ZeroNorm {
            what: what.into(),
            row,
        })),
        None => Ok(()),
    }
}

/// `n_null` Haar bases for `(d, k)`, the error naming the model.
pub(crate) fn draw_null(d: usize, k: usize, params: NullParams, what: &str) -> Result<NullBases> {
    let params = params.check()?;
    NullBases::draw(d, k, &params).map_err(|e| Error::NullOnLayer {
        what: format!("hidden size d = {d} of {what}"),
        error: e,
    })
}

/// A model's readout as the caller hands it over, after reading and preparing `W_U` (tensor,
/// vocabulary rows, the final norm's gain, centring: `repgeom_io::ReadoutPrep`): the one
/// readout type of every run ([`crate::analysis::ModelContext`], [`crate::Pga::run_model`],
/// the one-call [`crate::params`] API), as a faer or an ndarray view.
#[derive(Debug, Clone, Copy)]
pub enum Readout<'a> {
    /// The unembedding matrix `W_U` (`V × d`); the basis is its top-`k` right singular vectors.
    Unembedding(MatRef<'a, f32>),
    /// A `d × k` basis with orthonormal columns, used as given (`k` is its column count;
    /// checked by [`check_readout_basis`]).
    Basis(MatRef<'a, f64>),
    /// `W_U` as an ndarray view (read in place when row-major contiguous, else copied once).
    NdUnembedding(ArrayView2<'a, f32>),
    /// A `d × k` orthonormal basis as an ndarray view.
    NdBasis(ArrayView2<'a, f64>),
}

/// A [`Readout`] as faer views, the form the runs work on.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ReadoutView<'a> {
    /// `W_U`, `V × d`.
    Unembedding(MatRef<'a, f32>),
    /// A `d × k` orthonormal basis.
    Basis(MatRef<'a, f64>),
}

impl<'a> Readout<'a> {
    /// The readout as faer views: in place for faer views and row-major ndarray views, else
    /// copied once into `w_copy` or `basis_copy`.
    pub(crate) fn view<'s>(
        self,
        w_copy: &'s mut Option<Mat<f32>>,
        basis_copy: &'s mut Option<Mat<f64>>,
    ) -> ReadoutView<'s>
    where
        'a: 's,
    {
        match self {
            Readout::Unembedding(w) => ReadoutView::Unembedding(w),
            Readout::NdUnembedding(v) => ReadoutView::Unembedding(faer_f32(v, w_copy)),
            Readout::Basis(b) => ReadoutView::Basis(b),
            Readout::NdBasis(v) => ReadoutView::Basis(faer_f64(v, basis_copy)),
        }
    }
}

impl<'a> From<ReadoutView<'a>> for Readout<'a> {
    fn from(v: ReadoutView<'a>) -> Self {
        match v {
            ReadoutView::Unembedding(w) => Readout::Unembedding(w),
            ReadoutView::Basis(b) => Readout::Basis(b),
        }
    }
}

/// Activations (`N × d`) in `f32` (used in place) or `f64` (converted to `f32`, the engine's
/// precision for distances), as faer or ndarray views: `.into()` from any of them.
#[derive(Debug, Clone, Copy)]
pub enum Acts<'a> {
    /// `f32` values, any strides.
    F32(MatRef<'a, f32>),
    /// `f64` values, converted once.
    F64(MatRef<'a, f64>),
    /// An ndarray view of `f32` values: in place when row-major contiguous (the default
    /// layout), else copied once.
    NdF32(ArrayView2<'a, f32>),
    /// An ndarray view of `f64` values, converted once.
    NdF64(ArrayView2<'a, f64>),
}

impl<'a> Acts<'a> {
    /// The activations as a faer `f32` view: in place for `f32` faer views and row-major
    /// ndarray views, else converted (or copied) once into `store`.
    pub(crate) fn as_f32<'s>(self, store: &'s mut Option<Mat<f32>>) -> MatRef<'s, f32>
    where
        'a: 's,
    {
        match self {
            Acts::F32(m) => m,
            Acts::F64(m) => store
                .insert(repgeom_linalg::to_f32(m, repgeom_linalg::Par::Seq))
                .as_ref(),
            Acts::NdF32(v) => faer_f32(v, store),
            Acts::NdF64(v) => store
                .insert(Mat::from_fn(v.nrows(), v.ncols(), |i, j| v[(i, j)] as f32))
                .as_ref(),
        }
    }
}

impl<'a> From<ArrayView2<'a, f32>> for Acts<'a> {
    fn from(v: ArrayView2<'a, f32>) -> Self {
        Acts::NdF32(v)
    }
}

impl<'a> From<ArrayView2<'a, f64>> for Acts<'a> {
    fn from(v: ArrayView2<'a, f64>) -> Self {
        Acts::NdF64(v)
    }
}

impl<'a> From<&'a Array2<f32>> for Acts<'a> {
    fn from(a: &'a Array2<f32>) -> Self {
        Acts::NdF32(a.view())
    }
}

impl<'a> From<&'a Array2<f64>> for Acts<'a> {
    fn from(a: &'a Array2<f64>) -> Self {
        Acts::NdF64(a.view())
    }
}

/// A faer view of an ndarray `f32` view: in place when row-major contiguous, else a copy
/// kept in `store`. (ndarray views are invariant in their lifetime, hence `'v: 's`.)
fn faer_f32<'v: 's, 's>(
    v: ArrayView2<'v, f32>,
    store: &'s mut Option<Mat<f32>>,
) -> MatRef<'s, f32> {
    match v.to_slice() {
        Some(s) => MatRef::from_row_major_slice(s, v.nrows(), v.ncols()),
        None => store
            .insert(Mat::from_fn(v.nrows(), v.ncols(), |i, j| v[(i, j)]))
            .as_ref(),
    }
}

/// As [`faer_f32`] for `f64`.
fn faer_f64<'v: 's, 's>(
    v: ArrayView2<'v, f64>,
    store: &'s mut Option<Mat<f64>>,
) -> MatRef<'s, f64> {
    match v.to_slice() {
        Some(s) => MatRef::from_row_major_slice(s, v.nrows(), v.ncols()),
        None => store
            .insert(Mat::from_fn(v.nrows(), v.ncols(), |i, j| v[(i, j)]))
            .as_ref(),
    }
}

impl<'a> From<MatRef<'a, f32>> for Acts<'a> {
    fn from(m: MatRef<'a, f32>) -> Self {
        Acts::F32(m)
    }
}

impl<'a> From<MatRef<'a, f64>> for Acts<'a> {
    fn from(m: MatRef<'a, f64>) -> Self {
        Acts::F64(m)
    }
}
