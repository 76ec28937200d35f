//! Figure 4: share of the top principal directions inside the readout subspace.

use plotters::style::RGBColor;

use super::{
    Figure, FigureOptions, count_nonfinite, footnote, grid_plot, nonfinite_note, select_or_no_data,
    variant_legend, variant_panels, variant_strokes, variants_by_number,
};
use crate::error::Result;
use crate::plot::{HLine, LegendEntry, Panel, Scale, Stroke};
use crate::table::ResultsTable;

/// Figure 4: share of the top principal directions inside the readout subspace per layer,
/// with the random expectation k/d.
pub fn fig4_pc_readout_share(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig4_pc_readout_share";
    let rows = select_or_no_data(table, name, "pc_readout_share", None)?;
    let variants = variants_by_number(&rows, "pc");
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
        let kd = (f64::from(o.readout_k_of(&m.model)) / f64::from(m.d.max(1))).min(1.0);
        p.y_range = Some((0.0, 1.0));
        p.title = format!("{}, k/d = {}", p.title, crate::plot::tick_label(kd));
        p.hlines = vec![HLine {
            y: kd,
            stroke: random,
            label: None,
        }];
    }
    let mut p = grid_plot(
        o,
        "Top principal directions: share inside the readout subspace",
        panels.into_iter().map(Panel::Lines).collect(),
    );
    p.legend_title = "direction".to_owned();
    p.legend = variant_legend(&variants, &strokes, str::to_uppercase);
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
