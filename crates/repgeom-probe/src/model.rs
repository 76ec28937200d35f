//! The probe as a linfa model: [`Fit`] on a `linfa::Dataset`, [`PredictInplace`] (hence
//! `Predict`) with the fitted [`FittedProbe`].

use linfa::dataset::{AsSingleTargets, DatasetBase};
use linfa::traits::{Fit, PredictInplace};
use ndarray::{Array1, Array2, ArrayBase, Data, Ix2};

use crate::probe::standardise_row;
use crate::solver::{Linear, StopReason};
use crate::{Error, Features, Labels, Result, ValidProbeParams};

/// A fitted probe: a multinomial logistic regression on raw feature rows, with the
/// standardisation of its training rows and what the protocol chose.
///
/// Made by [`ProbePlan::fit_layer`](crate::ProbePlan::fit_layer) or by linfa's [`Fit`] on a
/// dataset. Predictions (linfa's `Predict`, or [`FittedProbe::try_predict`]) standardise each
/// row with the training mean and scale and take the argmax of the f32 logits (lowest class
/// on ties): exactly how [`ProbePlan::probe_layer`](crate::ProbePlan::probe_layer) scores its
/// test rows. [`FittedProbe::weights`] and [`FittedProbe::intercept`] give the same model in
/// raw coordinates.
#[derive(Debug, Clone, PartialEq)]
pub struct FittedProbe {
    /// The label of each model class.
    pub(crate) classes: Vec<usize>,
    pub(crate) mu: Vec<f64>,
    pub(crate) inv_s: Vec<f64>,
    /// `W` (d × k, row-major) then `b` (k), on the standardised rows.
    pub(crate) theta: Vec<f64>,
    pub(crate) chosen_l2: f64,
    pub(crate) cv_accuracy: Vec<(f64, f64)>,
    pub(crate) iterations: usize,
    pub(crate) stop: StopReason,
}

impl FittedProbe {
    /// The class labels the probe predicts, ascending (model class `q` predicts
    /// `classes()[q]`). From [`Fit`]: the distinct targets of the dataset; from
    /// [`ProbePlan::fit_layer`](crate::ProbePlan::fit_layer): every label `0..n_classes`.
    pub fn classes(&self) -> &[usize] {
        &self.classes
    }

    /// Feature dimension the probe was fitted on.
    pub fn n_features(&self) -> usize {
        self.mu.len()
    }

    /// Weights on raw (unstandardised) features, `d × k`: `W ⊙ σ⁻¹`. A class the training
    /// rows lack has zero weights with `solver = linfa`.
    pub fn weights(&self) -> Array2<f64> {
        let (d, k) = (self.n_features(), self.classes.len());
        Array2::from_shape_fn((d, k), |(j, q)| self.theta[j * k + q] * self.inv_s[j])
    }

    /// Intercepts on raw features, one per class: `b − μ · (W ⊙ σ⁻¹)`. A class the training
    /// rows lack has `−∞` with `solver = linfa` (never predicted).
    pub fn intercept(&self) -> Array1<f64> {
        let (d, k) = (self.n_features(), self.classes.len());
        Array1::from_shape_fn(k, |q| {
            self.theta[d * k + q]
                - (0..d)
                    .map(|j| self.mu[j] * self.theta[j * k + q] * self.inv_s[j])
                    .sum::<f64>()
        })
    }

    /// L2 strength chosen by cross-validation (the only one with a one-value grid).
    pub fn chosen_l2(&self) -> f64 {
        self.chosen_l2
    }

    /// Pooled cross-validation accuracy of each grid strength, strongest first (empty with a
    /// one-value grid).
    pub fn cv_accuracy(&self) -> &[(f64, f64)] {
        &self.cv_accuracy
    }

    /// L-BFGS iterations of the final fit (0 with `solver = linfa`, which does not report them).
    pub fn iterations(&self) -> usize {
        self.iterations
    }

    /// Why the final fit stopped.
    pub fn stop(&self) -> StopReason {
        self.stop
    }

    /// Whether the final fit met the gradient tolerance.
    pub fn converged(&self) -> bool {
        self.stop.converged()
    }

    /// The predicted class of every row of `records` (`n × n_features`, f32 or f64, converted
    /// to f32 like the training records); an error for the wrong feature count or a value
    /// that is not a finite f32.
    pub fn try_predict<F, D>(&self, records: &ArrayBase<D, Ix2>) -> Result<Array1<usize>>
    where
        F: linfa::Float,
        D: Data<Elem = F>,
    {
        let d = self.n_features();
        if records.ncols() != d {
            return Err(Error::FeatureCount {
                expected: d,
                found: records.ncols(),
            });
        }
        let raw = to_f32(records)?;
        let mut x = Array2::<f32>::zeros((records.nrows(), d));
        for (i, row) in x.rows_mut().into_iter().enumerate() {
            standardise_row(
                &raw[i * d..(i + 1) * d],
                &self.mu,
                &self.inv_s,
                row.into_iter(),
            );
        }
        let k = self.classes.len();
        let linear = Linear::new(&self.theta, d, k, &vec![0.0; d], &vec![1.0; d]);
        Ok(linear
            .predict(x.view(), 0..x.nrows())
            .into_iter()
            .map(|q| self.classes[q])
            .collect())
    }
}

