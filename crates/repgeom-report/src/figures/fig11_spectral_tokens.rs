//! Figure 11: the spectral metrics over every token of the corpus, against the tokens seen.

use super::{
    Figure, FigureOptions, final_rows, footnote, grid_plot, model_infos, model_key, model_series,
    model_strokes, no_data, select,
};
use crate::error::Result;
use crate::plot::{LinePanel, Panel, Scale};
use crate::table::{ResultsTable, Row};

/// The suffix of the metric names of spectral rows over every token of the corpus
/// (`rankme_all_tokens`: a study's `analysis.spectral_tokens`), each row at one convergence
/// checkpoint (extra `n_tokens`; variant [`all_tokens_variant`]), the row over every token
/// with the metric's own variant and extras `tolerance` and `stable_from`. The study writes
/// them and this figure reads them.
pub const ALL_TOKENS: &str = "_all_tokens";

/// The variant of a row over the tokens: the metric's own `variant` over every token
/// (`n_tokens` `None`), else `n1024` or `isoscore_n1024` at a convergence checkpoint, so that
/// every row of the tidy table has its own identity.
///
/// ```
/// use repgeom_report::all_tokens_variant;
/// assert_eq!(all_tokens_variant("", Some(1024)), "n1024");
/// assert_eq!(all_tokens_variant("isoscore", Some(2048)), "isoscore_n2048");
/// assert_eq!(all_tokens_variant("isoscore", None), "isoscore");
/// ```
pub fn all_tokens_variant(variant: &str, n_tokens: Option<u64>) -> String {
    match (n_tokens, variant.is_empty()) {
        (None, _) => variant.to_owned(),
        (Some(n), true) => format!("n{n}"),
        (Some(n), false) => format!("{variant}_n{n}"),
    }
}

/// The metric's own variant of a row over the tokens ([`all_tokens_variant`] undone).
fn base_variant(v: &str) -> &str {
    let is_count = |t: &str| {
        t.strip_prefix('n')
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
    };
    match v.rsplit_once('_') {
        Some((base, t)) if is_count(t) => base,
        _ if is_count(v) => "",
        _ => v,
    }
}

/// Figure 11: each spectral metric's covariance form over the corpus's tokens, relative to its
/// value over every token, against the tokens accumulated (2¹⁰, 2¹¹, … and all), at each
/// model's final checkpoint and deepest analysed hidden state; the band is the convergence
/// tolerance. Drawn only when the table has rows over every token.
pub fn fig11_spectral_tokens(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig11_spectral_tokens";
    let metrics: Vec<(&str, String)> = (o.spectral.iter())
        .map(|m| (m.as_str(), format!("{m}{ALL_TOKENS}")))
        .filter(|(_, m)| !select(table, m, None).is_empty())
        .collect();
    if metrics.is_empty() {
        let first = o.spectral.first().map_or("rankme", String::as_str);
        return Err(no_data(
            name,
            &format!(
                "{first}{ALL_TOKENS} or another spectral metric over every token (a study's analysis.spectral_tokens)"
            ),
            None,
        ));
    }
    let all: Vec<&Row> = (metrics.iter())
        .flat_map(|(_, m)| select(table, m, None))
        .collect();
    let models = model_infos(all.iter().copied());
    let strokes = model_strokes(&models, o);
    let mut tolerance = None;
    let mut panels = Vec::new();
    for (base, metric) in &metrics {
        let rows = select(table, metric, None);
        let fin = final_rows(&rows);
        let mut series = Vec::new();
        for m in &models {
            let Some(rs) = fin.get(&m.model) else {
                continue;
            };
            let Some(deepest) = rs.iter().map(|r| r.layer).max() else {
                continue;
            };
            // The metric's first variant at that layer, by tokens.
            let variant = (rs.iter())
                .find(|r| r.layer == deepest)
                .map(|r| base_variant(&r.variant));
            let mut pts: Vec<(f64, f64)> = (rs.iter())
                .filter(|r| r.layer == deepest && Some(base_variant(&r.variant)) == variant)
                .filter_map(|r| Some((*r.extra.get("n_tokens")?, r.value)))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let Some(&(_, last)) = pts.last() else {
                continue;
            };
            if let Some(t) = (rs.iter())
                .filter(|r| r.layer == deepest)
                .find_map(|r| r.extra.get("tolerance"))
            {
                tolerance = Some(*t);
            }
            let rel = (pts.iter())
                .filter(|(t, v)| t.is_finite() && v.is_finite() && last != 0.0)
                .map(|&(t, v)| (t, v / last))
                .collect();
            series.push(model_series(m, &strokes, rel));
        }
        let mut p = LinePanel::new(
            base,
            "tokens accumulated",
            "value / value over every token",
            Scale::Log10,
            Scale::Linear,
            series,
        );
        p.band = tolerance.map(|t| (1.0 - t, 1.0 + t));
        panels.push(Panel::Lines(p));
    }
    let mut p = grid_plot(
        o,
        "Spectral metrics over every token: convergence with the tokens seen",
        panels,
    );
    (p.legend_title, p.legend) = model_key(&models, &strokes, []);
    let band = tolerance.map_or_else(String::new, |t| {
        format!(
            "shaded: within {}% of the value over every token",
            100.0 * t
        )
    });
    p.footnote = footnote(vec![band]);
    let caption = "Each spectral metric computed from the covariance accumulated over the \
                   corpus's tokens (its covariance form: IsoScore for isotropy), relative to its \
                   value over every token, against the tokens accumulated (2^10, 2^11, … and all), \
                   at each model's final checkpoint and deepest analysed hidden state. The \
                   results table's stable_from is the count after which the value stays within \
                   the tolerance."
        .to_owned();
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}
