//! The conformance suite a metric must pass to join the registry, for plugin crates' own tests:
//! [`check_metric`] and [`check_pair_metric`] run one configuration, [`check_registry`] every
//! registered metric with its default options (what `repgeom-metrics`' own test suite runs).
//!
//! A metric conforms when it is deterministic (same bits twice, and at one and two threads),
//! its configuration survives a JSON and a TOML round trip under its typetag name, every option
//! is documented in [`MetricInfo::options`](crate::MetricInfo) and no documented option is
//! stale, it has a summary and a source, its values are finite on well-conditioned input, a
//! claimed rotation invariance holds (activations, readout and null bases rotated together by a
//! Haar-random orthogonal matrix), a claimed symmetry holds for pair metrics, a pair metric's
//! shared work (`warm`) and whole tables (`compute_table`) change no bit of a cell, and a
//! metric that needs a readout says so by name when it gets none.
//!
//! These are test helpers: each `check_*` **panics** with the metric's name and the property it
//! breaks, so call them from a `#[test]`:
//!
//! ```
//! repgeom_metrics::conformance::check_metric(&repgeom_metrics::RankMe::default());
//! ```
//!
//! The module is compiled into every build (it is small, and a `testing` feature would split
//! the crate's build between tests and binaries); it does no I/O.
#![allow(clippy::missing_panics_doc)]

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use repgeom_linalg::{Mat, MatRef, Par, project};
use repgeom_null::{NullBases, NullParams, haar_basis};

use crate::{
    LayerInput, Metric, MetricValue, PairInput, PairMetric, PairSide, all_metrics,
    all_pair_metrics, options_of,
};

/// Relative tolerance (scaled by max(1, |value|)) for values before and after a rotation: the
/// rotated activations are rounded to `f32`, which perturbs distances at the 1e-7 level.
pub const ROTATION_TOL: f64 = 1e-4;

const N: usize = 48;
const K: usize = 4;
const N_NULL: usize = 12;

/// One model's data for a metric: activations, a readout basis and null bases (what a
/// [`LayerInput`] holds), so that property tests can build their own and rotate them.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// Activations, `N × d`.
    pub acts: Mat<f32>,
    /// Readout basis, `d × k` with orthonormal columns.
    pub readout: Mat<f64>,
    /// Null bases, each `d × k`.
    pub null: NullBases,
}

impl Fixture {
    /// The same model in a hidden space rotated by a Haar-random orthogonal `R` drawn from
    /// `seed`: activations `H R`, readout `Rᵀ V_k`, null bases `Rᵀ Q_i`. Every metric that
    /// claims rotation invariance must give the same values on it (up to the `f32` rounding of
    /// the rotated activations: [`ROTATION_TOL`]).
    pub fn rotated(&self, seed: u64) -> Fixture {
        let d = self.acts.ncols();
        let k = self.readout.ncols();
        let r = haar_basis(d, d, seed, 0);
        let h64 = repgeom_linalg::to_f64(self.acts.as_ref());
        let acts = repgeom_linalg::to_f32(
            project(h64.as_ref(), r.as_ref(), Par::Seq).as_ref(),
            Par::Seq,
        );
        let rt = r.transpose().to_owned();
        let readout = project(rt.as_ref(), self.readout.as_ref(), Par::Seq);
        let (shape, _) = self.null.to_array();
        let mut data = Vec::new();
        for q in self.null.bases() {
            let rq = project(rt.as_ref(), q.as_ref(), Par::Seq);
            for i in 0..d {
                for j in 0..k {
                    data.push(rq[(i, j)]);
                }
            }
        }
        let null = NullBases::from_array(&shape, &data, d, k, 1e-9)
            .expect("a rotation keeps the bases orthonormal");
        Fixture {
            acts,
            readout,
            null,
        }
    }

    /// The fixture as a metric's input (readout and null attached).
    ///
    /// # Panics
    ///
    /// When the fixture is not a valid input (e.g. fewer than 4 points).
    pub fn input(&self, what: &str, par: Par) -> LayerInput<'_> {
        LayerInput::new(self.acts.as_ref(), what, par)
            .and_then(|i| i.with_readout(self.readout.as_ref()))
            .and_then(|i| i.with_null(&self.null))
            .expect("valid fixture")
    }
}

