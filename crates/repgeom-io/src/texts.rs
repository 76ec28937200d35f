//! Texts and labels of a dataset: one column of a set of parquet files (feature `parquet`).

use std::fs::File;
use std::path::Path;

use polars::prelude::*;

use crate::labels::{LabelFile, from_cells, from_indices};
use crate::{Error, Result};

/// The values of text column `column` in `files`, file after file, rows in file order: the
/// texts of a dataset split whose parquet files `repgeom_hub::Hub::dataset` returned.
///
/// Errors name the file: a column it lacks ([`Error::MissingColumn`], with the columns it
/// has), a column that is not a string column ([`Error::ColumnNotText`], with its dtype), a
/// null value ([`Error::Format`], with its row), or a file that is not parquet.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use polars::prelude::*;
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("test-00000-of-00001.parquet");
/// let mut df = df!("text" => ["a cat", "a dog"], "label" => [0i64, 1])?;
/// ParquetWriter::new(std::fs::File::create(&path)?).finish(&mut df)?;
/// let texts = repgeom_io::read_parquet_texts(&[path.clone()], "text")?;
/// assert_eq!(texts, ["a cat", "a dog"]);
/// let err = repgeom_io::read_parquet_texts(&[path], "label").unwrap_err();
/// assert!(err.to_string().ends_with("column `label` has dtype i64, not text (a string column)"));
/// # Ok(())
/// # }
/// ```
pub fn read_parquet_texts<P: AsRef<Path>>(files: &[P], column: &str) -> Result<Vec<String>> {
    let mut texts = Vec::new();
    for path in files {
        let path = path.as_ref();
        let df = read_column(path, column)?;
        let col = df.column(column).map_err(|e| polars_err(path, e))?;
        let not_text = || Error::ColumnNotText {
            file: path.to_path_buf(),
            column: column.into(),
            dtype: col.dtype().to_string(),
        };
        if col.dtype() != &DataType::String {
            return Err(not_text());
        }
        let strings = col.str().map_err(|_| not_text())?;
        texts.reserve(strings.len());
        for (row, v) in strings.iter().enumerate() {
            let Some(v) = v else {
                return Err(Error::Format {
                    file: path.to_path_buf(),
                    format: "parquet",
                    reason: format!("column `{column}`: row {row} is null, not a text"),
                });
            };
            texts.push(v.to_string());
        }
    }
    Ok(texts)
}

