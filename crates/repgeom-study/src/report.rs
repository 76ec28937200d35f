//! A sweep directory's report: the merged table, every figure, the summary and `index.html`,
//! drawn from the directory alone (its `plan.json` holds the manifest), so that whoever has
//! the `repgeom` binary can draw what `cargo xtask paper` draws.

use std::path::Path;

use crate::{Error, MergeReport, Result, Study, merge, read_plan};

/// What [`report`] wrote.
#[derive(Debug, Clone)]
pub struct Report {
    /// The files written and the figures skipped (with why).
    pub files: repgeom_report::ReportFiles,
    /// The merge: units planned, and part files of units not in the plan (ignored).
    pub merge: MergeReport,
    /// Rows of the merged table.
    pub rows: usize,
}

/// Merges the sweep directory `work` (every planned unit must be done) and writes its report
/// into `out`: `results.{csv,parquet,json}`, every figure the table has data for, `summary.{md,csv}`
/// and `index.html`. The figure settings come from the manifest in `work/plan.json`.
///
/// ```no_run
/// let r = repgeom_study::report("sweep".as_ref(), "paper".as_ref())?;
/// println!("{} rows, {} files", r.rows, r.files.files.len());
/// # Ok::<(), repgeom_study::Error>(())
/// ```
pub fn report(work: &Path, out: &Path) -> Result<Report> {
    let plan = read_plan(work)?;
    let study = Study::new(plan.manifest, &plan.origin)?;
    let (table, merge) = merge(work)?;
    if !merge.complete() {
        return Err(Error::Incomplete {
            dir: work.to_owned(),
            missing: merge.missing.len(),
            planned: merge.planned,
            first: merge.missing[0].clone(),
        });
    }
    let files = repgeom_report::write_report(out, &table, &crate::figure_options(&study))?;
    Ok(Report {
        files,
        merge,
        rows: table.len(),
    })
}

/// The files a check compares: every SVG, the CSV table and the summary (the PNGs, parquet and
/// HTML follow from them).
fn checked_files(dir: &Path) -> Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|source| Error::Io {
            op: "list report",
            path: dir.to_owned(),
            source,
        })?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".svg") || n == "results.csv" || n == "summary.md")
        .collect();
    names.sort();
    Ok(names)
}

/// Draws the report of `work` into a temporary directory and compares it with the one in
/// `committed` (every SVG, `results.csv`, `summary.md`): the names of the files that differ
/// or exist on one side only; empty when `committed` is up to date. Writes nothing into
/// `committed`.
pub fn check_report(work: &Path, committed: &Path) -> Result<Vec<String>> {
    let tmp = tempfile::tempdir().map_err(|source| Error::Io {
        op: "create temporary directory",
        path: std::env::temp_dir(),
        source,
    })?;
    report(work, tmp.path())?;
    let fresh = checked_files(tmp.path())?;
    let old = if committed.is_dir() {
        checked_files(committed)?
    } else {
        Vec::new()
    };
    let mut stale = Vec::new();
    for n in fresh
        .iter()
        .chain(old.iter().filter(|n| !fresh.contains(n)))
    {
        let a = std::fs::read(tmp.path().join(n)).ok();
        let b = std::fs::read(committed.join(n)).ok();
        if a != b {
            stale.push(n.clone());
        }
    }
    Ok(stale)
}
