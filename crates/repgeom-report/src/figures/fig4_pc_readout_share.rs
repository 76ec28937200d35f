//! Figure 4: share of the top principal directions inside the readout subspace.

use std::collections::BTreeSet;

use plotters::style::RGBColor;

use super::{
    Figure, FigureOptions, count_nonfinite, footnote, grid_cols, no_data, nonfinite_note, plot,
    select, variant_number, variant_panels, variant_strokes,
};
use crate::error::Result;
use crate::plot::{HLine, LegendEntry, Panel, Scale, Stroke};
use crate::table::ResultsTable;

/// Figure 4: share of the top principal directions inside the readout subspace per layer,
/// with the random expectation k/d.
pub fn fig4_pc_readout_share(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig4_pc_readout_share";
    let rows = select(table, "pc_readout_share", None);
    if rows.is_empty() {
        return Err(no_data(name, "pc_readout_share", None));
    }
    let mut variants: Vec<String> = rows
        .iter()
        .map(|r| r.variant.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    variants.sort_by_key(|v| (variant_number(v, "pc").unwrap_or(u32::MAX), v.clone()));
    let strokes = variant_strokes(&variants);
    let (models, mut panels) = variant_panels(
        &rows,
        &variants,
        &strokes,
        "share of ‖u‖² in readout",
        Scale::Linear,
    );
    let random = Stroke {
        color: RGBColor(120, 120, 120),
        dashed: true,
        marker: false,
        width: 2,
    };
    for (p, m) in panels.iter_mut().zip(&models) {
        let k = o
            .readout_k_by_model
            .get(&m.model)
            .copied()
            .unwrap_or(o.readout_k);
        let kd = (f64::from(k) / f64::from(m.d.max(1))).min(1.0);
        p.y_range = Some((0.0, 1.0));
        p.title = format!("{}, k/d = {}", p.title, crate::plot::tick_label(kd));
        p.hlines = vec![HLine {
            y: kd,
            stroke: random,
            label: None,
        }];
    }
    let mut p = plot(
        o,
        "Top principal directions: share inside the readout subspace",
        grid_cols(panels.len()),
        panels.into_iter().map(Panel::Lines).collect(),
    );
    p.legend_title = "direction".to_owned();
    p.legend = variants
        .iter()
        .zip(&strokes)
        .map(|(v, s)| LegendEntry {
            label: v.to_uppercase(),
            stroke: *s,
            patch: false,
        })
        .collect();
    p.legend.push(LegendEntry::line(
        if o.readout_k_by_model.is_empty() {
            format!("random (k/d, k={})", o.readout_k)
        } else {
            "random (k/d)".to_owned()
        },
        random,
    ));
    p.footnote = footnote(vec![nonfinite_note(count_nonfinite(&rows))]);
    let caption = format!(
        "For each of the top principal directions u_j of a layer (final checkpoint), the share ‖V_kᵀu_j‖² lying \
         in the top-{} readout subspace of W_U; the dashed line is the expectation k/d for a random direction.",
        if o.readout_k_by_model.is_empty() {
            o.readout_k.to_string()
        } else {
            "k".to_owned()
        }
    );
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}
