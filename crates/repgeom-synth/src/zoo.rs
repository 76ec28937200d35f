//! The synthetic model zoo (demo) and its training trajectory (default study).

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use repgeom_linalg::Mat;

use crate::error::Result;
use crate::params::{DetourKind, ValidZooParams};
use crate::space::{Regime, SyntheticSpace};

/// One synthetic model at one checkpoint: readout, layers and planted regimes.
#[derive(Debug, Clone)]
pub struct SyntheticModel {
    /// Always `true`: generated data, never a real model.
    pub synthetic: bool,
    /// `synthetic-d{d}`.
    pub label: String,
    /// Hidden width.
    pub d: usize,
    /// Readout dimension to use for PGA.
    pub k: usize,
    /// Training step of this checkpoint.
    pub step: u64,
    /// Synthetic validation loss at this step.
    pub val_loss: f64,
    /// `W_U`, `V × d`.
    pub readout: Mat<f32>,
    /// `d × k` orthonormal basis of `W_U`'s top-`k` right singular subspace.
    pub readout_basis: Mat<f64>,
    /// `d × dark_pool` dark directions, orthogonal to `readout_basis`.
    pub dark_basis: Mat<f64>,
    /// Layers `N × d`, first to final.
    pub layers: Vec<Mat<f32>>,
    /// Planted regime of each layer.
    pub regimes: Vec<Regime>,
    /// Probe class of each point (same points in every layer).
    pub labels: Vec<usize>,
    /// Number of classes.
    pub n_classes: usize,
}

/// One checkpoint of a [`SyntheticRun`].
#[derive(Debug, Clone)]
pub struct SyntheticCheckpoint {
    /// Training step.
    pub step: u64,
    /// Training progress in `[0, 1]` on a log-step scale (0 = first checkpoint).
    pub progress: f64,
    /// Synthetic validation loss.
    pub val_loss: f64,
    /// Layers `N × d`, first to final.
    pub layers: Vec<Mat<f32>>,
    /// Planted regime of each layer.
    pub regimes: Vec<Regime>,
}

/// One synthetic model over training: fixed readout and points, layers per checkpoint.
#[derive(Debug, Clone)]
pub struct SyntheticRun {
    /// Always `true`.
    pub synthetic: bool,
    /// The fixed geometry (label, readout, bases, labels).
    pub space: SyntheticSpace,
    /// Checkpoints in increasing step order.
    pub checkpoints: Vec<SyntheticCheckpoint>,
}

/// The default study: one [`SyntheticRun`] per width.
#[derive(Debug, Clone)]
pub struct SyntheticStudy {
    /// Always `true`.
    pub synthetic: bool,
    /// Master seed.
    pub seed: u64,
    /// One run per width, in `widths` order.
    pub runs: Vec<SyntheticRun>,
}

impl SyntheticRun {
    /// The model at checkpoint `index` (panics if out of range: a caller bug).
    #[track_caller]
    pub fn model_at(&self, index: usize) -> SyntheticModel {
        let c = &self.checkpoints[index];
        let s = &self.space;
        SyntheticModel {
            synthetic: true,
            label: s.label.clone(),
            d: s.d,
            k: s.k,
            step: c.step,
            val_loss: c.val_loss,
            readout: s.readout.clone(),
            readout_basis: s.readout_basis.clone(),
            dark_basis: s.dark_basis.clone(),
            layers: c.layers.clone(),
            regimes: c.regimes.clone(),
            labels: s.labels.clone(),
            n_classes: s.n_classes,
        }
    }
}

/// SplitMix64 finaliser: derives independent sub-seeds from the master seed and tags.
fn derive_seed(seed: u64, tags: &[u64]) -> u64 {
    fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    tags.iter().fold(mix(seed), |h, &t| mix(h ^ mix(t)))
}

const TAG_SPACE: u64 = 1;
const TAG_EMBED: u64 = 2;
const TAG_CONTENT: u64 = 3;
const TAG_POINTS: u64 = 4;

/// Gives every width the same inputs: the labels and latent points come from one stream of the
/// master seed shared by all models (each model uses the first `latent` of the template's
/// `latent_dims` dimensions), as real models are compared on the same token positions. Only
/// then do cross-model comparisons (distance agreement, CKA) compare like with like.
fn share_points(space: &mut SyntheticSpace, seed: u64) {
    use rand::seq::SliceRandom;
    let params = space.params().clone();
    let p = &params.p;
    let (n, c, l_all, l) = (
        p.n_points,
        p.n_classes,
        p.latent_dims.max(params.latent),
        params.latent,
    );
    let mut rng = ChaCha8Rng::seed_from_u64(derive_seed(seed, &[TAG_POINTS]));
    let mut labels: Vec<usize> = (0..n).map(|i| i % c).collect();
    labels.shuffle(&mut rng);
    let means: Vec<f64> = (0..c * l_all)
        .map(|_| p.class_sep * crate::space::gauss(&mut rng))
        .collect();
    let mut z = vec![0.0f64; n * l_all];
    for i in 0..n {
        for t in 0..l_all {
            z[i * l_all + t] = means[labels[i] * l_all + t] + crate::space::gauss(&mut rng);
        }
    }
    space.latent = Mat::from_fn(n, l, |i, t| z[i * l_all + t]);
    space.labels = labels;
}

