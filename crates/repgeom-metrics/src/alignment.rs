//! Cross-model alignment metrics from the comparison literature: SVCCA (Raghu et al. 2017),
//! PWCCA (Morcos et al. 2018), the orthogonal Procrustes distance (Ding et al. 2021; Williams
//! et al. 2021) and RSA (Spearman between representational dissimilarity matrices, as
//! rsatoolbox computes it by default).
//!
//! Canonical correlations are the singular values of `U_Aᵀ U_B`, where `U` is an orthonormal
//! basis of a centred representation's column space (its left singular vectors); the bases come
//! from the eigendecomposition of the smaller Gram matrix, in `f64`, sequentially.

use repgeom_linalg::{
    Mat, MatRef, Par, cosine_distances, gram_rows, project, singular_values, symmetric_eigen_desc,
};
use serde::{Deserialize, Serialize};

use crate::cross::{SpearmanSide, spearman_side};
use crate::error::{Error, Result};
use crate::input::{PairInput, numerical_rank};
use crate::permute::{N_PERM_OPTION, Prepared, PreparedKind, SEED_OPTION, permutation_fields};
use crate::registry::{PairMetric, PairSide};
use crate::value::{MetricInfo, MetricValue, OptionDoc};

/// An orthonormal basis `U` (`N × r`) of the column space of a centred `N × d` matrix and its
/// singular values (non-increasing), keeping the numerical rank (the `f32` rule of
/// [`numerical_rank`]).
fn left_basis(xc: MatRef<'_, f64>, par: Par) -> Result<(Mat<f64>, Vec<f64>)> {
    let (n, d) = (xc.nrows(), xc.ncols());
    let (values, vectors, rows) = if d <= n {
        let g = project(xc.transpose(), xc, par);
        let (l, v) = symmetric_eigen_desc(g.as_ref(), par)?;
        (l, v, false)
    } else {
        let g = gram_rows(xc, par);
        let (l, u) = symmetric_eigen_desc(g.as_ref(), par)?;
        (l, u, true)
    };
    let sigma: Vec<f64> = values.iter().map(|l| l.max(0.0).sqrt()).collect();
    let r = numerical_rank(&sigma, n, d);
    let sigma = sigma[..r].to_vec();
    let u = if rows {
        vectors.as_ref().subcols(0, r).to_owned()
    } else {
        let xv = project(xc, vectors.as_ref().subcols(0, r), par);
        Mat::from_fn(n, r, |i, j| xv[(i, j)] / sigma[j])
    };
    Ok((u, sigma))
}

/// [`left_basis`] of a layer's centred points, once per layer ([`crate::LayerInput`]'s memo):
/// every pair the layer is part of, and every draw of a permutation null, shares it.
fn layer_basis(layer: &crate::LayerInput<'_>) -> Result<std::sync::Arc<(Mat<f64>, Vec<f64>)>> {
    layer.memo(("left singular basis", 0, false), || {
        left_basis(layer.centred(), layer.par())
    })
}

/// Smallest `r` whose top-`r` squared singular values hold at least `keep` of the total.
fn rank_for_variance(sigma: &[f64], keep: f64) -> usize {
    let total: f64 = sigma.iter().map(|s| s * s).sum();
    let mut acc = 0.0;
    for (i, s) in sigma.iter().enumerate() {
        acc += s * s;
        if acc >= keep * total {
            return i + 1;
        }
    }
    sigma.len()
}

fn check_fraction(name: &str, value: f64) -> Result<()> {
    if !(value > 0.0 && value <= 1.0) {
        return Err(Error::InvalidOption {
            name: name.into(),
            value: value.to_string(),
            reason: "a fraction of variance must lie in (0, 1]".into(),
        });
    }
    Ok(())
}

/// Canonical correlations (non-increasing, clipped to [0, 1]) between two orthonormal bases.
fn canonical_correlations(
    ua: MatRef<'_, f64>,
    ub: MatRef<'_, f64>,
    what: &str,
    par: Par,
) -> Result<Vec<f64>> {
    let m = project(ua.transpose(), ub, par);
    let mut rho = singular_values(m.as_ref(), what, par)?;
    rho.truncate(ua.ncols().min(ub.ncols()));
    for r in &mut rho {
        *r = r.clamp(0.0, 1.0);
    }
    Ok(rho)
}

