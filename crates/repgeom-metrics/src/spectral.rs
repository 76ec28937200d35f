//! Spectral metrics of one layer: RankMe, α-ReQ, isotropy (IsoScore and mean cosine
//! similarity) and the condition number. Definitions are pinned in `docs/metrics.md`.

use repgeom_linalg::normalize_rows;
use serde::{Deserialize, Serialize};

use crate::registry::{LayerInput, Metric, MetricInfo, MetricValue, OptionDoc, numerical_rank};
use crate::{Error, Result};

fn invalid(name: &str, value: impl ToString, reason: &str) -> Error {
    Error::InvalidOption {
        name: name.into(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

// ---------------------------------------------------------------------------------------------

/// RankMe (Garrido et al. 2023): the exponential of the entropy of the normalised singular
/// values, $\exp(-\sum_k p_k\log p_k)$ with $p_k = \sigma_k/\lVert\sigma\rVert_1 + \varepsilon$.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RankMe {
    /// Centre the points before taking singular values (the paper does not; default false).
    pub center: bool,
    /// The paper's $\varepsilon$ added to every $p_k$ (default 1e-7).
    pub epsilon: f64,
}

impl Default for RankMe {
    fn default() -> Self {
        Self {
            center: false,
            epsilon: 1e-7,
        }
    }
}

#[typetag::serde(name = "rankme")]
impl Metric for RankMe {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "rankme",
            summary: "effective rank: exp of the entropy of the normalised singular values",
            source: "Garrido, Balestriero, Najman, LeCun (2023), RankMe, ICML",
            options: &[
                OptionDoc {
                    name: "center",
                    help: "centre the points first (paper: false)",
                },
                OptionDoc {
                    name: "epsilon",
                    help: "added to each normalised singular value (paper: 1e-7)",
                },
            ],
            needs_readout: false,
            needs_null: false,
            rotation_invariant: true,
        }
    }

    fn check(&self) -> Result<()> {
        if !(0.0..1.0).contains(&self.epsilon) {
            return Err(invalid(
                "epsilon",
                self.epsilon,
                "must satisfy 0 <= epsilon < 1",
            ));
        }
        Ok(())
    }

    fn compute(&self, input: &LayerInput<'_>) -> Result<Vec<MetricValue>> {
        self.check()?;
        let sv = input.singular_values(self.center)?;
        let value = rankme(sv, self.epsilon).ok_or_else(|| Error::Degenerate {
            what: format!("rankme on {}", input.what()),
            reason: "all singular values are zero".into(),
        })?;
        Ok(vec![
            MetricValue::new("rankme", if self.center { "centred" } else { "" }, value)
                .with_extra("max_rank", sv.len() as f64),
        ])
    }
}

/// RankMe of a list of singular values; `None` when they are all zero.
pub fn rankme(singular_values: &[f64], epsilon: f64) -> Option<f64> {
    let total: f64 = singular_values.iter().sum();
    if total.is_nan() || total <= 0.0 {
        return None;
    }
    let entropy: f64 = singular_values
        .iter()
        .map(|s| {
            let p = s / total + epsilon;
            if p > 0.0 { -p * p.ln() } else { 0.0 }
        })
        .sum();
    Some(entropy.exp())
}

// ---------------------------------------------------------------------------------------------

/// α-ReQ (Agrawal et al. 2022): the decay exponent α of the covariance eigenspectrum,
/// $\lambda_i \propto i^{-\alpha}$, fitted by least squares on $\log\lambda_i$ against $\log i$.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlphaReq {
    /// First eigenvalue index of the fit, 1-based (default 1).
    pub fit_start: usize,
    /// Last index of the fit, 1-based; default: the numerical rank of the centred data.
    pub fit_end: Option<usize>,
}

impl Default for AlphaReq {
    fn default() -> Self {
        Self {
            fit_start: 1,
            fit_end: None,
        }
    }
}

