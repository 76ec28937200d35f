//! The per-layer protocol: split, standardise, cross-validate the L2 strength, fit, score.

use std::ops::Range;

use ndarray::Array2;
use serde::{Deserialize, Serialize};

use crate::solver::{Fit, Linear, Problem, StopReason, column_stats};
use crate::split::{Labels, Split, rng, shuffle, stratified_folds, train_test};
use crate::{Error, FittedProbe, ProbeParams, Result, ValidProbeParams};

/// A borrowed row-major feature matrix: one row per labelled example.
#[derive(Debug, Clone, Copy)]
pub struct Features<'a> {
    rows: usize,
    cols: usize,
    data: &'a [f32],
}

impl<'a> Features<'a> {
    /// View `data` as `rows × cols` (row-major); `layer` only labels the error.
    pub fn new(layer: usize, rows: usize, cols: usize, data: &'a [f32]) -> Result<Self> {
        let expected = rows.saturating_mul(cols);
        if data.len() != expected {
            return Err(Error::FeatureShape {
                layer,
                rows,
                cols,
                expected,
                found: data.len(),
            });
        }
        if rows == 0 || cols == 0 {
            return Err(Error::EmptyFeatures { layer, rows, cols });
        }
        Ok(Self { rows, cols, data })
    }

    /// Number of examples.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Feature dimension.
    pub fn cols(&self) -> usize {
        self.cols
    }

    fn row(&self, i: usize) -> &'a [f32] {
        &self.data[i * self.cols..(i + 1) * self.cols]
    }
}

/// Probe result for one layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerProbe {
    /// Layer index (as given by the caller).
    pub layer: usize,
    /// Test accuracy of the probe.
    pub accuracy: f64,
    /// Test macro-F1 (unweighted mean of per-class F1 over classes present in test labels or predictions).
    pub macro_f1: f64,
    /// L2 strength chosen by cross-validation.
    pub chosen_l2: f64,
    /// Test accuracy of always predicting the most frequent training class.
    pub majority_baseline: f64,
    /// Pooled cross-validation accuracy of each grid strength, strongest first.
    pub cv_accuracy: Vec<(f64, f64)>,
    /// Training examples.
    pub n_train: usize,
    /// Test examples.
    pub n_test: usize,
    /// Feature dimension.
    pub dim: usize,
    /// L-BFGS iterations of the final fit.
    pub iterations: usize,
    /// Whether the final fit met the gradient tolerance within `max_iter` (a fit that stops
    /// on a failed line search or a stalled loss is not converged).
    pub converged: bool,
    /// Why the final fit stopped.
    pub stop: StopReason,
    /// 95% Wilson score interval of `accuracy` over the `n_test` test examples.
    pub accuracy_ci: (f64, f64),
    /// 95% Wilson score interval of `majority_baseline`.
    pub majority_ci: (f64, f64),
    /// The random-label control task on the same features, when run (see [`ControlProbe`]).
    pub control: Option<ControlProbe>,
}

/// The random-label control task of one layer: the same protocol (split, folds, L2 grid)
/// with every example's label replaced by a seeded permutation of all labels (class
/// frequencies kept, any relation to the features destroyed). Its test accuracy is what the
/// probe reaches without information about the property; selectivity = accuracy − this.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlProbe {
    /// Test accuracy against the permuted labels.
    pub accuracy: f64,
    /// 95% Wilson score interval of `accuracy`.
    pub accuracy_ci: (f64, f64),
    /// L2 strength chosen by cross-validation on the permuted labels.
    pub chosen_l2: f64,
    /// Whether its final fit met the gradient tolerance.
    pub converged: bool,
    /// Why its final fit stopped.
    pub stop: StopReason,
}

impl LayerProbe {
    /// Probe accuracy minus control accuracy (Hewitt & Liang 2019), when the control ran.
    pub fn selectivity(&self) -> Option<f64> {
        self.control.as_ref().map(|c| self.accuracy - c.accuracy)
    }
}

/// Two-sided normal quantile of the 95% intervals.
const Z95: f64 = 1.959_963_984_540_054;

/// The 95% Wilson score interval of a proportion `successes / n` (Wilson 1927):
/// $(\hat p + z^2/2n \pm z\sqrt{\hat p(1-\hat p)/n + z^2/4n^2})/(1 + z^2/n)$, `z = 1.96`.
/// `(NaN, NaN)` when `n = 0`.
pub fn wilson_interval(successes: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let (k, n) = (successes as f64, n as f64);
    let p = k / n;
    let z2 = Z95 * Z95;
    let centre = p + z2 / (2.0 * n);
    let half = Z95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    let den = 1.0 + z2 / n;
    // At k = 0 and k = n the bound is exactly 0 or 1; rounding would leave 1 − 1e-16.
    let lo = if successes == 0 {
        0.0
    } else {
        ((centre - half) / den).max(0.0)
    };
    let hi = if k == n {
        1.0
    } else {
        ((centre + half) / den).min(1.0)
    };
    (lo, hi)
}

