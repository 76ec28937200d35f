//! Figure 3: CCR ablation, PGA z per layer at CCR-1/5/10, one panel per model.

use super::{
    Figure, FigureOptions, band_entry, count_nonfinite, footnote, grid_plot, no_data,
    nonfinite_note, select, variant_legend, variant_number, variant_panels, variant_strokes,
    variants_by_number, z_label, z_refs, z_scale,
};
use crate::error::Result;
use crate::plot::Panel;
use crate::table::{ResultsTable, Row};

/// Figure 3: CCR ablation, PGA z per layer at CCR-1/5/10, one panel per model.
pub fn fig3_ccr_ablation(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig3_ccr_ablation";
    let rows: Vec<&Row> = select(table, "pga_z", None)
        .into_iter()
        .filter(|r| variant_number(&r.variant, "ccr").is_some())
        .collect();
    if rows.is_empty() {
        return Err(no_data(name, "pga_z", Some("ccr1/ccr5/ccr10")));
    }
    let variants = variants_by_number(&rows, "ccr");
    let strokes = variant_strokes(&variants);
    let scale = z_scale(o, rows.iter().map(|r| r.value));
    let (models, mut panels) = variant_panels(&rows, &variants, &strokes, &z_label(scale), scale);
    for p in &mut panels {
        (p.hlines, p.band) = z_refs(o);
    }
    let mut p = grid_plot(
        o,
        "CCR ablation: PGA z per layer after removing the top c principal directions",
        panels.into_iter().map(Panel::Lines).collect(),
    );
    p.legend_title = "variant".to_owned();
    p.legend = variant_legend(&variants, &strokes, |v| {
        format!("CCR-{}", variant_number(v, "ccr").unwrap_or(0))
    });
    p.legend.push(band_entry(o));
    p.footnote = footnote(vec![nonfinite_note(count_nonfinite(&rows))]);
    let caption = format!(
        "PGA z per layer at each model's final checkpoint after common-component removal of the top 1, 5 and \
         10 principal directions ({}); {} models.",
        variants.join(", "),
        models.len()
    );
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}
