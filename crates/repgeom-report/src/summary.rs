//! The summary: per model, peak and minimum PGA z, the collapse zone and the CCR effect; per
//! model pair, the calibrated aggregates over the layer × layer table with every number they
//! carry.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::io::atomic_write;
use crate::table::{Cell, ResultsTable, Row, format_number, tidy_cells};

/// Rules for the summary (defaults: variant `ccr1`, collapse zone from relative depth 0.5,
/// final layer excluded).
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryOptions {
    /// The PGA variant the peak, minimum and collapse zone are read from.
    pub pga_variant: String,
    /// Layers at relative depth ≥ this can be in the collapse zone.
    pub collapse_min_depth: f64,
    /// Leave the model's final layer out of the collapse zone (it recovers by construction:
    /// it is what the readout reads).
    pub exclude_final_layer: bool,
    /// A collapse-zone layer needs z < 0 **and** a Benjamini–Hochberg q-value below this
    /// (q over the two-sided PGA p-values of every `pga_z` row of the table at the same
    /// variant: all models, checkpoints and layers of the run form one family).
    pub collapse_q: f64,
}

impl Default for SummaryOptions {
    fn default() -> Self {
        Self {
            pga_variant: "ccr1".to_owned(),
            collapse_min_depth: 0.5,
            exclude_final_layer: true,
            collapse_q: 0.05,
        }
    }
}

/// PGA z at a stronger CCR variant: its minimum (and layer) and how many layers stay negative.
#[derive(Debug, Clone, PartialEq)]
pub struct CcrEffect {
    /// Minimum z over layers.
    pub min_z: f64,
    /// Layer of the minimum.
    pub min_layer: u32,
    /// Number of layers with z < 0.
    pub negative_layers: usize,
}

/// One model's line in the summary.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryRow {
    /// Model name.
    pub model: String,
    /// Model family.
    pub family: String,
    /// Hidden width.
    pub d: u32,
    /// Layers (hidden-state tensors).
    pub n_layers: u32,
    /// The checkpoint summarised (`""` = the released model).
    pub checkpoint: String,
    /// Highest z and its layer.
    pub peak: (f64, u32),
    /// Lowest z and its layer.
    pub min: (f64, u32),
    /// Number of layers with z < 0 at the base variant.
    pub negative_layers: usize,
    /// Collapse-zone layers (see [`SummaryOptions`]), ascending.
    pub collapse_layers: Vec<u32>,
    /// CCR-5 effect, when `ccr5` rows exist.
    pub ccr5: Option<CcrEffect>,
    /// CCR-10 effect, when `ccr10` rows exist.
    pub ccr10: Option<CcrEffect>,
}

/// The summary: one row per model with PGA z rows, sorted by (d, model).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SummaryTable {
    /// One row per model.
    pub rows: Vec<SummaryRow>,
    /// The options used.
    pub pga_variant: String,
    /// True when any row of the source table was synthetic.
    pub synthetic: bool,
    /// The collapse-zone rule, in words (printed next to the counts).
    pub collapse_rule: String,
    /// The q threshold of the collapse-zone rule.
    pub collapse_q: f64,
    /// Checkpoints whose weights equal an earlier checkpoint's of the same model (from the
    /// `weights_sha256` rows of a study of hub revisions; empty without them).
    pub duplicates: Vec<DuplicateCheckpoint>,
    /// Per model pair, its calibrated aggregates (empty when the table has none).
    pub cross: Vec<CrossSummary>,
    /// Cross-model rows of the table that are not aggregates (cells and matched-depth rows,
    /// in the results table with every column; counted for the legend).
    pub cross_other_rows: usize,
}

/// The extra that marks a calibrated aggregate's row: its critical value `tau` (the null's
/// `1 − alpha` order statistic), which only an aggregate over a layer × layer table reports.
pub const AGGREGATE_EXTRA: &str = "tau";

/// How many aggregates one cross-model table of the summary shows side by side; a pair with
/// more continues in the next table, so the page stays readable in a 1400-pixel window.
pub const CROSS_COLUMNS_PER_TABLE: usize = 5;

