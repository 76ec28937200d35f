//! Class labels for linear probes: `.npy` integer arrays, CSV columns, the AG News CSV.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::path::Path;

use crate::activations::extension;
use crate::{Error, Result, mmap, npy};

/// Integer class labels as read from a file, one per example, and the names of the classes
/// (`repgeom_probe::Labels` is the checked form a probe takes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelFile {
    /// Class index of each example, in `0..class_names.len()`.
    pub values: Vec<usize>,
    /// Name of each class index.
    pub class_names: Vec<String>,
}

/// AG News class names, for class indices 1..4 in the CSV (0..3 here).
pub const AG_NEWS_CLASSES: [&str; 4] = ["World", "Sports", "Business", "Sci/Tech"];

/// Largest class index accepted (guards against a stray huge value allocating names).
const MAX_CLASS: usize = 1 << 20;

/// Reads labels from `.npy` (integer or integral-float 1-D array) or `.csv`.
///
/// CSV: a headerless AG News file (first column `1`..`4`, then title and description) gives
/// values 0..3 named World, Sports, Business, Sci/Tech. Otherwise the first row is a header and
/// `column` names the label column (optional when there is only one column). Non-negative
/// integers are used as class indices (names `"0"`, `"1"`, ...); other strings become classes
/// numbered in sorted order.
pub fn read_labels(path: &Path, column: Option<&str>) -> Result<LabelFile> {
    match extension(path).as_str() {
        "npy" => read_npy(path),
        "csv" => read_csv(path, column),
        _ => Err(Error::UnknownFormat {
            file: path.to_path_buf(),
            expected: ".npy or .csv",
        }),
    }
}

fn fail(path: &Path, reason: String) -> Error {
    Error::Labels {
        file: path.to_path_buf(),
        reason,
    }
}

pub(crate) fn from_indices(path: &Path, values: Vec<usize>) -> Result<LabelFile> {
    let max = values.iter().copied().max();
    if let Some(m) = max
        && m > MAX_CLASS
    {
        return Err(fail(
            path,
            format!("class index {m} is implausibly large (more than {MAX_CLASS})"),
        ));
    }
    let k = max.map_or(0, |m| m + 1);
    Ok(LabelFile {
        values,
        class_names: (0..k).map(|i| i.to_string()).collect(),
    })
}

fn read_npy(path: &Path) -> Result<LabelFile> {
    let map = mmap::map_file(path)?;
    let t = npy::parse(Cow::Borrowed(map.bytes()), path, "labels")?;
    if t.shape.len() != 1 && !(t.shape.len() == 2 && t.shape[1] == 1) {
        return Err(Error::ShapeMismatch {
            file: path.to_path_buf(),
            tensor: "labels".into(),
            expected: "[N] or [N, 1]".into(),
            found: t.shape.clone(),
        });
    }
    let values: Vec<usize> = if t.dtype.is_float() {
        let v = t.to_f64(path)?;
        v.iter()
            .enumerate()
            .map(|(i, &x)| {
                if x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x <= MAX_CLASS as f64 {
                    Ok(x as usize)
                } else {
                    Err(fail(
                        path,
                        format!("label {i} is {x}, not a non-negative integer"),
                    ))
                }
            })
            .collect::<Result<_>>()?
    } else {
        let v = t.to_i128(path)?;
        v.iter()
            .enumerate()
            .map(|(i, &x)| {
                usize::try_from(x).map_err(|_| {
                    fail(
                        path,
                        format!("label {i} is {x}, not a non-negative integer"),
                    )
                })
            })
            .collect::<Result<_>>()?
    };
    from_indices(path, values)
}

fn read_csv(path: &Path, column: Option<&str>) -> Result<LabelFile> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(&bytes[..]);
    let mut rows: Vec<csv::StringRecord> = Vec::new();
    for (i, r) in rdr.records().enumerate() {
        rows.push(r.map_err(|e| fail(path, format!("row {}: {e}", i + 1)))?);
    }
    if rows.is_empty() {
        return Err(fail(path, "the file is empty".into()));
    }
    let ag_class = |r: &csv::StringRecord| {
        r.get(0)
            .and_then(|s| s.trim().parse::<usize>().ok())
            .filter(|c| (1..=4).contains(c))
    };
    if column.is_none() && rows[0].len() >= 3 && ag_class(&rows[0]).is_some() {
        // AG News: no header, class index 1..4 then title and description.
        let mut values = Vec::with_capacity(rows.len());
        for (i, r) in rows.iter().enumerate() {
            let c = ag_class(r).ok_or_else(|| {
                fail(
                    path,
                    format!(
                        "row {}: first column is {:?}, expected an AG News class 1-4",
                        i + 1,
                        r.get(0).unwrap_or("")
                    ),
                )
            })?;
            values.push(c - 1);
        }
        return Ok(LabelFile {
            values,
            class_names: AG_NEWS_CLASSES.iter().map(|s| s.to_string()).collect(),
        });
    }
    let header = &rows[0];
    let names: Vec<&str> = header.iter().collect();
    let col = match column {
        Some(c) => names.iter().position(|h| h.trim() == c).ok_or_else(|| {
            fail(
                path,
                format!(
                    "no column `{c}` in the header (columns: {})",
                    names.join(", ")
                ),
            )
        })?,
        None if names.len() == 1 => 0,
        None => {
            return Err(fail(
                path,
                format!(
                    "several columns ({}): name the label column",
                    names.join(", ")
                ),
            ));
        }
    };
    let mut cells = Vec::with_capacity(rows.len() - 1);
    for (i, r) in rows.iter().enumerate().skip(1) {
        let v = r
            .get(col)
            .ok_or_else(|| fail(path, format!("row {}: no column {}", i + 1, col + 1)))?;
        cells.push(v.trim().to_string());
    }
    from_cells(path, cells)
}

/// Labels from text cells: non-negative integers are class indices, anything else makes every
/// distinct string a class, numbered in sorted order.
pub(crate) fn from_cells(path: &Path, cells: Vec<String>) -> Result<LabelFile> {
    if cells.iter().all(|c| c.parse::<usize>().is_ok()) {
        let values = cells
            .iter()
            .map(|c| c.parse::<usize>().unwrap_or_default())
            .collect();
        return from_indices(path, values);
    }
    let classes: Vec<String> = cells
        .iter()
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let values = cells
        .iter()
        .map(|c| classes.binary_search(c).unwrap_or_default())
        .collect();
    Ok(LabelFile {
        values,
        class_names: classes,
    })
}
