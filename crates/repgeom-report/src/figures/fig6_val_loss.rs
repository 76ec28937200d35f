//! Figure 6: validation loss over training checkpoints, small vs large models.

use std::collections::BTreeMap;

use super::{
    Figure, FigureOptions, ckpt_key, count_nonfinite, footnote, model_infos, model_key,
    model_series, model_strokes, nonfinite_note, plot, select_or_no_data, size_note,
};
use crate::error::Result;
use crate::plot::{LinePanel, Panel, Scale};
use crate::table::ResultsTable;

/// Figure 6: validation loss over training checkpoints, small vs large models.
pub fn fig6_val_loss(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig6_val_loss";
    let rows = select_or_no_data(table, name, "val_loss", None)?;
    let models = model_infos(rows.iter().copied());
    let strokes = model_strokes(&models, o);
    let all_steps = rows.iter().all(|r| r.step.is_some());
    let mut series = Vec::new();
    let mut zero_steps = 0;
    for m in &models {
        // one value per checkpoint: the lowest layer's row (val_loss does not depend on layer)
        let mut per_ckpt: BTreeMap<(u64, &str), f64> = BTreeMap::new();
        for r in rows.iter().filter(|r| r.model == m.model) {
            per_ckpt.entry(ckpt_key(r)).or_insert(r.value);
        }
        let points: Vec<(f64, f64)> = per_ckpt
            .iter()
            .enumerate()
            .map(|(i, (&(s, _), &v))| (if all_steps { s as f64 } else { i as f64 }, v))
            .collect();
        zero_steps += points.iter().filter(|q| q.0 <= 0.0).count();
        series.push(model_series(m, &strokes, points));
    }
    let pos: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|q| q.0))
        .filter(|&x| x > 0.0)
        .collect();
    let (lo, hi) = (
        pos.iter().copied().fold(f64::INFINITY, f64::min),
        pos.iter().copied().fold(0.0, f64::max),
    );
    let log_x = all_steps && !pos.is_empty() && hi / lo >= 100.0;
    let x_label = if !all_steps {
        "checkpoint (index, oldest first)"
    } else if log_x {
        "training step (log)"
    } else {
        "training step"
    };
    let panel = LinePanel::new(
        "",
        x_label,
        "validation loss (nats/token)",
        if log_x { Scale::Log10 } else { Scale::Linear },
        Scale::Linear,
        series,
    );
    let mut p = plot(
        o,
        "Validation loss over training",
        1,
        vec![Panel::Lines(panel)],
    );
    (p.legend_title, p.legend) = model_key(&models, &strokes, []);
    p.footnote = footnote(vec![
        size_note(&models, o),
        if log_x && zero_steps > 0 {
            format!("{zero_steps} point(s) at step 0 not shown on the log axis")
        } else {
            String::new()
        },
        nonfinite_note(count_nonfinite(&rows)),
    ]);
    let caption = format!(
        "Validation loss per checkpoint for every model; {}. Small and large models improve alike even where \
         PGA z collapses.",
        size_note(&models, o)
    );
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}
