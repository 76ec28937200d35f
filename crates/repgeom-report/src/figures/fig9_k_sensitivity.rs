//! Figure 9: sensitivity of PGA z to the readout dimension k.

use std::collections::BTreeMap;

use super::{
    Figure, FigureOptions, band_entry, final_rows, footnote, model_infos, model_key, model_series,
    model_strokes, nonfinite_note, plot, select, size_note, z_label, z_refs, z_scale,
};
use crate::error::{Error, Result};
use crate::plot::{LinePanel, Panel, Scale};
use crate::table::{ResultsTable, Row};

/// Figure 9: sensitivity of PGA z to the readout dimension: z against k/d per model at its
/// final checkpoint, at the last layer and as the median over layers. Drawn only when some
/// model has PGA rows at two or more k; otherwise skipped with a note.
pub fn fig9_k_sensitivity(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig9_k_sensitivity";
    let v = o.pga_variant.as_str();
    let rows: Vec<&Row> = select(table, "pga_z", None)
        .into_iter()
        .filter(|r| is_variant_at_some_k(&r.variant, v))
        .collect();
    let fin = final_rows(&rows);
    // model -> k -> rows of the final checkpoint.
    let mut by_k: BTreeMap<&str, BTreeMap<u32, Vec<&Row>>> = BTreeMap::new();
    for (model, rs) in &fin {
        for r in rs {
            by_k.entry(model.as_str())
                .or_default()
                .entry(pga_row_k(r, o))
                .or_default()
                .push(r);
        }
    }
    by_k.retain(|_, ks| ks.len() >= 2);
    if by_k.is_empty() {
        return Err(Error::NoData {
            figure: name.to_owned(),
            metric: "pga_z".to_owned(),
            variant_note: format!(
                ", variant {v}, at two or more k per model (this table has one k per model)"
            ),
        });
    }
    let models = model_infos(
        rows.iter()
            .copied()
            .filter(|r| by_k.contains_key(r.model.as_str())),
    );
    let strokes = model_strokes(&models, o);
    let median = |mut xs: Vec<f64>| -> Option<f64> {
        xs.retain(|x| x.is_finite());
        if xs.is_empty() {
            return None;
        }
        xs.sort_by(f64::total_cmp);
        let m = xs.len() / 2;
        Some(if xs.len() % 2 == 1 {
            xs[m]
        } else {
            0.5 * (xs[m - 1] + xs[m])
        })
    };
    let mut last = Vec::new();
    let mut mid = Vec::new();
    let mut all_z = Vec::new();
    for m in &models {
        let ks = &by_k[m.model.as_str()];
        let mut pl = Vec::new();
        let mut pm = Vec::new();
        for (&k, rs) in ks {
            let x = f64::from(k) / f64::from(m.d);
            if let Some(r) = rs.iter().max_by_key(|r| r.layer)
                && r.value.is_finite()
            {
                pl.push((x, r.value));
            }
            if let Some(z) = median(rs.iter().map(|r| r.value).collect()) {
                pm.push((x, z));
            }
            all_z.extend(rs.iter().map(|r| r.value));
        }
        last.push(model_series(m, &strokes, pl));
        mid.push(model_series(m, &strokes, pm));
    }
    let scale = z_scale(o, all_z.iter().copied());
    let panel = |title: &str, series| {
        let mut p = LinePanel::new(
            title,
            "k / d (readout dimension over width)",
            &z_label(scale),
            Scale::Linear,
            scale,
            series,
        );
        (p.hlines, p.band) = z_refs(o);
        Panel::Lines(p)
    };
    let n_bad = all_z.iter().filter(|z| !z.is_finite()).count();
    let mut p = plot(
        o,
        "Sensitivity of PGA z to the readout dimension k",
        2,
        vec![panel("last layer", last), panel("median over layers", mid)],
    );
    (p.legend_title, p.legend) = model_key(&models, &strokes, [band_entry(o)]);
    p.footnote = footnote(vec![size_note(&models, o), nonfinite_note(n_bad)]);
    let caption = format!(
        "PGA z ({v}) against k/d at each model's final checkpoint, for the models measured at two or \
         more readout dimensions k: left at the last layer, right the median over layers. z is only \
         comparable across widths at equal k/d. {}.",
        size_note(&models, o)
    );
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}

/// The readout dimension `k` of a PGA row: the `k<N>` token of its variant (`ccr1_k50`, as
/// written by runs that sweep several k), else the model's configured k
/// ([`FigureOptions::readout_k_by_model`], then [`FigureOptions::readout_k`]).
fn pga_row_k(r: &Row, o: &FigureOptions) -> u32 {
    r.variant
        .split(['_', '/', ':'])
        .find_map(|t| t.strip_prefix('k').and_then(|n| n.parse::<u32>().ok()))
        .unwrap_or_else(|| o.readout_k_of(&r.model))
}

/// Whether a PGA variant is `base` itself or `base` at some k (`ccr1`, `ccr1_k50`; not
/// `ccr1_k50_spectrum`, which is another null).
fn is_variant_at_some_k(variant: &str, base: &str) -> bool {
    variant == base
        || variant
            .strip_prefix(base)
            .and_then(|rest| rest.strip_prefix("_k"))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}
