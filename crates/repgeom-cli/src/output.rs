//! Where result tables go: `--format` and `--out`, printed or written atomically; the
//! formatting itself is the report crate's [`CellTable`], the workspace's one table formatter.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
pub(crate) use repgeom_report::{Cell, CellFormat, CellTable, Row, tidy_cells};

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

impl From<Format> for CellFormat {
    fn from(f: Format) -> Self {
        match f {
            Format::Table => CellFormat::Text,
            Format::Json => CellFormat::JsonLines,
            Format::Csv => CellFormat::Csv,
        }
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
    pub(crate) fn emit(&self, table: &CellTable) -> anyhow::Result<()> {
        emit(table, self.format, self.out.as_deref())
    }
}

pub(crate) fn emit(
    table: &CellTable,
    format: Option<Format>,
    out: Option<&Path>,
) -> anyhow::Result<()> {
    match out {
        None => {
            let text = table.render(format.unwrap_or(Format::Table).into());
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
            let text = table.render(format.into());
            repgeom_io::atomic_write(path, |w| w.write_all(text.as_bytes()))
                .with_context(|| format!("writing {}", path.display()))
        }
    }
}

/// A registry value as a row of the report's tidy schema ([`Row`]), its extras included, for
/// [`repgeom_report::tidy_cells`] ([`repgeom_study::value_row`], the mapping the study's
/// cross rows share). The command-line tables print neither `n_layers` (here only a bound on
/// `layer`: the highest layer read + 1) nor the depth or family derived from it.
pub(crate) fn metric_row(
    model: &str,
    d: usize,
    (layer, n_layers): (usize, usize),
    v: repgeom_metrics::MetricValue,
) -> Row {
    repgeom_study::value_row(model, "", d as u32, (layer as u32, n_layers as u32), v)
}

/// The `n_layers` of [`metric_row`] for a file's layers: the highest layer read + 1.
pub(crate) fn layer_bound(acts: &repgeom_io::Activations) -> usize {
    acts.layers.iter().map(|l| l.layer + 1).max().unwrap_or(1)
}

/// Column names from fixed strings.
pub(crate) fn names(columns: &[&'static str]) -> Vec<Cow<'static, str>> {
    columns.iter().map(|c| Cow::Borrowed(*c)).collect()
}
