//! One call that writes a whole report directory.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result, io_err};
use crate::figures::{FigureOptions, all_figures};
use crate::html::index_html_with_notes;
use crate::io::atomic_write;
use crate::summary::summary;
use crate::table::ResultsTable;

/// What [`write_report`] wrote.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReportFiles {
    /// Every file written, in write order.
    pub files: Vec<PathBuf>,
    /// One note per figure that was skipped, with the reason.
    pub skipped: Vec<String>,
}

/// Writes `results.{csv,parquet,json}`, every figure that the table has data for
/// (`<name>.svg`/`.png`), `summary.{md,csv}` and `index.html` into `dir` (created if missing).
///
/// A figure without data is skipped with a note (listed on the page and returned); any other
/// failure is an error.
pub fn write_report(dir: &Path, table: &ResultsTable, opts: &FigureOptions) -> Result<ReportFiles> {
    opts.check()?;
    std::fs::create_dir_all(dir).map_err(io_err("create directory", dir))?;
    let mut out = ReportFiles::default();
    for ext in ["csv", "parquet", "json"] {
        let p = dir.join(format!("results.{ext}"));
        table.write(&p)?;
        out.files.push(p);
    }
    let mut figures = Vec::new();
    for (name, fig) in all_figures(table, opts) {
        match fig {
            Ok(f) => {
                let (svg, png) = f.save(dir)?;
                out.files.extend([svg, png]);
                figures.push(f);
            }
            Err(e @ Error::NoData { .. }) => out.skipped.push(format!("{name} skipped: {e}")),
            Err(e) => return Err(e),
        }
    }
    let s = summary(table);
    let (md, csv) = s.write(dir)?;
    out.files.extend([md, csv]);
    let index = dir.join("index.html");
    atomic_write(
        &index,
        index_html_with_notes(&figures, &s, &out.skipped).as_bytes(),
    )?;
    out.files.push(index);
    Ok(out)
}