/// One model pair's calibrated aggregates: the rows of the results table whose `other_model`
/// is set and that carry [`AGGREGATE_EXTRA`] (and no `other_layer`: not a cell of the table),
/// each with every number it carries.
#[derive(Debug, Clone, PartialEq)]
pub struct CrossSummary {
    /// The first model.
    pub model: String,
    /// Its checkpoint (`""` = the released model).
    pub checkpoint: String,
    /// The second model (at its final checkpoint).
    pub other_model: String,
    /// The aggregates' rows, in the table's order.
    pub rows: Vec<Row>,
}

/// One block of a pair's transposed table: the aggregates it shows, as (metric, variant), and
/// one line per number, named, with one cell per aggregate (`–` where it has none).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CrossBlock {
    pub(crate) heads: Vec<(String, String)>,
    pub(crate) lines: Vec<(String, Vec<String>)>,
}

impl CrossSummary {
    /// The pair as the summary names it: `A (checkpoint) vs B`.
    pub fn title(&self) -> String {
        let ckpt = if self.checkpoint.is_empty() {
            "final"
        } else {
            &self.checkpoint
        };
        format!("{} ({ckpt}) vs {}", self.model, self.other_model)
    }

    /// The pair's table transposed, [`CROSS_COLUMNS_PER_TABLE`] aggregates per block: its
    /// lines are the columns `repgeom compare` prints for these rows ([`tidy_cells`]: value,
    /// the null's mean, std and p, then every extra by name), numbers as in the other tables.
    pub(crate) fn blocks(&self) -> Vec<CrossBlock> {
        let t = tidy_cells(&self.rows, &[]);
        let text = |c: &Cell| match c {
            Cell::Int(v) => v.to_string(),
            Cell::Float { value, .. } if value.is_nan() => "–".to_owned(),
            Cell::Float { value, .. } => format_number(*value),
            Cell::Text(s) if s.is_empty() => "–".to_owned(),
            Cell::Text(s) => s.clone(),
        };
        let plain = |c: &Cell| match c {
            Cell::Text(s) => s.clone(),
            c => text(c),
        };
        let (metric, variant) = (col(&t.columns, "metric"), col(&t.columns, "variant"));
        let numbers: Vec<usize> = (0..t.columns.len())
            .filter(|&i| i != metric && i != variant)
            .collect();
        t.rows
            .chunks(CROSS_COLUMNS_PER_TABLE)
            .map(|rows| CrossBlock {
                heads: rows
                    .iter()
                    .map(|r| (plain(&r[metric]), plain(&r[variant])))
                    .collect(),
                lines: numbers
                    .iter()
                    .map(|&i| {
                        (
                            t.columns[i].to_string(),
                            rows.iter().map(|r| text(&r[i])).collect(),
                        )
                    })
                    .collect(),
            })
            .collect()
    }
}

/// The index of column `name` of a [`tidy_cells`] table (it always has the tidy columns).
fn col(columns: &[std::borrow::Cow<'static, str>], name: &str) -> usize {
    columns
        .iter()
        .position(|c| c == name)
        .expect("a tidy column")
}

/// The calibrated aggregates of `table`, per (model, checkpoint, other model) in table order,
/// and how many other cross-model rows it has.
fn cross_summaries(table: &ResultsTable) -> (Vec<CrossSummary>, usize) {
    let mut pairs: Vec<CrossSummary> = Vec::new();
    let mut others = 0;
    for r in table.rows().iter().filter(|r| !r.other_model.is_empty()) {
        if !r.extra.contains_key(AGGREGATE_EXTRA) || r.extra.contains_key("other_layer") {
            others += 1;
            continue;
        }
        let same = |p: &CrossSummary| {
            (p.model == r.model) && p.checkpoint == r.checkpoint && p.other_model == r.other_model
        };
        match pairs.iter_mut().find(|p| same(p)) {
            Some(p) => p.rows.push(r.clone()),
            None => pairs.push(CrossSummary {
                model: r.model.clone(),
                checkpoint: r.checkpoint.clone(),
                other_model: r.other_model.clone(),
                rows: vec![r.clone()],
            }),
        }
    }
    (pairs, others)
}

/// A checkpoint that serves the same weights as an earlier one of its model: the hub
/// publishes one model under two names, so its rows repeat the other's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateCheckpoint {
    /// The model.
    pub model: String,
    /// The checkpoint.
    pub checkpoint: String,
    /// The earliest checkpoint (by step, then name) with the same weights.
    pub duplicate_of: String,
    /// The shared weights hash.
    pub weights_sha256: String,
}

