//! The file formats: the format named by a path, conversion to and from a polars `DataFrame`,
//! and CSV and Parquet through polars (JSON is in `json`).

use std::path::Path;

use polars::prelude::{Column as PlColumn, *};

use super::{Column, ResultsTable, Row};
use crate::error::{Error, Result, io_err, polars_err};
use crate::io::atomic_write;

/// The file formats a [`ResultsTable`] reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableFormat {
    /// Comma-separated values with a header.
    Csv,
    /// Apache Parquet.
    Parquet,
    /// A JSON array of row objects (non-finite floats as the strings `"NaN"`, `"inf"`, `"-inf"`).
    Json,
}

impl TableFormat {
    /// The format named by a path's extension.
    pub fn from_path(path: &Path) -> Result<Self> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("csv") => Ok(TableFormat::Csv),
            Some("parquet") | Some("pq") => Ok(TableFormat::Parquet),
            Some("json") => Ok(TableFormat::Json),
            _ => Err(Error::UnknownFormat {
                path: path.to_owned(),
            }),
        }
    }
}

impl ResultsTable {
    /// Converts to a polars `DataFrame` with the schema's columns in file order.
    pub fn to_dataframe(&self) -> Result<DataFrame> {
        let rs = &self.rows;
        let s = |f: fn(&Row) -> &str| rs.iter().map(f).collect::<Vec<&str>>();
        let columns = vec![
            PlColumn::new("model".into(), s(|r| &r.model)),
            PlColumn::new("family".into(), s(|r| &r.family)),
            PlColumn::new("d".into(), rs.iter().map(|r| r.d).collect::<Vec<u32>>()),
            PlColumn::new("checkpoint".into(), s(|r| &r.checkpoint)),
            PlColumn::new(
                "step".into(),
                rs.iter().map(|r| r.step).collect::<Vec<Option<u64>>>(),
            ),
            PlColumn::new(
                "layer".into(),
                rs.iter().map(|r| r.layer).collect::<Vec<u32>>(),
            ),
            PlColumn::new(
                "n_layers".into(),
                rs.iter().map(|r| r.n_layers).collect::<Vec<u32>>(),
            ),
            PlColumn::new(
                "relative_depth".into(),
                rs.iter().map(|r| r.relative_depth).collect::<Vec<f64>>(),
            ),
            PlColumn::new("metric".into(), s(|r| &r.metric)),
            PlColumn::new("variant".into(), s(|r| &r.variant)),
            PlColumn::new(
                "value".into(),
                rs.iter().map(|r| r.value).collect::<Vec<f64>>(),
            ),
            PlColumn::new(
                "null_mean".into(),
                rs.iter().map(|r| r.null_mean).collect::<Vec<Option<f64>>>(),
            ),
            PlColumn::new(
                "null_std".into(),
                rs.iter().map(|r| r.null_std).collect::<Vec<Option<f64>>>(),
            ),
            PlColumn::new(
                "p_value".into(),
                rs.iter().map(|r| r.p_value).collect::<Vec<Option<f64>>>(),
            ),
            PlColumn::new("other_model".into(), s(|r| &r.other_model)),
            PlColumn::new(
                "synthetic".into(),
                rs.iter().map(|r| r.synthetic).collect::<Vec<bool>>(),
            ),
        ];
        let mut columns = columns;
        for name in super::extra_names(rs) {
            columns.push(PlColumn::new(
                name.into(),
                rs.iter()
                    .map(|r| r.extra.get(name).copied())
                    .collect::<Vec<Option<f64>>>(),
            ));
        }
        DataFrame::new(rs.len(), columns).map_err(polars_err("building data frame"))
    }

