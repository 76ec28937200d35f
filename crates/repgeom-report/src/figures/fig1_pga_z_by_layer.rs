//! Figure 1: PGA z per layer, one line per model at its final checkpoint.

use super::{
    Figure, FigureOptions, band_entry, count_nonfinite, final_rows, footnote, model_infos,
    model_key, model_strokes, nonfinite_note, pga_z_panel, plot, select_or_no_data, size_note,
    z_scale,
};
use crate::error::Result;
use crate::plot::{Panel, Scale};
use crate::table::{ResultsTable, Row};

/// Figure 1: PGA z per layer (relative depth), one line per model at its final checkpoint;
/// small models dashed blue, large solid red; z = 0 line and the ±band shaded.
pub fn fig1_pga_z_by_layer(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig1_pga_z_by_layer";
    let v = o.pga_variant.as_str();
    let rows = select_or_no_data(table, name, "pga_z", Some(v))?;
    let per_model = final_rows(&rows);
    let used: Vec<&Row> = per_model.values().flatten().copied().collect();
    let models = model_infos(used.iter().copied());
    let strokes = model_strokes(&models, o);
    let scale = z_scale(o, used.iter().map(|r| r.value));
    let panel = pga_z_panel("", scale, &per_model, &models, &strokes, o);
    let title = format!("PGA z per layer (final checkpoint, {v})");
    let mut p = plot(o, &title, 1, vec![Panel::Lines(panel)]);
    (p.legend_title, p.legend) = model_key(&models, &strokes, [band_entry(o)]);
    p.footnote = footnote(vec![
        size_note(&models, o),
        nonfinite_note(count_nonfinite(&used)),
    ]);
    let caption = format!(
        "Subspace PGA z (readout top-k subspace vs random subspaces, {v}) per layer at each model's final \
         checkpoint; x is relative depth layer/(L−1). {}. The shaded band marks |z| < {}; {} y scale.",
        size_note(&models, o),
        crate::plot::tick_label(o.z_band),
        if scale == Scale::SymLog {
            "symmetric-log"
        } else {
            "linear"
        }
    );
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}
