//! `repgeom selftest --bench`: the field's validation tests for representation-similarity
//! metrics, run on built-in synthetic data, each with its source, its figure for every metric
//! and its pass band.
//!
//! 1. **Independence** (the bias of linear CKA; MONAI PR #9129's table): mean CKA of
//!    independent `N(0, 1)` inputs of width [`INDEPENDENCE_WIDTH`] at n = 32 … 256, biased and
//!    debiased, over [`INDEPENDENCE_REPS`] draws. Held: the debiased mean within two standard
//!    errors of 0 at every n; the biased mean positive and shrinking with n.
//! 2. **PCA deletion** (Ding, Denain & Steinhardt 2021, *Grounding representation similarity
//!    with statistical testing*, NeurIPS): a representation against itself with only its top-k
//!    principal directions kept, k from d down to 1, beside the accuracy of a probe planted on a
//!    low-variance direction. Reported, not held: Ding et al. find CKA insensitive to exactly
//!    this deletion; the figure is each metric's similarity once the probe is at chance.
//! 3. **Layer monotonicity** (ReSi, Klabunde et al. 2025, ICLR, test 6): on a residual network
//!    of [`MONO_LAYERS`] layers, similarity should fall with layer distance: for `i < j < k`,
//!    `s(i, j) ≥ s(i, k)` and `s(j, k) ≥ s(i, k)`. Held: a violation rate of at most
//!    [`MAX_VIOLATIONS`]; Spearman of similarity against layer distance reported.
//! 4. **Scale confound** (Gröger, Wen & Brbić 2026, *An Aristotelian View*): two networks with
//!    nothing in common (random weights, independent inputs). Held: the raw maximum of linear
//!    CKA over layer pairs rises with width, and the calibrated aggregate stays inside its
//!    permutation null (p ≥ [`NULL_P_FLOOR`]) in every configuration. The raw maximum against
//!    depth (2, 4, 8 layers) is reported: on these networks the selection effect of a larger
//!    table is smaller than the spread between independently drawn networks.
//!
//! Layer identification across seeds, the fifth test, is the plain selftest's first check.
//! Everything is seeded; the figures are the same on every machine and at any thread count.

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use repgeom_linalg::{Mat, MatRef, Par};
use repgeom_metrics::calibrate::{Aggregate, CompareSettings, Permutations, compare};
use repgeom_metrics::{CkaLinear, LayerInput, PairInput, PairMetric, layer_pairs};

use crate::Result;
use crate::checks::{Check, CheckGroup, pair_metrics};

/// Width of the independence test's inputs (MONAI's figures were reported without theirs).
pub const INDEPENDENCE_WIDTH: usize = 32;
/// Sample sizes of the independence test.
pub const INDEPENDENCE_NS: [usize; 4] = [32, 64, 128, 256];
/// Independent draws per sample size.
pub const INDEPENDENCE_REPS: usize = 200;
/// Layers of the layer-monotonicity network.
pub const MONO_LAYERS: usize = 8;
/// Largest violation rate of layer monotonicity that passes.
pub const MAX_VIOLATIONS: f64 = 0.1;
/// The calibrated aggregate of two unrelated networks stays inside its null: p at least this.
pub const NULL_P_FLOOR: f64 = 0.01;
/// Permutations of the scale-confound null.
pub const SCALE_N_PERM: usize = 100;

/// Runs the four field tests; `push` sees each check as it finishes.
pub fn field_bench(push: &mut dyn FnMut(Check)) -> Result<()> {
    independence(push)?;
    pca_deletion(push)?;
    layer_monotonicity(push)?;
    scale_confound(push)?;
    Ok(())
}

/// A standard normal draw (Box–Muller on two uniforms).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let v: f64 = rng.random();
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

fn gaussian(n: usize, d: usize, rng: &mut ChaCha8Rng) -> Mat<f32> {
    Mat::from_fn(n, d, |_, _| normal(rng) as f32)
}

/// Every value row of `metric` on two layers (`variant` -> value).
fn values(
    metric: &dyn PairMetric,
    a: MatRef<'_, f32>,
    b: MatRef<'_, f32>,
    what: &str,
) -> Result<BTreeMap<String, f64>> {
    let ia = LayerInput::new(a, format!("{what} A"), Par::Seq)?;
    let ib = LayerInput::new(b, format!("{what} B"), Par::Seq)?;
    let input = PairInput::new(&ia, &ib)?;
    Ok(metric
        .compute(&input)?
        .into_iter()
        .map(|r| (r.variant, r.value))
        .collect())
}