/// `records` row-major as f32; the first value that is not a finite f32 is an error.
fn to_f32<F: linfa::Float, D: Data<Elem = F>>(records: &ArrayBase<D, Ix2>) -> Result<Vec<f32>> {
    let (rows, cols) = records.dim();
    let mut out = Vec::with_capacity(rows * cols);
    for ((row, col), v) in records.indexed_iter() {
        let wide = v.to_f64().unwrap_or(f64::NAN);
        let narrow = wide as f32;
        if !narrow.is_finite() {
            return Err(Error::NonFiniteRecord {
                row,
                col,
                rows,
                cols,
                value: wide,
            });
        }
        out.push(narrow);
    }
    Ok(out)
}

/// linfa's [`Fit`]: the probe's protocol with every record as a training row. The L2
/// strength is cross-validated over `grid` on stratified `folds` (seeded by `seed`), then the
/// final model is fitted on all records with `solver`: the code path of
/// [`ProbePlan::fit_layer`](crate::ProbePlan::fit_layer), whose model it equals when the
/// dataset holds the plan's [`train_rows`](crate::ProbePlan::train_rows) in that order.
/// Records are f32 or f64 (converted to f32, the precision of the solver's kernels);
/// targets are class labels (any `usize`; the model's classes are the distinct targets);
/// sample weights are ignored. `train_frac` and `control` do not apply (no test rows).
///
/// ```
/// use linfa::prelude::*;
/// use ndarray::{Array1, Array2};
/// use repgeom_probe::ProbeParams;
///
/// // Two classes on either side of x0 = 0.
/// let x = Array2::from_shape_fn((60, 2), |(i, j)| {
///     let side = if i % 2 == 0 { -1.0 } else { 1.0 };
///     if j == 0 { side * (1.0 + (i % 7) as f64) } else { (i % 5) as f64 }
/// });
/// let y = Array1::from_shape_fn(60, |i| i % 2);
/// let data = Dataset::new(x, y);
/// let probe = ProbeParams::default().fit(&data)?; // checked by linfa's ParamGuard
/// let pred = probe.predict(&data);
/// assert_eq!(pred.confusion_matrix(&data)?.accuracy(), 1.0);
/// # Ok::<(), repgeom_probe::Error>(())
/// ```
impl<F, D, T> Fit<ArrayBase<D, Ix2>, T, Error> for ValidProbeParams
where
    F: linfa::Float,
    D: Data<Elem = F>,
    T: AsSingleTargets<Elem = usize>,
{
    type Object = FittedProbe;

    fn fit(&self, dataset: &DatasetBase<ArrayBase<D, Ix2>, T>) -> Result<FittedProbe> {
        let records = dataset.records();
        let targets = dataset.targets().as_single_targets();
        let (rows, cols) = records.dim();
        if targets.len() != rows {
            return Err(Error::TargetCount {
                rows,
                targets: targets.len(),
            });
        }
        if rows == 0 || cols == 0 {
            return Err(Error::EmptyDataset { rows, cols });
        }
        let data = to_f32(records)?;
        let mut classes = targets.to_vec();
        classes.sort_unstable();
        classes.dedup();
        let compact: Vec<usize> = targets
            .iter()
            .map(|c| classes.partition_point(|v| v < c))
            .collect();
        let names = classes.iter().map(ToString::to_string).collect();
        let plan = self.plan_all(Labels::new(compact, names)?)?;
        let mut probe = plan.fit_layer(0, Features::new(0, rows, cols, &data)?)?;
        probe.classes = classes;
        Ok(probe)
    }
}

/// linfa's prediction: the class label of every row.
///
/// # Panics
///
/// linfa's `PredictInplace` cannot return an error, so records of the wrong width or with a
/// value that is not a finite f32 panic with the message of [`FittedProbe::try_predict`],
/// which returns it instead (linfa-logistic's models panic on such input as well).
impl<F, D> PredictInplace<ArrayBase<D, Ix2>, Array1<usize>> for FittedProbe
where
    F: linfa::Float,
    D: Data<Elem = F>,
{
    fn predict_inplace(&self, x: &ArrayBase<D, Ix2>, y: &mut Array1<usize>) {
        match self.try_predict(x) {
            Ok(pred) if pred.len() == y.len() => y.assign(&pred),
            Ok(pred) => panic!(
                "{} records but {} targets to predict into",
                pred.len(),
                y.len()
            ),
            Err(e) => panic!("{e}"),
        }
    }

    fn default_target(&self, x: &ArrayBase<D, Ix2>) -> Array1<usize> {
        Array1::zeros(x.nrows())
    }
}
