//! `repgeom selftest`: checks taken from the field's own benchmarks, run on built-in synthetic
//! data in seconds, each with the figure it rests on.
//!
//! 1. **Layer identification across seeds** (Kornblith et al. 2019): two synthetic zoos with
//!    the same inputs and different seeds ([`repgeom_synth::ZooParams::inputs_seed`]); for
//!    every layer of the first, the most similar layer of the second must be the same layer.
//!    Accuracy per pair metric.
//! 2. **Specificity**: a pair metric between a layer and a random rotation of itself equals its
//!    value between the layer and itself; between the layer and its points shuffled it falls to
//!    chance (the spread of a few other shuffles), far from the identity value.
//! 3. **Planted PGA regimes** (`direct`, `detour`, `noise`, `variance-only`) come out with the
//!    expected signs under the Haar and the spectrum-matched null.
//!
//! [`selftest_bench`] runs the field's benchmarks ([`crate::field_bench`]) after these three;
//! the [`Check`] line and the pair metrics both check come from the `checks` module below them.
//!
//! Everything is seeded: the figures are the same on every machine and at any thread count.

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use repgeom_linalg::{Mat, MatRef, Par};
use repgeom_metrics::analysis::{Hooks, ModelInput, ModelLayer, NullSource, Readout};
use repgeom_metrics::pga::NullKind;
use repgeom_metrics::{LayerInput, PairInput, PairMetric, Pga};
use repgeom_null::NullParams;
use repgeom_synth::{ModelParams, Regime, SyntheticSpace, ZooParams};

use crate::Result;
use crate::checks::pair_metrics;
pub use crate::checks::{Check, CheckGroup};

/// All checks, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct SelftestReport {
    /// Every check, grouped in the order 1, 2, 3.
    pub checks: Vec<Check>,
}

impl SelftestReport {
    /// True when every held check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed || !c.held)
    }
}

/// Least accuracy of layer identification (chance is `1 / n_layers`).
const MIN_ACCURACY: f64 = 0.75;
/// Rotation invariance, relative to `max(1, |value|)` (the rotated layer is rounded to `f32`).
const ROTATION_TOL: f64 = 1e-4;
/// Shuffled points: within this many null standard deviations of the shuffles' mean...
const SHUFFLE_SDS: f64 = 4.0;
/// ...while the identity value lies beyond this many.
const IDENTITY_SDS: f64 = 10.0;
/// Shuffles that make the chance distribution of a metric.
const N_SHUFFLES: usize = 6;
/// Null draws of the planted PGA checks.
const PGA_N_NULL: usize = 30;

/// The headline value of a pair metric on two layers (its first row).
fn pair_value(
    metric: &dyn PairMetric,
    a: MatRef<'_, f32>,
    b: MatRef<'_, f32>,
    what: &str,
) -> Result<f64> {
    let ia = LayerInput::new(a, format!("{what} A"), Par::Seq)?;
    let ib = LayerInput::new(b, format!("{what} B"), Par::Seq)?;
    let input = PairInput::new(&ia, &ib)?;
    let rows = metric.compute(&input)?;
    Ok(rows.first().map_or(f64::NAN, |r| r.value))
}

/// Runs the three checks; `on_check` sees each one as it finishes (for printing as it goes).
pub fn selftest(on_check: &dyn Fn(&Check)) -> Result<SelftestReport> {
    run(on_check, false)
}

/// [`selftest`], then the field's benchmarks ([`crate::field_bench`]).
pub fn selftest_bench(on_check: &dyn Fn(&Check)) -> Result<SelftestReport> {
    run(on_check, true)
}

fn run(on_check: &dyn Fn(&Check), bench: bool) -> Result<SelftestReport> {
    let mut checks = Vec::new();
    let mut push = |c: Check| {
        on_check(&c);
        checks.push(c);
    };
    layer_identification(&mut push)?;
    specificity(&mut push)?;
    planted_pga(&mut push)?;
    if bench {
        crate::field_bench::field_bench(&mut push)?;
    }
    Ok(SelftestReport { checks })
}

/// The two-seed zoo: width 64, 8 layers, 320 points, seeds 1 and 2 on inputs seed 0.
fn two_seeds() -> Result<[Vec<Mat<f32>>; 2]> {
    let zoo = |seed: u64| -> Result<Vec<Mat<f32>>> {
        let p = ZooParams {
            seed,
            inputs_seed: Some(0),
            widths: vec![64],
            n_layers: 8,
            ..ZooParams::default()
        }
        .check()?;
        let mut models = repgeom_synth::generate_zoo(&p)?;
        Ok(models.remove(0).layers)
    };
    Ok([zoo(1)?, zoo(2)?])
}

