//! Figure 5: spectral metrics (RankMe, α-ReQ, isotropy, condition number) per layer beside PGA z.

use super::{
    Figure, FigureOptions, footnote, metric_panel, model_key, models_for, no_data, nonfinite_note,
    pga_z_beside, plot, select, size_note,
};
use crate::error::Result;
use crate::plot::Scale;
use crate::table::ResultsTable;

/// Figure 5: spectral metrics (RankMe, α-ReQ, isotropy, condition number) per layer beside PGA z.
pub fn fig5_spectral_vs_pga(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig5_spectral_vs_pga";
    let metrics = [
        "pga_z",
        "rankme",
        "alpha_req",
        "isotropy",
        "condition_number",
    ];
    let spectral_present = metrics[1..]
        .iter()
        .any(|m| !select(table, m, None).is_empty());
    if !spectral_present {
        return Err(no_data(
            name,
            "rankme/alpha_req/isotropy/condition_number",
            None,
        ));
    }
    let (models, strokes) = models_for(table, &metrics, o);
    let mut used = Vec::new();
    let mut panels = vec![pga_z_beside(table, o, &models, &strokes, &mut used)];
    for (m, title, yl, sc) in [
        ("rankme", "RankMe", "effective rank", Scale::Linear),
        ("alpha_req", "α-ReQ", "eigenspectrum decay α", Scale::Linear),
        ("isotropy", "isotropy", "isotropy (0–1)", Scale::Linear),
        (
            "condition_number",
            "condition number",
            "λmax / λmin (log)",
            Scale::Log10,
        ),
    ] {
        panels.push(metric_panel(
            table, m, None, title, yl, sc, &strokes, &models, &mut used,
        ));
    }
    let n_bad = used
        .iter()
        .filter(|r| !r.value.is_finite() || (r.metric == "condition_number" && r.value <= 0.0))
        .count();
    let mut p = plot(o, "Spectral metrics per layer beside PGA z", 3, panels);
    (p.legend_title, p.legend) = model_key(&models, &strokes, []);
    p.footnote = footnote(vec![size_note(&models, o), nonfinite_note(n_bad)]);
    let v = o.pga_variant.as_str();
    let caption = format!(
        "Per layer at each model's final checkpoint: PGA z ({v}) and the spectral metrics RankMe, α-ReQ, \
         isotropy and condition number (log scale), sharing relative depth on x. {}.",
        size_note(&models, o)
    );
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}
