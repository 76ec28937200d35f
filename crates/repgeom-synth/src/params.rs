//! Unchecked parameter builders and their checked forms.

use crate::error::{Result, invalid};

/// Geometry of one synthetic model: widths, readout, latent point cloud and layer noise.
///
/// An unchecked builder: fill the fields you care about with `..Default::default()` and call
/// [`ModelParams::check`]. The defaults are tuned so that the planted PGA signs are robust
/// for `n_points` 200–600, `d` 64–512 and `k` between `d/8` and `d/4` (see `docs/synthetic.md`).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelParams {
    /// Hidden width `d`.
    pub d: usize,
    /// Readout dimension `k` (top right singular vectors of `W_U`); `None` means `d / 8`.
    pub k: Option<usize>,
    /// Vocabulary size `V` (rows of `W_U`); `None` means `2 d`. Must be at least `d`.
    pub vocab: Option<usize>,
    /// Number of points `N` (token positions), shared by every layer.
    pub n_points: usize,
    /// Number of probe classes; labels are balanced and linearly decodable in every layer.
    pub n_classes: usize,
    /// Latent dimensions of the point cloud (capped at `k` and at the complement's width).
    pub latent_dims: usize,
    /// Standard deviation of the class means per latent coordinate (within-class is 1).
    pub class_sep: f64,
    /// Amplitude share of the latent embedding that leaks outside the readout subspace, in `[0, 1)`.
    pub leak: f64,
    /// Isotropic noise standard deviation per coordinate (the direct signal has unit variance per coordinate on average).
    pub noise: f64,
    /// Norm of the shared mean offset, in units of `sqrt(d)` (removed by centring).
    pub offset: f64,
    /// Per-layer jitter of the latent points (standard deviation, latent units).
    pub jitter: f64,
    /// Dark directions reserved orthogonal to the readout (upper bound for `Regime::Detour::dark_dims`).
    pub dark_pool: usize,
    /// Geometric decay of the dark standard deviations: direction `j` has `strength * decay^j`.
    pub dark_decay: f64,
}

impl Default for ModelParams {
    fn default() -> Self {
        Self {
            d: 128,
            k: None,
            vocab: None,
            n_points: 320,
            n_classes: 4,
            latent_dims: 32,
            class_sep: 0.5,
            leak: 0.15,
            noise: 0.2,
            offset: 2.0,
            jitter: 0.2,
            dark_pool: 8,
            dark_decay: 0.9,
        }
    }
}

/// Checked [`ModelParams`] with `k`, `vocab` and the effective latent width resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidModelParams {
    pub(crate) p: ModelParams,
    pub(crate) k: usize,
    pub(crate) vocab: usize,
    pub(crate) latent: usize,
}

impl ValidModelParams {
    /// Hidden width `d`.
    pub fn d(&self) -> usize {
        self.p.d
    }
    /// Resolved readout dimension `k`.
    pub fn k(&self) -> usize {
        self.k
    }
    /// Resolved vocabulary size `V`.
    pub fn vocab(&self) -> usize {
        self.vocab
    }
    /// Effective latent dimensions `min(latent_dims, k, d - k - dark_pool)`.
    pub fn latent_dims(&self) -> usize {
        self.latent
    }
    /// The unchecked parameters this was built from.
    pub fn params(&self) -> &ModelParams {
        &self.p
    }
    /// The model label, `synthetic-d{d}`.
    pub fn label(&self) -> String {
        format!("synthetic-d{}", self.p.d)
    }
}

fn non_negative(params: &'static str, name: &'static str, v: f64) -> Result<()> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(invalid(params, name, v, "must be finite and >= 0"))
    }
}

fn finite_in(
    params: &'static str,
    name: &'static str,
    v: f64,
    lo: f64,
    hi: f64,
    hi_open: bool,
) -> Result<()> {
    let ok = v.is_finite() && v >= lo && if hi_open { v < hi } else { v <= hi };
    if ok {
        Ok(())
    } else {
        let bracket = if hi_open { ")" } else { "]" };
        Err(invalid(
            params,
            name,
            v,
            format!("must be finite and in [{lo}, {hi}{bracket}"),
        ))
    }
}