fn first(metric: &dyn PairMetric, a: &Mat<f32>, b: &Mat<f32>, what: &str) -> Result<f64> {
    Ok(values(metric, a.as_ref(), b.as_ref(), what)?
        .into_values()
        .next()
        .unwrap_or(f64::NAN))
}

fn mean_se(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

fn independence(push: &mut dyn FnMut(Check)) -> Result<()> {
    let d = INDEPENDENCE_WIDTH;
    let mut biased_means = Vec::new();
    for (i, &n) in INDEPENDENCE_NS.iter().enumerate() {
        let mut rng = ChaCha8Rng::seed_from_u64(100 + i as u64);
        let (mut biased, mut debiased) = (Vec::new(), Vec::new());
        for _ in 0..INDEPENDENCE_REPS {
            let (x, y) = (gaussian(n, d, &mut rng), gaussian(n, d, &mut rng));
            let b = first(&CkaLinear::default(), &x, &y, "independent")?;
            let u = first(
                &CkaLinear {
                    debiased: true,
                    ..CkaLinear::default()
                },
                &x,
                &y,
                "independent",
            )?;
            biased.push(b);
            debiased.push(u);
        }
        let (bm, bse) = mean_se(&biased);
        let (um, use_) = mean_se(&debiased);
        let shrinking = biased_means.last().is_none_or(|&prev| bm < prev);
        biased_means.push(bm);
        push(Check {
            group: CheckGroup::Independence,
            subject: format!("cka_linear, n = {n}, d = {d}"),
            figure: format!(
                "biased {bm:.4} ± {bse:.4}, debiased {um:.4} ± {use_:.4} (mean ± se, {INDEPENDENCE_REPS} draws)"
            ),
            rule: "|debiased| ≤ 2 se; biased > 0 and below the previous n's".to_owned(),
            passed: um.abs() <= 2.0 * use_ && bm > 0.0 && shrinking,
            held: true,
            values: BTreeMap::from([
                ("n".to_owned(), n as f64),
                ("biased_mean".to_owned(), bm),
                ("biased_se".to_owned(), bse),
                ("debiased_mean".to_owned(), um),
                ("debiased_se".to_owned(), use_),
            ]),
        });
    }
    Ok(())
}

/// Accuracy of a least-squares linear probe (fit and scored on the same points: the question
/// is whether the information is linearly present at all) for ±1 labels.
fn probe_accuracy(x: &Mat<f64>, labels: &[f64]) -> f64 {
    let (n, d) = (x.nrows(), x.ncols());
    // Normal equations with a small ridge, solved by Cholesky-free Gauss–Jordan (d is small).
    let mut a = vec![vec![0.0; d + 1]; d];
    for i in 0..d {
        for j in 0..d {
            a[i][j] = (0..n).map(|r| x[(r, i)] * x[(r, j)]).sum::<f64>();
        }
        a[i][i] += 1e-9 * n as f64;
        a[i][d] = (0..n).map(|r| x[(r, i)] * labels[r]).sum::<f64>();
    }
    for c in 0..d {
        let p = (c..d)
            .max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))
            .unwrap_or(c);
        a.swap(c, p);
        let piv = a[c][c];
        if piv.abs() < 1e-300 {
            continue;
        }
        for j in c..=d {
            a[c][j] /= piv;
        }
        for i in 0..d {
            if i != c {
                let f = a[i][c];
                for j in c..=d {
                    a[i][j] -= f * a[c][j];
                }
            }
        }
    }
    let w: Vec<f64> = (0..d).map(|i| a[i][d]).collect();
    let hits = (0..n)
        .filter(|&r| {
            let s: f64 = (0..d).map(|j| x[(r, j)] * w[j]).sum();
            s * labels[r] > 0.0
        })
        .count();
    hits as f64 / n as f64
}