/// Duplicate checkpoints from the `weights_sha256` rows (variant: the hash).
fn duplicate_checkpoints(table: &ResultsTable) -> Vec<DuplicateCheckpoint> {
    let mut by_model: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in table.rows().iter().filter(|r| r.metric == "weights_sha256") {
        by_model.entry(&r.model).or_default().push(r);
    }
    let mut out = Vec::new();
    for rows in by_model.values_mut() {
        rows.sort_by(|a, b| (a.step, &a.checkpoint).cmp(&(b.step, &b.checkpoint)));
        rows.dedup_by(|a, b| a.checkpoint == b.checkpoint);
        for (i, r) in rows.iter().enumerate() {
            if let Some(first) = rows[..i].iter().find(|o| o.variant == r.variant) {
                out.push(DuplicateCheckpoint {
                    model: r.model.clone(),
                    checkpoint: r.checkpoint.clone(),
                    duplicate_of: first.checkpoint.clone(),
                    weights_sha256: r.variant.clone(),
                });
            }
        }
    }
    out
}

/// Benjamini–Hochberg q-values (adjusted p) of one family, in input order (NaN stays NaN
/// and is left out of the family). A copy of `repgeom_null::benjamini_hochberg` (this crate
/// does not depend on the numerical crates), pinned to it bit for bit by a test below.
fn benjamini_hochberg(p: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..p.len()).filter(|&i| !p[i].is_nan()).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]).then(a.cmp(&b)));
    let m = order.len() as f64;
    let mut q = vec![f64::NAN; p.len()];
    let mut running = 1.0f64;
    for (rank, &i) in order.iter().enumerate().rev() {
        running = running.min(p[i] * m / (rank + 1) as f64).min(1.0);
        q[i] = running;
    }
    q
}

/// Key of a PGA row: (model, checkpoint, layer).
type RowKey<'a> = (&'a str, &'a str, u32);

/// q-values of the `pga_z` rows at `variant`, from the `pga_p_two_sided` rows beside them.
fn q_values<'a>(table: &'a ResultsTable, variant: &str) -> BTreeMap<RowKey<'a>, f64> {
    let key = |r: &'a Row| (r.model.as_str(), r.checkpoint.as_str(), r.layer);
    let p: BTreeMap<RowKey<'a>, f64> = table
        .rows()
        .iter()
        .filter(|r| r.metric == "pga_p_two_sided" && r.variant == variant)
        .map(|r| (key(r), r.value))
        .collect();
    let family: Vec<RowKey<'a>> = table
        .rows()
        .iter()
        .filter(|r| r.metric == "pga_z" && r.variant == variant)
        .map(key)
        .filter(|k| p.contains_key(k))
        .collect();
    let ps: Vec<f64> = family.iter().map(|k| p[k]).collect();
    family.into_iter().zip(benjamini_hochberg(&ps)).collect()
}

/// Compresses sorted layers to ranges: `[3, 5, 6, 7]` → `"3, 5–7"`; empty → `"none"`.
pub fn layer_ranges(layers: &[u32]) -> String {
    if layers.is_empty() {
        return "none".to_owned();
    }
    let mut parts = Vec::new();
    let mut i = 0;
    while i < layers.len() {
        let mut j = i;
        while j + 1 < layers.len() && layers[j + 1] == layers[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            layers[i].to_string()
        } else {
            format!("{}–{}", layers[i], layers[j])
        });
        i = j + 1;
    }
    parts.join(", ")
}

