//! Figure 7: cross-model agreement, one row of panels per model pair.

use std::collections::{BTreeMap, BTreeSet};

use plotters::style::RGBColor;

use super::{
    Figure, FigureOptions, count_nonfinite, depth_panel, final_rows, footnote, grid_cols, no_data,
    nonfinite_note, plot,
};
use crate::error::Result;
use crate::plot::{LegendEntry, Panel, Scale, Series, Stroke};
use crate::table::{ResultsTable, Row};

/// Figure 7: cross-model agreement, one row of panels per model pair. The first column is
/// distance agreement (Spearman of pairwise distances) in the full space, the readout subspace
/// and random subspaces (± null std); every other pair metric in the table (mutual kNN, CKA,
/// ...) gets a column of its own, its value per variant beside its null (mean ± 1 sd) where it
/// has one.
pub fn fig7_cross_model(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig7_cross_model";
    let rows: Vec<&Row> = table
        .rows()
        .iter()
        .filter(|r| !r.other_model.is_empty() && !super::fig10_layer_heatmaps::is_cell(r))
        .collect();
    if rows.is_empty() {
        return Err(no_data(
            name,
            "distance_spearman or another pair metric (with other_model)",
            None,
        ));
    }
    // Columns: distance agreement first, then mutual kNN, CKNNA and CKA (the field's usual
    // companions), then any other pair metric by name.
    let rank = |m: &str| match m {
        "distance_spearman" => 0,
        "mutual_knn" => 1,
        "cknna" => 2,
        "cka_linear" => 3,
        _ => 4,
    };
    let mut metrics: Vec<&str> = rows
        .iter()
        .map(|r| r.metric.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    metrics.sort_by_key(|m| (rank(m), *m));
    // Rows of panels in order of width (the first model's d, then the other's; names break
    // ties), not by name: "pythia-1b" would otherwise sort before "pythia-160m".
    let width_of: BTreeMap<&str, u32> = table
        .rows()
        .iter()
        .map(|r| (r.model.as_str(), r.d))
        .collect();
    let d_of = |m: &str| width_of.get(m).copied().unwrap_or(u32::MAX);
    let mut pairs: BTreeMap<(u32, u32, String, String), Vec<&Row>> = BTreeMap::new();
    for r in &rows {
        pairs
            .entry((
                r.d,
                d_of(&r.other_model),
                r.model.clone(),
                r.other_model.clone(),
            ))
            .or_default()
            .push(r);
    }
    let kinds = [
        ("full", "full space", RGBColor(110, 110, 110)),
        ("readout", "readout subspace", RGBColor(200, 30, 30)),
        ("random", "random subspaces (± 1 sd)", RGBColor(0, 100, 180)),
    ];
    let has_distance = metrics.contains(&"distance_spearman");
    let mut panels = Vec::new();
    for ((_, _, a, b), prs) in &pairs {
        let fin = final_rows(prs);
        let fr: Vec<&Row> = fin.values().flatten().copied().collect();
        for metric in &metrics {
            let mr: Vec<&Row> = fr.iter().filter(|r| r.metric == *metric).copied().collect();
            let mut panel = if *metric == "distance_spearman" {
                depth_panel(
                    &format!("{a} vs {b}"),
                    "distance Spearman ρ",
                    Scale::Linear,
                    distance_series(&mr, &kinds),
                )
            } else {
                // The row's first panel names the pair; the others name their metric.
                let title = if has_distance {
                    pair_metric_label(metric).to_owned()
                } else {
                    format!("{a} vs {b}: {}", pair_metric_label(metric))
                };
                let mut p = depth_panel(
                    &title,
                    pair_metric_label(metric),
                    Scale::Linear,
                    pair_metric_series(&mr),
                );
                p.inline_legend = p.series.len() > 1;
                // Similarities bounded in [0, 1] on their whole range, so a value near its null
                // looks near it.
                if matches!(*metric, "mutual_knn" | "cka_linear" | "svcca" | "pwcca") {
                    p.y_range = Some((0.0, 1.0));
                }
                p
            };
            if panel.series.iter().all(|s| s.points.len() <= 1) {
                panel.x_range = None;
            }
            panels.push(Panel::Lines(panel));
        }
    }
    let n_pairs = pairs.len();
    let cols = if metrics.len() == 1 {
        grid_cols(panels.len())
    } else {
        metrics.len()
    };
    let title = if metrics == ["distance_spearman"] {
        "Cross-model agreement of pairwise distances"
    } else {
        "Cross-model agreement"
    };
    let mut p = plot(o, title, cols, panels);
    if has_distance {
        p.legend_title = "space".to_owned();
        p.legend = kinds
            .iter()
            .map(|(_, label, color)| LegendEntry::line((*label).to_owned(), Stroke::solid(*color)))
            .collect();
    }
    p.footnote = footnote(vec![nonfinite_note(count_nonfinite(&rows))]);
    let others: Vec<&str> = metrics
        .iter()
        .filter(|m| **m != "distance_spearman")
        .map(|m| pair_metric_label(m))
        .collect();
    let mut caption = String::new();
    if has_distance {
        caption.push_str(
            "Spearman correlation between two models' pairwise distances on the same inputs, per \
             layer (relative depth of the first model), in the full space, in each model's readout \
             subspace, and in random subspaces (mean ± 1 sd)",
        );
    }
    if !others.is_empty() {
        caption.push_str(if has_distance {
            "; beside it, "
        } else {
            "Per layer (relative depth of the first model), "
        });
        caption.push_str(&others.join(", "));
        caption.push_str(" with each metric's null (mean ± 1 sd) where it has one");
    }
    caption.push_str(&format!("; {n_pairs} model pair(s)."));
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}

/// Distance agreement by space; without explicit `random` rows, the readout rows' null.
fn distance_series(fr: &[&Row], kinds: &[(&str, &str, RGBColor); 3]) -> Vec<Series> {
    let mut series = Vec::new();
    for &(v, label, color) in kinds {
        let mut s = Series::new(label.to_owned(), Stroke::solid(color), Vec::new());
        let direct: Vec<&&Row> = fr.iter().filter(|r| r.variant == v).collect();
        if !direct.is_empty() {
            for r in direct {
                s.points.push((r.relative_depth, r.value));
                if v == "random" {
                    s.yerr.push(r.null_std.unwrap_or(0.0));
                }
            }
        } else if v == "random" {
            for r in fr.iter().filter(|r| r.variant == "readout") {
                if let Some(m) = r.null_mean {
                    s.points.push((r.relative_depth, m));
                    s.yerr.push(r.null_std.unwrap_or(0.0));
                }
            }
        }
        if v == "random" && s.yerr.iter().all(|e| *e == 0.0) {
            s.yerr.clear();
        }
        series.push(s);
    }
    series
}

/// A pair metric's axis label.
fn pair_metric_label(metric: &str) -> &str {
    match metric {
        "mutual_knn" => "mutual kNN alignment",
        "cknna" => "CKNNA",
        "cka_linear" => "linear CKA",
        "svcca" => "SVCCA",
        "pwcca" => "PWCCA",
        "procrustes" => "Procrustes distance",
        "rsa" => "RSA (Spearman of RDMs)",
        other => other,
    }
}

/// One series per variant of a pair metric (black, then the palette), and one of its null
/// (mean ± 1 sd, blue) where its rows carry one.
fn pair_metric_series(rows: &[&Row]) -> Vec<Series> {
    let variants: BTreeSet<&str> = rows.iter().map(|r| r.variant.as_str()).collect();
    let colors = [
        RGBColor(30, 30, 30),
        RGBColor(200, 30, 30),
        RGBColor(0, 158, 115),
        RGBColor(230, 120, 0),
    ];
    let mut series = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        let of: Vec<&&Row> = rows.iter().filter(|r| r.variant == *v).collect();
        series.push(Series::new(
            if v.is_empty() {
                "value".to_owned()
            } else {
                (*v).to_owned()
            },
            Stroke::solid(colors[i % colors.len()]),
            of.iter().map(|r| (r.relative_depth, r.value)).collect(),
        ));
        let null: Vec<&&&Row> = of.iter().filter(|r| r.null_mean.is_some()).collect();
        if !null.is_empty() {
            series.push(Series {
                label: if variants.len() == 1 {
                    "null (± 1 sd)".to_owned()
                } else {
                    format!("{v} null (± 1 sd)")
                },
                stroke: Stroke::solid(RGBColor(0, 100, 180)),
                points: null
                    .iter()
                    .map(|r| (r.relative_depth, r.null_mean.unwrap_or(f64::NAN)))
                    .collect(),
                yerr: null.iter().map(|r| r.null_std.unwrap_or(0.0)).collect(),
            });
        }
    }
    series
}