fn layer_identification(push: &mut dyn FnMut(Check)) -> Result<()> {
    let [a, b] = two_seeds()?;
    let n_layers = a.len();
    for (metric, name, lower, held) in pair_metrics() {
        let mut hits = 0;
        for (i, la) in a.iter().enumerate() {
            let mut best = (0, f64::NAN);
            for (j, lb) in b.iter().enumerate() {
                let v = pair_value(
                    metric.as_ref(),
                    la.as_ref(),
                    lb.as_ref(),
                    &format!("seed-1 layer {i} vs seed-2 layer {j}"),
                )?;
                let better = if lower { v < best.1 } else { v > best.1 };
                if best.1.is_nan() || better {
                    best = (j, v);
                }
            }
            hits += usize::from(best.0 == i);
        }
        let acc = hits as f64 / n_layers as f64;
        let chance = 1.0 / n_layers as f64;
        push(Check {
            group: CheckGroup::LayerIdentification,
            subject: name.to_owned(),
            figure: format!("{hits}/{n_layers} layers ({acc:.2})"),
            rule: if held {
                format!("accuracy ≥ {MIN_ACCURACY} (chance {chance:.2})")
            } else {
                format!(
                    "reported, not held: CCA-type, fails this test in Kornblith et al. 2019 (chance {chance:.2})"
                )
            },
            passed: acc >= MIN_ACCURACY,
            held,
            values: BTreeMap::from([("accuracy".to_owned(), acc)]),
        });
    }
    Ok(())
}

/// Rows of `x` in the order `perm`.
fn permuted(x: &Mat<f32>, perm: &[usize]) -> Mat<f32> {
    Mat::from_fn(x.nrows(), x.ncols(), |i, j| x[(perm[i], j)])
}

fn specificity(push: &mut dyn FnMut(Check)) -> Result<()> {
    let [a, _] = two_seeds()?;
    let layer = &a[a.len() - 1];
    let (n, d) = (layer.nrows(), layer.ncols());
    let r = repgeom_null::haar_basis(d, d, 7, 0);
    let rotated = repgeom_linalg::to_f32(
        repgeom_linalg::project(
            repgeom_linalg::to_f64(layer.as_ref()).as_ref(),
            r.as_ref(),
            Par::Seq,
        )
        .as_ref(),
        Par::Seq,
    );
    let shuffles: Vec<Mat<f32>> = (0..=N_SHUFFLES)
        .map(|s| {
            let mut perm: Vec<usize> = (0..n).collect();
            perm.shuffle(&mut ChaCha8Rng::seed_from_u64(1000 + s as u64));
            permuted(layer, &perm)
        })
        .collect();
    for (metric, name, _, _) in pair_metrics() {
        let m = metric.as_ref();
        let same = pair_value(m, layer.as_ref(), layer.as_ref(), "layer vs itself")?;
        let rot = pair_value(m, layer.as_ref(), rotated.as_ref(), "layer vs rotated")?;
        let rot_ok = (same - rot).abs() <= ROTATION_TOL * same.abs().max(1.0);
        push(Check {
            group: CheckGroup::Specificity,
            subject: format!("{name}: rotation"),
            figure: format!("itself {same:.6}, rotated {rot:.6}"),
            rule: format!("equal within {ROTATION_TOL} (relative)"),
            passed: rot_ok,
            held: true,
            values: BTreeMap::from([("itself".to_owned(), same), ("rotated".to_owned(), rot)]),
        });
        let chance: Vec<f64> = shuffles[1..]
            .iter()
            .map(|s| pair_value(m, layer.as_ref(), s.as_ref(), "layer vs shuffled"))
            .collect::<Result<_>>()?;
        let mean = chance.iter().sum::<f64>() / chance.len() as f64;
        let sd = (chance.iter().map(|v| (v - mean).powi(2)).sum::<f64>()
            / (chance.len() - 1) as f64)
            .sqrt()
            .max(1e-12);
        let shuffled = pair_value(m, layer.as_ref(), shuffles[0].as_ref(), "layer vs shuffled")?;
        let (z_shuffled, z_same) = ((shuffled - mean) / sd, (same - mean) / sd);
        push(Check {
            group: CheckGroup::Specificity,
            subject: format!("{name}: shuffled points"),
            figure: format!(
                "shuffled {shuffled:.4} (z {z_shuffled:.1}), chance {mean:.4} ± {sd:.4}, itself {same:.4} (z {z_same:.0})"
            ),
            rule: format!("|z shuffled| ≤ {SHUFFLE_SDS}, |z itself| ≥ {IDENTITY_SDS}"),
            passed: z_shuffled.abs() <= SHUFFLE_SDS && z_same.abs() >= IDENTITY_SDS,
            held: true,
            values: BTreeMap::from([
                ("z_shuffled".to_owned(), z_shuffled),
                ("z_itself".to_owned(), z_same),
            ]),
        });
    }
    Ok(())
}