/// Probe results over layers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// Class names, indexed by label.
    pub class_names: Vec<String>,
    /// One entry per probed layer, in the order probed.
    pub layers: Vec<LayerProbe>,
}

/// One tidy output row, joinable with PGA results on `(model, layer)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TidyRow {
    /// Model name.
    pub model: String,
    /// Layer index.
    pub layer: usize,
    /// `probe_accuracy`, `probe_macro_f1`, `probe_l2`, `majority_baseline`, and with the
    /// control task `probe_control_accuracy` and `probe_selectivity`.
    pub metric: String,
    /// The value.
    pub value: f64,
    /// 95% Wilson interval of the value, for the accuracies (`probe_accuracy`,
    /// `majority_baseline`, `probe_control_accuracy`).
    pub ci: Option<(f64, f64)>,
    /// Whether the fit behind the value converged (`probe_accuracy`, `probe_macro_f1`,
    /// `probe_l2`: the final fit; `probe_control_accuracy`: the control's final fit;
    /// `probe_selectivity`: both).
    pub converged: Option<bool>,
}

/// The metric names of [`ProbeReport::tidy`], in output order (the last two only when the
/// control task ran).
pub const METRICS: [&str; 6] = [
    "probe_accuracy",
    "probe_macro_f1",
    "probe_l2",
    "majority_baseline",
    "probe_control_accuracy",
    "probe_selectivity",
];

impl ProbeReport {
    /// Long-format rows: per layer, the [`METRICS`] in order.
    pub fn tidy(&self, model: &str) -> Vec<TidyRow> {
        let mut out = Vec::with_capacity(self.layers.len() * METRICS.len());
        for l in &self.layers {
            let fit = Some(l.converged);
            let mut values = vec![
                (l.accuracy, Some(l.accuracy_ci), fit),
                (l.macro_f1, None, fit),
                (l.chosen_l2, None, fit),
                (l.majority_baseline, Some(l.majority_ci), None),
            ];
            if let Some(c) = &l.control {
                values.push((c.accuracy, Some(c.accuracy_ci), Some(c.converged)));
                values.push((
                    l.accuracy - c.accuracy,
                    None,
                    Some(l.converged && c.converged),
                ));
            }
            for (metric, (value, ci, converged)) in METRICS.iter().zip(values) {
                out.push(TidyRow {
                    model: model.to_owned(),
                    layer: l.layer,
                    metric: (*metric).to_owned(),
                    value,
                    ci,
                    converged,
                });
            }
        }
        out
    }
}

/// Split and folds fixed once for all layers of one labelled set.
#[derive(Debug, Clone)]
pub struct ProbePlan {
    params: ValidProbeParams,
    labels: Labels,
    /// Training examples ordered by fold (fold 0 first), so each fold is a row range.
    train_order: Vec<usize>,
    fold_ranges: Vec<Range<usize>>,
    test: Vec<usize>,
    /// The control task's labels (a seeded permutation of all labels), when enabled.
    control_labels: Option<Vec<usize>>,
}

impl ValidProbeParams {
    /// Fix the train/test split and the cross-validation folds for `labels`.
    pub fn plan(&self, labels: Labels, split: &Split) -> Result<ProbePlan> {
        let p = &self.0;
        let (train, test) = train_test(&labels, split, p.train_frac, p.seed)?;
        // Stream 2 of the seed: the split uses 0 and the folds 1.
        let control_labels = p.control.then(|| {
            let mut v = labels.values().to_vec();
            shuffle(&mut v, &mut rng(p.seed, 2));
            v
        });
        self.plan_rows(labels, &train, test, control_labels)
    }

    /// The plan of a linfa [`Fit`](linfa::traits::Fit): every example trains (folds as
    /// [`ValidProbeParams::plan`] would deal them for these training rows), no test rows,
    /// no control task.
    pub(crate) fn plan_all(&self, labels: Labels) -> Result<ProbePlan> {
        let train: Vec<usize> = (0..labels.len()).collect();
        self.plan_rows(labels, &train, Vec::new(), None)
    }

