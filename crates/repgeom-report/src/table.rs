//! The tidy long results table: [`Row`], [`ResultsTable`], file formats and the text formatter.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use polars::prelude::{Column as PlColumn, *};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, polars_err};
use crate::io::atomic_write;

/// One measurement: a metric value for one (model, checkpoint, layer, variant[, other model]).
///
/// Every producer in the workspace emits rows of exactly this shape; figures and summaries read
/// nothing else. See `docs/report.md` for every column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Model name, e.g. `pythia-410m`.
    pub model: String,
    /// Model family, e.g. `pythia`, `olmo`.
    pub family: String,
    /// Hidden width d.
    pub d: u32,
    /// Checkpoint name (`""` if none, e.g. `step143000`).
    pub checkpoint: String,
    /// Training step of the checkpoint, if known.
    pub step: Option<u64>,
    /// Layer index (0 = embedding output, HuggingFace `output_hidden_states` convention).
    pub layer: u32,
    /// Number of layers in the model (hidden-state tensors), for relative depth.
    pub n_layers: u32,
    /// `layer / (n_layers - 1)` (0 when `n_layers == 1`).
    pub relative_depth: f64,
    /// Metric name: `pga_z`, `rho_readout`, `rankme`, `alpha_req`, `isotropy`,
    /// `condition_number`, `pc_readout_share`, `probe_accuracy`, `val_loss`,
    /// `distance_spearman`, `cka_linear`, ...
    pub metric: String,
    /// Variant: `ccr1`, `ccr5`, `ccr10`, `pc1`, `full`, `readout`, `random`, or `""`.
    pub variant: String,
    /// The metric value (may be NaN or infinite; figures skip non-finite points).
    #[serde(with = "json_f64")]
    pub value: f64,
    /// Mean of the null distribution, if the metric has one.
    #[serde(with = "json_opt_f64")]
    pub null_mean: Option<f64>,
    /// Standard deviation (ddof = 1) of the null distribution, if any.
    #[serde(with = "json_opt_f64")]
    pub null_std: Option<f64>,
    /// One-sided empirical p-value, if any.
    #[serde(with = "json_opt_f64")]
    pub p_value: Option<f64>,
    /// Cross-model rows: the second model, else `""`.
    pub other_model: String,
    /// True when the row was computed from synthetic data.
    pub synthetic: bool,
}

impl Row {
    /// A row with the required fields; relative depth is computed, everything optional is empty.
    pub fn new(
        model: impl Into<String>,
        family: impl Into<String>,
        d: u32,
        layer: u32,
        n_layers: u32,
        metric: impl Into<String>,
        variant: impl Into<String>,
        value: f64,
    ) -> Self {
        Self {
            model: model.into(),
            family: family.into(),
            d,
            checkpoint: String::new(),
            step: None,
            layer,
            n_layers,
            relative_depth: relative_depth(layer, n_layers),
            metric: metric.into(),
            variant: variant.into(),
            value,
            null_mean: None,
            null_std: None,
            p_value: None,
            other_model: String::new(),
            synthetic: false,
        }
    }

    /// Sets the checkpoint name and step.
    pub fn with_checkpoint(mut self, checkpoint: impl Into<String>, step: Option<u64>) -> Self {
        self.checkpoint = checkpoint.into();
        self.step = step;
        self
    }

    /// Sets the null distribution summary.
    pub fn with_null(mut self, mean: f64, std: f64, p_value: f64) -> Self {
        self.null_mean = Some(mean);
        self.null_std = Some(std);
        self.p_value = Some(p_value);
        self
    }

    /// Sets the second model of a cross-model row.
    pub fn with_other_model(mut self, other: impl Into<String>) -> Self {
        self.other_model = other.into();
        self
    }

    /// Marks the row as computed from synthetic data (or not).
    pub fn with_synthetic(mut self, synthetic: bool) -> Self {
        self.synthetic = synthetic;
        self
    }

    fn key(&self) -> (&str, &str, Option<u64>, u32, &str, &str, &str) {
        (
            &self.model,
            &self.checkpoint,
            self.step,
            self.layer,
            &self.metric,
            &self.variant,
            &self.other_model,
        )
    }

    fn invalid(&self, problem: impl Into<String>) -> Error {
        Error::InvalidRow {
            model: self.model.clone(),
            metric: self.metric.clone(),
            layer: self.layer,
            problem: problem.into(),
        }
    }

    fn validate(&self) -> Result<()> {
        if self.model.is_empty() {
            return Err(self.invalid("empty model name"));
        }
        if self.metric.is_empty() {
            return Err(self.invalid("empty metric name"));
        }
        if self.n_layers == 0 {
            return Err(self.invalid("n_layers is 0"));
        }
        if self.layer >= self.n_layers {
            return Err(self.invalid(format!(
                "layer {} out of range for n_layers {}",
                self.layer, self.n_layers
            )));
        }
        let expected = relative_depth(self.layer, self.n_layers);
        if !(self.relative_depth - expected).abs().le(&1e-9) {
            return Err(self.invalid(format!(
                "relative_depth {} but layer/(n_layers-1) = {}",
                self.relative_depth, expected
            )));
        }
        Ok(())
    }
}

