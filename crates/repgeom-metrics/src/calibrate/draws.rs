//! The permutation draws of a comparison: by prepared per-layer work (kernel matrices in one
//! pass over several draws, or a metric's own relabelled lists), or by recomputing the metric
//! on the relabelled rows.

use repgeom_linalg::{Mat, MatRef, Par};

use crate::error::Result;
use crate::input::{LayerInput, PairInput};
use crate::permute::{KernelMatrix, Prepared, PreparedKind, Relabel};
use crate::registry::PairMetric;

/// Draws scored together by the kernel path: each A row is read from memory once for this
/// many draws (the pass is bound by memory traffic, not arithmetic).
pub(super) const DRAWS_PER_PASS: usize = 8;

/// Draws of the kernel path: for each permutation of `perms` (`None` = as given), the value
/// of every cell `(a, b)` (indices into `a` and `b`) with B's points relabelled by it. Row by
/// row: each A matrix's row is copied once for all the draws, each B matrix's relabelled row
/// gathered once per draw, and one small `f32` GEMM (`L_A × L_B`, SIMD-dispatched by faer)
/// per draw scores every cell's strict upper triangle of that row at once; rows are summed in
/// `f64`. A draw's values do not depend on which draws share its pass.
fn kernel_draws(
    a: &[&KernelMatrix],
    b: &[&KernelMatrix],
    cells: &[(usize, usize)],
    perms: &[Option<&[u32]>],
) -> Vec<Vec<f64>> {
    let n = a[0].n;
    let (na, nb, nt) = (a.len(), b.len(), perms.len());
    let mut out = vec![vec![0.0f64; cells.len()]; nt];
    let mut bbuf = vec![0.0f32; nb * n];
    let mut abuf = vec![0.0f32; na * n];
    let (mut used_a, mut used_b) = (vec![false; na], vec![false; nb]);
    for &(i, j) in cells {
        used_a[i] = true;
        used_b[j] = true;
    }
    let mut prod = Mat::<f32>::zeros(na, nb);
    for i in 0..n {
        for (ai, m) in a.iter().enumerate().filter(|(ai, _)| used_a[*ai]) {
            abuf[ai * n + i..(ai + 1) * n].copy_from_slice(&m.data[i * n + i..(i + 1) * n]);
        }
        let l = n - i - 1;
        for (perm, out) in perms.iter().zip(out.iter_mut()) {
            for (bi, m) in b.iter().enumerate().filter(|(bi, _)| used_b[*bi]) {
                let dst = &mut bbuf[bi * n..(bi + 1) * n];
                match perm {
                    Some(p) => {
                        let row = &m.data[p[i] as usize * n..(p[i] as usize + 1) * n];
                        for (d, &pj) in dst[i..].iter_mut().zip(&p[i..]) {
                            *d = row[pj as usize];
                        }
                    }
                    None => dst[i..].copy_from_slice(&m.data[i * n + i..(i + 1) * n]),
                }
            }
            if l > 0 {
                let av = MatRef::from_row_major_slice(&abuf, na, n).subcols(i + 1, l);
                let bv = MatRef::from_row_major_slice(&bbuf, nb, n).subcols(i + 1, l);
                repgeom_linalg::matmul_abt_f32(prod.as_mut(), av, bv, Par::Seq);
            }
            for (c, &(ai, bi)) in cells.iter().enumerate() {
                let ka = a[ai];
                let mut v = if l > 0 {
                    f64::from(ka.off_weight) * f64::from(prod[(ai, bi)])
                } else {
                    0.0
                };
                if ka.diagonal {
                    v += f64::from(abuf[ai * n + i] * bbuf[bi * n + i]);
                }
                out[c] += v;
            }
        }
    }
    out
}

/// Variant `k`'s kernel matrix of every layer of a side (every layer prepared, as kernels).
fn mats(side: &[Option<Prepared>], k: usize) -> Vec<&KernelMatrix> {
    side.iter()
        .map(|p| match p {
            Some(Prepared(PreparedKind::Kernel(m))) => &m[k],
            _ => unreachable!("the kernel path has every layer prepared as kernels"),
        })
        .collect()
}

/// Whether a side's prepared work is kernel matrices (the device path's kind).
pub(super) fn is_kernel(prep: &[Option<Prepared>]) -> bool {
    prep.iter()
        .all(|p| matches!(p, Some(Prepared(PreparedKind::Kernel(_)))))
}