/// Final-checkpoint rows of one model for `variant`, finite values only, by layer.
fn final_layer_values<'a>(rows: &[&'a Row]) -> (String, Vec<&'a Row>) {
    let key = |r: &Row| (r.step.unwrap_or(u64::MAX), r.checkpoint.clone());
    let Some(fin) = rows.iter().map(|r| key(r)).max() else {
        return (String::new(), Vec::new());
    };
    let mut out: Vec<&Row> = rows
        .iter()
        .copied()
        .filter(|r| key(r) == fin && r.value.is_finite())
        .collect();
    out.sort_by_key(|r| r.layer);
    (fin.1, out)
}

fn extremes(rows: &[&Row]) -> Option<((f64, u32), (f64, u32))> {
    let first = rows.first()?;
    let mut peak = (first.value, first.layer);
    let mut min = peak;
    for r in rows {
        if r.value > peak.0 {
            peak = (r.value, r.layer);
        }
        if r.value < min.0 {
            min = (r.value, r.layer);
        }
    }
    Some((peak, min))
}

fn ccr_effect(rows: &[&Row]) -> Option<CcrEffect> {
    let (_, min) = extremes(rows)?;
    Some(CcrEffect {
        min_z: min.0,
        min_layer: min.1,
        negative_layers: rows.iter().filter(|r| r.value < 0.0).count(),
    })
}

/// The summary with default rules ([`SummaryOptions::default`]).
pub fn summary(table: &ResultsTable) -> SummaryTable {
    summary_with(table, &SummaryOptions::default())
}

/// The summary with explicit rules.
pub fn summary_with(table: &ResultsTable, opts: &SummaryOptions) -> SummaryTable {
    let mut by_model: BTreeMap<&str, BTreeMap<&str, Vec<&Row>>> = BTreeMap::new();
    for r in table.rows().iter().filter(|r| r.metric == "pga_z") {
        by_model
            .entry(&r.model)
            .or_default()
            .entry(&r.variant)
            .or_default()
            .push(r);
    }
    let qs = q_values(table, &opts.pga_variant);
    let mut rows = Vec::new();
    for variants in by_model.values() {
        let Some(base) = variants.get(opts.pga_variant.as_str()) else {
            continue;
        };
        let (checkpoint, base) = final_layer_values(base);
        let Some((peak, min)) = extremes(&base) else {
            continue;
        };
        let info = base[0];
        let collapse_layers = base
            .iter()
            .filter(|r| {
                r.value < 0.0
                    && qs
                        .get(&(r.model.as_str(), r.checkpoint.as_str(), r.layer))
                        .is_some_and(|q| *q < opts.collapse_q)
                    && r.relative_depth >= opts.collapse_min_depth
                    && !(opts.exclude_final_layer && r.layer + 1 == r.n_layers)
            })
            .map(|r| r.layer)
            .collect();
        let effect = |v: &str| {
            variants
                .get(v)
                .and_then(|rs| ccr_effect(&final_layer_values(rs).1))
        };
        rows.push(SummaryRow {
            model: info.model.clone(),
            family: info.family.clone(),
            d: info.d,
            n_layers: info.n_layers,
            checkpoint,
            peak,
            min,
            negative_layers: base.iter().filter(|r| r.value < 0.0).count(),
            collapse_layers,
            ccr5: effect("ccr5"),
            ccr10: effect("ccr10"),
        });
    }
    rows.sort_by(|a, b| (a.d, &a.model).cmp(&(b.d, &b.model)));
    let (cross, cross_other_rows) = cross_summaries(table);
    SummaryTable {
        rows,
        cross,
        cross_other_rows,
        duplicates: duplicate_checkpoints(table),
        pga_variant: opts.pga_variant.clone(),
        synthetic: table.any_synthetic(),
        collapse_q: opts.collapse_q,
        collapse_rule: format!(
            "relative depth ≥ {}{}, z < 0 and BH q < {} (two-sided PGA p, one family per CCR level over all rows of the table){}",
            opts.collapse_min_depth,
            if opts.exclude_final_layer {
                ", final layer excluded"
            } else {
                ""
            },
            opts.collapse_q,
            if qs.is_empty() {
                "; this table has no pga_p_two_sided rows, so no layer qualifies"
            } else {
                ""
            }
        ),
    }
}