fn pca_deletion(push: &mut dyn FnMut(Check)) -> Result<()> {
    // Principal axes are the coordinates: variance 0.8^i along axis i, centred by construction.
    let (n, d, probe_axis) = (400, 24, 16);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let x = Mat::<f64>::from_fn(n, d, |_, j| normal(&mut rng) * 0.8f64.powi(j as i32));
    let labels: Vec<f64> = (0..n)
        .map(|r| if x[(r, probe_axis)] > 0.0 { 1.0 } else { -1.0 })
        .collect();
    let keep = |k: usize| Mat::<f64>::from_fn(n, d, |i, j| if j < k { x[(i, j)] } else { 0.0 });
    let full = repgeom_linalg::to_f32(x.as_ref(), Par::Seq);
    let series: Vec<(usize, f64, Mat<f32>)> = (1..=d)
        .rev()
        .map(|k| {
            let xk = keep(k);
            (
                k,
                probe_accuracy(&xk, &labels),
                repgeom_linalg::to_f32(xk.as_ref(), Par::Seq),
            )
        })
        .collect();
    // The first k (from the top) at which the probe's direction is gone.
    let (k_drop, acc_drop) = series
        .iter()
        .find(|(k, _, _)| *k <= probe_axis)
        .map(|(k, a, _)| (*k, *a))
        .unwrap_or((0, f64::NAN));
    let acc_full = series[0].1;
    for (metric, name, lower, _) in pair_metrics() {
        let m = metric.as_ref();
        let v = |xk: &Mat<f32>| first(m, &full, xk, "PCA deletion");
        let at_full = v(&series[0].2)?;
        let at_drop = match series.iter().find(|s| s.0 == k_drop) {
            Some(s) => v(&s.2)?,
            None => f64::NAN,
        };
        let at_one = v(&series[series.len() - 1].2)?;
        // A similarity should fall, a distance rise, by at least a tenth of its full range
        // once the probe's direction is deleted.
        // (A metric that does not move at all over the series fails too.)
        let range = (at_one - at_full).abs();
        let change = if lower {
            at_drop - at_full
        } else {
            at_full - at_drop
        };
        let moved = range > 1e-6 && change >= 0.1 * range;
        push(Check {
            group: CheckGroup::PcaDeletion,
            subject: format!("{name}: top-{k_drop} of {d} PCs kept"),
            figure: format!(
                "{at_drop:.4} (all kept {at_full:.4}, top-1 {at_one:.4}); probe accuracy {acc_full:.2} -> {acc_drop:.2}"
            ),
            rule: "reported, not held: moves by ≥ 10% of its range when the probe falls to chance (Ding et al. 2021 find CKA does not)".to_owned(),
            passed: moved,
            held: false,
            values: BTreeMap::from([
                ("k_kept".to_owned(), k_drop as f64),
                ("value_at_drop".to_owned(), at_drop),
                ("value_all".to_owned(), at_full),
                ("value_top1".to_owned(), at_one),
                ("probe_accuracy_all".to_owned(), acc_full),
                ("probe_accuracy_at_drop".to_owned(), acc_drop),
            ]),
        });
    }
    Ok(())
}

/// A random residual tanh network: `L` layers of `n` points in width `d`, inputs
/// `N(0, 1)`, `x ← x + a · tanh(x W / √d)` with Gaussian `W`.
fn residual_net(n: usize, d: usize, layers: usize, a: f64, seed: u64) -> Vec<Mat<f32>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut x = Mat::<f64>::from_fn(n, d, |_, _| normal(&mut rng));
    let mut out = vec![repgeom_linalg::to_f32(x.as_ref(), Par::Seq)];
    for _ in 1..layers {
        let w = Mat::<f64>::from_fn(d, d, |_, _| normal(&mut rng) / (d as f64).sqrt());
        let h = Mat::<f64>::from_fn(n, d, |i, j| {
            (0..d).map(|k| x[(i, k)] * w[(k, j)]).sum::<f64>().tanh()
        });
        x = Mat::from_fn(n, d, |i, j| x[(i, j)] + a * h[(i, j)]);
        out.push(repgeom_linalg::to_f32(x.as_ref(), Par::Seq));
    }
    out
}