    /// Reads rows from a data frame. Required columns: model, d, layer, n_layers, metric, value.
    /// Missing optional columns take their empty defaults (relative_depth is computed); every
    /// other numeric column becomes the rows' extra number of that name (other columns are
    /// not read).
    pub fn from_dataframe(df: &DataFrame) -> Result<Self> {
        let n = df.height();
        let strs = |c: Column, required: bool| -> Result<Vec<String>> {
            match get(df, c, required)? {
                None => Ok(vec![String::new(); n]),
                Some(col) => {
                    let ca = col.str().map_err(polars_err(c.name()))?;
                    Ok(ca
                        .iter()
                        .map(|v| v.unwrap_or_default().to_owned())
                        .collect())
                }
            }
        };
        let u32s = |c: Column| -> Result<Vec<u32>> {
            let col = get(df, c, true)?.unwrap_or_else(|| unreachable_col(c));
            let ca = col.u32().map_err(polars_err(c.name()))?;
            ca.iter().map(|v| v.ok_or_else(|| null_in(c))).collect()
        };
        let f64s = |c: Column, required: bool| -> Result<Option<Vec<Option<f64>>>> {
            Ok(match get(df, c, required)? {
                None => None,
                Some(col) => Some(col.f64().map_err(polars_err(c.name()))?.iter().collect()),
            })
        };
        use Column as C;
        let model = strs(C::Model, true)?;
        let family = strs(C::Family, false)?;
        let checkpoint = strs(C::Checkpoint, false)?;
        let metric = strs(C::Metric, true)?;
        let variant = strs(C::Variant, false)?;
        let other_model = strs(C::OtherModel, false)?;
        let d = u32s(C::D)?;
        let layer = u32s(C::Layer)?;
        let n_layers = u32s(C::NLayers)?;
        let step: Vec<Option<u64>> = match get(df, C::Step, false)? {
            None => vec![None; n],
            Some(col) => col.u64().map_err(polars_err("step"))?.iter().collect(),
        };
        let value = f64s(C::Value, true)?.unwrap_or_default();
        let rel = f64s(C::RelativeDepth, false)?;
        let null_mean = f64s(C::NullMean, false)?;
        let null_std = f64s(C::NullStd, false)?;
        let p_value = f64s(C::PValue, false)?;
        let synthetic: Vec<bool> = match get(df, C::Synthetic, false)? {
            None => vec![false; n],
            Some(col) => col
                .bool()
                .map_err(polars_err("synthetic"))?
                .iter()
                .map(|v| v.unwrap_or(false))
                .collect(),
        };
        let mut extras: Vec<(String, Vec<Option<f64>>)> = Vec::new();
        for col in df.columns() {
            let name = col.name().as_str();
            if Column::from_name(name).is_ok() || !(col.dtype().is_primitive_numeric()) {
                continue;
            }
            let values = col
                .cast(&DataType::Float64)
                .map_err(polars_err(name.to_owned()))?;
            let values = values.f64().map_err(polars_err(name.to_owned()))?;
            extras.push((name.to_owned(), values.iter().collect()));
        }
        let mut rows = Vec::with_capacity(n);
        for i in 0..n {
            let value_i = value[i].ok_or_else(|| null_in(C::Value))?;
            let mut row = Row::new(
                model[i].clone(),
                family[i].clone(),
                d[i],
                layer[i],
                n_layers[i],
                metric[i].clone(),
                variant[i].clone(),
                value_i,
            )
            .with_checkpoint(checkpoint[i].clone(), step[i])
            .with_other_model(other_model[i].clone())
            .with_synthetic(synthetic[i]);
            if let Some(rel) = &rel {
                row.relative_depth = rel[i].ok_or_else(|| null_in(C::RelativeDepth))?;
            }
            row.null_mean = null_mean.as_ref().and_then(|v| v[i]);
            row.null_std = null_std.as_ref().and_then(|v| v[i]);
            row.p_value = p_value.as_ref().and_then(|v| v[i]);
            for (name, values) in &extras {
                if let Some(v) = values[i] {
                    row.extra.insert(name.clone(), v);
                }
            }
            rows.push(row);
        }
        Self::new(rows)
    }

    /// Writes CSV (header, schema column order, canonical row order) atomically.
    pub fn write_csv(&self, path: &Path) -> Result<()> {
        let mut df = self.to_dataframe()?;
        let mut buf = Vec::new();
        CsvWriter::new(&mut buf)
            .include_header(true)
            .n_threads(1)
            .finish(&mut df)
            .map_err(polars_err(format!("writing CSV {}", path.display())))?;
        atomic_write(path, &buf)
    }

    /// Writes Parquet (uncompressed-statistics defaults, one row group) atomically.
    pub fn write_parquet(&self, path: &Path) -> Result<()> {
        let mut df = self.to_dataframe()?;
        let mut buf = Vec::new();
        ParquetWriter::new(&mut buf)
            .with_row_group_size(Some(self.rows.len().max(1)))
            .finish(&mut df)
            .map_err(polars_err(format!("writing Parquet {}", path.display())))?;
        atomic_write(path, &buf)
    }