    /// Deal `train` (ascending) into stratified folds and fix the plan.
    fn plan_rows(
        &self,
        labels: Labels,
        train: &[usize],
        test: Vec<usize>,
        control_labels: Option<Vec<usize>>,
    ) -> Result<ProbePlan> {
        // Through linfa's `check_ref` the grid may still be in the caller's order.
        let params = self.normalised();
        let p = &params.0;
        let fold_of = stratified_folds(&labels, train, p.folds, p.seed)?;
        let mut order: Vec<(usize, usize)> =
            train.iter().zip(&fold_of).map(|(&i, &f)| (f, i)).collect();
        order.sort_unstable();
        let mut fold_ranges = Vec::with_capacity(p.folds);
        let mut start = 0;
        for f in 0..p.folds {
            let len = fold_of.iter().filter(|&&x| x == f).count();
            fold_ranges.push(start..start + len);
            start += len;
        }
        Ok(ProbePlan {
            params,
            labels,
            train_order: order.into_iter().map(|(_, i)| i).collect(),
            fold_ranges,
            test,
            control_labels,
        })
    }
}

/// Copy `idx` rows of `f`, standardised with `mu`/`inv_s`, into an f32 matrix.
fn gather(f: &Features<'_>, idx: &[usize], mu: &[f64], inv_s: &[f64]) -> Array2<f32> {
    let d = f.cols();
    let mut out = Array2::<f32>::zeros((idx.len(), d));
    for (mut row, &i) in out.rows_mut().into_iter().zip(idx) {
        standardise_row(f.row(i), mu, inv_s, row.iter_mut());
    }
    out
}

/// `out_j = (raw_j − μ_j) σ_j⁻¹` in f64, stored as f32: how every scored row is standardised.
pub(crate) fn standardise_row<'o>(
    raw: &[f32],
    mu: &[f64],
    inv_s: &[f64],
    out: impl Iterator<Item = &'o mut f32>,
) {
    for (j, (o, v)) in out.zip(raw).enumerate() {
        *o = ((f64::from(*v) - mu[j]) * inv_s[j]) as f32;
    }
}

/// The training rows of one layer, standardised on themselves.
struct Standardised {
    mu: Vec<f64>,
    inv_s: Vec<f64>,
    /// Rows in `train_order`.
    x_tr: Array2<f32>,
}

/// What the protocol (CV over the grid, then the final fit) gives for one set of labels.
struct Trained {
    /// The final model, in the training rows' standardised coordinates.
    theta: Vec<f64>,
    chosen_l2: f64,
    cv_accuracy: Vec<(f64, f64)>,
    iterations: usize,
    stop: StopReason,
}

impl Trained {
    /// Predicted class of every row of `x` (standardised like the training rows).
    fn predict(&self, x: &Array2<f32>, k: usize) -> Vec<usize> {
        let d = x.ncols();
        Linear::new(&self.theta, d, k, &vec![0.0; d], &vec![1.0; d]).predict(x.view(), 0..x.nrows())
    }
}

impl ProbePlan {
    /// The labels the plan was made for.
    pub fn labels(&self) -> &Labels {
        &self.labels
    }

    /// Number of training examples.
    pub fn n_train(&self) -> usize {
        self.train_order.len()
    }

    /// Number of test examples.
    pub fn n_test(&self) -> usize {
        self.test.len()
    }

    /// Training examples in ascending order (the rows of a linfa dataset that
    /// [`Fit`](linfa::traits::Fit)s the same model as [`ProbePlan::fit_layer`]).
    pub fn train_rows(&self) -> Vec<usize> {
        let mut v = self.train_order.clone();
        v.sort_unstable();
        v
    }

    /// Test examples in ascending order (the order they are scored in).
    pub fn test_rows(&self) -> &[usize] {
        &self.test
    }

