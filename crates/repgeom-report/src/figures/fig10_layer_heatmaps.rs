//! Figure 10: layer × layer heat maps of each pair metric, one per model pair.

use std::collections::BTreeMap;

use super::{
    Figure, FigureOptions, count_nonfinite, final_rows, footnote, no_data, nonfinite_note, plot,
};
use crate::error::Result;
use crate::plot::{ColorBar, HeatPanel, Panel, Scale};
use crate::table::{ResultsTable, Row};

/// Cells whose p-value against their null is at most this are marked with a dot.
pub const SIGNIFICANT_P: f64 = 0.05;

/// Figure 10: for each model pair and each pair metric (and variant) computed over the whole
/// layer × layer table (rows with `other_model` and an `other_layer` extra, as
/// `repgeom compare` and the study's `cross_table` units write them), a heat map of the value:
/// rows the first model's layers, columns the second's, each labelled with its layer and
/// relative depth; a dot marks a cell whose p-value against its null (the permutation null;
/// random subspaces for `distance_spearman`'s readout variant) is at most [`SIGNIFICANT_P`] (uncorrected: the calibrated aggregate rows are the test over the table).
pub fn fig10_layer_heatmaps(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig10_layer_heatmaps";
    let rows: Vec<&Row> = table.rows().iter().filter(|r| is_cell(r)).collect();
    if rows.is_empty() {
        return Err(no_data(
            name,
            "a pair metric over layer × layer (rows with other_model and other_layer)",
            None,
        ));
    }
    // The second model's number of hidden states: from its own rows, else the table's bound.
    let n_layers_of = |model: &str, seen: u32| -> u32 {
        table
            .rows()
            .iter()
            .filter(|r| r.model == model)
            .map(|r| r.n_layers)
            .max()
            .unwrap_or(seen)
            .max(seen)
    };
    // One row of panels per model pair, one column per metric and variant.
    let mut pair_rows: Vec<Vec<Panel>> = Vec::new();
    let mut vmax = 0.0f64;
    let mut n_marked = 0usize;
    for (_, fin) in final_rows(&rows) {
        // (other model, metric, variant) -> cells
        let mut groups: BTreeMap<(&str, &str, &str), Vec<&Row>> = BTreeMap::new();
        for r in fin {
            groups
                .entry((&r.other_model, &r.metric, &r.variant))
                .or_default()
                .push(r);
        }
        let mut panels = Vec::new();
        let mut current = None;
        for ((other, metric, variant), cells) in groups {
            // A new other model starts a new row of panels.
            if current.is_some_and(|c| c != other) {
                pair_rows.push(std::mem::take(&mut panels));
            }
            current = Some(other);
            let a = cells[0];
            let other_layer = |r: &Row| r.extra.get("other_layer").copied().unwrap_or(0.0) as u32;
            let na = a
                .n_layers
                .max(cells.iter().map(|r| r.layer + 1).max().unwrap_or(1));
            let nb = n_layers_of(
                other,
                cells.iter().map(|r| other_layer(r) + 1).max().unwrap_or(1),
            );
            let mut grid = vec![vec![None; nb as usize]; na as usize];
            let mut marks = vec![vec![false; nb as usize]; na as usize];
            for r in &cells {
                let (i, j) = (r.layer as usize, other_layer(r) as usize);
                grid[i][j] = Some(r.value);
                if r.value.is_finite() {
                    vmax = vmax.max(r.value.abs());
                }
                if r.p_value.is_some_and(|p| p <= SIGNIFICANT_P) {
                    marks[i][j] = true;
                    n_marked += 1;
                }
            }
            // Only the layers the table has: drop rows and columns without any cell.
            let keep_i: Vec<usize> = (0..na as usize)
                .filter(|&i| grid[i].iter().any(Option::is_some))
                .collect();
            let keep_j: Vec<usize> = (0..nb as usize)
                .filter(|&j| grid.iter().any(|row| row[j].is_some()))
                .collect();
            fn pick<T: Copy>(g: &[Vec<T>], keep_i: &[usize], keep_j: &[usize]) -> Vec<Vec<T>> {
                keep_i
                    .iter()
                    .map(|&i| keep_j.iter().map(|&j| g[i][j]).collect())
                    .collect()
            }
            let tick =
                |l: usize, n: u32| format!("{l} ({:.2})", crate::relative_depth(l as u32, n));
            let what = if variant.is_empty() {
                metric.to_owned()
            } else {
                format!("{metric} {variant}")
            };
            panels.push(Panel::Heat(HeatPanel {
                title: what,
                x_label: format!("{other} layer (depth)"),
                y_label: format!("{} layer (depth)", a.model),
                x_ticks: keep_j.iter().map(|&j| tick(j, nb)).collect(),
                y_ticks: keep_i.iter().map(|&i| tick(i, na)).collect(),
                cells: pick(&grid, &keep_i, &keep_j),
                marks: pick(&marks, &keep_i, &keep_j),
            }));
        }
        pair_rows.push(panels);
    }
    // A pair with fewer metrics than the widest row leaves its last columns empty.
    let (n_rows, n_cols) = (
        pair_rows.len(),
        pair_rows.iter().map(Vec::len).max().unwrap_or(1),
    );
    let mut panels = Vec::new();
    for mut row in pair_rows {
        while row.len() < n_cols {
            row.push(Panel::Message {
                title: String::new(),
                message: String::new(),
            });
        }
        panels.extend(row);
    }
    let mut p = plot(
        o,
        "Cross-model similarity over every layer pair",
        n_cols,
        panels,
    );
    // Room for every panel: about 330 × 280 px each, beside the colour bar.
    p.width = p.width.max(n_cols as u32 * 330 + 170);
    p.height = p.height.max(n_rows as u32 * 280 + 140);
    p.colorbar = Some(ColorBar {
        label: "value".to_owned(),
        vmax: if vmax > 0.0 { vmax } else { 1.0 },
        scale: Scale::Linear,
    });
    p.footnote = footnote(vec![
        format!(
            "dot: p <= {SIGNIFICANT_P} against that cell's null alone ({n_marked} cells; uncorrected, see the calibrated aggregates)"
        ),
        nonfinite_note(count_nonfinite(&rows)),
    ]);
    let caption = format!(
        "Each pair metric over every layer of one model (rows of a panel) against every layer of \
         the other (columns), at their final checkpoints: one row of panels per model pair, one \
         panel per metric and variant; ticks give the layer and its relative depth. Colours diverge at 0 and saturate at \
         |value| = {} (similarities; procrustes is a distance, lower = more alike). A dot marks \
         a cell whose one-sided p-value (in the metric's direction; against the permutation \
         null, or for distance_spearman's readout variant against random subspaces) is at most \
         {SIGNIFICANT_P}, uncorrected for the number of cells: the calibrated aggregates (max, \
         hungarian, ...) are the tests over the whole table.",
        crate::plot::tick_label(vmax)
    );
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}

/// A cell of a layer × layer table: a cross-model row with the other model's layer.
pub(crate) fn is_cell(r: &Row) -> bool {
    !r.other_model.is_empty() && r.extra.contains_key("other_layer")
}