#[typetag::serde(name = "alpha_req")]
impl Metric for AlphaReq {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "alpha_req",
            summary: "power-law decay exponent of the covariance eigenspectrum (with the fit's R2)",
            source: "Agrawal, Mondal, Ghosh, Richards (2022), alpha-ReQ, NeurIPS",
            options: &[
                OptionDoc {
                    name: "fit_start",
                    help: "first eigenvalue index fitted, 1-based",
                },
                OptionDoc {
                    name: "fit_end",
                    help: "last index fitted, 1-based (null: the numerical rank)",
                },
            ],
            needs_readout: false,
            needs_null: false,
            rotation_invariant: true,
        }
    }

    fn check(&self) -> Result<()> {
        if self.fit_start == 0 {
            return Err(invalid("fit_start", 0, "indices are 1-based"));
        }
        if let Some(end) = self.fit_end
            && end < self.fit_start + 2
        {
            return Err(invalid(
                "fit_end",
                end,
                "the fit needs at least 3 eigenvalues (fit_end >= fit_start + 2)",
            ));
        }
        Ok(())
    }

    fn compute(&self, input: &LayerInput<'_>) -> Result<Vec<MetricValue>> {
        self.check()?;
        let what = format!("alpha_req on {}", input.what());
        let sv = input.singular_values(true)?;
        let rank = numerical_rank(sv, input.n(), input.d());
        let end = self.fit_end.unwrap_or(rank);
        if end > rank {
            return Err(invalid(
                "fit_end",
                end,
                &format!("only {rank} covariance eigenvalues are numerically non-zero ({what})"),
            ));
        }
        if end < self.fit_start + 2 {
            return Err(Error::Degenerate {
                what,
                reason: format!(
                    "the fit range {}..={end} holds fewer than 3 non-zero eigenvalues (numerical rank {rank})",
                    self.fit_start
                ),
            });
        }
        let denom = (input.n() - 1) as f64;
        let lambdas: Vec<f64> = sv.iter().map(|s| s * s / denom).collect();
        let fit = power_law_fit(&lambdas, self.fit_start, end);
        Ok(vec![
            MetricValue::new("alpha_req", "", fit.alpha)
                .with_extra("r2", fit.r2)
                .with_extra("fit_start", self.fit_start as f64)
                .with_extra("fit_end", end as f64),
        ])
    }
}

/// A least-squares line through $(\log i, \log\lambda_i)$.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerLawFit {
    /// Minus the slope.
    pub alpha: f64,
    /// Coefficient of determination; 1 when the points lie on a line (also when flat).
    pub r2: f64,
}

/// Fits $\log\lambda_i = c - \alpha\log i$ for 1-based `i` in `start..=end` (all λ > 0).
#[track_caller]
pub fn power_law_fit(lambdas: &[f64], start: usize, end: usize) -> PowerLawFit {
    assert!(
        start >= 1 && end <= lambdas.len() && end > start,
        "power_law_fit: bad range"
    );
    let pts: Vec<(f64, f64)> = (start..=end)
        .map(|i| ((i as f64).ln(), lambdas[i - 1].ln()))
        .collect();
    let m = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / m;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / m;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = pts.iter().map(|p| (p.1 - my).powi(2)).sum();
    let slope = sxy / sxx;
    let ss_res: f64 = pts
        .iter()
        .map(|p| (p.1 - my - slope * (p.0 - mx)).powi(2))
        .sum();
    let r2 = if syy > 0.0 { 1.0 - ss_res / syy } else { 1.0 };
    PowerLawFit { alpha: -slope, r2 }
}

// ---------------------------------------------------------------------------------------------

/// Isotropy: IsoScore (Rudman et al. 2022) of the covariance spectrum, and the mean pairwise
/// cosine similarity of the raw points (Ethayarajh 2019).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Isotropy {
    /// Report IsoScore (variant `isoscore`; 1 = isotropic, 0 = one direction).
    pub isoscore: bool,
    /// Report the mean pairwise cosine similarity of the uncentred points (variant `mean_cosine`).
    pub mean_cosine: bool,
}

impl Default for Isotropy {
    fn default() -> Self {
        Self {
            isoscore: true,
            mean_cosine: true,
        }
    }
}

#[typetag::serde(name = "isotropy")]
impl Metric for Isotropy {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "isotropy",
            summary: "IsoScore of the covariance spectrum (1 = isotropic) and mean pairwise cosine similarity",
            source: "Rudman, Gillman, Rayne, Eickhoff (2022), IsoScore, Findings of ACL; Ethayarajh (2019), EMNLP",
            options: &[
                OptionDoc {
                    name: "isoscore",
                    help: "report IsoScore (variant isoscore)",
                },
                OptionDoc {
                    name: "mean_cosine",
                    help: "report the mean pairwise cosine similarity (variant mean_cosine)",
                },
            ],
            needs_readout: false,
            needs_null: false,
            rotation_invariant: true,
        }
    }

    fn check(&self) -> Result<()> {
        if !self.isoscore && !self.mean_cosine {
            return Err(invalid(
                "isoscore",
                false,
                "at least one of isoscore and mean_cosine must be true",
            ));
        }
        Ok(())
    }

    fn compute(&self, input: &LayerInput<'_>) -> Result<Vec<MetricValue>> {
        self.check()?;
        let mut out = Vec::new();
        if self.isoscore {
            let lambdas = input.covariance_eigenvalues()?;
            let value = isoscore(&lambdas).ok_or_else(|| Error::Degenerate {
                what: format!("isoscore on {}", input.what()),
                reason: "the covariance is zero".into(),
            })?;
            out.push(MetricValue::new("isotropy", "isoscore", value));
        }
        if self.mean_cosine {
            out.push(MetricValue::new(
                "isotropy",
                "mean_cosine",
                mean_cosine(input)?,
            ));
        }
        Ok(out)
    }
}