pub(crate) const HEADER: [&str; 17] = [
    "model",
    "family",
    "d",
    "n_layers",
    "checkpoint",
    "peak_z",
    "peak_layer",
    "min_z",
    "min_layer",
    "negative_layers",
    "collapse_zone",
    "ccr5_min_z",
    "ccr5_negative_layers",
    "ccr10_min_z",
    "ccr10_negative_layers",
    "collapse_layers",
    "collapse_rule",
];

impl SummaryRow {
    pub(crate) fn cells(&self, digits: usize, rule: &str) -> [String; 17] {
        let f = |v: f64| format!("{v:.digits$}");
        let e = |c: &Option<CcrEffect>| match c {
            Some(c) => (
                format!("{} (layer {})", f(c.min_z), c.min_layer),
                c.negative_layers.to_string(),
            ),
            None => ("–".to_owned(), "–".to_owned()),
        };
        let (c5, n5) = e(&self.ccr5);
        let (c10, n10) = e(&self.ccr10);
        [
            self.model.clone(),
            self.family.clone(),
            self.d.to_string(),
            self.n_layers.to_string(),
            if self.checkpoint.is_empty() {
                "final".to_owned()
            } else {
                self.checkpoint.clone()
            },
            f(self.peak.0),
            self.peak.1.to_string(),
            f(self.min.0),
            self.min.1.to_string(),
            self.negative_layers.to_string(),
            layer_ranges(&self.collapse_layers),
            c5,
            n5,
            c10,
            n10,
            self.collapse_layers.len().to_string(),
            rule.to_owned(),
        ]
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

impl DuplicateCheckpoint {
    /// One line naming the model, both checkpoints and the hash.
    pub fn line(&self) -> String {
        format!(
            "model {} checkpoint {} has the same weights as checkpoint {} (weights_sha256 {})",
            self.model, self.checkpoint, self.duplicate_of, self.weights_sha256
        )
    }
}

impl SummaryTable {
    /// A markdown table with a short legend of the definitions.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        if self.synthetic {
            s.push_str("**SYNTHETIC DATA**: these numbers come from synthetic inputs, not real models.\n\n");
        }
        let _ = writeln!(s, "| {} |", HEADER.join(" | "));
        let _ = writeln!(s, "|{}", HEADER.iter().map(|_| "---|").collect::<String>());
        for r in &self.rows {
            let _ = writeln!(
                s,
                "| {} |",
                r.cells(2, &format!("z < 0 and q < {} (see below)", self.collapse_q))
                    .map(|c| c.replace('|', "\\|"))
                    .join(" | ")
            );
        }
        let _ = writeln!(s, "\n{}", self.legend());
        if !self.cross.is_empty() || self.cross_other_rows > 0 {
            let _ = writeln!(s, "\n## Cross-model comparisons\n\n{}", self.cross_legend());
        }
        for pair in &self.cross {
            let _ = writeln!(s, "\n**{}**", pair.title());
            for b in pair.blocks() {
                let heads: Vec<String> = (b.heads.iter())
                    .map(|(m, v)| {
                        if v.is_empty() {
                            m.clone()
                        } else {
                            format!("{m} ({v})")
                        }
                    })
                    .map(|h| h.replace('|', "\\|"))
                    .collect();
                let _ = writeln!(s, "\n| | {} |", heads.join(" | "));
                let _ = writeln!(
                    s,
                    "|---|{}",
                    heads.iter().map(|_| "---|").collect::<String>()
                );
                for (name, cells) in &b.lines {
                    let _ = writeln!(s, "| {name} | {} |", cells.join(" | "));
                }
            }
        }
        if !self.duplicates.is_empty() {
            s.push_str("\nDuplicate checkpoints (the same weights under two names; their rows repeat the other's):\n\n");
            for d in &self.duplicates {
                let _ = writeln!(s, "- {}", d.line());
            }
        }
        s
    }