    /// Probe one layer's features (one row per labelled example).
    pub fn probe_layer(&self, layer: usize, features: Features<'_>) -> Result<LayerProbe> {
        let s = self.standardise(layer, &features)?;
        let d = features.cols();
        let k = self.labels.n_classes();
        let y = self.labels.values();
        let x_te = gather(&features, &self.test, &s.mu, &s.inv_s);
        let y_te: Vec<usize> = self.test.iter().map(|&i| y[i]).collect();
        let run = self.cv_fit(layer, &s.x_tr, y, k)?;
        let pred = run.predict(&x_te, k);

        let y_tr: Vec<usize> = self.train_order.iter().map(|&i| y[i]).collect();
        let majority = majority_class(&y_tr, k);
        let n_test = y_te.len();
        let majority_hits = y_te.iter().filter(|&&c| c == majority).count();
        let n_hits = hits(&pred, &y_te);
        let control = match &self.control_labels {
            Some(yc) => {
                let c = self.cv_fit(layer, &s.x_tr, yc, k)?;
                let c_pred = c.predict(&x_te, k);
                let yc_te: Vec<usize> = self.test.iter().map(|&i| yc[i]).collect();
                let c_hits = hits(&c_pred, &yc_te);
                Some(ControlProbe {
                    accuracy: c_hits as f64 / n_test as f64,
                    accuracy_ci: wilson_interval(c_hits, n_test),
                    chosen_l2: c.chosen_l2,
                    converged: c.stop.converged(),
                    stop: c.stop,
                })
            }
            None => None,
        };
        Ok(LayerProbe {
            layer,
            accuracy: accuracy(&pred, &y_te),
            macro_f1: macro_f1(&pred, &y_te, k),
            chosen_l2: run.chosen_l2,
            majority_baseline: majority_hits as f64 / n_test as f64,
            cv_accuracy: run.cv_accuracy,
            n_train: self.train_order.len(),
            n_test: self.test.len(),
            dim: d,
            iterations: run.iterations,
            converged: run.stop.converged(),
            stop: run.stop,
            accuracy_ci: wilson_interval(n_hits, n_test),
            majority_ci: wilson_interval(majority_hits, n_test),
            control,
        })
    }

    /// The model [`ProbePlan::probe_layer`] scores for this layer: cross-validated on the
    /// plan's folds and fitted on its training rows. It predicts raw feature rows (a linfa
    /// [`Predict`](linfa::traits::Predict) model; see [`FittedProbe`]).
    pub fn fit_layer(&self, layer: usize, features: Features<'_>) -> Result<FittedProbe> {
        let s = self.standardise(layer, &features)?;
        let k = self.labels.n_classes();
        let run = self.cv_fit(layer, &s.x_tr, self.labels.values(), k)?;
        Ok(FittedProbe {
            classes: (0..k).collect(),
            mu: s.mu,
            inv_s: s.inv_s,
            theta: run.theta,
            chosen_l2: run.chosen_l2,
            cv_accuracy: run.cv_accuracy,
            iterations: run.iterations,
            stop: run.stop,
        })
    }

    /// Check `features` against the labels and standardise the training rows on themselves.
    fn standardise(&self, layer: usize, features: &Features<'_>) -> Result<Standardised> {
        let (rows, d) = (features.rows(), features.cols());
        if rows != self.labels.len() {
            return Err(Error::LabelCount {
                layer,
                rows,
                cols: d,
                labels: self.labels.len(),
            });
        }
        if let Some(pos) = features.data.iter().position(|v| !v.is_finite()) {
            return Err(Error::NonFinite {
                layer,
                row: pos / d,
                col: pos % d,
                rows,
                cols: d,
                value: features.data[pos],
            });
        }
        // Standardise on the training rows only: compute stats on the raw training rows.
        let raw_train = gather(features, &self.train_order, &vec![0.0; d], &vec![1.0; d]);
        let all_train = [0..self.train_order.len()];
        let (mu, inv_s) = column_stats(raw_train.view(), &all_train);
        drop(raw_train);
        let x_tr = gather(features, &self.train_order, &mu, &inv_s);
        Ok(Standardised { mu, inv_s, x_tr })
    }

