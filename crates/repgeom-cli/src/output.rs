//! Formatting of result tables: aligned text, JSON lines, CSV; written atomically.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// One cell of an output table.
#[derive(Debug, Clone)]
pub(crate) enum Cell {
    Int(i64),
    Float { value: f64, decimals: usize },
    Text(String),
}

impl Cell {
    pub(crate) fn float(value: f64, decimals: usize) -> Self {
        Cell::Float { value, decimals }
    }
    fn display(&self) -> String {
        match self {
            Cell::Int(v) => v.to_string(),
            // Missing values (NaN) show as blanks, as in the CSV and JSON outputs.
            Cell::Float { value, .. } if value.is_nan() => String::new(),
            Cell::Float { value, decimals } => format!("{value:.decimals$}"),
            Cell::Text(s) => s.clone(),
        }
    }
    fn exact(&self) -> String {
        match self {
            Cell::Int(v) => v.to_string(),
            Cell::Float { value, .. } => format_float_exact(*value),
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

/// Shortest round-trip representation (what Rust's `{}` gives for f64).
fn format_float_exact(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        String::new()
    }
}

/// A table with named columns (fixed names borrowed, a metric's extra columns owned).
#[derive(Debug, Clone, Default)]
pub(crate) struct Table {
    pub(crate) columns: Vec<Cow<'static, str>>,
    pub(crate) rows: Vec<Vec<Cell>>,
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    Table,
    Json,
    Csv,
}

impl Format {
    /// The format implied by a file extension.
    pub(crate) fn from_path(path: &Path) -> anyhow::Result<Self> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("json") | Some("jsonl") | Some("ndjson") => Ok(Format::Json),
            Some("csv") => Ok(Format::Csv),
            Some("txt") | Some("tsv") | Some("md") => Ok(Format::Table),
            _ => anyhow::bail!(
                "cannot tell the output format from {}: use .csv, .json (one object per line) or .txt",
                path.display()
            ),
        }
    }
}

impl Table {
    pub(crate) fn render(&self, format: Format) -> String {
        match format {
            Format::Table => self.render_text(),
            Format::Json => self.render_json(),
            Format::Csv => self.render_csv(),
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
                    .map(|r| r[j].len())
                    .chain([c.len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        let line = |items: Vec<&str>, out: &mut String| {
            let parts: Vec<String> = items
                .iter()
                .zip(&widths)
                .map(|(s, w)| format!("{s:>w$}"))
                .collect();
            out.push_str(parts.join("  ").trim_end());
            out.push('\n');
        };
        line(self.columns.iter().map(|c| c.as_ref()).collect(), &mut out);
        for row in &cells {
            line(row.iter().map(String::as_str).collect(), &mut out);
        }
        out
    }

    fn render_json(&self) -> String {
        let mut out = String::new();
        for row in &self.rows {
            let mut obj = serde_json::Map::new();
            for (c, cell) in self.columns.iter().zip(row) {
                obj.insert(c.to_string(), cell.json());
            }
            out.push_str(&serde_json::Value::Object(obj).to_string());
            out.push('\n');
        }
        out
    }

    fn render_csv(&self) -> String {
        let mut out = self.columns.join(",");
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

/// Prints to stdout, or writes atomically to `out` (format from its extension unless given).
/// `--format` and `--out`, the same in every command that writes a table.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct OutputArgs {
    /// Output format (default: table on stdout; with --out, from the file's extension).
    #[arg(long, value_enum)]
    pub(crate) format: Option<Format>,
    /// Write the results to this file (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
}

impl OutputArgs {
    /// Writes `table` as these flags ask ([`emit`]).
    pub(crate) fn emit(&self, table: &Table) -> anyhow::Result<()> {
        emit(table, self.format, self.out.as_deref())
    }
}

pub(crate) fn emit(
    table: &Table,
    format: Option<Format>,
    out: Option<&Path>,
) -> anyhow::Result<()> {
    match out {
        None => {
            let text = table.render(format.unwrap_or(Format::Table));
            #[allow(clippy::print_stdout)] // the CLI's output channel
            {
                print!("{text}");
            }
            Ok(())
        }
        Some(path) => {
            let format = match format {
                Some(f) => f,
                None => Format::from_path(path)?,
            };
            let text = table.render(format);
            repgeom_io::atomic_write(path, |w| w.write_all(text.as_bytes()))
                .with_context(|| format!("writing {}", path.display()))
        }
    }
}

/// The tidy long table of metric values: the `leading` columns (e.g. model, layer), then
/// metric, variant, value, null_mean, null_std, p_value, then every extra column any row has,
/// sorted by name (a row without it leaves it empty). Missing numbers are NaN cells: empty in
/// CSV, null in JSON.
pub(crate) fn metric_table(
    leading: &[&'static str],
    rows: Vec<(Vec<Cell>, repgeom_metrics::MetricValue)>,
) -> Table {
    let extras: std::collections::BTreeSet<String> = rows
        .iter()
        .flat_map(|(_, v)| v.extra.keys().cloned())
        .collect();
    let mut columns = names(leading);
    columns.extend(names(&[
        "metric",
        "variant",
        "value",
        "null_mean",
        "null_std",
        "p_value",
    ]));
    columns.extend(extras.iter().map(|e| Cow::Owned(e.clone())));
    let number = |v: f64| {
        if v.fract() == 0.0 && v.abs() < 1e15 {
            Cell::Int(v as i64)
        } else {
            Cell::float(v, 6)
        }
    };
    let optional = |v: Option<f64>| Cell::float(v.unwrap_or(f64::NAN), 6);
    let rows = rows
        .into_iter()
        .map(|(mut cells, v)| {
            cells.extend([
                Cell::Text(v.metric.clone()),
                Cell::Text(v.variant.clone()),
                Cell::float(v.value, 6),
                optional(v.null_mean),
                optional(v.null_std),
                optional(v.p_value),
            ]);
            cells.extend(extras.iter().map(|e| {
                v.extra
                    .get(e)
                    .map_or(Cell::float(f64::NAN, 6), |x| number(*x))
            }));
            cells
        })
        .collect();
    Table { columns, rows }
}

/// Column names from fixed strings.
pub(crate) fn names(columns: &[&'static str]) -> Vec<Cow<'static, str>> {
    columns.iter().map(|c| Cow::Borrowed(*c)).collect()
}