/// The class labels in column `column` of `files`, file after file, rows in file order: an
/// integer column gives the class indices themselves (non-negative; the `datasets` library's
/// `ClassLabel`, e.g. AG News's `label` 0-3), a string column makes each distinct string a
/// class, numbered in sorted order (as [`crate::read_labels`] does for a CSV column).
///
/// Errors name the file: a missing column (with the columns there are), a column of another
/// dtype ([`Error::ColumnNotLabels`]), a null or negative value (with its row).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use polars::prelude::*;
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("test-00000-of-00001.parquet");
/// let mut df = df!("text" => ["a cat", "a dog"], "label" => [3i64, 1], "score" => [0.5, 1.0])?;
/// ParquetWriter::new(std::fs::File::create(&path)?).finish(&mut df)?;
/// assert_eq!(repgeom_io::read_parquet_labels(&[path.clone()], "label")?.values, [3, 1]);
/// let words = repgeom_io::read_parquet_labels(&[path.clone()], "text")?;
/// assert_eq!((words.values, words.class_names), (vec![0, 1], vec!["a cat".into(), "a dog".into()]));
/// let err = repgeom_io::read_parquet_labels(&[path], "score").unwrap_err();
/// assert!(err.to_string().ends_with("column `score` has dtype f64, not class labels (an integer or string column)"));
/// # Ok(())
/// # }
/// ```
pub fn read_parquet_labels<P: AsRef<Path>>(files: &[P], column: &str) -> Result<LabelFile> {
    let mut cells: Vec<String> = Vec::new();
    let mut indices: Vec<usize> = Vec::new();
    let mut first: Option<&Path> = None;
    for path in files {
        let path = path.as_ref();
        first.get_or_insert(path);
        let df = read_column(path, column)?;
        let col = df.column(column).map_err(|e| polars_err(path, e))?;
        let null = |row: usize| Error::Format {
            file: path.to_path_buf(),
            format: "parquet",
            reason: format!("column `{column}`: row {row} is null, not a label"),
        };
        let dtype = col.dtype().clone();
        if dtype.is_integer() {
            let ints = col
                .cast(&DataType::Int64)
                .map_err(|e| polars_err(path, e))?;
            for (row, v) in ints
                .i64()
                .map_err(|e| polars_err(path, e))?
                .iter()
                .enumerate()
            {
                let v = v.ok_or_else(|| null(row))?;
                indices.push(usize::try_from(v).map_err(|_| Error::Format {
                    file: path.to_path_buf(),
                    format: "parquet",
                    reason: format!(
                        "column `{column}`: row {row} is {v}, not a non-negative class index"
                    ),
                })?);
            }
        } else if dtype == DataType::String {
            for (row, v) in col
                .str()
                .map_err(|e| polars_err(path, e))?
                .iter()
                .enumerate()
            {
                cells.push(v.ok_or_else(|| null(row))?.trim().to_string());
            }
        } else {
            return Err(Error::ColumnNotLabels {
                file: path.to_path_buf(),
                column: column.into(),
                dtype: dtype.to_string(),
            });
        }
        if !indices.is_empty() && !cells.is_empty() {
            return Err(Error::Format {
                file: path.to_path_buf(),
                format: "parquet",
                reason: format!(
                    "column `{column}` holds integers in one file and strings in another"
                ),
            });
        }
    }
    let path = first.unwrap_or(Path::new("(no files)"));
    if cells.is_empty() {
        from_indices(path, indices)
    } else {
        from_cells(path, cells)
    }
}

fn polars_err(path: &Path, e: PolarsError) -> Error {
    Error::Format {
        file: path.to_path_buf(),
        format: "parquet",
        reason: e.to_string(),
    }
}

