//! What the selftest and the field's benchmarks share: a check's line ([`Check`], its
//! [`CheckGroup`]) and the pair metrics they check ([`pair_metrics`]).
//!
//! It sits below both: `selftest` and `field_bench` import it, it imports neither (nor does
//! `field_bench` import `selftest`; `selftest` runs the benchmarks after its own checks).

use std::collections::BTreeMap;

use repgeom_metrics::PairMetric;

/// Which check a [`Check`] belongs to: one of the selftest's three, or with `--bench` one of the
/// field's four.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckGroup {
    /// Layer identification across seeds.
    LayerIdentification,
    /// Rotation invariance and the fall to chance on shuffled points.
    Specificity,
    /// Planted PGA regimes under both nulls.
    PlantedPga,
    /// `--bench`: E[CKA] of independent inputs, biased and debiased.
    Independence,
    /// `--bench`: Ding et al.'s deletion of low-variance principal directions.
    PcaDeletion,
    /// `--bench`: ReSi test 6, similarity falling with layer distance.
    LayerMonotonicity,
    /// `--bench`: raw and calibrated maxima of unrelated networks against width and depth.
    ScaleConfound,
}

impl CheckGroup {
    /// Short stable name.
    pub fn name(self) -> &'static str {
        match self {
            CheckGroup::LayerIdentification => "layer identification",
            CheckGroup::Specificity => "specificity",
            CheckGroup::PlantedPga => "planted PGA",
            CheckGroup::Independence => "independence",
            CheckGroup::PcaDeletion => "PCA deletion",
            CheckGroup::LayerMonotonicity => "layer monotonicity",
            CheckGroup::ScaleConfound => "scale confound",
        }
    }

    /// Where the test comes from.
    pub fn source(self) -> &'static str {
        match self {
            CheckGroup::LayerIdentification => {
                "Kornblith, Norouzi, Lee & Hinton (2019), ICML, section 6.1"
            }
            CheckGroup::Specificity => "repgeom: invariances every metric documents",
            CheckGroup::PlantedPga => "repgeom: planted regimes of the synthetic zoo",
            CheckGroup::Independence => {
                "MONAI PR #9129 (biased vs debiased CKA of independent inputs); Song et al. (2012), JMLR"
            }
            CheckGroup::PcaDeletion => {
                "Ding, Denain & Steinhardt (2021), Grounding representation similarity with statistical testing, NeurIPS"
            }
            CheckGroup::LayerMonotonicity => {
                "Klabunde et al. (2025), ReSi: a comprehensive benchmark for representational similarity measures, ICLR, test 6"
            }
            CheckGroup::ScaleConfound => {
                "Groeger, Wen & Brbic (2026), Revisiting the Platonic Representation Hypothesis: an Aristotelian view, ICML"
            }
        }
    }
}

/// One pass/fail line with its figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// The check it belongs to.
    pub group: CheckGroup,
    /// What was checked, e.g. `cka_linear` or `variance-only, spectrum null, CCR-1`.
    pub subject: String,
    /// The figure, e.g. `8/8 layers (1.00)` or `z = 12.3`.
    pub figure: String,
    /// The rule it was held to, e.g. `accuracy ≥ 0.75` or `z > 4`.
    pub rule: String,
    /// Whether it held.
    pub passed: bool,
    /// Whether a failure fails the selftest (`false`: reported, e.g. a known failure of a
    /// metric in the literature).
    pub held: bool,
    /// The figure's numbers by name (for `selftest.json`).
    pub values: BTreeMap<String, f64>,
}

/// Pair metrics checked (configuration, name), whether lower means more similar (a
/// distance), and whether layer identification is held to its least accuracy (`selftest`'s
/// `MIN_ACCURACY`). SVCCA is
/// reported, not held: like every CCA variant without PWCCA's weighting it is invariant to
/// invertible linear maps of either side, and Kornblith et al. (2019, Table 2) find such
/// metrics fail exactly this test; on the synthetic zoo it picks the right layer 2 times in 8.
const PAIR_METRICS: &[(&str, &str, bool, bool)] = &[
    (r#"{"metric":"cka_linear"}"#, "cka_linear", false, true),
    (
        r#"{"metric":"mutual_knn","n_perm":0}"#,
        "mutual_knn",
        false,
        true,
    ),
    (r#"{"metric":"cknna","n_perm":0}"#, "cknna", false, true),
    (r#"{"metric":"svcca"}"#, "svcca", false, false),
    (r#"{"metric":"pwcca"}"#, "pwcca", false, true),
    (r#"{"metric":"procrustes"}"#, "procrustes", true, true),
    (r#"{"metric":"rsa"}"#, "rsa", false, true),
];

/// A pair metric of [`PAIR_METRICS`], built: the metric, its name, whether lower means more
/// similar, and whether layer identification is held.
pub(crate) type PairMetricCase = (Box<dyn PairMetric>, &'static str, bool, bool);

/// The pair metrics both the selftest and the field's benchmarks check, in order.
pub(crate) fn pair_metrics() -> Vec<PairMetricCase> {
    PAIR_METRICS
        .iter()
        .map(|(json, name, lower, held)| {
            let m: Box<dyn PairMetric> =
                serde_json::from_str(json).expect("built-in metric configurations parse");
            (m, *name, *lower, *held)
        })
        .collect()
}