    /// The per-model table's legend: what its numbers are and the collapse-zone rule.
    pub(crate) fn legend(&self) -> String {
        format!(
            "PGA z at variant {v}, each model's final checkpoint. Layers are hidden-state indices (0 = embeddings). \
             collapse_zone (collapse_layers: their count): {rule}. \
             ccr5/ccr10: minimum z (and its layer) and number of layers with z < 0 after removing the top 5 / 10 \
             principal directions.",
            v = self.pga_variant,
            rule = self.collapse_rule
        )
    }

    /// The cross-model section's legend.
    pub(crate) fn cross_legend(&self) -> String {
        let mut s = String::from(
            "Each column is one calibrated aggregate over a model pair's layer × layer table \
             (metric METRIC_AGGREGATE, its variant in brackets), against the permutation null \
             that recomputes the whole table under each draw; its lines are every number \
             `repgeom compare --aggregate` reports for it, in the same order: the value, the \
             null's mean, standard deviation and p-value in the metric's direction, then each \
             further number by name (tau: the null's 1 − alpha critical value). – : not \
             reported for that aggregate.",
        );
        if self.cross.is_empty() {
            s.push_str(" This table has no calibrated aggregates (`repgeom compare --aggregate`, a study's `analysis.cross_aggregate`).");
        }
        if self.cross_other_rows > 0 {
            let _ = write!(
                s,
                " The table's {} other cross-model rows (layer pairs) are in the results table, \
                 each with every number it carries.",
                self.cross_other_rows
            );
        }
        s
    }

    /// CSV with the same columns (4 decimals; `min_z (layer L)` cells split are kept as text).
    pub fn to_csv(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{}", HEADER.join(","));
        for r in &self.rows {
            let mut cells = r.cells(4, &self.collapse_rule);
            // machine-readable CCR columns: the number only
            for (i, c) in [(11, &r.ccr5), (13, &r.ccr10)] {
                cells[i] = c
                    .as_ref()
                    .map(|c| format!("{:.4}", c.min_z))
                    .unwrap_or_default();
            }
            for i in [12, 14] {
                if cells[i] == "–" {
                    cells[i].clear();
                }
            }
            let _ = writeln!(
                s,
                "{}",
                cells
                    .iter()
                    .map(|c| csv_field(c))
                    .collect::<Vec<_>>()
                    .join(",")
            );
        }
        s
    }

    /// Writes `summary.md` and `summary.csv` into `dir` atomically.
    pub fn write(&self, dir: &Path) -> Result<(PathBuf, PathBuf)> {
        if !dir.is_dir() {
            return Err(Error::Io {
                op: "write summary into",
                path: dir.to_owned(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
            });
        }
        let md = dir.join("summary.md");
        let csv = dir.join("summary.csv");
        atomic_write(&md, self.to_markdown().as_bytes())?;
        atomic_write(&csv, self.to_csv().as_bytes())?;
        Ok((md, csv))
    }
}

#[cfg(test)]
mod bh_pin {
    /// The summary's Benjamini–Hochberg equals `repgeom_null`'s, bit for bit, on families with
    /// ties, NaN, zeros, ones and the order reversed.
    #[test]
    fn benjamini_hochberg_is_the_null_crates_bit_for_bit() {
        let mut families: Vec<Vec<f64>> = vec![
            vec![],
            vec![0.5],
            vec![0.05, 0.01, 0.5, 0.03, 0.02, 0.04],
            vec![f64::NAN, 0.01, 0.01, f64::NAN, 1.0, 0.0],
            vec![0.2; 7],
        ];
        // A long deterministic family, and the same reversed.
        let long: Vec<f64> = (0..500)
            .map(|i| ((i * 7919 % 1000) as f64 / 1000.0).powi(3))
            .collect();
        families.push(long.iter().rev().copied().collect());
        families.push(long);
        for p in families {
            let ours = super::benjamini_hochberg(&p);
            let theirs = repgeom_null::benjamini_hochberg(&p);
            assert_eq!(ours.len(), theirs.len());
            for (a, b) in ours.iter().zip(&theirs) {
                assert_eq!(a.to_bits(), b.to_bits(), "{p:?}");
            }
        }
    }
}
