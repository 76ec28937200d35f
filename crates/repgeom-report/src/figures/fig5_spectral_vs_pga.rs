//! Figure 5: per-layer spectral metrics (by default RankMe, α-ReQ, isotropy, condition number)
//! beside PGA z; the panels are [`FigureOptions::spectral`], any metric in the table.

use super::{
    Figure, FigureOptions, footnote, metric_panel, model_key, models_for, no_data, nonfinite_note,
    pga_z_beside, plot, select, size_note,
};
use crate::error::Result;
use crate::plot::Scale;
use crate::table::ResultsTable;

/// A panel's title, y label and scale: the built-in study's four spectral metrics by their
/// names in the literature, any other metric by its own name on a linear axis.
fn panel_labels(metric: &str) -> (String, String, Scale) {
    let (title, y_label, scale) = match metric {
        "rankme" => ("RankMe", "effective rank", Scale::Linear),
        "alpha_req" => ("α-ReQ", "eigenspectrum decay α", Scale::Linear),
        "isotropy" => ("isotropy", "isotropy (0–1)", Scale::Linear),
        "condition_number" => ("condition number", "λmax / λmin (log)", Scale::Log10),
        other => (other, other, Scale::Linear),
    };
    (title.to_owned(), y_label.to_owned(), scale)
}

/// Figure 5: the metrics of [`FigureOptions::spectral`] per layer beside PGA z.
pub fn fig5_spectral_vs_pga(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig5_spectral_vs_pga";
    let spectral: Vec<&str> = o.spectral.iter().map(String::as_str).collect();
    if !spectral.iter().any(|m| !select(table, m, None).is_empty()) {
        return Err(no_data(name, &spectral.join("/"), None));
    }
    let mut metrics = vec!["pga_z"];
    metrics.extend(&spectral);
    let (models, strokes) = models_for(table, &metrics, o);
    let mut used = Vec::new();
    let mut panels = vec![pga_z_beside(table, o, &models, &strokes, &mut used)];
    let mut log_scaled = Vec::new();
    for &m in &spectral {
        let (title, y_label, scale) = panel_labels(m);
        if scale == Scale::Log10 {
            log_scaled.push(m);
        }
        panels.push(metric_panel(
            table, m, None, &title, &y_label, scale, &strokes, &models, &mut used,
        ));
    }
    let n_bad = used
        .iter()
        .filter(|r| {
            !r.value.is_finite() || (log_scaled.contains(&r.metric.as_str()) && r.value <= 0.0)
        })
        .count();
    let mut p = plot(o, "Spectral metrics per layer beside PGA z", 3, panels);
    (p.legend_title, p.legend) = model_key(&models, &strokes, []);
    p.footnote = footnote(vec![size_note(&models, o), nonfinite_note(n_bad)]);
    let v = o.pga_variant.as_str();
    let caption = format!(
        "Per layer at each model's final checkpoint: PGA z ({v}) and {}, sharing relative depth on x. {}.",
        metric_list(&spectral),
        size_note(&models, o)
    );
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}

/// "the spectral metrics RankMe, α-ReQ, isotropy and condition number (log scale)" for the
/// default panels (the caption the figure always had), else the panels' titles.
fn metric_list(spectral: &[&str]) -> String {
    let names: Vec<String> = spectral
        .iter()
        .map(|m| {
            let (title, _, scale) = panel_labels(m);
            if scale == Scale::Log10 {
                format!("{title} (log scale)")
            } else {
                title
            }
        })
        .collect();
    let joined = match names.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    };
    if spectral == super::DEFAULT_SPECTRAL {
        format!("the spectral metrics {joined}")
    } else {
        format!("the per-layer metrics {joined}")
    }
}