/// IsoScore from the variances along the principal axes (all `d` of them, zeros included).
///
/// $\hat\Sigma = \sqrt d\,\lambda/\lVert\lambda\rVert_2$,
/// $\delta = \lVert\hat\Sigma - \mathbf 1\rVert_2/\sqrt{2(d-\sqrt d)}$,
/// $\phi = (d - \delta^2(d-\sqrt d))^2/d^2$, IsoScore $= (d\phi - 1)/(d-1)$.
pub fn isoscore(variances: &[f64]) -> Option<f64> {
    let d = variances.len() as f64;
    let norm = variances.iter().map(|v| v * v).sum::<f64>().sqrt();
    if norm.is_nan() || norm <= 0.0 || variances.len() < 2 {
        return None;
    }
    let scale = d.sqrt() / norm;
    let defect_sq = variances
        .iter()
        .map(|v| (v * scale - 1.0).powi(2))
        .sum::<f64>();
    let delta_sq = defect_sq / (2.0 * (d - d.sqrt()));
    let phi = (d - delta_sq * (d - d.sqrt())).powi(2) / (d * d);
    Some(((d * phi - 1.0) / (d - 1.0)).clamp(0.0, 1.0))
}

/// Mean of $\cos(x_i, x_j)$ over all pairs $i<j$ of raw rows, from
/// $\sum_{i<j}\cos = (\lVert\sum_i \hat x_i\rVert^2 - N)/2$ (exact, `O(Nd)`).
fn mean_cosine(input: &LayerInput<'_>) -> Result<f64> {
    let xn = normalize_rows(input.acts(), input.what())?;
    let (n, d) = (xn.nrows(), xn.ncols());
    let mut sum = vec![0.0f64; d];
    for j in 0..d {
        for i in 0..n {
            sum[j] += f64::from(xn[(i, j)]);
        }
    }
    // Use exact f64 squared norms of the normalised f32 rows, not N, to cancel rounding.
    let mut self_sq = 0.0f64;
    for j in 0..d {
        for i in 0..n {
            self_sq += f64::from(xn[(i, j)]).powi(2);
        }
    }
    let total = sum.iter().map(|s| s * s).sum::<f64>();
    let pairs = (n * (n - 1)) as f64 / 2.0;
    Ok(((total - self_sq) / 2.0 / pairs).clamp(-1.0, 1.0))
}

// ---------------------------------------------------------------------------------------------

/// Condition number of the centred point cloud: $\sigma_1/\sigma_r$, $r = \min(N-1, d)$.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConditionNumber {
    /// `singular_values` ($\sigma_1/\sigma_r$, default) or `covariance` ($\lambda_1/\lambda_r$,
    /// the square).
    pub of: SpectrumKind,
}

/// Which spectrum a ratio is taken of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpectrumKind {
    /// Singular values of the centred points.
    #[default]
    SingularValues,
    /// Eigenvalues of the covariance (squared singular values).
    Covariance,
}

impl Default for ConditionNumber {
    fn default() -> Self {
        Self {
            of: SpectrumKind::SingularValues,
        }
    }
}

#[typetag::serde(name = "condition_number")]
impl Metric for ConditionNumber {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "condition_number",
            summary: "largest over smallest numerically non-zero singular value of the centred points",
            source: "standard numerical linear algebra (Golub & Van Loan); as used for representations by the study",
            options: &[OptionDoc {
                name: "of",
                help: "singular_values (sigma_1/sigma_r) or covariance (lambda_1/lambda_r, the square)",
            }],
            needs_readout: false,
            needs_null: false,
            rotation_invariant: true,
        }
    }

    fn check(&self) -> Result<()> {
        Ok(())
    }

    fn compute(&self, input: &LayerInput<'_>) -> Result<Vec<MetricValue>> {
        let sv = input.singular_values(true)?;
        let max_rank = (input.n() - 1).min(input.d());
        // Singular values below the f32 resolution of the data are noise, not spectrum: the
        // ratio is taken over the numerically non-zero ones, and the rank used is reported.
        let rank = numerical_rank(sv, input.n(), input.d()).min(max_rank);
        if rank < 2 {
            return Err(Error::Degenerate {
                what: format!("condition_number on {}", input.what()),
                reason: format!(
                    "the centred points have numerical rank {rank}, so no ratio exists"
                ),
            });
        }
        let kappa = sv[0] / sv[rank - 1];
        let (value, variant) = match self.of {
            SpectrumKind::SingularValues => (kappa, "singular_values"),
            SpectrumKind::Covariance => (kappa * kappa, "covariance"),
        };
        Ok(vec![
            MetricValue::new("condition_number", variant, value)
                .with_extra("rank", rank as f64)
                .with_extra("max_rank", max_rank as f64),
        ])
    }
}