fn layer_monotonicity(push: &mut dyn FnMut(Check)) -> Result<()> {
    let net = residual_net(300, 32, MONO_LAYERS, 0.5, 11);
    let l = net.len();
    for (metric, name, lower, _) in pair_metrics() {
        let m = metric.as_ref();
        // Similarity of every pair (a distance negated, so larger is always more alike).
        let mut s = vec![vec![f64::NAN; l]; l];
        for i in 0..l {
            for j in i + 1..l {
                let v = first(m, &net[i], &net[j], &format!("layers {i} and {j}"))?;
                s[i][j] = if lower { -v } else { v };
            }
        }
        let (mut conditions, mut violations) = (0usize, 0usize);
        for i in 0..l {
            for j in i + 1..l {
                for k in j + 1..l {
                    conditions += 2;
                    violations += usize::from(s[i][j] < s[i][k]);
                    violations += usize::from(s[j][k] < s[i][k]);
                }
            }
        }
        let rate = violations as f64 / conditions as f64;
        let (mut sims, mut dist) = (Vec::new(), Vec::new());
        for (i, row) in s.iter().enumerate() {
            for (j, &v) in row.iter().enumerate().skip(i + 1) {
                sims.push(v);
                dist.push((j - i) as f64);
            }
        }
        // (Similarities in f32 for the workspace's rank code: ranks of 28 values far apart.)
        let sims32: Vec<f32> = sims.iter().map(|&v| v as f32).collect();
        let dist32: Vec<f32> = dist.iter().map(|&v| v as f32).collect();
        let rho =
            repgeom_linalg::spearman(&sims32, &dist32, &format!("{name}: layer monotonicity"))?;
        push(Check {
            group: CheckGroup::LayerMonotonicity,
            subject: name.to_owned(),
            figure: format!(
                "violations {violations}/{conditions} ({rate:.3}), Spearman(similarity, layer distance) {rho:.3}"
            ),
            rule: format!("violation rate ≤ {MAX_VIOLATIONS}"),
            passed: rate <= MAX_VIOLATIONS,
            held: true,
            values: BTreeMap::from([
                ("violation_rate".to_owned(), rate),
                ("spearman".to_owned(), rho),
            ]),
        });
    }
    Ok(())
}

fn scale_confound(push: &mut dyn FnMut(Check)) -> Result<()> {
    let n = 200;
    // (width, depth): widths at depth 4, then depths at width 32.
    let configs = [(8, 4), (32, 4), (128, 4), (32, 2), (32, 8)];
    let mut raw = BTreeMap::new();
    for (c, &(d, depth)) in configs.iter().enumerate() {
        let a = residual_net(n, d, depth, 1.0, 1000 + 2 * c as u64);
        let b = residual_net(n, d, depth, 1.0, 1001 + 2 * c as u64);
        let ia = (a.iter().enumerate())
            .map(|(i, x)| LayerInput::new(x.as_ref(), format!("A layer {i}"), Par::Seq))
            .collect::<repgeom_metrics::Result<Vec<_>>>()?;
        let ib = (b.iter().enumerate())
            .map(|(i, x)| LayerInput::new(x.as_ref(), format!("B layer {i}"), Par::Seq))
            .collect::<repgeom_metrics::Result<Vec<_>>>()?;
        let mut cka = CkaLinear::default();
        cka.set_permutations(Permutations {
            n_perm: SCALE_N_PERM,
            seed: 5,
        });
        let settings = CompareSettings {
            aggregates: vec![Aggregate::Max],
            ..CompareSettings::default()
        };
        let table = compare(
            &cka,
            &ia.iter().collect::<Vec<_>>(),
            &ib.iter().collect::<Vec<_>>(),
            &layer_pairs(depth, depth, false),
            &settings,
        )?;
        let agg = &table.aggregates[0].value;
        let p = agg.p_value.unwrap_or(f64::NAN);
        let calibrated = agg.extra.get("calibrated").copied().unwrap_or(f64::NAN);
        raw.insert((d, depth), agg.value);
        // Widths rise along configs 0-2 (depth 4): held, the biased estimator's bias grows
        // with width. Depths 2 < 4 < 8 at width 32 (configs 3, 1, 4) are reported: on these
        // networks the selection effect of a larger table is smaller than the spread between
        // independently drawn networks.
        let rising = match c {
            1 | 2 => raw
                .get(&configs[c - 1])
                .is_some_and(|&prev| agg.value > prev),
            _ => true,
        };
        push(Check {
            group: CheckGroup::ScaleConfound,
            subject: format!("cka_linear max, d = {d}, {depth} layers"),
            figure: format!(
                "raw max {:.4}, p {p:.3}, calibrated {calibrated:.3} ({SCALE_N_PERM} permutations, n = {n})",
                agg.value
            ),
            rule: format!(
                "{}p ≥ {NULL_P_FLOOR}",
                match c {
                    1 | 2 => "raw max above the narrower network's; ",
                    3 | 4 => "raw max against depth reported, not held; ",
                    _ => "",
                }
            ),
            passed: rising && p >= NULL_P_FLOOR,
            held: true,
            values: BTreeMap::from([
                ("width".to_owned(), d as f64),
                ("depth".to_owned(), depth as f64),
                ("raw_max".to_owned(), agg.value),
                ("p_value".to_owned(), p),
                ("calibrated".to_owned(), calibrated),
            ]),
        });
    }
    Ok(())
}
