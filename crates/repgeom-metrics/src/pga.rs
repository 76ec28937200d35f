//! Subspace PGA (predictive geometric alignment): does a layer's distance structure survive
//! projection onto the readout subspace of `W_U` better than projection onto random subspaces?
//!
//! For one layer `H` (`N × d`), readout basis $V_k$ and null bases $Q_1..Q_n$:
//! 1. $H_c$ = CCR-`c` of `H` (centre over points, remove the top-`c` principal directions);
//! 2. $d_{full}$ = cosine distances of all pairs of rows of $H_c$; $d_{proj}$ those of $H_c V_k$;
//! 3. $\rho_{readout} = \mathrm{Spearman}(d_{full}, d_{proj})$ over all $N(N-1)/2$ pairs;
//! 4. $\rho_i$ the same with $Q_i$ in place of $V_k$;
//! 5. $z = (\rho_{readout} - \bar\rho)/s_\rho$ (ddof 1), $p = (1 + \#\{\rho_i \ge \rho_{readout}\})/(n+1)$.
//!
//! The engine ranks $d_{full}$ once per (layer, CCR) and reuses it for every draw; each draw
//! costs two `f32` GEMMs and one radix sort, and draws run in parallel with a bounded scratch
//! per worker thread.

use rayon::prelude::*;
use repgeom_linalg::{
    Mat, MatRef, Par, RankScratch, RankedReference, center_columns, cosine_distances,
    first_non_finite, principal_directions, remove_directions, to_f32,
};
use repgeom_null::{NullBases, NullSummary};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Fewest points for which PGA is defined (below this there are too few pairs to rank).
pub const MIN_POINTS: usize = 4;

/// The result of Subspace PGA on one layer at one CCR level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PgaResult {
    /// Number of points `N`.
    pub n_points: usize,
    /// Hidden size `d`.
    pub d: usize,
    /// Readout subspace dimension `k`.
    pub k: usize,
    /// Number of principal directions removed (CCR-`c`).
    pub ccr: usize,
    /// Spearman correlation of full and readout-projected distances.
    pub rho_readout: f64,
    /// Mean of the null correlations.
    pub null_mean: f64,
    /// Sample standard deviation (ddof 1) of the null correlations.
    pub null_std: f64,
    /// The PGA z-score.
    pub z: f64,
    /// One-sided empirical p-value.
    pub p_value: f64,
    /// Every null correlation, in draw order.
    pub null_rhos: Vec<f64>,
}

/// Checks the inputs shared by every PGA call. `what` names the layer for messages, e.g.
/// `"run.safetensors: hidden_states.3 [300, 64]"`.
pub fn validate_inputs(acts: MatRef<'_, f32>, basis: MatRef<'_, f64>, what: &str) -> Result<()> {
    let (n, d) = (acts.nrows(), acts.ncols());
    if n < MIN_POINTS {
        return Err(Error::TooFewPoints {
            what: what.into(),
            n,
            min: MIN_POINTS,
        });
    }
    if basis.nrows() != d {
        return Err(Error::ShapeMismatch {
            what: format!("{what} against the readout basis"),
            left: format!("activations [{n}, {d}] (d = {d})"),
            right: format!(
                "readout basis [{}, {}] (d = {})",
                basis.nrows(),
                basis.ncols(),
                basis.nrows()
            ),
        });
    }
    let k = basis.ncols();
    if k == 0 || k >= d {
        return Err(Error::InvalidOption {
            name: "k".into(),
            value: k.to_string(),
            reason: format!("the readout subspace dimension must satisfy 0 < k < d = {d} ({what})"),
        });
    }
    if let Some((row, col)) = first_non_finite(acts) {
        return Err(Error::NonFinite {
            what: what.into(),
            row,
            col,
        });
    }
    if let Some(row) = (0..n).find(|&i| acts.row(i).iter().all(|&v| v == 0.0)) {
        return Err(Error::Linalg(repgeom_linalg::Error::ZeroNorm {
            what: what.into(),
            row,
        }));
    }
    if let Some((row, col)) = first_non_finite(basis) {
        return Err(Error::NonFinite {
            what: format!("readout basis for {what}"),
            row,
            col,
        });
    }
    Ok(())
}