/// Expected sign of a planted z: clearly positive, clearly negative, or near zero.
#[derive(Debug, Clone, Copy)]
enum Sign {
    Positive(f64),
    Negative(f64),
    Small(f64),
}

impl Sign {
    fn holds(self, z: f64) -> bool {
        match self {
            Sign::Positive(t) => z > t,
            Sign::Negative(t) => z < -t,
            Sign::Small(t) => z.abs() < t,
        }
    }
    fn rule(self) -> String {
        match self {
            Sign::Positive(t) => format!("z > {t}"),
            Sign::Negative(t) => format!("z < −{t}"),
            Sign::Small(t) => format!("|z| < {t}"),
        }
    }
}

fn planted_pga(push: &mut dyn FnMut(Check)) -> Result<()> {
    let (d, k, dark) = (64, 8, 4);
    let p = ModelParams {
        d,
        k: Some(k),
        n_points: 200,
        ..ModelParams::default()
    }
    .check()?;
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let space = SyntheticSpace::generate(&p, &mut rng);
    let null = NullParams {
        n_null: PGA_N_NULL,
        seed: 11,
    };
    let direct = space.layer(Regime::Direct, &mut rng)?;
    let detour = space.layer(
        Regime::Detour {
            dark_dims: dark,
            strength: 1.5,
        },
        &mut rng,
    )?;
    let noise = space.layer(Regime::Isotropic, &mut rng)?;
    let variance = space.layer(Regime::VarianceOnly { strength: 1.0 }, &mut rng)?;
    // (regime, layer, CCR level, expected under Haar, expected under the spectrum null)
    let cases: [(&str, &Mat<f32>, usize, Sign, Sign); 5] = [
        (
            "direct",
            &direct,
            1,
            Sign::Positive(4.0),
            Sign::Positive(2.0),
        ),
        (
            "detour",
            &detour,
            1,
            Sign::Negative(4.0),
            Sign::Negative(2.0),
        ),
        (
            "detour",
            &detour,
            dark,
            Sign::Positive(2.0),
            Sign::Positive(2.0),
        ),
        ("noise", &noise, 1, Sign::Small(4.0), Sign::Small(4.0)),
        (
            "variance-only",
            &variance,
            1,
            Sign::Positive(4.0),
            Sign::Small(3.0),
        ),
    ];
    for (name, layer, c, haar, spectrum) in cases {
        for (kind, expect) in [(NullKind::Haar, haar), (NullKind::Spectrum, spectrum)] {
            let input = ModelInput {
                layers: vec![ModelLayer {
                    layer: 0,
                    acts: layer.as_ref(),
                    what: format!("planted {name} layer"),
                }],
                readout: Readout::Basis(space.readout_basis.as_ref()),
                ks: Vec::new(),
                null: NullSource::Draw(null.clone()),
                sequences: None,
                memory_budget: Some(repgeom_io::default_memory_budget()),
                device: Default::default(),
            };
            let mut pga = Pga {
                ccr: vec![c],
                ..Pga::default()
            };
            pga.engine.null = kind;
            let r = pga
                .run_model(&input, Par::Seq, &Hooks::default())?
                .rows
                .remove(0)
                .result;
            push(Check {
                group: CheckGroup::PlantedPga,
                subject: format!("{name}, {} null, CCR-{c}", kind.name()),
                figure: format!(
                    "z = {:.1} (captured variance: readout {:.3}, null {:.3})",
                    r.summary.z, r.captured_variance_readout, r.captured_variance_null_mean
                ),
                rule: expect.rule(),
                passed: expect.holds(r.summary.z),
                held: true,
                values: BTreeMap::from([("z".to_owned(), r.summary.z)]),
            });
        }
    }
    Ok(())
}