/// [`fast_draws`] of kernel metrics on a CUDA device, every draw `t < draws` (relabelling
/// `perm(t)`): each variant's matrices uploaded once, each draw's strict upper triangles
/// summed there ([`repgeom_cuda::Gpu::kernel_upper_sums`]), and each cell's value formed here
/// as [`kernel_draws`] forms it: `off_weight ·` that sum, plus the diagonal's products when
/// the metric counts them.
pub(super) fn device_kernel_draws(
    gpu: &repgeom_cuda::Gpu,
    prep_a: &[Option<Prepared>],
    prep_b: &[Option<Prepared>],
    pairs: &[(usize, usize)],
    variants: &[String],
    draws: usize,
    perm: &dyn Fn(usize) -> Vec<u32>,
    what: &str,
) -> Result<Vec<Vec<f64>>> {
    let nv = variants.len();
    let mut out = vec![vec![0.0f64; pairs.len() * nv]; draws];
    for k in 0..nv {
        let (a, b) = (mats(prep_a, k), mats(prep_b, k));
        let n = a[0].n;
        fn data<'a>(ms: &[&'a KernelMatrix]) -> Vec<&'a [f32]> {
            ms.iter().map(|m| m.data.as_slice()).collect()
        }
        let upper = gpu.kernel_upper_sums(&data(&a), &data(&b), n, draws, perm, what)?;
        let counts_diagonal = pairs.iter().any(|&(i, _)| a[i].diagonal);
        for (t, (upper, out)) in upper.iter().zip(out.iter_mut()).enumerate() {
            let p = if counts_diagonal { perm(t) } else { Vec::new() };
            for (c, &(i, j)) in pairs.iter().enumerate() {
                let (ka, kb) = (a[i], b[j]);
                let mut v = f64::from(ka.off_weight) * upper[i * b.len() + j];
                if ka.diagonal {
                    v += (0..n)
                        .map(|r| {
                            let q = p[r] as usize;
                            f64::from(ka.data[r * n + r] * kb.data[q * n + q])
                        })
                        .sum::<f64>();
                }
                out[c * nv + k] = v;
            }
        }
    }
    Ok(out)
}

/// Draws by prepared work: for each `(perm, inv)`, each B layer relabelled once, then every
/// cell scored (kernels: the draws in one pass, see [`kernel_draws`]).
pub(super) fn fast_draws(
    prep_a: &[Option<Prepared>],
    prep_b: &[Option<Prepared>],
    pairs: &[(usize, usize)],
    variants: &[String],
    perms: &[(Vec<u32>, Vec<u32>)],
) -> Result<Vec<Vec<f64>>> {
    let nv = variants.len();
    let mut out = vec![vec![0.0f64; pairs.len() * nv]; perms.len()];
    fn get(p: &Option<Prepared>) -> &PreparedKind {
        match p {
            Some(Prepared(k)) => k,
            None => unreachable!("the fast path has every layer prepared"),
        }
    }
    match get(&prep_a[0]) {
        PreparedKind::Kernel(_) => {
            let ps: Vec<Option<&[u32]>> = perms.iter().map(|(p, _)| Some(p.as_slice())).collect();
            for (k, _) in variants.iter().enumerate() {
                let values = kernel_draws(&mats(prep_a, k), &mats(prep_b, k), pairs, &ps);
                for (t, values) in values.into_iter().enumerate() {
                    for (c, v) in values.into_iter().enumerate() {
                        out[t][c * nv + k] = v;
                    }
                }
            }
        }
        PreparedKind::Neighbours(_) => {
            fn nb(p: &Option<Prepared>) -> &dyn Relabel {
                match get(p) {
                    PreparedKind::Neighbours(x) => x.as_ref(),
                    PreparedKind::Kernel(_) => unreachable!("one kind per metric"),
                }
            }
            for ((perm, inv), out) in perms.iter().zip(out.iter_mut()) {
                let mut relabelled: Vec<Option<Box<dyn Relabel>>> =
                    prep_b.iter().map(|_| None).collect();
                for (c, &(i, j)) in pairs.iter().enumerate() {
                    if relabelled[j].is_none() {
                        relabelled[j] = Some(nb(&prep_b[j]).permuted(perm, inv));
                    }
                    let pb = relabelled[j].as_deref().expect("just set");
                    out[c * nv] = nb(&prep_a[i]).score(pb);
                }
            }
        }
    }
    Ok(out)
}

/// One draw by recomputation: each B layer's rows relabelled once, the metric computed on
/// every cell.
pub(super) fn generic_draw(
    metric: &dyn PairMetric,
    a: &[&LayerInput<'_>],
    b: &[&LayerInput<'_>],
    pairs: &[(usize, usize)],
    variants: &[String],
    perm: &[u32],
) -> Result<Vec<f64>> {
    let nv = variants.len();
    let mut out = vec![f64::NAN; pairs.len() * nv];
    let used = |j: usize| pairs.iter().any(|&(_, q)| q == j);
    let relabelled: Vec<Option<Mat<f32>>> = (0..b.len())
        .map(|j| {
            used(j).then(|| {
                let x = b[j].acts();
                Mat::from_fn(x.nrows(), x.ncols(), |r, col| x[(perm[r] as usize, col)])
            })
        })
        .collect();
    let mut inputs = Vec::with_capacity(b.len());
    for (j, m) in relabelled.iter().enumerate() {
        inputs.push(match m {
            None => None,
            Some(m) => {
                let mut ib = LayerInput::new(
                    m.as_ref(),
                    format!("{} (points permuted)", b[j].what()),
                    b[j].par(),
                )?
                .with_memory_budget(b[j].memory_budget())
                .with_device(b[j].device());
                if let Some(basis) = b[j].readout_basis_opt() {
                    ib = ib.with_readout(basis)?;
                }
                if let Some(null) = b[j].null_opt() {
                    ib = ib.with_null(null)?;
                }
                Some(ib)
            }
        });
    }
    for (c, &(i, j)) in pairs.iter().enumerate() {
        let ib = inputs[j]
            .as_ref()
            .expect("every paired layer is relabelled");
        for v in metric.compute(&PairInput::new(a[i], ib)?)? {
            if let Some(k) = variants.iter().position(|x| *x == v.variant) {
                out[c * nv + k] = v.value;
            }
        }
    }
    Ok(out)
}
