//! The aggregates of a comparison's layer × layer table (`max`, `row_max_mean`, `hungarian`
//! with its optimal one-to-one matching, `diagonal`) and the row that reports one with its
//! calibrated null (Gröger et al.'s threshold `tau`).

use serde::{Deserialize, Serialize};

use super::with_null;
use crate::error::{Error, Result};
use crate::input::layer_pairs;
use crate::value::MetricValue;

/// An aggregate of a comparison's layer × layer table, calibrated by taking the same aggregate
/// of the table under each permutation. For a distance (a metric where smaller is closer, e.g.
/// Procrustes) "best" means smallest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregate {
    /// The best cell of the table (the best-matching layer pair).
    Max,
    /// The mean over A's layers of each one's best cell over B's layers.
    RowMaxMean,
    /// The mean of the cells of the best one-to-one matching of layers (Hungarian algorithm;
    /// `min(L_A, L_B)` cells).
    Hungarian,
    /// The mean of the matched-depth cells ([`crate::layer_pairs`] with `diagonal`).
    Diagonal,
}

impl Aggregate {
    /// Every aggregate, in the order of their names.
    pub const ALL: [Aggregate; 4] = [
        Aggregate::Max,
        Aggregate::RowMaxMean,
        Aggregate::Hungarian,
        Aggregate::Diagonal,
    ];

    /// The name used on the command line, in manifests and in the `aggregate` column.
    pub fn name(self) -> &'static str {
        match self {
            Aggregate::Max => "max",
            Aggregate::RowMaxMean => "row_max_mean",
            Aggregate::Hungarian => "hungarian",
            Aggregate::Diagonal => "diagonal",
        }
    }

    /// The aggregate of `table` (row-major `la × lb`, oriented so that larger is closer).
    pub(super) fn of(self, table: &[f64], la: usize, lb: usize) -> f64 {
        match self {
            Aggregate::Max => table.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            Aggregate::RowMaxMean => {
                table
                    .chunks(lb)
                    .map(|r| r.iter().copied().fold(f64::NEG_INFINITY, f64::max))
                    .sum::<f64>()
                    / la as f64
            }
            Aggregate::Hungarian => {
                let cells = best_matching(table, la, lb);
                cells.iter().map(|&(i, j)| table[i * lb + j]).sum::<f64>() / cells.len() as f64
            }
            Aggregate::Diagonal => {
                let cells = layer_pairs(la, lb, true);
                cells.iter().map(|&(i, j)| table[i * lb + j]).sum::<f64>() / cells.len() as f64
            }
        }
    }
}

impl std::fmt::Display for Aggregate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Aggregate {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Aggregate::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| Error::InvalidOption {
                name: "aggregate".into(),
                value: s.into(),
                reason: format!(
                    "expected one of {}",
                    Aggregate::ALL.map(Aggregate::name).join(", ")
                ),
            })
    }
}

/// The one-to-one matching of rows to columns of `w` (`la × lb`, row-major) with the largest
/// total weight, as `(row, column)` cells sorted by row (Kuhn–Munkres with potentials,
/// `O(n²m)`; the transpose is matched when there are more rows than columns).
pub(crate) fn best_matching(w: &[f64], la: usize, lb: usize) -> Vec<(usize, usize)> {
    if la > lb {
        let t: Vec<f64> = (0..lb)
            .flat_map(|j| (0..la).map(move |i| (i, j)))
            .map(|(i, j)| w[i * lb + j])
            .collect();
        let mut cells: Vec<(usize, usize)> = best_matching(&t, lb, la)
            .into_iter()
            .map(|(j, i)| (i, j))
            .collect();
        cells.sort_unstable();
        return cells;
    }
    let (n, m) = (la, lb);
    // Minimise the cost −w; 1-based arrays as in the classic formulation.
    let cost = |i: usize, j: usize| -w[(i - 1) * m + (j - 1)];
    let mut u = vec![0.0f64; n + 1];
    let mut v = vec![0.0f64; m + 1];
    let mut p = vec![0usize; m + 1];
    let mut way = vec![0usize; m + 1];
    for i in 1..=n {
        p[0] = i;
        let mut j0 = 0;
        let mut minv = vec![f64::INFINITY; m + 1];
        let mut used = vec![false; m + 1];
        loop {
            used[j0] = true;
            let i0 = p[j0];
            let mut delta = f64::INFINITY;
            let mut j1 = 0;
            for j in 1..=m {
                if !used[j] {
                    let cur = cost(i0, j) - u[i0] - v[j];
                    if cur < minv[j] {
                        minv[j] = cur;
                        way[j] = j0;
                    }
                    if minv[j] < delta {
                        delta = minv[j];
                        j1 = j;
                    }
                }
            }
            for j in 0..=m {
                if used[j] {
                    u[p[j]] += delta;
                    v[j] -= delta;
                } else {
                    minv[j] -= delta;
                }
            }
            j0 = j1;
            if p[j0] == 0 {
                break;
            }
        }
        loop {
            let j1 = way[j0];
            p[j0] = p[j1];
            j0 = j1;
            if j0 == 0 {
                break;
            }
        }
    }
    let mut cells: Vec<(usize, usize)> = (1..=m)
        .filter(|&j| p[j] != 0)
        .map(|j| (p[j] - 1, j - 1))
        .collect();
    cells.sort_unstable();
    cells
}

#[allow(clippy::too_many_arguments)]
pub(super) fn aggregate_row(
    metric: &str,
    variant: &str,
    oriented_obs: f64,
    oriented_null: &[f64],
    sign: f64,
    alpha: f64,
    agg: &Aggregate,
    la: usize,
    lb: usize,
    n_cells: usize,
) -> Result<MetricValue> {
    let obs = sign * oriented_obs;
    let null: Vec<f64> = oriented_null.iter().map(|v| sign * v).collect();
    let v = with_null(
        MetricValue::new(metric, variant, obs),
        obs,
        &null,
        sign > 0.0,
    )?;
    // tau: the ceil((1 − α)(K + 1))-th smallest of {observed} ∪ null, oriented (Gröger et al.).
    let mut combined: Vec<f64> = oriented_null.to_vec();
    combined.push(oriented_obs);
    combined.sort_by(f64::total_cmp);
    let k = oriented_null.len();
    let idx = (((1.0 - alpha) * (k + 1) as f64).ceil() as usize).clamp(1, k + 1) - 1;
    let tau = combined[idx];
    let mut v = v
        .with_extra("tau", sign * tau)
        .with_extra("alpha", alpha)
        .with_extra(
            "n_cells",
            match agg {
                Aggregate::Max | Aggregate::RowMaxMean => n_cells as f64,
                Aggregate::Hungarian => la.min(lb) as f64,
                Aggregate::Diagonal => la as f64,
            },
        );
    if sign > 0.0 {
        let denom = (1.0 - tau).max(1e-12);
        v = v.with_extra("calibrated", ((oriented_obs - tau) / denom).clamp(0.0, 1.0));
    }
    Ok(v)
}
