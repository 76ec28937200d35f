//! The plain-text table: numbers and cells formatted for people.

use std::fmt::Write as _;

use polars::prelude::DataType;

use super::{Column, Row};

impl Column {
    fn cell(self, row: &Row) -> String {
        match self {
            Column::Model => row.model.clone(),
            Column::Family => row.family.clone(),
            Column::D => row.d.to_string(),
            Column::Checkpoint => row.checkpoint.clone(),
            Column::Step => row.step.map(|s| s.to_string()).unwrap_or_default(),
            Column::Layer => row.layer.to_string(),
            Column::NLayers => row.n_layers.to_string(),
            Column::RelativeDepth => format!("{:.3}", row.relative_depth),
            Column::Metric => row.metric.clone(),
            Column::Variant => row.variant.clone(),
            Column::Value => format_number(row.value),
            Column::NullMean => row.null_mean.map(format_number).unwrap_or_default(),
            Column::NullStd => row.null_std.map(format_number).unwrap_or_default(),
            Column::PValue => row.p_value.map(format_number).unwrap_or_default(),
            Column::OtherModel => row.other_model.clone(),
            Column::Synthetic => row.synthetic.to_string(),
        }
    }

    fn right_aligned(self) -> bool {
        !matches!(self.dtype(), DataType::String | DataType::Boolean)
    }
}

/// Formats a number for people: 4 decimals in the usual range, scientific outside it.
pub fn format_number(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e5).contains(&a) {
        format!("{v:.3e}")
    } else {
        format!("{v:.4}")
    }
}

/// An aligned plain-text table of `rows` restricted to `columns` (header, dashes, one line per row).
pub fn format_table(rows: &[Row], columns: &[Column]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| columns.iter().map(|c| c.cell(r)).collect())
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(j, c)| {
            cells
                .iter()
                .map(|r| r[j].chars().count())
                .chain([c.name().len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let line = |out: &mut String, items: &[String]| {
        let parts: Vec<String> = items
            .iter()
            .zip(columns)
            .zip(&widths)
            .map(|((s, c), &w)| {
                if c.right_aligned() {
                    format!("{s:>w$}")
                } else {
                    format!("{s:<w$}")
                }
            })
            .collect();
        let _ = writeln!(out, "{}", parts.join("  ").trim_end());
    };
    line(
        &mut out,
        &columns
            .iter()
            .map(|c| c.name().to_owned())
            .collect::<Vec<_>>(),
    );
    line(
        &mut out,
        &widths.iter().map(|&w| "-".repeat(w)).collect::<Vec<_>>(),
    );
    for r in &cells {
        line(&mut out, r);
    }
    out
}
