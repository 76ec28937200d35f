//! [`CellTable`]: named columns of typed cells, rendered as aligned text, JSON lines or CSV. The
//! one table formatter of the workspace: the CLI's outputs and [`format_table`] of tidy rows both
//! go through it.
//!
//! [`format_table`]: super::format_table

use std::borrow::Cow;
use std::fmt::Write as _;

/// One cell of a [`CellTable`].
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// An integer, printed in full everywhere.
    Int(i64),
    /// A float: `decimals` places in text; the shortest round-trip form in CSV and JSON. NaN is
    /// a missing value: blank in text and CSV, `null` in JSON.
    Float {
        /// The value.
        value: f64,
        /// Decimal places in the text rendering.
        decimals: usize,
    },
    /// Text, printed as is (quoted in CSV where needed).
    Text(String),
}

impl Cell {
    /// A float cell shown with `decimals` places in text.
    pub fn float(value: f64, decimals: usize) -> Self {
        Cell::Float { value, decimals }
    }

    fn display(&self) -> String {
        match self {
            Cell::Int(v) => v.to_string(),
            Cell::Float { value, .. } if value.is_nan() => String::new(),
            Cell::Float { value, decimals } => format!("{value:.decimals$}"),
            Cell::Text(s) => s.clone(),
        }
    }

    fn exact(&self) -> String {
        match self {
            Cell::Int(v) => v.to_string(),
            // Shortest round-trip representation (Rust's `{}` for f64); non-finite → blank.
            Cell::Float { value, .. } if value.is_finite() => format!("{value}"),
            Cell::Float { .. } => String::new(),
            Cell::Text(s) => s.clone(),
        }
    }

    fn json(&self) -> serde_json::Value {
        match self {
            Cell::Int(v) => serde_json::Value::from(*v),
            Cell::Float { value, .. } => serde_json::Number::from_f64(*value)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Cell::Text(s) => serde_json::Value::from(s.clone()),
        }
    }
}

/// How a [`CellTable`] is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellFormat {
    /// Columns padded to a common width, separated by two spaces, header first.
    Text,
    /// One JSON object per row and line, keyed by column name.
    JsonLines,
    /// Comma-separated values with a header; floats in their shortest round-trip form.
    Csv,
}

/// Where a column's cells sit in the text rendering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Align {
    /// Padded on the right.
    Left,
    /// Padded on the left (numbers line up).
    #[default]
    Right,
}

/// A table of named columns (fixed names borrowed, computed ones owned) and rows of cells.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CellTable {
    /// Column names, in order.
    pub columns: Vec<Cow<'static, str>>,
    /// Rows, each with one cell per column.
    pub rows: Vec<Vec<Cell>>,
    /// Text alignment per column; a column without an entry is right-aligned.
    pub align: Vec<Align>,
    /// Draw a line of dashes under the text header.
    pub rule: bool,
}

impl CellTable {
    /// A table of `columns` and `rows`, right-aligned, without a rule.
    pub fn new(columns: Vec<Cow<'static, str>>, rows: Vec<Vec<Cell>>) -> Self {
        Self {
            columns,
            rows,
            align: Vec::new(),
            rule: false,
        }
    }

    /// The table in `format`.
    pub fn render(&self, format: CellFormat) -> String {
        match format {
            CellFormat::Text => self.render_text(),
            CellFormat::JsonLines => self.render_json_lines(),
            CellFormat::Csv => self.render_csv(),
        }
    }

    fn render_text(&self) -> String {
        let cells: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| r.iter().map(Cell::display).collect())
            .collect();
        let widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(j, c)| {
                cells
                    .iter()
                    .map(|r| r[j].chars().count())
                    .chain([c.chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        let mut line = |items: &mut dyn Iterator<Item = &str>| {
            let parts: Vec<String> = items
                .zip(&widths)
                .enumerate()
                .map(
                    |(j, (s, &w))| match self.align.get(j).copied().unwrap_or_default() {
                        Align::Left => format!("{s:<w$}"),
                        Align::Right => format!("{s:>w$}"),
                    },
                )
                .collect();
            let _ = writeln!(out, "{}", parts.join("  ").trim_end());
        };
        line(&mut self.columns.iter().map(|c| c.as_ref()));
        if self.rule {
            let dashes: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
            line(&mut dashes.iter().map(String::as_str));
        }
        for row in &cells {
            line(&mut row.iter().map(String::as_str));
        }
        out
    }

    fn render_json_lines(&self) -> String {
        let mut out = String::new();
        for row in &self.rows {
            let obj: serde_json::Map<String, serde_json::Value> = self
                .columns
                .iter()
                .zip(row)
                .map(|(c, cell)| (c.to_string(), cell.json()))
                .collect();
            out.push_str(&serde_json::Value::Object(obj).to_string());
            out.push('\n');
        }
        out
    }

    fn render_csv(&self) -> String {
        let header: Vec<String> = self.columns.iter().map(|c| csv_escape(c)).collect();
        let mut out = header.join(",");
        out.push('\n');
        for row in &self.rows {
            let parts: Vec<String> = row.iter().map(|c| csv_escape(&c.exact())).collect();
            out.push_str(&parts.join(","));
            out.push('\n');
        }
        out
    }
}

fn csv_escape(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}
