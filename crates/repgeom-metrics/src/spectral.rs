//! Spectral metrics of one layer: RankMe, α-ReQ, isotropy (IsoScore and mean cosine
//! similarity) and the condition number. Definitions are pinned in `docs/metrics.md`.

use repgeom_linalg::normalize_rows;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::input::{LayerInput, Spectrum, numerical_rank};
use crate::registry::Metric;
use crate::value::{MetricInfo, MetricValue, OptionDoc};

fn invalid(name: &str, value: impl ToString, reason: &str) -> Error {
    Error::InvalidOption {
        name: name.into(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

// ---------------------------------------------------------------------------------------------

/// RankMe: the exponential of the entropy of a normalised spectrum,
/// $\exp(-\sum_k p_k\log p_k)$ with $p_k = s_k/\lVert s\rVert_1 + \varepsilon$, where the
/// spectrum `s` depends on the [`RankMeConvention`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RankMe {
    /// Which spectrum is normalised (default: Garrido et al.'s singular values).
    pub convention: RankMeConvention,
    /// Centre the points before taking singular values (convention `garrido` only; the paper
    /// does not; default false). The `covariance` convention always centres.
    pub center: bool,
    /// The paper's $\varepsilon$ added to every $p_k$ (default 1e-7).
    pub epsilon: f64,
}

/// The spectrum RankMe normalises: published implementations differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RankMeConvention {
    /// Singular values of the points as given (uncentred unless `center = true`): the
    /// definition of Garrido et al. (2023).
    #[default]
    Garrido,
    /// Eigenvalues of the covariance of the centred points ($\sigma_k^2/(N-1)$ of $H_c$), as in
    /// common implementations that run PCA first (e.g. `reptrix`'s `get_rankme`).
    Covariance,
}

impl Default for RankMe {
    fn default() -> Self {
        Self {
            convention: RankMeConvention::Garrido,
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
            source: "Garrido, Balestriero, Najman, LeCun (2023), RankMe, ICML; convention covariance: \
                     Roy & Vetterli (2007) effective rank of the covariance, as in reptrix's get_rankme",
            options: &[
                OptionDoc {
                    name: "convention",
                    help: "garrido (singular values, the paper) or covariance (centred covariance eigenvalues)",
                },
                OptionDoc {
                    name: "center",
                    help: "garrido only: centre the points first (paper: false)",
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
        self.compute_spectrum(input)
    }

    fn covariance_form(&self) -> Option<Box<dyn Metric>> {
        Some(Box::new(self.clone()))
    }

    fn compute_spectrum(&self, input: &dyn Spectrum) -> Result<Vec<MetricValue>> {
        self.check()?;
        let (value, variant, len) = match self.convention {
            RankMeConvention::Garrido => {
                let sv = input.singular_values(self.center)?;
                let variant = if self.center { "centred" } else { "" };
                (rankme(sv, self.epsilon), variant, sv.len())
            }
            RankMeConvention::Covariance => {
                let denom = (input.n() - 1) as f64;
                let lambdas: Vec<f64> = input
                    .singular_values(true)?
                    .iter()
                    .map(|s| s * s / denom)
                    .collect();
                (rankme(&lambdas, self.epsilon), "covariance", lambdas.len())
            }
        };
        let value = value.ok_or_else(|| Error::Degenerate {
            what: format!("rankme on {}", input.what()),
            reason: "all singular values are zero".into(),
        })?;
        Ok(vec![
            MetricValue::new("rankme", variant, value).with_extra("max_rank", len as f64),
        ])
    }
}

/// RankMe of a non-negative spectrum (singular values, or covariance eigenvalues); `None`
/// when it is all zero.
pub fn rankme(spectrum: &[f64], epsilon: f64) -> Option<f64> {
    let total: f64 = spectrum.iter().sum();
    if total.is_nan() || total <= 0.0 {
        return None;
    }
    let entropy: f64 = spectrum
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
/// $\lambda_i \propto i^{-\alpha}$, fitted by (weighted) least squares on $\log\lambda_i$
/// against $\log i$.
///
/// The paper does not state the fit's range or weights; the default [`AlphaFit::Agrawal2022`]
/// follows its authors' reference code. Explicit `fit_start`, `fit_end` and `weighting`
/// override the preset's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlphaReq {
    /// The preset range and weighting (default `agrawal2022`).
    pub fit: AlphaFit,
    /// First eigenvalue index of the fit, 1-based (default: the preset's, 4 or 1).
    pub fit_start: Option<usize>,
    /// Last index of the fit, 1-based (default: the preset's, capped at the numerical rank of
    /// the centred data).
    pub fit_end: Option<usize>,
    /// Weights of the least-squares points (default: the preset's).
    pub weighting: Option<FitWeighting>,
}

/// Preset fit range and weighting of [`AlphaReq`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlphaFit {
    /// The authors' reference implementation (`fastssl`, `stringer_get_powerlaw` called with
    /// `trange = np.arange(3, 100)`): ranks 4..=100, weights 1/rank.
    #[default]
    Agrawal2022,
    /// Ranks 1..=numerical rank, unweighted (repgeom's fit before the reference fit was the
    /// default; its finite-sample tail biases α upwards).
    FullRank,
}

/// Weights of the log-log least-squares fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FitWeighting {
    /// Every rank weighs the same.
    Uniform,
    /// Rank `i` weighs `1/i` (the reference implementation's weights).
    InverseRank,
}

impl FitWeighting {
    /// The power `p` of the weights `i^{-p}`.
    pub fn power(self) -> f64 {
        match self {
            FitWeighting::Uniform => 0.0,
            FitWeighting::InverseRank => 1.0,
        }
    }
}

impl AlphaFit {
    /// `(fit_start, largest fit_end or None for the numerical rank, weighting)`.
    fn preset(self) -> (usize, Option<usize>, FitWeighting) {
        match self {
            AlphaFit::Agrawal2022 => (4, Some(100), FitWeighting::InverseRank),
            AlphaFit::FullRank => (1, None, FitWeighting::Uniform),
        }
    }
    fn variant(self) -> &'static str {
        match self {
            AlphaFit::Agrawal2022 => "",
            AlphaFit::FullRank => "full_rank",
        }
    }
}

impl Default for AlphaReq {
    fn default() -> Self {
        Self {
            fit: AlphaFit::Agrawal2022,
            fit_start: None,
            fit_end: None,
            weighting: None,
        }
    }
}

#[typetag::serde(name = "alpha_req")]
impl Metric for AlphaReq {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "alpha_req",
            summary: "power-law decay exponent of the covariance eigenspectrum (with the fit's R2)",
            source: "Agrawal, Mondal, Ghosh, Richards (2022), alpha-ReQ, NeurIPS; fit range and \
                     weights of the authors' fastssl code (stringer_get_powerlaw)",
            options: &[
                OptionDoc {
                    name: "fit",
                    help: "agrawal2022 (ranks 4..=100, weights 1/rank) or full_rank (1..=rank, unweighted)",
                },
                OptionDoc {
                    name: "fit_start",
                    help: "first eigenvalue index fitted, 1-based (null: the preset's)",
                },
                OptionDoc {
                    name: "fit_end",
                    help: "last index fitted, 1-based (null: the preset's, capped at the numerical rank)",
                },
                OptionDoc {
                    name: "weighting",
                    help: "uniform or inverse_rank (null: the preset's)",
                },
            ],
            needs_readout: false,
            needs_null: false,
            rotation_invariant: true,
        }
    }

    fn check(&self) -> Result<()> {
        if self.fit_start == Some(0) {
            return Err(invalid("fit_start", 0, "indices are 1-based"));
        }
        let start = self.fit_start.unwrap_or(self.fit.preset().0);
        if let Some(end) = self.fit_end
            && end < start + 2
        {
            return Err(invalid(
                "fit_end",
                end,
                &format!(
                    "the fit needs at least 3 eigenvalues (fit_end >= fit_start + 2 = {})",
                    start + 2
                ),
            ));
        }
        Ok(())
    }

    fn compute(&self, input: &LayerInput<'_>) -> Result<Vec<MetricValue>> {
        self.compute_spectrum(input)
    }

    fn covariance_form(&self) -> Option<Box<dyn Metric>> {
        Some(Box::new(self.clone()))
    }

    fn compute_spectrum(&self, input: &dyn Spectrum) -> Result<Vec<MetricValue>> {
        self.check()?;
        let what = format!("alpha_req on {}", input.what());
        let sv = input.singular_values(true)?;
        let rank = numerical_rank(sv, input.n(), input.d());
        let (preset_start, preset_end, preset_weighting) = self.fit.preset();
        let start = self.fit_start.unwrap_or(preset_start);
        let weighting = self.weighting.unwrap_or(preset_weighting);
        let end = match self.fit_end {
            Some(end) if end > rank => {
                return Err(invalid(
                    "fit_end",
                    end,
                    &format!(
                        "only {rank} covariance eigenvalues are numerically non-zero ({what})"
                    ),
                ));
            }
            Some(end) => end,
            None => preset_end.map_or(rank, |e| e.min(rank)),
        };
        if end < start + 2 {
            return Err(Error::Degenerate {
                what,
                reason: format!(
                    "the fit range {start}..={end} holds fewer than 3 non-zero eigenvalues (numerical rank {rank})"
                ),
            });
        }
        let denom = (input.n() - 1) as f64;
        let lambdas: Vec<f64> = sv.iter().map(|s| s * s / denom).collect();
        let fit = power_law_fit_weighted(&lambdas, start, end, weighting.power());
        Ok(vec![
            MetricValue::new("alpha_req", self.fit.variant(), fit.alpha)
                .with_extra("r2", fit.r2)
                .with_extra("fit_start", start as f64)
                .with_extra("fit_end", end as f64)
                .with_extra("weight_power", weighting.power()),
        ])
    }
}