/// Subspace PGA of one layer at each CCR level in `ccrs`, sharing the centring and one
/// eigendecomposition (for the largest CCR) across levels.
///
/// `par` sets the parallelism: with `Par::Seq` everything runs on this thread; otherwise the
/// null draws run on the current rayon pool. Results are identical either way.
/// `on_draw` is called once per finished null draw (for progress bars).
pub fn pga_ccr_sweep(
    acts: MatRef<'_, f32>,
    readout_basis: MatRef<'_, f64>,
    null: &NullBases,
    ccrs: &[usize],
    what: &str,
    par: Par,
    on_draw: &(dyn Fn() + Sync),
) -> Result<Vec<PgaResult>> {
    validate_inputs(acts, readout_basis, what)?;
    let (n, d, k) = (acts.nrows(), acts.ncols(), readout_basis.ncols());
    if null.d() != d || null.k() != k {
        return Err(Error::ShapeMismatch {
            what: format!("{what}: null bases against the readout basis"),
            left: format!("null bases [{}, {}, {}]", null.len(), null.d(), null.k()),
            right: format!("readout basis [{d}, {k}]"),
        });
    }
    let max_c = ccrs.iter().copied().max().unwrap_or(0);
    if max_c >= n.min(d) {
        return Err(Error::InvalidOption {
            name: "ccr".into(),
            value: max_c.to_string(),
            reason: format!(
                "cannot remove {max_c} principal directions from {n} points in {d} dimensions ({what})"
            ),
        });
    }
    let centred = center_columns(acts);
    let directions = if max_c > 0 {
        Some(principal_directions(centred.as_ref(), max_c, par)?.directions)
    } else {
        None
    };
    let readout32 = to_f32(readout_basis);
    let null32: Vec<Mat<f32>> = null.bases().iter().map(|q| to_f32(q.as_ref())).collect();
    ccrs.iter()
        .map(|&c| {
            let corrected = match (&directions, c) {
                (Some(u), c) if c > 0 => {
                    remove_directions(centred.as_ref(), u.as_ref().subcols(0, c), par)
                }
                _ => centred.clone(),
            };
            let label = format!("{what} after CCR-{c}");
            pga_corrected(
                corrected.as_ref(),
                readout32.as_ref(),
                &null32,
                c,
                &label,
                par,
                on_draw,
            )
            .map(|mut r| {
                r.n_points = n;
                r
            })
        })
        .collect()
}

/// Subspace PGA of one layer at one CCR level. See [`pga_ccr_sweep`].
pub fn pga(
    acts: MatRef<'_, f32>,
    readout_basis: MatRef<'_, f64>,
    null: &NullBases,
    ccr: usize,
    what: &str,
    par: Par,
    on_draw: &(dyn Fn() + Sync),
) -> Result<PgaResult> {
    let mut all = pga_ccr_sweep(acts, readout_basis, null, &[ccr], what, par, on_draw)?;
    Ok(all.remove(0))
}

/// The engine on an already corrected `N × d` matrix.
fn pga_corrected(
    corrected: MatRef<'_, f64>,
    readout: MatRef<'_, f32>,
    null: &[Mat<f32>],
    ccr: usize,
    what: &str,
    par: Par,
    on_draw: &(dyn Fn() + Sync),
) -> Result<PgaResult> {
    let (n, d, k) = (corrected.nrows(), corrected.ncols(), readout.ncols());
    let full = cosine_distances(corrected, what, par)?;
    let reference = RankedReference::new(&full, &format!("{what}: full-space distances"))?;
    drop(full);
    let h32 = to_f32(corrected);
    let engine = Engine {
        h: h32.as_ref(),
        reference: &reference,
        what,
    };

    let mut scratch = DrawScratch::new(n);
    let rho_readout = engine.rho(readout, &mut scratch, "readout subspace")?;
    drop(scratch);

    let null_rhos: Vec<f64> = match par {
        Par::Seq => {
            let mut scratch = DrawScratch::new(n);
            null.iter()
                .map(|q| {
                    let r = engine.rho(q.as_ref(), &mut scratch, "random subspace");
                    on_draw();
                    r
                })
                .collect::<Result<_>>()?
        }
        _ => null
            .par_iter()
            .map_init(
                || DrawScratch::new(n),
                |scratch, q| {
                    let r = engine.rho(q.as_ref(), scratch, "random subspace");
                    on_draw();
                    r
                },
            )
            .collect::<Result<_>>()?,
    };
    let NullSummary {
        null_mean,
        null_std,
        z,
        p_value,
    } = repgeom_null::summarize(rho_readout, &null_rhos)?;
    Ok(PgaResult {
        n_points: n,
        d,
        k,
        ccr,
        rho_readout,
        null_mean,
        null_std,
        z,
        p_value,
        null_rhos,
    })
}

/// Per-worker buffers: the radix-sort words (two `u64` per pair).
struct DrawScratch {
    rank: RankScratch,
}

impl DrawScratch {
    fn new(_n: usize) -> Self {
        Self {
            rank: RankScratch::default(),
        }
    }
}

struct Engine<'a> {
    h: MatRef<'a, f32>,
    reference: &'a RankedReference,
    what: &'a str,
}

impl Engine<'_> {
    /// Spearman of the full-space distances with those inside `basis`'s span.
    fn rho(&self, basis: MatRef<'_, f32>, scratch: &mut DrawScratch, space: &str) -> Result<f64> {
        let label = format!("{}: projection onto the {space}", self.what);
        let projected = repgeom_linalg::project_f32(self.h, basis, Par::Seq);
        Ok(repgeom_linalg::spearman_of_cosine(
            self.reference,
            projected.as_ref(),
            &mut scratch.rank,
            &label,
            Par::Seq,
        )?)
    }
}

#[cfg(test)]
#[path = "pga_tests.rs"]
mod tests;
