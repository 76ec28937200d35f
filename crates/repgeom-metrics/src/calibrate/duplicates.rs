//! The same input twice: which points repeat an earlier one in every layer given, and a
//! comparison run on the first copy of each.

use repgeom_linalg::{Mat, MatRef};

use super::Comparison;
use crate::error::Result;
use crate::input::LayerInput;

/// `run` on the points of `a` and `b` other than `dups` (ascending indices): the same input
/// twice (a repeated token in a repeated context) adds no information and ties every distance
/// to it, so the comparison runs on the first copy of each, the layers copied without the
/// others once for every metric `run` computes. Every row of the result reports how many were
/// dropped in extra `duplicates_dropped`.
pub(super) fn on_kept_points(
    a: &[&LayerInput<'_>],
    b: &[&LayerInput<'_>],
    dups: &[usize],
    run: impl FnOnce(&[&LayerInput<'_>], &[&LayerInput<'_>]) -> Result<Comparison>,
) -> Result<Comparison> {
    let mut out = if dups.is_empty() {
        run(a, b)?
    } else {
        let n = a.iter().chain(b).next().map_or(0, |x| x.n());
        let keep: Vec<usize> = (0..n).filter(|i| dups.binary_search(i).is_err()).collect();
        let owned_a: Vec<Mat<f32>> = a.iter().map(|x| rows_of(x.acts(), &keep)).collect();
        let owned_b: Vec<Mat<f32>> = b.iter().map(|x| rows_of(x.acts(), &keep)).collect();
        let kept_a = (owned_a.iter().zip(a))
            .map(|(m, x)| kept_input(m, x, dups.len()))
            .collect::<Result<Vec<_>>>()?;
        let kept_b = (owned_b.iter().zip(b))
            .map(|(m, x)| kept_input(m, x, dups.len()))
            .collect::<Result<Vec<_>>>()?;
        let (ra, rb): (Vec<&LayerInput<'_>>, Vec<&LayerInput<'_>>) =
            (kept_a.iter().collect(), kept_b.iter().collect());
        run(&ra[..], &rb[..])?
    };
    let dropped = dups.len() as f64;
    for r in &mut out.pairs {
        r.value.extra.insert("duplicates_dropped".into(), dropped);
    }
    for r in &mut out.aggregates {
        r.value.extra.insert("duplicates_dropped".into(), dropped);
    }
    Ok(out)
}

/// Points (ascending) whose rows equal an earlier point's in every layer of `a` and of `b`:
/// the same input seen twice, judged on the layers given. Empty when the sides disagree on `N`
/// (an error later).
pub(super) fn duplicate_points(a: &[&LayerInput<'_>], b: &[&LayerInput<'_>]) -> Vec<usize> {
    let layers: Vec<MatRef<'_, f32>> = a.iter().chain(b).map(|x| x.acts()).collect();
    duplicate_rows(&layers)
}

/// Points (ascending) whose rows equal an earlier point's in every one of `layers`. Empty when
/// there are none or the layers disagree on `N`.
pub(crate) fn duplicate_rows(layers: &[MatRef<'_, f32>]) -> Vec<usize> {
    let Some(n) = layers.first().map(|m| m.nrows()) else {
        return Vec::new();
    };
    if layers.iter().any(|m| m.nrows() != n) {
        return Vec::new();
    }
    // A duplicate in every layer is one in the first: hash that layer's rows (FNV-1a over the
    // bit patterns), and compare every layer only where two rows hash alike.
    let first = layers[0];
    let hash = |i: usize| -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for j in 0..first.ncols() {
            h = (h ^ u64::from(first[(i, j)].to_bits())).wrapping_mul(0x0100_0000_01b3);
        }
        h
    };
    let same = |i: usize, k: usize| {
        (layers.iter()).all(|m| (0..m.ncols()).all(|j| m[(i, j)].to_bits() == m[(k, j)].to_bits()))
    };
    let mut seen: std::collections::BTreeMap<u64, Vec<usize>> = std::collections::BTreeMap::new();
    let mut dups = Vec::new();
    for i in 0..n {
        let firsts = seen.entry(hash(i)).or_default();
        if firsts.iter().any(|&k| same(i, k)) {
            dups.push(i);
        } else {
            firsts.push(i);
        }
    }
    dups
}

/// The rows `keep` of `x`.
fn rows_of(x: MatRef<'_, f32>, keep: &[usize]) -> Mat<f32> {
    Mat::from_fn(keep.len(), x.ncols(), |i, j| x[(keep[i], j)])
}

/// `x` with only the kept rows `m`, its readout basis, null bases and memory budget carried.
fn kept_input<'a>(m: &'a Mat<f32>, x: &LayerInput<'a>, dropped: usize) -> Result<LayerInput<'a>> {
    let what = format!("{} ({dropped} duplicate points dropped)", x.what());
    let mut input = LayerInput::new(m.as_ref(), what, x.par())?
        .with_memory_budget(x.memory_budget())
        .with_device(x.device());
    if let Some(basis) = x.readout_basis_opt() {
        input = input.with_readout(basis)?;
    }
    if let Some(null) = x.null_opt() {
        input = input.with_null(null)?;
    }
    Ok(input)
}