impl ModelParams {
    /// Validates the parameters.
    pub fn check(self) -> Result<ValidModelParams> {
        const P: &str = "ModelParams";
        let d = self.d;
        if d < 8 {
            return Err(invalid(P, "d", d, "must be at least 8"));
        }
        let k = self.k.unwrap_or(d / 8);
        if k == 0 {
            return Err(invalid(P, "k", k, "must be at least 1"));
        }
        if self.dark_pool == 0 {
            return Err(invalid(
                P,
                "dark_pool",
                self.dark_pool,
                "must be at least 1",
            ));
        }
        if k + self.dark_pool >= d {
            return Err(invalid(
                P,
                "k",
                k,
                format!("k + dark_pool ({}) must be below d = {d}", self.dark_pool),
            ));
        }
        let vocab = self.vocab.unwrap_or(2 * d);
        if vocab < d {
            return Err(invalid(
                P,
                "vocab",
                vocab,
                format!("must be at least d = {d}"),
            ));
        }
        if self.n_classes == 0 {
            return Err(invalid(
                P,
                "n_classes",
                self.n_classes,
                "must be at least 1",
            ));
        }
        if self.n_points < 4 || self.n_points < self.n_classes {
            return Err(invalid(
                P,
                "n_points",
                self.n_points,
                format!(
                    "must be at least 4 and at least n_classes = {}",
                    self.n_classes
                ),
            ));
        }
        if self.latent_dims == 0 {
            return Err(invalid(
                P,
                "latent_dims",
                self.latent_dims,
                "must be at least 1",
            ));
        }
        non_negative(P, "class_sep", self.class_sep)?;
        finite_in(P, "leak", self.leak, 0.0, 1.0, true)?;
        non_negative(P, "noise", self.noise)?;
        non_negative(P, "offset", self.offset)?;
        non_negative(P, "jitter", self.jitter)?;
        if !(self.dark_decay.is_finite() && self.dark_decay > 0.0 && self.dark_decay <= 1.0) {
            return Err(invalid(
                P,
                "dark_decay",
                self.dark_decay,
                "must be in (0, 1]",
            ));
        }
        let latent = self.latent_dims.min(k).min(d - k - self.dark_pool);
        Ok(ValidModelParams {
            p: self,
            k,
            vocab,
            latent,
        })
    }
}

/// The synthetic model zoo and its training trajectory (the default study of `cargo xtask paper`).
///
/// Every width gets one [`ModelParams`] derived from `model` (with `d` = the width and
/// `k = d / k_divisor`). Widths up to `detour_max_width` develop a late-layer detour over
/// training; wider models stay direct. The final layer is always direct.
#[derive(Debug, Clone, PartialEq)]
pub struct ZooParams {
    /// Master seed; every model, layer and checkpoint derives its own stream from it.
    pub seed: u64,
    /// Seed of the inputs and of what each layer computes from them: the labelled points and
    /// every layer's embedding of them (its mixing, jitter and offset), in the model's own
    /// frame. `None` (the default) means `seed`. Two zoos with the same `inputs_seed` and
    /// different `seed`s are the same architecture "trained from two seeds" on the same
    /// inputs: each layer's geometry agrees up to a rotation of the hidden space and
    /// independent noise, while readout, frame and noise differ (`repgeom selftest`'s layer
    /// identification).
    pub inputs_seed: Option<u64>,
    /// Hidden widths, one model each (labels `synthetic-d{width}`).
    pub widths: Vec<usize>,
    /// Layers per model (all transformer-block outputs; the last is the final layer).
    pub n_layers: usize,
    /// `k = d / k_divisor`.
    pub k_divisor: usize,
    /// Widths up to and including this one take the detour.
    pub detour_max_width: usize,
    /// Dark directions of a detour layer (`m`); CCR-`m` removes them again.
    pub dark_dims: usize,
    /// Detour strength at `detour_max_width` at the end of training; narrower models get
    /// `strength * sqrt(detour_max_width / d)`.
    pub detour_strength: f64,
    /// How the detour is planted: [`DetourKind::Rotation`] (default) or [`DetourKind::Dark`].
    pub detour_kind: DetourKind,
    /// Relative depths `[lo, hi)` (layer / (n_layers - 1)) of the detour zone.
    pub detour_depth: (f64, f64),
    /// Training progress (0 = first checkpoint, 1 = last, log-step scale) where the detour starts.
    pub detour_onset: f64,
    /// Extra isotropic noise early in training: noise is `noise * (1 + early_noise * (1 - progress))`.
    pub early_noise: f64,
    /// Training steps of the checkpoints, strictly increasing; the demo zoo uses the last.
    pub steps: Vec<u64>,
    /// Template for every model (its `d` and `k` are overwritten per width).
    pub model: ModelParams,
}

