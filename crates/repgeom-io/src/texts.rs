//! Texts of a dataset: one string column of a set of parquet files (feature `parquet`).

use std::fs::File;
use std::path::Path;

use polars::prelude::*;

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
        let format = |e: PolarsError| Error::Format {
            file: path.to_path_buf(),
            format: "parquet",
            reason: e.to_string(),
        };
        let open = || {
            File::open(path).map_err(|source| Error::Io {
                file: path.to_path_buf(),
                source,
            })
        };
        let columns: Vec<String> = ParquetReader::new(open()?)
            .schema()
            .map_err(format)?
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
        let df = ParquetReader::new(open()?)
            .with_columns(Some(vec![column.to_string()]))
            .finish()
            .map_err(format)?;
        let col = df.column(column).map_err(format)?;
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

    /// Reads `column` of `files`: the texts joined by `|`, or the error with `dir` as `<dir>`.
    fn check(dir: &Path, files: &[&PathBuf], column: &str, want: &str) {
        let got = match read_parquet_texts(files, column) {
            Ok(texts) => texts.join("|"),
            Err(e) => e.to_string().replace(&*dir.to_string_lossy(), "<dir>"),
        };
        assert_eq!(got, want, "{column}");
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
}