/// `layer / (n_layers - 1)`, 0 for a single-layer model.
pub fn relative_depth(layer: u32, n_layers: u32) -> f64 {
    if n_layers <= 1 {
        0.0
    } else {
        f64::from(layer) / f64::from(n_layers - 1)
    }
}

/// A validated, canonically sorted set of [`Row`]s.
///
/// Rows are sorted by (model, checkpoint, step, layer, metric, variant, other_model) and that key
/// is unique, so identical input gives byte-identical files whatever order the rows came in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResultsTable {
    rows: Vec<Row>,
}

/// The tidy schema's columns, in file order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[allow(missing_docs)] // each variant is the column of the same name in `Row`
pub enum Column {
    Model,
    Family,
    D,
    Checkpoint,
    Step,
    Layer,
    NLayers,
    RelativeDepth,
    Metric,
    Variant,
    Value,
    NullMean,
    NullStd,
    PValue,
    OtherModel,
    Synthetic,
}

impl Column {
    /// All columns in file order.
    pub const ALL: [Column; 16] = [
        Column::Model,
        Column::Family,
        Column::D,
        Column::Checkpoint,
        Column::Step,
        Column::Layer,
        Column::NLayers,
        Column::RelativeDepth,
        Column::Metric,
        Column::Variant,
        Column::Value,
        Column::NullMean,
        Column::NullStd,
        Column::PValue,
        Column::OtherModel,
        Column::Synthetic,
    ];

    /// The column's name in files and data frames.
    pub fn name(self) -> &'static str {
        match self {
            Column::Model => "model",
            Column::Family => "family",
            Column::D => "d",
            Column::Checkpoint => "checkpoint",
            Column::Step => "step",
            Column::Layer => "layer",
            Column::NLayers => "n_layers",
            Column::RelativeDepth => "relative_depth",
            Column::Metric => "metric",
            Column::Variant => "variant",
            Column::Value => "value",
            Column::NullMean => "null_mean",
            Column::NullStd => "null_std",
            Column::PValue => "p_value",
            Column::OtherModel => "other_model",
            Column::Synthetic => "synthetic",
        }
    }

    /// Looks a column up by its name.
    pub fn from_name(name: &str) -> Result<Column> {
        Column::ALL
            .into_iter()
            .find(|c| c.name() == name)
            .ok_or_else(|| Error::BadColumn {
                column: name.to_owned(),
                problem: format!(
                    "no such column (known: {})",
                    Column::ALL.map(Column::name).join(", ")
                ),
            })
    }

    fn dtype(self) -> DataType {
        match self {
            Column::D | Column::Layer | Column::NLayers => DataType::UInt32,
            Column::Step => DataType::UInt64,
            Column::RelativeDepth
            | Column::Value
            | Column::NullMean
            | Column::NullStd
            | Column::PValue => DataType::Float64,
            Column::Synthetic => DataType::Boolean,
            _ => DataType::String,
        }
    }

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