fn model(d: usize, seed: u64, latent: Option<&Mat<f64>>) -> Fixture {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let z = match latent {
        Some(z) => z.clone(),
        None => Mat::from_fn(N, d, |_, _| StandardNormal.sample(&mut rng)),
    };
    let mix = haar_basis(d, d, seed + 100, 0);
    let acts = Mat::from_fn(N, d, |i, j| {
        let mut v = 2.0 + 0.3 * j as f64; // mean offset
        for l in 0..z.ncols().min(d) {
            let scale = 3.0 / (1.0 + l as f64);
            v += z[(i, l)] * scale * mix[(l, j)];
        }
        let noise: f64 = StandardNormal.sample(&mut rng);
        (v + 0.01 * noise) as f32
    });
    let readout = haar_basis(d, K, seed + 200, 0);
    let null = NullBases::draw(
        d,
        K,
        &NullParams {
            n_null: N_NULL,
            seed: seed + 300,
        }
        .check()
        .unwrap(),
    )
    .unwrap();
    Fixture {
        acts,
        readout,
        null,
    }
}

/// Runs a per-layer metric on a model.
fn run(metric: &dyn Metric, m: &Fixture, par: Par) -> Vec<MetricValue> {
    let name = metric.info().name;
    metric
        .compute(&m.input("fixture", par))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Runs a pair metric on two models.
fn run_pair(metric: &dyn PairMetric, a: &Fixture, b: &Fixture, par: Par) -> Vec<MetricValue> {
    let name = metric.info().name;
    let (ia, ib) = (a.input("A", par), b.input("B", par));
    let input = PairInput::new(&ia, &ib).unwrap();
    metric
        .compute(&input)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn bits(values: &[MetricValue]) -> Vec<(String, String, Vec<u64>)> {
    values
        .iter()
        .map(|v| {
            let mut b = vec![v.value.to_bits()];
            b.extend(
                [v.null_mean, v.null_std, v.p_value]
                    .iter()
                    .map(|x| x.map_or(0, f64::to_bits)),
            );
            b.extend(v.extra.values().map(|x| x.to_bits()));
            (v.metric.clone(), v.variant.clone(), b)
        })
        .collect()
}

/// Extras that count exact ties among the input's values.
const TIE_EXTRAS: [&str; 2] = ["tied_a", "tied_b"];

fn assert_close_values(a: &[MetricValue], b: &[MetricValue], name: &str) {
    assert_eq!(a.len(), b.len(), "{name}: row count");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(
            (&x.metric, &x.variant),
            (&y.metric, &y.variant),
            "{name}: row order"
        );
        let mut pairs = vec![("value", x.value, y.value)];
        // (The tie fractions describe the input's floating-point numbers, which a rotation
        // changes, not its geometry.)
        for (key, vx) in x
            .extra
            .iter()
            .filter(|(k, _)| !TIE_EXTRAS.contains(&k.as_str()))
        {
            pairs.push((key.as_str(), *vx, y.extra[key]));
        }
        for (field, vx, vy) in pairs {
            let tol = ROTATION_TOL * vx.abs().max(1.0);
            assert!(
                repgeom_testkit::within(vx, vy, tol),
                "{name} {} {field}: {vx} vs {vy} after rotation",
                x.variant
            );
        }
    }
}

fn assert_config_conforms<T: serde::Serialize + ?Sized>(
    config: &T,
    info: crate::MetricInfo,
    roundtrip_json: String,
) {
    let json = serde_json::to_value(config).unwrap();
    assert_eq!(
        json["metric"], info.name,
        "typetag name and MetricInfo::name agree"
    );
    assert_eq!(
        serde_json::to_string(config).unwrap(),
        roundtrip_json,
        "{}: JSON round trip",
        info.name
    );
    let documented: Vec<&str> = info.options.iter().map(|o| o.name).collect();
    let fields: Vec<String> = options_of(config).into_keys().collect();
    let mut documented_sorted = documented.clone();
    documented_sorted.sort_unstable();
    assert_eq!(
        fields, documented_sorted,
        "{}: every option documented, no stale docs",
        info.name
    );
    assert!(
        !info.summary.is_empty() && !info.source.is_empty(),
        "{}: summary and source",
        info.name
    );
}

/// A configuration's JSON and TOML round trips give back the same configuration under its
/// typetag name, with every option documented.
fn check_config<T>(config: &T, info: crate::MetricInfo)
where
    T: serde::Serialize + ?Sized,
    Box<T>: serde::Serialize + serde::de::DeserializeOwned,
{
    let name = info.name;
    let json = serde_json::to_string(config).expect("a metric configuration serialises");
    let back: Box<T> = serde_json::from_str(&json)
        .unwrap_or_else(|e| panic!("{name}: JSON round trip: {e} in {json}"));
    assert_config_conforms(&back, info, json.clone());
    let toml_text = toml::to_string(config).unwrap_or_else(|e| panic!("{name}: TOML: {e}"));
    let from_toml: Box<T> = toml::from_str(&toml_text)
        .unwrap_or_else(|e| panic!("{name}: TOML round trip: {e} in {toml_text}"));
    assert_eq!(
        serde_json::to_string(&from_toml).expect("serialises"),
        json,
        "{name}: TOML round trip"
    );
}

/// Runs the conformance checks on one per-layer metric configuration.
///
/// # Panics
///
/// With the metric's name and the broken property, e.g. `rankme: thread count`.
pub fn check_metric(metric: &(dyn Metric + 'static)) {
    let m = model(16, 1, None);
    let info = metric.info();
    let name = info.name;
    metric
        .check()
        .unwrap_or_else(|e| panic!("{name}: configuration invalid: {e}"));

    // Config serde: JSON and TOML round trips give back the same configuration.
    check_config::<dyn Metric>(metric, info);

    // Determinism: same input, same bits, at one and two threads.
    let first = run(metric, &m, Par::Seq);
    assert!(!first.is_empty(), "{name}: produces values");
    assert_eq!(
        bits(&first),
        bits(&run(metric, &m, Par::Seq)),
        "{name}: repeatable"
    );
    assert_eq!(
        bits(&first),
        bits(&run(metric, &m, Par::rayon(2))),
        "{name}: thread count"
    );
    assert!(
        first.iter().all(|v| v.value.is_finite()),
        "{name}: finite values"
    );

    // Rotation invariance (activations, readout and null bases rotated together).
    if info.rotation_invariant {
        let r = m.rotated(77);
        assert_close_values(&first, &run(metric, &r, Par::Seq), name);
    }

    // Readout-needing metrics say so when the readout is missing.
    if info.needs_readout {
        let bare = LayerInput::new(m.acts.as_ref(), "bare", Par::Seq).expect("valid fixture");
        match metric.compute(&bare) {
            Ok(_) => panic!("{name}: declares needs_readout but ran without one"),
            Err(e) => {
                let err = e.to_string();
                assert!(
                    err.contains(&format!("metric {name} needs")),
                    "{name}: {err}"
                );
            }
        }
    }
}

/// Runs the conformance checks on one pair metric configuration: model A (width 16) against
/// model B (width 24) over the same inputs.
///
/// # Panics
///
/// With the metric's name and the broken property, e.g. `svcca: symmetric`.
pub fn check_pair_metric(metric: &(dyn PairMetric + 'static)) {
    let a = model(16, 2, None);
    // B: another model of different width over the same inputs (shared latent structure).
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let latent = Mat::from_fn(N, 16, |i, j| {
        let noise: f64 = StandardNormal.sample(&mut rng);
        f64::from(a.acts[(i, j)]) + 0.5 * noise
    });
    let b = model(24, 3, Some(&latent));
    let info = metric.info();
    let name = info.name;
    metric
        .check()
        .unwrap_or_else(|e| panic!("{name}: configuration invalid: {e}"));
    check_config::<dyn PairMetric>(metric, info);

    let first = run_pair(metric, &a, &b, Par::Seq);
    assert!(!first.is_empty(), "{name}: produces values");
    assert_eq!(
        bits(&first),
        bits(&run_pair(metric, &a, &b, Par::Seq)),
        "{name}: repeatable"
    );
    assert_eq!(
        bits(&first),
        bits(&run_pair(metric, &a, &b, Par::rayon(2))),
        "{name}: thread count"
    );
    // The per-layer work a table shares between pairs (`PairMetric::warm`), done first on
    // each side and again, changes no bit; nor does it on the side each layer is not on.
    {
        let (ia, ib) = (a.input("A", Par::rayon(2)), b.input("B", Par::rayon(2)));
        for (layer, side) in [(&ia, PairSide::A), (&ib, PairSide::B), (&ia, PairSide::A)] {
            metric.warm(layer, side);
        }
        metric.warm(&ia, PairSide::B);
        metric.warm(&ib, PairSide::A);
        let input = PairInput::new(&ia, &ib).unwrap();
        let warmed = (metric.compute(&input)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(bits(&first), bits(&warmed), "{name}: warm changes no value");
    }
    // A whole table at once (`PairMetric::compute_table`), where the metric computes one:
    // each cell equals the cell alone on fresh layers, bit for bit. Two layers a side, so
    // every layer is in two cells.
    {
        let (a2, b2) = (model(16, 5, None), model(24, 6, Some(&latent)));
        let (ia, ib) = (a.input("A0", Par::rayon(2)), b.input("B0", Par::rayon(2)));
        let (ia2, ib2) = (a2.input("A1", Par::rayon(2)), b2.input("B1", Par::rayon(2)));
        let pairs = [(0, 0), (0, 1), (1, 0), (1, 1)];
        if let Some(cells) = metric.compute_table(&[&ia, &ia2], &[&ib, &ib2], &pairs) {
            assert_eq!(cells.len(), pairs.len(), "{name}: a table's cells");
            for (cell, &(i, j)) in cells.into_iter().zip(&pairs) {
                let (fa, fb) = ([&a, &a2][i], [&b, &b2][j]);
                let alone = run_pair(metric, fa, fb, Par::Seq);
                let cell = cell.unwrap_or_else(|e| panic!("{name}: table cell ({i}, {j}): {e}"));
                assert_eq!(bits(&alone), bits(&cell), "{name}: table cell ({i}, {j})");
            }
        }
    }
    if info.rotation_invariant {
        let (ra, rb) = (a.rotated(78), b.rotated(79));
        assert_close_values(&first, &run_pair(metric, &ra, &b, Par::Seq), name);
        assert_close_values(&first, &run_pair(metric, &a, &rb, Par::Seq), name);
    }
    // Symmetric in its arguments, when the metric claims so.
    if metric.symmetric() {
        let swapped = run_pair(metric, &b, &a, Par::Seq);
        for (x, y) in first.iter().zip(&swapped) {
            if x.variant != "random" {
                assert!(
                    (x.value - y.value).abs() <= 1e-9,
                    "{name} {}: symmetric",
                    x.variant
                );
            }
        }
    }
}

/// Every registered metric and pair metric with its default options (including those of any
/// plugin crate linked into the calling binary), and the input checks no metric can bypass:
/// fewer than 4 points, identical points and zero width are rejected by [`LayerInput`] itself.
///
/// # Panics
///
/// As [`check_metric`] and [`check_pair_metric`], or when the registry is empty.
pub fn check_registry() {
    let metrics = all_metrics();
    assert!(!metrics.is_empty(), "the registry holds metrics");
    for metric in &metrics {
        check_metric(metric.as_ref());
    }
    for metric in all_pair_metrics() {
        check_pair_metric(metric.as_ref());
    }
    let tiny = Mat::<f32>::from_fn(3, 8, |i, j| (i * 8 + j) as f32);
    let constant = Mat::<f32>::from_fn(20, 8, |_, j| j as f32);
    for (x, expected) in [
        (tiny.as_ref(), "needs at least 4 points, got 3"),
        (constant.as_ref(), "are identical"),
    ] {
        match LayerInput::new(x, "degenerate", Par::Seq) {
            Ok(_) => panic!("LayerInput accepted degenerate input ({expected})"),
            Err(e) => assert!(e.to_string().contains(expected), "{e}"),
        }
    }
    let zero_width: MatRef<'_, f32> = MatRef::from_row_major_slice(&[], 10, 0);
    assert!(
        LayerInput::new(zero_width, "empty", Par::Seq).is_err(),
        "LayerInput accepted zero width"
    );
}
