//! The tidy long results table: the row schema ([`Row`], [`Column`]) and [`ResultsTable`] with
//! its in-memory operations. The file formats live in `formats` (CSV and Parquet through polars,
//! the format dispatch) and `json`; the plain-text table of rows in `text`, drawn by the one
//! table formatter, [`CellTable`] in `cells`.

use std::collections::{BTreeMap, BTreeSet};

use polars::prelude::DataType;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

mod cells;
mod formats;
mod json;
mod text;

pub use cells::{Align, Cell, CellFormat, CellTable};
pub use formats::TableFormat;
pub use text::{format_number, format_table, tidy_cells};

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
    #[serde(with = "json::float")]
    pub value: f64,
    /// Mean of the null distribution, if the metric has one.
    #[serde(with = "json::float::opt")]
    pub null_mean: Option<f64>,
    /// Standard deviation (ddof = 1) of the null distribution, if any.
    #[serde(with = "json::float::opt")]
    pub null_std: Option<f64>,
    /// One-sided empirical p-value, if any.
    #[serde(with = "json::float::opt")]
    pub p_value: Option<f64>,
    /// Cross-model rows: the second model, else `""`.
    pub other_model: String,
    /// True when the row was computed from synthetic data.
    pub synthetic: bool,
    /// Further named numbers reported with the value (e.g. `k`, `n_null`, `rho_readout` beside
    /// a `pga_z` from `repgeom metrics`; `other_layer` of a `repgeom compare` row). In files they
    /// are columns after the schema's, sorted by name, empty where a row lacks one; reading a
    /// file turns every numeric column outside the schema into one. The study's tables carry one,
    /// `other_layer`, on the cells of its `cross_table` units (figure 10).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        with = "json::float::map"
    )]
    pub extra: BTreeMap<String, f64>,
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
            extra: BTreeMap::new(),
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

    /// Adds (or replaces) the extra number `name`.
    pub fn with_extra(mut self, name: impl Into<String>, value: f64) -> Self {
        self.extra.insert(name.into(), value);
        self
    }

    /// What identifies a row: model, checkpoint, step, layer, metric, variant, other model and,
    /// for a cell of a layer × layer table, the other model's layer (extra `other_layer`).
    fn key(&self) -> (&str, &str, Option<u64>, u32, &str, &str, &str, Option<u64>) {
        (
            &self.model,
            &self.checkpoint,
            self.step,
            self.layer,
            &self.metric,
            &self.variant,
            &self.other_model,
            self.extra.get("other_layer").map(|v| v.to_bits()),
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
        for name in self.extra.keys() {
            if name.is_empty() || Column::from_name(name).is_ok() {
                return Err(self.invalid(format!(
                    "extra column {name:?} is empty or a schema column's name"
                )));
            }
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

    /// The column's type in data frames and files.
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

    /// The names of the extra numbers any row has, sorted (the columns after the schema's).
    pub fn extra_columns(&self) -> BTreeSet<&str> {
        extra_names(&self.rows)
    }
}

/// The extra names any of `rows` has, sorted.
pub(crate) fn extra_names(rows: &[Row]) -> BTreeSet<&str> {
    rows.iter()
        .flat_map(|r| r.extra.keys().map(String::as_str))
        .collect()
}