    /// Writes in the format named by the extension (`.csv`, `.parquet`, `.json`).
    pub fn write(&self, path: &Path) -> Result<()> {
        match TableFormat::from_path(path)? {
            TableFormat::Csv => self.write_csv(path),
            TableFormat::Parquet => self.write_parquet(path),
            TableFormat::Json => self.write_json(path),
        }
    }

    /// Reads a table written by [`ResultsTable::write`] (format from the extension).
    pub fn read(path: &Path) -> Result<Self> {
        match TableFormat::from_path(path)? {
            TableFormat::Json => Self::read_json(path),
            TableFormat::Parquet => {
                let file = std::fs::File::open(path).map_err(io_err("open", path))?;
                let df = ParquetReader::new(file)
                    .finish()
                    .map_err(polars_err(format!("reading Parquet {}", path.display())))?;
                Self::from_dataframe(&cast_to_schema(df)?)
            }
            TableFormat::Csv => {
                let overwrite = csv_known_columns(path)?;
                let df = CsvReadOptions::default()
                    .with_has_header(true)
                    .with_infer_schema_length(None)
                    .with_schema_overwrite(Some(std::sync::Arc::new(overwrite)))
                    .try_into_reader_with_file_path(Some(path.to_owned()))
                    .and_then(|r| r.finish())
                    .map_err(polars_err(format!("reading CSV {}", path.display())))?;
                Self::from_dataframe(&cast_to_schema(df)?)
            }
        }
    }
}

/// dtypes for the schema columns present in a CSV file's header line.
fn csv_known_columns(path: &Path) -> Result<Schema> {
    use std::io::BufRead as _;
    let file = std::fs::File::open(path).map_err(io_err("open", path))?;
    let mut header = String::new();
    std::io::BufReader::new(file)
        .read_line(&mut header)
        .map_err(io_err("read", path))?;
    let mut schema = Schema::default();
    for name in header.trim_end_matches(['\n', '\r']).split(',') {
        let name = name.trim_matches('"');
        if let Ok(c) = Column::from_name(name) {
            schema.insert(name.into(), c.dtype());
        }
    }
    Ok(schema)
}

/// Casts every known column to the schema's dtype (files may store `d` as i64, say).
fn cast_to_schema(df: DataFrame) -> Result<DataFrame> {
    let mut cols = Vec::with_capacity(df.width());
    for col in df.columns() {
        let name = col.name().as_str();
        let target = match Column::from_name(name) {
            Ok(c) => c.dtype(),
            Err(_) => {
                cols.push(col.clone());
                continue;
            }
        };
        let cast = if col.dtype() == &DataType::Null
            || col.dtype() == &DataType::String && target != DataType::String
        {
            // an all-empty CSV column is read as String or Null: it holds nulls only
            if col.null_count() == col.len() {
                PlColumn::full_null(col.name().clone(), col.len(), &target)
            } else {
                col.strict_cast(&target)
                    .map_err(polars_err(format!("column {name}")))?
            }
        } else {
            col.strict_cast(&target)
                .map_err(polars_err(format!("column {name}")))?
        };
        cols.push(cast);
    }
    DataFrame::new(df.height(), cols).map_err(polars_err("casting columns"))
}

fn get(df: &DataFrame, c: Column, required: bool) -> Result<Option<PlColumn>> {
    match df.column(c.name()) {
        Ok(col) => {
            let want = c.dtype();
            if col.dtype() == &want {
                Ok(Some(col.clone()))
            } else {
                col.strict_cast(&want)
                    .map(Some)
                    .map_err(|e| Error::BadColumn {
                        column: c.name().to_owned(),
                        problem: format!("expected {want}, found {} ({e})", col.dtype()),
                    })
            }
        }
        Err(_) if !required => Ok(None),
        Err(_) => Err(Error::BadColumn {
            column: c.name().to_owned(),
            problem: "required column missing".to_owned(),
        }),
    }
}

fn unreachable_col(c: Column) -> PlColumn {
    // `get(.., required = true)` never returns Ok(None); keep an empty column as a harmless fallback.
    PlColumn::new_empty(c.name().into(), &c.dtype())
}

fn null_in(c: Column) -> Error {
    Error::BadColumn {
        column: c.name().to_owned(),
        problem: "null value in a column that must not have nulls".to_owned(),
    }
}
