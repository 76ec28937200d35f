//! Figure 8: linear-probe accuracy per layer beside PGA z (two stacked panels, shared x).

use super::{
    Figure, FigureOptions, band_entry, count_nonfinite, footnote, metric_panel, model_key,
    models_for, nonfinite_note, pga_z_beside, plot, select_or_no_data, size_note,
};
use crate::error::Result;
use crate::plot::Scale;
use crate::table::ResultsTable;

/// Figure 8: linear-probe accuracy per layer beside PGA z (two stacked panels, shared x).
pub fn fig8_probe_vs_pga(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig8_probe_vs_pga";
    select_or_no_data(table, name, "probe_accuracy", None)?;
    let (models, strokes) = models_for(table, &["pga_z", "probe_accuracy"], o);
    let mut used = Vec::new();
    let zp = pga_z_beside(table, o, &models, &strokes, &mut used);
    let pp = metric_panel(
        table,
        "probe_accuracy",
        None,
        "linear-probe accuracy",
        "accuracy (fraction correct)",
        Scale::Linear,
        &strokes,
        &models,
        &mut used,
    );
    let n_bad = count_nonfinite(&used);
    let mut p = plot(
        o,
        "Linear-probe accuracy per layer beside PGA z",
        2,
        vec![zp, pp],
    );
    (p.legend_title, p.legend) = model_key(&models, &strokes, [band_entry(o)]);
    p.footnote = footnote(vec![size_note(&models, o), nonfinite_note(n_bad)]);
    let v = o.pga_variant.as_str();
    let caption = format!(
        "Left: PGA z ({v}) per layer; right: accuracy of a multinomial logistic-regression probe on the same \
         layer's features, both at each model's final checkpoint. {}.",
        size_note(&models, o)
    );
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}
