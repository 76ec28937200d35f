//! The plain-text table: numbers and cells formatted for people.

use std::borrow::Cow;

use polars::prelude::DataType;

use super::cells::{Align, Cell, CellFormat, CellTable};
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

/// An aligned plain-text table of `rows` restricted to `columns` (header, dashes, one line per
/// row; text columns left-aligned, numbers right-aligned), through [`CellTable`].
pub fn format_table(rows: &[Row], columns: &[Column]) -> String {
    CellTable {
        columns: columns.iter().map(|c| Cow::Borrowed(c.name())).collect(),
        rows: rows
            .iter()
            .map(|r| columns.iter().map(|c| Cell::Text(c.cell(r))).collect())
            .collect(),
        align: columns
            .iter()
            .map(|c| {
                if c.right_aligned() {
                    Align::Right
                } else {
                    Align::Left
                }
            })
            .collect(),
        rule: true,
    }
    .render(CellFormat::Text)
}

/// Tidy rows as a [`CellTable`] for the command line: the `leading` columns (schema column names
/// such as `model` and `layer`, or extra names such as `other_layer`), then `metric`, `variant`,
/// `value`, `null_mean`, `null_std`, `p_value`, then every other extra any row has, sorted by
/// name (blank where a row lacks it). Floats show 6 decimals in text (CSV and JSON keep every
/// digit); integer columns and integral extras are integers; missing numbers are blank in text
/// and CSV and `null` in JSON. Rows keep their order.
pub fn tidy_cells(rows: &[Row], leading: &[&str]) -> CellTable {
    use Column as C;
    const TIDY: [Column; 6] = [
        C::Metric,
        C::Variant,
        C::Value,
        C::NullMean,
        C::NullStd,
        C::PValue,
    ];
    let trailing: Vec<&str> = super::extra_names(rows)
        .into_iter()
        .filter(|e| !leading.contains(e))
        .collect();
    let float = |v: Option<f64>| Cell::float(v.unwrap_or(f64::NAN), 6);
    let extra = |r: &Row, name: &str| match r.extra.get(name) {
        Some(&v) if v.fract() == 0.0 && v.abs() < 1e15 => Cell::Int(v as i64),
        v => float(v.copied()),
    };
    let schema_cell = |r: &Row, c: Column| match c {
        C::D => Cell::Int(i64::from(r.d)),
        C::Layer => Cell::Int(i64::from(r.layer)),
        C::NLayers => Cell::Int(i64::from(r.n_layers)),
        C::Step => r.step.map_or(float(None), |s| Cell::Int(s as i64)),
        C::Value => float(Some(r.value)),
        C::NullMean => float(r.null_mean),
        C::NullStd => float(r.null_std),
        C::PValue => float(r.p_value),
        C::RelativeDepth => float(Some(r.relative_depth)),
        other => Cell::Text(other.cell(r)),
    };
    let lead: Vec<Result<Column, &str>> = leading
        .iter()
        .map(|&name| Column::from_name(name).map_err(|_| name))
        .collect();
    let columns = leading
        .iter()
        .map(|&n| Cow::Owned(n.to_owned()))
        .chain(TIDY.iter().map(|c| Cow::Borrowed(c.name())))
        .chain(trailing.iter().map(|&n| Cow::Owned(n.to_owned())))
        .collect();
    let rows = rows
        .iter()
        .map(|r| {
            lead.iter()
                .map(|l| match *l {
                    Ok(c) => schema_cell(r, c),
                    Err(name) => extra(r, name),
                })
                .chain(TIDY.iter().map(|&c| schema_cell(r, c)))
                .chain(trailing.iter().map(|&name| extra(r, name)))
                .collect()
        })
        .collect();
    CellTable::new(columns, rows)
}