/// Training progress of checkpoint `index` in `[0, 1]`, log-step scale.
pub fn progress(steps: &[u64], index: usize) -> f64 {
    let (first, last) = (steps[0] as f64, steps[steps.len() - 1] as f64);
    if steps.len() < 2 {
        return 1.0;
    }
    ((steps[index] as f64).ln() - first.ln()) / (last.ln() - first.ln())
}

/// Synthetic validation loss: `L∞(d) + 8 (1 + step/100)^(-0.35)` with `L∞(d) = 2 + 48/d`.
///
/// Monotone in the step for every width, and alike for small and large widths (the detour
/// does not show in it), as in the study.
pub fn validation_loss(d: usize, step: u64) -> f64 {
    2.0 + 48.0 / d as f64 + 8.0 * (1.0 + step as f64 / 100.0).powf(-0.35)
}

/// The planted regime of `layer` of the model of width `d` at training `progress`.
pub fn planned_regime(p: &ValidZooParams, d: usize, layer: usize, progress: f64) -> Regime {
    let z = &p.p;
    let last = z.n_layers - 1;
    let depth = layer as f64 / last as f64;
    let (lo, hi) = z.detour_depth;
    let in_zone = layer < last && depth >= lo && depth < hi;
    if !in_zone || d > z.detour_max_width {
        return Regime::Direct;
    }
    let x = ((progress - z.detour_onset) / (1.0 - z.detour_onset)).clamp(0.0, 1.0);
    let ramp = x * x * (3.0 - 2.0 * x);
    let strength = z.detour_strength * (z.detour_max_width as f64 / d as f64).sqrt() * ramp;
    if strength == 0.0 {
        return Regime::Direct;
    }
    match z.detour_kind {
        DetourKind::Rotation => Regime::Rotation {
            dims: (d / z.k_divisor).min(z.model.dark_pool),
            angle: ramp,
        },
        DetourKind::Dark => Regime::Detour {
            dark_dims: z.dark_dims,
            strength,
        },
    }
}

fn run_for(p: &ValidZooParams, index: usize, checkpoints: &[usize]) -> Result<SyntheticRun> {
    let z = &p.p;
    let mp = &p.models[index];
    let d = mp.d();
    let mut rng = ChaCha8Rng::seed_from_u64(derive_seed(z.seed, &[TAG_SPACE, d as u64]));
    let mut space = SyntheticSpace::generate(mp, &mut rng);
    let inputs = z.inputs_seed.unwrap_or(z.seed);
    share_points(&mut space, inputs);
    let mut out = Vec::with_capacity(checkpoints.len());
    for &c in checkpoints {
        let step = z.steps[c];
        let t = progress(&z.steps, c);
        let noise = mp.params().noise * (1.0 + z.early_noise * (1.0 - t));
        let mut layers = Vec::with_capacity(z.n_layers);
        let mut regimes = Vec::with_capacity(z.n_layers);
        for layer in 0..z.n_layers {
            let regime = planned_regime(p, d, layer, t);
            let mut embed = ChaCha8Rng::seed_from_u64(derive_seed(
                inputs,
                &[TAG_EMBED, d as u64, layer as u64],
            ));
            let mut content = ChaCha8Rng::seed_from_u64(derive_seed(
                z.seed,
                &[TAG_CONTENT, d as u64, layer as u64, step],
            ));
            layers.push(space.layer_with(regime, noise, &mut embed, &mut content)?);
            regimes.push(regime);
        }
        out.push(SyntheticCheckpoint {
            step,
            progress: t,
            val_loss: validation_loss(d, step),
            layers,
            regimes,
        });
    }
    Ok(SyntheticRun {
        synthetic: true,
        space,
        checkpoints: out,
    })
}

/// The demo zoo: every width at its last checkpoint.
///
/// Bit-identical to the last checkpoint of [`generate_study`] with the same parameters.
pub fn generate_zoo(p: &ValidZooParams) -> Result<Vec<SyntheticModel>> {
    let last = p.p.steps.len() - 1;
    (0..p.models.len())
        .map(|i| run_for(p, i, &[last]).map(|r| r.model_at(0)))
        .collect()
}

/// The default study: every width at every checkpoint.
pub fn generate_study(p: &ValidZooParams) -> Result<SyntheticStudy> {
    let all: Vec<usize> = (0..p.p.steps.len()).collect();
    let runs = (0..p.models.len())
        .map(|i| run_for(p, i, &all))
        .collect::<Result<_>>()?;
    Ok(SyntheticStudy {
        synthetic: true,
        seed: p.p.seed,
        runs,
    })
}