/// Column `column` of parquet file `path` (read alone), or the error naming the columns it has.
fn read_column(path: &Path, column: &str) -> Result<DataFrame> {
    let open = || {
        File::open(path).map_err(|source| Error::Io {
            file: path.to_path_buf(),
            source,
        })
    };
    let columns: Vec<String> = ParquetReader::new(open()?)
        .schema()
        .map_err(|e| polars_err(path, e))?
        .iter_names()
        .map(|n| n.to_string())
        .collect();
    if !columns.iter().any(|c| c == column) {
        return Err(Error::MissingColumn {
            file: path.to_path_buf(),
            column: column.into(),
            columns,
        });
    }
    ParquetReader::new(open()?)
        .with_columns(Some(vec![column.to_string()]))
        .finish()
        .map_err(|e| polars_err(path, e))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// Writes `df` as parquet file `name` in `dir`.
    fn write(dir: &Path, name: &str, mut df: DataFrame) -> PathBuf {
        let path = dir.join(name);
        ParquetWriter::new(File::create(&path).unwrap())
            .finish(&mut df)
            .unwrap();
        path
    }

    /// `got` as `show` writes it, or its error with `dir` as `<dir>`, against `want`.
    fn check_read<T>(dir: &Path, got: Result<T>, show: impl Fn(T) -> String, want: &str) {
        let got = match got {
            Ok(v) => show(v),
            Err(e) => e.to_string().replace(&*dir.to_string_lossy(), "<dir>"),
        };
        assert_eq!(got, want);
    }

    /// Reads `column` of `files`: the texts joined by `|`, or the error.
    fn check(dir: &Path, files: &[&PathBuf], column: &str, want: &str) {
        check_read(
            dir,
            read_parquet_texts(files, column),
            |t| t.join("|"),
            want,
        );
    }

    #[test]
    fn a_text_column_of_several_files_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let a = write(
            d,
            "train-00000-of-00002.parquet",
            df!("text" => ["one", "", "three"], "label" => [1i64, 2, 3]).unwrap(),
        );
        let b = write(
            d,
            "train-00001-of-00002.parquet",
            df!("text" => ["four"], "label" => [4i64]).unwrap(),
        );
        let nulls = write(
            d,
            "nulls.parquet",
            df!("text" => [Some("x"), None]).unwrap(),
        );
        let bytes = write(
            d,
            "bytes.parquet",
            df!("text" => [b"ab".as_slice()]).unwrap(),
        );
        let junk = d.join("junk.parquet");
        std::fs::write(&junk, b"not parquet").unwrap();
        check(d, &[&a, &b], "text", "one||three|four");
        check(d, &[&b, &a], "text", "four|one||three");
        check(d, &[], "text", "");
        check(
            d,
            &[&a],
            "content",
            "<dir>/train-00000-of-00002.parquet: no column `content`; its columns are \
             [\"text\", \"label\"]",
        );
        check(
            d,
            &[&a],
            "label",
            "<dir>/train-00000-of-00002.parquet: column `label` has dtype i64, not text \
             (a string column)",
        );
        check(
            d,
            &[&bytes],
            "text",
            "<dir>/bytes.parquet: column `text` has dtype binary, not text (a string column)",
        );
        check(
            d,
            &[&a, &nulls],
            "text",
            "<dir>/nulls.parquet: invalid parquet file: column `text`: row 1 is null, not a text",
        );
        let got = read_parquet_texts(&[&junk], "text").unwrap_err();
        assert!(
            matches!(
                got,
                Error::Format {
                    format: "parquet",
                    ..
                }
            ),
            "{got}"
        );
        let missing = d.join("missing.parquet");
        let got = read_parquet_texts(&[&missing], "text").unwrap_err();
        assert!(matches!(got, Error::Io { .. }), "{got}");
    }

    /// Reads label `column` of `files`: `values / class names`, or the error.
    fn check_labels(dir: &Path, files: &[&PathBuf], column: &str, want: &str) {
        let show = |l: LabelFile| format!("{:?} / {:?}", l.values, l.class_names);
        check_read(dir, read_parquet_labels(files, column), show, want);
    }

    #[test]
    fn a_label_column_of_integers_or_strings() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let a = write(
            d,
            "test-00000-of-00002.parquet",
            df!("label" => [2i64, 0], "topic" => ["sport", "world"], "x" => [0.5f64, 1.0]).unwrap(),
        );
        let b = write(
            d,
            "test-00001-of-00002.parquet",
            df!("label" => [1i32], "topic" => ["business"], "x" => [2.0f64]).unwrap(),
        );
        let neg = write(d, "neg.parquet", df!("label" => [1i64, -1]).unwrap());
        let words = write(d, "words.parquet", df!("label" => ["a"]).unwrap());
        check_labels(d, &[&a, &b], "label", r#"[2, 0, 1] / ["0", "1", "2"]"#);
        check_labels(
            d,
            &[&a, &b],
            "topic",
            r#"[1, 2, 0] / ["business", "sport", "world"]"#,
        );
        check_labels(
            d,
            &[&a],
            "x",
            "<dir>/test-00000-of-00002.parquet: column `x` has dtype f64, not class labels \
             (an integer or string column)",
        );
        check_labels(
            d,
            &[&neg],
            "label",
            "<dir>/neg.parquet: invalid parquet file: column `label`: row 1 is -1, not a \
             non-negative class index",
        );
        check_labels(
            d,
            &[&a, &words],
            "label",
            "<dir>/words.parquet: invalid parquet file: column `label` holds integers in one \
             file and strings in another",
        );
        check_labels(
            d,
            &[&a],
            "class",
            "<dir>/test-00000-of-00002.parquet: no column `class`; its columns are \
             [\"label\", \"topic\", \"x\"]",
        );
    }
}