// ---------------------------------------------------------------------------------------------

/// SVCCA (Raghu, Gilmer, Yosinski & Sohl-Dickstein 2017): keep each representation's top
/// singular directions holding `variance_kept` of its variance, then the mean canonical
/// correlation between the two reduced representations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Svcca {
    /// Fraction of each representation's variance kept by the SVD step (the paper's 0.99).
    pub variance_kept: f64,
    /// Permutations of B's points for the null (0 = none; each draw recomputes the metric).
    pub n_perm: usize,
    /// Seed of the permutation null.
    pub seed: u64,
}

impl Default for Svcca {
    fn default() -> Self {
        Self {
            variance_kept: 0.99,
            n_perm: 0,
            seed: 0,
        }
    }
}

#[typetag::serde(name = "svcca")]
impl PairMetric for Svcca {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "svcca",
            summary: "SVCCA: mean canonical correlation after keeping each side's top singular directions",
            source: "Raghu, Gilmer, Yosinski & Sohl-Dickstein (2017), SVCCA, NeurIPS",
            options: &[
                OptionDoc {
                    name: "variance_kept",
                    help: "fraction of each representation's variance kept by the SVD step, in (0, 1]",
                },
                N_PERM_OPTION,
                SEED_OPTION,
            ],
            needs_readout: false,
            needs_null: false,
            rotation_invariant: true,
        }
    }

    fn check(&self) -> Result<()> {
        check_fraction("variance_kept", self.variance_kept)
    }

    permutation_fields!();

    fn warm(&self, layer: &crate::LayerInput<'_>, _side: PairSide) {
        let _ = layer_basis(layer);
    }

    fn compute(&self, input: &PairInput<'_>) -> Result<Vec<MetricValue>> {
        self.check()?;
        let par = input.a.par();
        let (a, b) = (layer_basis(input.a)?, layer_basis(input.b)?);
        let ((ua, sa), (ub, sb)) = (&*a, &*b);
        let ra = rank_for_variance(sa, self.variance_kept);
        let rb = rank_for_variance(sb, self.variance_kept);
        let rho = canonical_correlations(
            ua.as_ref().subcols(0, ra),
            ub.as_ref().subcols(0, rb),
            &format!("svcca on {}", input.what()),
            par,
        )?;
        let value = rho.iter().sum::<f64>() / rho.len() as f64;
        Ok(vec![
            MetricValue::new("svcca", "", value)
                .with_extra("dims_a", ra as f64)
                .with_extra("dims_b", rb as f64),
        ])
    }
}

/// PWCCA (Morcos, Raghu & Bengio 2018): canonical correlations weighted by how much of the
/// representation each canonical variate accounts for, `α_i ∝ Σ_j |⟨h_i, z_j⟩|` over the
/// (centred) neurons `z_j` of the side with fewer neurons (the first on a tie, as the reference
/// code).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Pwcca {
    /// Permutations of B's points for the null (0 = none; each draw recomputes the metric).
    pub n_perm: usize,
    /// Seed of the permutation null.
    pub seed: u64,
}