/// An aligned plain-text table of `rows` restricted to `columns` (header, dashes, one line per row).
pub fn format_table(rows: &[Row], columns: &[Column]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| columns.iter().map(|c| c.cell(r)).collect())
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(j, c)| {
            cells
                .iter()
                .map(|r| r[j].chars().count())
                .chain([c.name().len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let line = |out: &mut String, items: &[String]| {
        let parts: Vec<String> = items
            .iter()
            .zip(columns)
            .zip(&widths)
            .map(|((s, c), &w)| {
                if c.right_aligned() {
                    format!("{s:>w$}")
                } else {
                    format!("{s:<w$}")
                }
            })
            .collect();
        let _ = writeln!(out, "{}", parts.join("  ").trim_end());
    };
    line(
        &mut out,
        &columns
            .iter()
            .map(|c| c.name().to_owned())
            .collect::<Vec<_>>(),
    );
    line(
        &mut out,
        &widths.iter().map(|&w| "-".repeat(w)).collect::<Vec<_>>(),
    );
    for r in &cells {
        line(&mut out, r);
    }
    out
}

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
    /// Validates the rows (names non-empty, layer < n_layers, relative depth consistent, unique
    /// keys) and sorts them canonically.
    pub fn new(mut rows: Vec<Row>) -> Result<Self> {
        for r in &rows {
            r.validate()?;
        }
        rows.sort_by(|a, b| a.key().cmp(&b.key()));
        for w in rows.windows(2) {
            if w[0].key() == w[1].key() {
                let r = &w[1];
                return Err(Error::DuplicateRow {
                    model: r.model.clone(),
                    checkpoint: r.checkpoint.clone(),
                    layer: r.layer,
                    metric: r.metric.clone(),
                    variant: r.variant.clone(),
                    other_model: r.other_model.clone(),
                });
            }
        }
        Ok(Self { rows })
    }

    /// The rows, canonically sorted.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Takes the rows out.
    pub fn into_rows(self) -> Vec<Row> {
        self.rows
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// True when any row is marked synthetic.
    pub fn any_synthetic(&self) -> bool {
        self.rows.iter().any(|r| r.synthetic)
    }

    /// The union of two tables (duplicate keys are an error).
    pub fn merge(self, other: ResultsTable) -> Result<Self> {
        let mut rows = self.rows;
        rows.extend(other.rows);
        Self::new(rows)
    }

    /// The distinct metric names present.
    pub fn metrics(&self) -> BTreeSet<&str> {
        self.rows.iter().map(|r| r.metric.as_str()).collect()
    }

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
        DataFrame::new(rs.len(), columns).map_err(polars_err("building data frame"))
    }

    /// Reads rows from a data frame. Required columns: model, d, layer, n_layers, metric, value.
    /// Missing optional columns take their empty defaults (relative_depth is computed).
    pub fn from_dataframe(df: &DataFrame) -> Result<Self> {
        let n = df.height();
        let strs = |c: self::Column, required: bool| -> Result<Vec<String>> {
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
        let u32s = |c: self::Column| -> Result<Vec<u32>> {
            let col = get(df, c, true)?.unwrap_or_else(|| unreachable_col(c));
            let ca = col.u32().map_err(polars_err(c.name()))?;
            ca.iter().map(|v| v.ok_or_else(|| null_in(c))).collect()
        };
        let f64s = |c: self::Column, required: bool| -> Result<Option<Vec<Option<f64>>>> {
            Ok(match get(df, c, required)? {
                None => None,
                Some(col) => Some(col.f64().map_err(polars_err(c.name()))?.iter().collect()),
            })
        };
        use self::Column as C;
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

    /// Writes a pretty-printed JSON array of rows atomically.
    pub fn write_json(&self, path: &Path) -> Result<()> {
        let mut buf = serde_json::to_vec_pretty(&self.rows).map_err(|source| Error::Json {
            path: path.to_owned(),
            source,
        })?;
        buf.push(b'\n');
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
        let io = |op| {
            let path: PathBuf = path.to_owned();
            move |source| Error::Io { op, path, source }
        };
        match TableFormat::from_path(path)? {
            TableFormat::Json => {
                let bytes = std::fs::read(path).map_err(io("read"))?;
                let rows: Vec<Row> =
                    serde_json::from_slice(&bytes).map_err(|source| Error::Json {
                        path: path.to_owned(),
                        source,
                    })?;
                Self::new(rows)
            }
            TableFormat::Parquet => {
                let file = std::fs::File::open(path).map_err(io("open"))?;
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
    let file = std::fs::File::open(path).map_err(|source| Error::Io {
        op: "open",
        path: path.to_owned(),
        source,
    })?;
    let mut header = String::new();
    std::io::BufReader::new(file)
        .read_line(&mut header)
        .map_err(|source| Error::Io {
            op: "read",
            path: path.to_owned(),
            source,
        })?;
    let mut schema = Schema::default();
    for name in header.trim_end_matches(['\n', '\r']).split(',') {
        let name = name.trim_matches('"');
        if let Ok(c) = self::Column::from_name(name) {
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
        let target = match self::Column::from_name(name) {
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

fn get(df: &DataFrame, c: self::Column, required: bool) -> Result<Option<polars::prelude::Column>> {
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

fn unreachable_col(c: self::Column) -> polars::prelude::Column {
    // `get(.., required = true)` never returns Ok(None); keep an empty column as a harmless fallback.
    polars::prelude::Column::new_empty(c.name().into(), &c.dtype())
}

fn null_in(c: self::Column) -> Error {
    Error::BadColumn {
        column: c.name().to_owned(),
        problem: "null value in a column that must not have nulls".to_owned(),
    }
}

/// JSON floats: numbers when finite, else the strings "NaN", "inf", "-inf".
mod json_f64 {
    use serde::{Deserialize, Deserializer, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    pub(super) enum Repr {
        Num(f64),
        Str(String),
    }

    pub(super) fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else if v.is_nan() {
            s.serialize_str("NaN")
        } else if *v > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }

    pub(super) fn from_repr<E: serde::de::Error>(r: Repr) -> Result<f64, E> {
        match r {
            Repr::Num(v) => Ok(v),
            Repr::Str(s) => match s.as_str() {
                "NaN" | "nan" => Ok(f64::NAN),
                "inf" | "Infinity" => Ok(f64::INFINITY),
                "-inf" | "-Infinity" => Ok(f64::NEG_INFINITY),
                other => Err(E::custom(format!(
                    "expected a number, found string {other:?}"
                ))),
            },
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        from_repr(Repr::deserialize(d)?)
    }

    pub(super) mod opt {
        use super::Repr;
        use serde::{Deserialize, Deserializer, Serializer};

        pub(in super::super) fn serialize<S: Serializer>(
            v: &Option<f64>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match v {
                None => s.serialize_none(),
                Some(v) => super::serialize(v, s),
            }
        }

        pub(in super::super) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<f64>, D::Error> {
            match Option::<Repr>::deserialize(d)? {
                None => Ok(None),
                Some(r) => super::from_repr(r).map(Some),
            }
        }
    }
}

use json_f64::opt as json_opt_f64;
