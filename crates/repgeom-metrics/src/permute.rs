//! The permutation null's vocabulary, below the traits that name it: what a pair metric asks
//! for ([`Permutations`], its `n_perm` and `seed` options), draw `i`'s relabelling
//! ([`permutation`]), and the per-layer work a metric prepares so that its value under any
//! relabelling follows without recomputing it ([`Prepared`]: kernel matrices, or a metric's
//! own lists behind the [`Relabel`] trait). The driver that scores draws and aggregates is
//! module `calibrate`; it sees prepared work only through this module, never a metric's types.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use repgeom_linalg::MatRef;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::value::OptionDoc;

/// The permutation null a pair metric asks for: `n_perm` draws (0 = none) from `seed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permutations {
    /// Number of draws (0 = no null; otherwise at least 2).
    pub n_perm: usize,
    /// Seed: draw `i` depends only on `(seed, i, N)`.
    pub seed: u64,
}

impl Permutations {
    /// Validates the draw count (a null of one draw has no spread).
    pub fn check(&self) -> Result<()> {
        if self.n_perm == 1 {
            return Err(Error::InvalidOption {
                name: "n_perm".into(),
                value: "1".into(),
                reason: "a permutation null needs at least 2 draws (0 = no null)".into(),
            });
        }
        Ok(())
    }
}

/// The documented `n_perm` option every pair metric has.
pub(crate) const N_PERM_OPTION: OptionDoc = OptionDoc {
    name: "n_perm",
    help: "permutations of the second representation's points for the null (0 = none)",
};

/// The documented `seed` option every pair metric has.
pub(crate) const SEED_OPTION: OptionDoc = OptionDoc {
    name: "seed",
    help: "seed of the permutation null (draw i depends only on seed, i and N)",
};

/// The `PairMetric::permutations` and `PairMetric::set_permutations` of a metric struct
/// with `n_perm` and `seed` fields.
macro_rules! permutation_fields {
    () => {
        fn permutations(&self) -> $crate::permute::Permutations {
            $crate::permute::Permutations {
                n_perm: self.n_perm,
                seed: self.seed,
            }
        }
        fn set_permutations(&mut self, p: $crate::permute::Permutations) {
            self.n_perm = p.n_perm;
            self.seed = p.seed;
        }
    };
}
pub(crate) use permutation_fields;

/// Permutation `i` of `n` points for `seed`, with its inverse: depends only on `(seed, i, n)`.
pub(crate) fn permutation(n: usize, seed: u64, i: u64) -> (Vec<u32>, Vec<u32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(i);
    let mut perm: Vec<u32> = (0..n as u32).collect();
    perm.shuffle(&mut rng);
    let mut inv = vec![0u32; n];
    for (i, &p) in perm.iter().enumerate() {
        inv[p as usize] = i as u32;
    }
    (perm, inv)
}

// ---------------------------------------------------------------------------------------------
// Prepared per-layer work.

/// Per-layer work from which a metric's values under any relabelling of the second side's
/// points follow without recomputing the metric (see the module docs). Built by
/// `PairMetric::prepare`; opaque outside this crate (a plugin metric returns `None` there and
/// takes the generic path).
#[derive(Debug)]
pub struct Prepared(pub(crate) PreparedKind);

#[derive(Debug)]
pub(crate) enum PreparedKind {
    /// One matrix per variant with a null.
    Kernel(Vec<KernelMatrix>),
    /// Neighbour lists.
    Neighbours(Box<dyn Relabel>),
}

impl Prepared {
    pub(crate) fn variants(&self) -> Vec<String> {
        match &self.0 {
            PreparedKind::Kernel(m) => m.iter().map(|k| k.variant.clone()).collect(),
            PreparedKind::Neighbours(p) => vec![p.variant().to_string()],
        }
    }
}

/// A symmetric `N × N` matrix (full storage, `f32`) scaled so that a metric's value of the
/// pair (A, B relabelled by `p`) is `w · Σ_{i<j} a_ij b_{p(i)p(j)} + [diagonal] Σ_i a_ii b_{p(i)p(i)}`.
#[derive(Debug)]
pub(crate) struct KernelMatrix {
    pub(crate) variant: String,
    pub(crate) n: usize,
    pub(crate) data: Vec<f32>,
    pub(crate) off_weight: f32,
    pub(crate) diagonal: bool,
}

impl KernelMatrix {
    /// `m` scaled by `scale`; `off_weight` multiplies the strict upper triangle's sum.
    pub(crate) fn new(
        variant: &str,
        m: MatRef<'_, f64>,
        scale: f64,
        off_weight: f32,
        diagonal: bool,
    ) -> Self {
        let n = m.nrows();
        let mut data = vec![0.0f32; n * n];
        for i in 0..n {
            for j in 0..n {
                data[i * n + j] = (m[(i, j)] * scale) as f32;
            }
        }
        Self {
            variant: variant.into(),
            n,
            data,
            off_weight,
            diagonal,
        }
    }

    /// From the condensed strict upper triangle (`i < j`, row-major), zero diagonal.
    pub(crate) fn from_condensed(variant: &str, n: usize, c: &[f64], off_weight: f32) -> Self {
        let mut data = vec![0.0f32; n * n];
        let mut t = 0;
        for i in 0..n {
            for j in i + 1..n {
                let v = c[t] as f32;
                data[i * n + j] = v;
                data[j * n + i] = v;
                t += 1;
            }
        }
        Self {
            variant: variant.into(),
            n,
            data,
            off_weight,
            diagonal: false,
        }
    }
}

/// Per-layer work of a metric whose value under a relabelling of the second side's points is
/// computed from the two layers' work alone (mutual k-NN and CKNNA: neighbour lists). The
/// driver relabels the second side's work once per draw and scores every first-side layer
/// against it, without knowing what the work is.
pub(crate) trait Relabel: std::fmt::Debug + Send + Sync {
    /// The variant this work scores.
    fn variant(&self) -> &str;
    /// The work as if the points were relabelled by `perm` (its inverse `inv`).
    fn permuted(&self, perm: &[u32], inv: &[u32]) -> Box<dyn Relabel>;
    /// The metric of this layer (first side) against `b`, prepared by the same metric.
    fn score(&self, b: &dyn Relabel) -> f64;
    /// For [`Relabel::score`]'s downcast of the other side.
    fn as_any(&self) -> &dyn std::any::Any;
}