#[typetag::serde(name = "pwcca")]
impl PairMetric for Pwcca {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "pwcca",
            summary: "projection-weighted CCA: canonical correlations weighted by each variate's share of the neurons",
            source: "Morcos, Raghu & Bengio (2018), Insights on representational similarity in neural networks with canonical correlation, NeurIPS",
            options: &[N_PERM_OPTION, SEED_OPTION],
            needs_readout: false,
            needs_null: false,
            // The weights sum absolute projections over neurons, a basis-dependent quantity.
            rotation_invariant: false,
        }
    }

    fn symmetric(&self) -> bool {
        // Symmetric except when both sides have the same width (then the first side weighs).
        false
    }

    permutation_fields!();

    fn warm(&self, layer: &crate::LayerInput<'_>, _side: PairSide) {
        let _ = layer_basis(layer);
    }

    fn compute(&self, input: &PairInput<'_>) -> Result<Vec<MetricValue>> {
        let par = input.a.par();
        let what = format!("pwcca on {}", input.what());
        let (first, second) = if input.a.d() <= input.b.d() {
            (&input.a, &input.b)
        } else {
            (&input.b, &input.a)
        };
        let (s, o) = (layer_basis(first)?, layer_basis(second)?);
        let (us, uo) = (&s.0, &o.0);
        let m = project(us.transpose(), uo.as_ref(), par);
        let mmt = gram_rows(m.as_ref(), par);
        let (l, p) = symmetric_eigen_desc(mmt.as_ref(), par)?;
        let c = us.ncols().min(uo.ncols());
        let rho: Vec<f64> = l[..c].iter().map(|v| v.max(0.0).sqrt().min(1.0)).collect();
        // h_i = U_s p_i; ⟨h_i, z_j⟩ = (Z_sᵀ U_s P)_{j,i}.
        let h = project(us.as_ref(), p.as_ref().subcols(0, c), par);
        let proj = project(first.centred().transpose(), h.as_ref(), par);
        let alpha: Vec<f64> = (0..c)
            .map(|i| (0..proj.nrows()).map(|j| proj[(j, i)].abs()).sum())
            .collect();
        let total: f64 = alpha.iter().sum();
        if total.is_nan() || total <= 0.0 {
            return Err(Error::Degenerate {
                what,
                reason: "the canonical variates carry no projection weight".into(),
            });
        }
        let value = alpha.iter().zip(&rho).map(|(a, r)| a * r).sum::<f64>() / total;
        Ok(vec![
            MetricValue::new("pwcca", "", value).with_extra("n_canonical", c as f64),
        ])
    }
}

/// Orthogonal Procrustes distance between the centred representations, each scaled to unit
/// Frobenius norm: with `ν = ‖A_cᵀ B_c‖_* / (‖A_c‖_F ‖B_c‖_F)` (nuclear norm), variant
/// `squared` is Ding et al.'s `2 − 2ν` and variant `angular` is Williams et al.'s `arccos ν`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Procrustes {
    /// Permutations of B's points for the null (0 = none; each draw recomputes the metric).
    pub n_perm: usize,
    /// Seed of the permutation null.
    pub seed: u64,
}

#[typetag::serde(name = "procrustes")]
impl PairMetric for Procrustes {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "procrustes",
            summary: "orthogonal Procrustes distance after centring and unit Frobenius norm (squared: 2 − 2ν; angular: arccos ν)",
            source: "Ding, Denain & Steinhardt (2021), Grounding representation similarity, NeurIPS; Williams, Kunz, Kornblith & Linderman (2021), Generalized shape metrics, NeurIPS",
            options: &[N_PERM_OPTION, SEED_OPTION],
            needs_readout: false,
            needs_null: false,
            rotation_invariant: true,
        }
    }

    permutation_fields!();

    fn larger_is_closer(&self) -> bool {
        // Both variants are distances.
        false
    }

    fn compute(&self, input: &PairInput<'_>) -> Result<Vec<MetricValue>> {
        let par = input.a.par();
        let (a, b) = (input.a.centred(), input.b.centred());
        let fro = |x: MatRef<'_, f64>| x.norm_l2();
        let (na, nb) = (fro(a), fro(b));
        let cross = project(a.transpose(), b, par);
        let what = format!("procrustes on {}", input.what());
        let nu = singular_values(cross.as_ref(), &what, par)?
            .iter()
            .sum::<f64>()
            / (na * nb);
        let nu = nu.clamp(0.0, 1.0);
        Ok(vec![
            MetricValue::new("procrustes", "angular", nu.acos()).with_extra("nuclear", nu),
            MetricValue::new("procrustes", "squared", 2.0 - 2.0 * nu).with_extra("nuclear", nu),
        ])
    }
}

/// How RSA builds each representational dissimilarity matrix.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RdmKind {
    /// Euclidean distance between points (rsatoolbox's default `calc_rdm` method; its scaling
    /// by the number of channels and the squaring do not change ranks).
    #[default]
    Euclidean,
    /// One minus the Pearson correlation between two points' activation patterns.
    Correlation,
}

/// RSA (Kriegeskorte, Mur & Bandettini 2008): Spearman correlation between the two
/// representations' RDMs over all `N(N−1)/2` pairs, as rsatoolbox's `compare(…,
/// method="spearman")` on `calc_rdm(…)` with its default Euclidean RDM.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Rsa {
    /// The RDM: `euclidean` (default, as rsatoolbox) or `correlation`.
    pub rdm: RdmKind,
    /// Permutations of B's points for the null (0 = none).
    pub n_perm: usize,
    /// Seed of the permutation null.
    pub seed: u64,
}