    /// Cross-validates the L2 strength and fits on all training rows, for labels `y` (one per
    /// example; the standardised `x_tr` rows follow `train_order`), with `params.solver`.
    fn cv_fit(&self, layer: usize, x_tr: &Array2<f32>, y: &[usize], k: usize) -> Result<Trained> {
        let p = self.params.params();
        let d = x_tr.ncols();
        let all_train = [0..self.train_order.len()];
        let y_tr: Vec<usize> = self.train_order.iter().map(|&i| y[i]).collect();

        // Cross-validate the L2 strength (grid strongest first, warm-started along it).
        let n_grid = p.grid.len();
        let mut correct = vec![0usize; n_grid];
        let mut fold_thetas: Vec<Vec<Vec<f64>>> = Vec::new();
        if n_grid > 1 {
            for val in &self.fold_ranges {
                let fit_ranges = [0..val.start, val.end..self.train_order.len()];
                let (fmu, finv) = column_stats(x_tr.view(), &fit_ranges);
                let prob = Problem::new(x_tr.view(), &y_tr, k, &fit_ranges, fmu, finv, p.parallel);
                let mut theta = vec![0.0; prob.n_params()];
                let mut per_grid = Vec::with_capacity(n_grid);
                for (g, &l2) in p.grid.iter().enumerate() {
                    let fit = solve(&prob, p, theta, l2, layer)?;
                    let pred = prob.predict(&fit.theta, x_tr.view(), val.clone());
                    correct[g] += pred
                        .iter()
                        .zip(&y_tr[val.clone()])
                        .filter(|(a, b)| a == b)
                        .count();
                    theta = fit.theta;
                    per_grid.push(theta.clone());
                }
                fold_thetas.push(per_grid);
            }
        }
        // Most correct wins; ties go to the stronger strength (earlier in the grid).
        let best = (0..n_grid).fold(0, |b, g| if correct[g] > correct[b] { g } else { b });
        let chosen_l2 = p.grid[best];
        let n_cv = self.train_order.len() as f64;
        let cv_accuracy = if n_grid > 1 {
            p.grid
                .iter()
                .zip(&correct)
                .map(|(&l, &c)| (l, c as f64 / n_cv))
                .collect()
        } else {
            Vec::new()
        };

        // Final fit on all training rows, warm-started at the folds' mean solution.
        let prob = Problem::new(
            x_tr.view(),
            &y_tr,
            k,
            &all_train,
            vec![0.0; d],
            vec![1.0; d],
            p.parallel,
        );
        let mut theta0 = vec![0.0; prob.n_params()];
        for f in &fold_thetas {
            for (t, v) in theta0.iter_mut().zip(&f[best]) {
                *t += v / fold_thetas.len() as f64;
            }
        }
        let fit = solve(&prob, p, theta0, chosen_l2, layer)?;
        Ok(Trained {
            theta: fit.theta,
            chosen_l2,
            cv_accuracy,
            iterations: fit.iterations,
            stop: fit.stop,
        })
    }

    /// Probe several layers in order; stops at the first error.
    pub fn probe_layers<'a>(
        &self,
        layers: impl IntoIterator<Item = (usize, Features<'a>)>,
    ) -> Result<ProbeReport> {
        let layers = layers
            .into_iter()
            .map(|(l, f)| self.probe_layer(l, f))
            .collect::<Result<Vec<_>>>()?;
        Ok(ProbeReport {
            class_names: self.labels.class_names().to_vec(),
            layers,
        })
    }
}

/// One fit with the params' solver, iteration cap and tolerance.
fn solve(
    prob: &Problem<'_>,
    p: &ProbeParams,
    theta0: Vec<f64>,
    l2: f64,
    layer: usize,
) -> Result<Fit> {
    match prob.solve(p.solver, theta0, l2, p.max_iter, p.tol) {
        Ok(Some(fit)) => Ok(fit),
        Ok(None) => Err(Error::Diverged { layer, l2 }),
        Err(source) => Err(Error::LinfaSolver { layer, l2, source }),
    }
}

/// Most frequent class (lowest label on ties).
pub(crate) fn majority_class(y: &[usize], k: usize) -> usize {
    let mut counts = vec![0usize; k];
    for &c in y {
        counts[c] += 1;
    }
    (0..k).fold(0, |b, c| if counts[c] > counts[b] { c } else { b })
}

/// Number of predictions equal to the truth.
fn hits(pred: &[usize], truth: &[usize]) -> usize {
    pred.iter().zip(truth).filter(|(a, b)| a == b).count()
}

/// Fraction of predictions equal to the truth.
pub fn accuracy(pred: &[usize], truth: &[usize]) -> f64 {
    if truth.is_empty() {
        return 0.0;
    }
    pred.iter().zip(truth).filter(|(a, b)| a == b).count() as f64 / truth.len() as f64
}

/// Macro-F1: mean over classes `c` with `tp + fp + fn > 0` of `F1_c = 2 tp / (2 tp + fp + fn)`.
pub fn macro_f1(pred: &[usize], truth: &[usize], n_classes: usize) -> f64 {
    let mut tp = vec![0usize; n_classes];
    let mut fp = vec![0usize; n_classes];
    let mut fn_ = vec![0usize; n_classes];
    for (&p, &t) in pred.iter().zip(truth) {
        if p == t {
            tp[t] += 1;
        } else {
            fp[p] += 1;
            fn_[t] += 1;
        }
    }
    let (mut sum, mut m) = (0.0, 0usize);
    for c in 0..n_classes {
        let den = 2 * tp[c] + fp[c] + fn_[c];
        if den > 0 {
            sum += 2.0 * tp[c] as f64 / den as f64;
            m += 1;
        }
    }
    if m == 0 { 0.0 } else { sum / m as f64 }
}