/// A least-squares line through $(\log i, \log\lambda_i)$.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerLawFit {
    /// Minus the slope.
    pub alpha: f64,
    /// Coefficient of determination (weighted like the fit); 1 when the points lie on a line
    /// (also when flat).
    pub r2: f64,
}

/// Fits $\log\lambda_i = c - \alpha\log i$ for 1-based `i` in `start..=end` (all λ > 0),
/// unweighted.
#[track_caller]
pub fn power_law_fit(lambdas: &[f64], start: usize, end: usize) -> PowerLawFit {
    power_law_fit_weighted(lambdas, start, end, 0.0)
}

/// Fits $\log\lambda_i = c - \alpha\log i$ for 1-based `i` in `start..=end` (all λ > 0) by
/// least squares with weights $w_i = i^{-p}$ (`weight_power` = p; 0 is unweighted, 1 the
/// α-ReQ reference code's $1/i$). `r2` is the weighted coefficient of determination,
/// $1 - \sum w_i r_i^2 / \sum w_i (y_i - \bar y_w)^2$.
#[track_caller]
pub fn power_law_fit_weighted(
    lambdas: &[f64],
    start: usize,
    end: usize,
    weight_power: f64,
) -> PowerLawFit {
    assert!(
        start >= 1 && end <= lambdas.len() && end > start,
        "power_law_fit: bad range"
    );
    let pts: Vec<(f64, f64, f64)> = (start..=end)
        .map(|i| {
            let x = (i as f64).ln();
            (x, lambdas[i - 1].ln(), (-weight_power * x).exp())
        })
        .collect();
    let sw: f64 = pts.iter().map(|p| p.2).sum();
    let mx = pts.iter().map(|p| p.2 * p.0).sum::<f64>() / sw;
    let my = pts.iter().map(|p| p.2 * p.1).sum::<f64>() / sw;
    let sxx: f64 = pts.iter().map(|p| p.2 * (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| p.2 * (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = pts.iter().map(|p| p.2 * (p.1 - my).powi(2)).sum();
    let slope = sxy / sxx;
    let ss_res: f64 = pts
        .iter()
        .map(|p| p.2 * (p.1 - my - slope * (p.0 - mx)).powi(2))
        .sum();
    let r2 = if syy > 0.0 { 1.0 - ss_res / syy } else { 1.0 };
    PowerLawFit { alpha: -slope, r2 }
}

// ---------------------------------------------------------------------------------------------

/// Isotropy: IsoScore (Rudman et al. 2022) of the covariance spectrum, the mean pairwise
/// cosine similarity of the raw points (Ethayarajh 2019) and, on request, the partition-function
/// isotropy I(W) of Mu & Viswanath (2018).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Isotropy {
    /// Report IsoScore (variant `isoscore`; 1 = isotropic, 0 = one direction).
    pub isoscore: bool,
    /// Report the mean pairwise cosine similarity of the uncentred points (variant `mean_cosine`).
    pub mean_cosine: bool,
    /// Report the partition-function isotropy I(W) of the uncentred points (variant
    /// `partition`; 1 = isotropic). Off by default: it needs all `d` eigenvectors of
    /// $H^\top H$, an $O(d^3)$ step the other variants do not take.
    pub partition: bool,
}

impl Default for Isotropy {
    fn default() -> Self {
        Self {
            isoscore: true,
            mean_cosine: true,
            partition: false,
        }
    }
}

#[typetag::serde(name = "isotropy")]
impl Metric for Isotropy {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "isotropy",
            summary: "IsoScore of the covariance spectrum (1 = isotropic), mean pairwise cosine similarity, partition-function isotropy I(W)",
            source: "Rudman, Gillman, Rayne, Eickhoff (2022), IsoScore, Findings of ACL; Ethayarajh (2019), EMNLP; \
                     Mu & Viswanath (2018), All-but-the-Top, ICLR",
            options: &[
                OptionDoc {
                    name: "isoscore",
                    help: "report IsoScore (variant isoscore)",
                },
                OptionDoc {
                    name: "mean_cosine",
                    help: "report the mean pairwise cosine similarity (variant mean_cosine)",
                },
                OptionDoc {
                    name: "partition",
                    help: "report Mu & Viswanath's I(W) over the eigenvectors of H^T H, both signs (variant partition)",
                },
            ],
            needs_readout: false,
            needs_null: false,
            rotation_invariant: true,
        }
    }

    fn check(&self) -> Result<()> {
        if !self.isoscore && !self.mean_cosine && !self.partition {
            return Err(invalid(
                "isoscore",
                false,
                "at least one of isoscore, mean_cosine and partition must be true",
            ));
        }
        Ok(())
    }

    fn compute(&self, input: &LayerInput<'_>) -> Result<Vec<MetricValue>> {
        self.check()?;
        let mut out = Vec::new();
        if self.isoscore {
            out.push(isoscore_value(input)?);
        }
        if self.mean_cosine {
            out.push(MetricValue::new(
                "isotropy",
                "mean_cosine",
                mean_cosine(input)?,
            ));
        }
        if self.partition {
            out.push(MetricValue::new(
                "isotropy",
                "partition",
                partition_isotropy(input)?,
            ));
        }
        Ok(out)
    }

    /// IsoScore only: the mean cosine and the partition function read the points.
    fn covariance_form(&self) -> Option<Box<dyn Metric>> {
        Some(Box::new(Isotropy {
            isoscore: true,
            mean_cosine: false,
            partition: false,
        }))
    }

    /// IsoScore from the spectrum; the mean cosine and the partition function read the points.
    fn compute_spectrum(&self, input: &dyn Spectrum) -> Result<Vec<MetricValue>> {
        self.check()?;
        let on_points: Vec<&str> = [
            ("mean_cosine", self.mean_cosine),
            ("partition", self.partition),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
        if !on_points.is_empty() {
            return Err(Error::NeedsPoints {
                metric: "isotropy".into(),
                what: input.what().into(),
                reason: format!(
                    "variant {} reads the points; set {} = false for the spectrum alone",
                    on_points.join(" and "),
                    on_points.join(" = false, ")
                ),
            });
        }
        Ok(if self.isoscore {
            vec![isoscore_value(input)?]
        } else {
            Vec::new()
        })
    }
}

/// IsoScore of a layer's covariance spectrum, as the `isoscore` variant's row.
fn isoscore_value(input: &dyn Spectrum) -> Result<MetricValue> {
    let lambdas = input.covariance_eigenvalues()?;
    let value = isoscore(&lambdas).ok_or_else(|| Error::Degenerate {
        what: format!("isoscore on {}", input.what()),
        reason: "the covariance is zero".into(),
    })?;
    Ok(MetricValue::new("isotropy", "isoscore", value))
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
    let xn = normalize_rows(input.acts(), input.what(), input.par())?;
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

/// Partition-function isotropy (Mu & Viswanath 2018): with $Z(c) = \sum_i \exp(c^\top h_i)$
/// over the raw rows, $I(W) = \min_{c \in C} Z(c) / \max_{c \in C} Z(c)$ where $C$ holds the
/// `d` unit eigenvectors of $H^\top H$ **and their negatives** (an eigenvector's sign is
/// arbitrary and $Z(c) \ne Z(-c)$, so both are taken to make the value well defined).
/// Computed in log space ($\log Z$ by log-sum-exp), so large activations cannot overflow.
fn partition_isotropy(input: &LayerInput<'_>) -> Result<f64> {
    use repgeom_linalg::{gram_rows, project, symmetric_eigen_desc, to_f64};
    let raw = to_f64(input.acts());
    // H^T H, as the row Gram matrix of H^T (d x d).
    let gram = gram_rows(raw.as_ref().transpose(), input.par());
    let (_, vectors) = symmetric_eigen_desc(gram.as_ref(), input.par())?;
    let scores = project(raw.as_ref(), vectors.as_ref(), input.par());
    let log_sum_exp = |sign: f64, j: usize| {
        let col = scores.col(j);
        let m = col
            .iter()
            .map(|v| sign * v)
            .fold(f64::NEG_INFINITY, f64::max);
        m + col.iter().map(|v| (sign * v - m).exp()).sum::<f64>().ln()
    };
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for j in 0..scores.ncols() {
        for sign in [1.0, -1.0] {
            let log_z = log_sum_exp(sign, j);
            lo = lo.min(log_z);
            hi = hi.max(log_z);
        }
    }
    if !(lo.is_finite() && hi.is_finite()) {
        return Err(Error::Degenerate {
            what: format!("isotropy (partition) on {}", input.what()),
            reason: "the partition function is not finite".into(),
        });
    }
    Ok((lo - hi).exp())
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

    fn compute(&self, input: &LayerInput<'_>) -> Result<Vec<MetricValue>> {
        self.compute_spectrum(input)
    }

    fn covariance_form(&self) -> Option<Box<dyn Metric>> {
        Some(Box::new(self.clone()))
    }

    fn compute_spectrum(&self, input: &dyn Spectrum) -> Result<Vec<MetricValue>> {
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