/// Condensed (`i < j`, row-major, as SciPy's `pdist`) squared Euclidean distances, by blocked
/// Gram products of the centred rows.
fn squared_euclidean(x: MatRef<'_, f64>, par: Par) -> Vec<f32> {
    let n = x.nrows();
    let sq: Vec<f64> = (0..n)
        .map(|i| x.row(i).iter().map(|v| v * v).sum())
        .collect();
    let mut out = Vec::with_capacity(n * (n - 1) / 2);
    let block = 256;
    for start in (0..n).step_by(block) {
        let rows = block.min(n - start);
        let g = project(x.subrows(start, rows), x.transpose(), par);
        for r in 0..rows {
            let i = start + r;
            for j in i + 1..n {
                out.push((sq[i] + sq[j] - 2.0 * g[(r, j)]).max(0.0) as f32);
            }
        }
    }
    out
}

#[typetag::serde(name = "rsa")]
impl PairMetric for Rsa {
    fn info(&self) -> MetricInfo {
        MetricInfo {
            name: "rsa",
            summary: "representational similarity analysis: Spearman between the two RDMs (Euclidean by default)",
            source: "Kriegeskorte, Mur & Bandettini (2008), Frontiers in Systems Neuroscience; defaults of rsatoolbox (calc_rdm euclidean, compare spearman)",
            options: &[
                OptionDoc {
                    name: "rdm",
                    help: "dissimilarity: euclidean (rsatoolbox's default) or correlation",
                },
                N_PERM_OPTION,
                SEED_OPTION,
            ],
            needs_readout: false,
            needs_null: false,
            rotation_invariant: self.rdm == RdmKind::Euclidean,
        }
    }

    permutation_fields!();

    fn prepare(&self, layer: &crate::LayerInput<'_>) -> Result<Option<Prepared>> {
        let what = format!("rsa on {}", layer.what());
        Ok(Some(Prepared(PreparedKind::Kernel(vec![
            crate::cross::standardized_ranks(self.variant(), layer.n(), &self.rdm(layer)?, &what)?,
        ]))))
    }

    fn warm(&self, layer: &crate::LayerInput<'_>, _: PairSide) {
        let _ = self.side(layer, &format!("rsa on {}", layer.what()));
    }

    fn compute(&self, input: &PairInput<'_>) -> Result<Vec<MetricValue>> {
        let what = format!("rsa on {}", input.what());
        let a = self.side(input.a, &what)?;
        let b = self.side(input.b, &what)?;
        let value = a.spearman(&b);
        let tied = |s: &SpearmanSide| s.tied.expect("an RDM keeps its ties");
        Ok(vec![
            MetricValue::new("rsa", self.variant(), value)
                .with_extra("tied_a", tied(&a))
                .with_extra("tied_b", tied(&b)),
        ])
    }
}

impl Rsa {
    fn variant(&self) -> &'static str {
        match self.rdm {
            RdmKind::Euclidean => "euclidean",
            RdmKind::Correlation => "correlation",
        }
    }

    /// The layer's RDM, ranked for the correlation, once per layer.
    fn side(
        &self,
        layer: &crate::LayerInput<'_>,
        what: &str,
    ) -> Result<std::sync::Arc<SpearmanSide>> {
        let key = match self.rdm {
            RdmKind::Euclidean => "rsa euclidean",
            RdmKind::Correlation => "rsa correlation",
        };
        spearman_side(layer, (key, 0), true, what, || self.rdm(layer))
    }

    /// The condensed RDM of one side.
    fn rdm(&self, side: &crate::LayerInput<'_>) -> Result<Vec<f32>> {
        let par = side.par();
        Ok(match self.rdm {
            RdmKind::Euclidean => squared_euclidean(side.centred(), par),
            RdmKind::Correlation => {
                let x = side.acts();
                let d = x.ncols();
                let means: Vec<f64> = (0..x.nrows())
                    .map(|i| x.row(i).iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64)
                    .collect();
                let xc = Mat::from_fn(x.nrows(), d, |i, j| f64::from(x[(i, j)]) - means[i]);
                cosine_distances(xc.as_ref(), &format!("{} (row-centred)", side.what()), par)?
            }
        })
    }
}