impl Default for ZooParams {
    fn default() -> Self {
        Self {
            seed: 0,
            inputs_seed: None,
            widths: vec![64, 128, 256],
            n_layers: 8,
            k_divisor: 8,
            detour_max_width: 128,
            dark_dims: 4,
            detour_strength: 1.5,
            detour_kind: DetourKind::Rotation,
            detour_depth: (0.6, 0.95),
            detour_onset: 0.3,
            early_noise: 1.0,
            steps: vec![256, 1000, 4000, 16000, 64000, 143000],
            model: ModelParams::default(),
        }
    }
}

/// How the default study plants its late-layer detour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DetourKind {
    /// [`crate::Regime::Rotation`]: the dominant directions rotate out of the readout into dark
    /// directions with the spectrum held fixed (PGA moves, rotation-invariant spectral metrics
    /// do not), `angle` ramping from 0 to 1 over training.
    #[default]
    Rotation,
    /// [`crate::Regime::Detour`]: large dark directions are added (the spectrum changes with
    /// PGA), `strength` ramping as `detour_strength` says. The default before rotation.
    Dark,
}

/// Checked [`ZooParams`] with one [`ValidModelParams`] per width.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidZooParams {
    pub(crate) p: ZooParams,
    pub(crate) models: Vec<ValidModelParams>,
}

impl ValidZooParams {
    /// The unchecked parameters this was built from.
    pub fn params(&self) -> &ZooParams {
        &self.p
    }
    /// The checked per-width model parameters, in `widths` order.
    pub fn models(&self) -> &[ValidModelParams] {
        &self.models
    }
}

impl ZooParams {
    /// Validates the parameters, including every per-width [`ModelParams`].
    pub fn check(self) -> Result<ValidZooParams> {
        const P: &str = "ZooParams";
        if self.widths.is_empty() {
            return Err(invalid(P, "widths", "[]", "must name at least one width"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for &w in &self.widths {
            if !seen.insert(w) {
                return Err(invalid(
                    P,
                    "widths",
                    w,
                    "widths must be distinct (labels are synthetic-d{width})",
                ));
            }
        }
        if self.n_layers < 2 {
            return Err(invalid(P, "n_layers", self.n_layers, "must be at least 2"));
        }
        if self.k_divisor < 2 {
            return Err(invalid(
                P,
                "k_divisor",
                self.k_divisor,
                "must be at least 2",
            ));
        }
        if self.dark_dims == 0 || self.dark_dims > self.model.dark_pool {
            return Err(invalid(
                P,
                "dark_dims",
                self.dark_dims,
                format!("must be in [1, model.dark_pool = {}]", self.model.dark_pool),
            ));
        }
        non_negative(P, "detour_strength", self.detour_strength)?;
        let (lo, hi) = self.detour_depth;
        if !(lo.is_finite() && hi.is_finite() && 0.0 <= lo && lo <= hi && hi <= 1.0) {
            return Err(invalid(
                P,
                "detour_depth",
                format!("({lo}, {hi})"),
                "must satisfy 0 <= lo <= hi <= 1",
            ));
        }
        finite_in(P, "detour_onset", self.detour_onset, 0.0, 1.0, true)?;
        non_negative(P, "early_noise", self.early_noise)?;
        if self.steps.is_empty() {
            return Err(invalid(
                P,
                "steps",
                "[]",
                "must name at least one checkpoint",
            ));
        }
        if self.steps[0] == 0 || self.steps.windows(2).any(|w| w[0] >= w[1]) {
            return Err(invalid(
                P,
                "steps",
                format!("{:?}", self.steps),
                "must be positive and strictly increasing",
            ));
        }
        let mut models = Vec::with_capacity(self.widths.len());
        for &w in &self.widths {
            let mp = ModelParams {
                d: w,
                k: Some(w / self.k_divisor),
                ..self.model.clone()
            };
            models.push(mp.check()?);
        }
        Ok(ValidZooParams { p: self, models })
    }
}
