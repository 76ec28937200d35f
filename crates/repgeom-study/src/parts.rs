//! Part files (one per finished unit), the plan file, and merging.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use repgeom_report::{ResultsTable, Row};
use serde::{Deserialize, Serialize};

use crate::manifest::Manifest;
use crate::plan::{PlannedUnit, Study, Unit};
use crate::{Error, Result};

/// Format tag of part files.
pub const PART_FORMAT: &str = "repgeom-part/1";
/// Format tag of the plan file.
pub const PLAN_FORMAT: &str = "repgeom-plan/1";

/// The part-file directory of a sweep directory.
pub fn parts_dir(dir: &Path) -> PathBuf {
    dir.join("parts")
}

/// The plan file of a sweep directory.
pub fn plan_path(dir: &Path) -> PathBuf {
    dir.join("plan.json")
}

/// The part file of a unit.
pub fn part_path(dir: &Path, id: &str) -> PathBuf {
    parts_dir(dir).join(format!("{id}.json"))
}

/// A row as stored in a part file: floats as Rust's shortest round-trip strings (`NaN`,
/// `inf`, `-inf` included), so that reading a part back gives bit-identical values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PartRow {
    model: String,
    family: String,
    d: u32,
    checkpoint: String,
    step: Option<u64>,
    layer: u32,
    n_layers: u32,
    relative_depth: String,
    metric: String,
    variant: String,
    value: String,
    null_mean: Option<String>,
    null_std: Option<String>,
    p_value: Option<String>,
    other_model: String,
    synthetic: bool,
    /// `Row::extra` (e.g. `other_layer` of a `cross_table` cell), absent when empty.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    extra: std::collections::BTreeMap<String, String>,
}

fn f2s(v: f64) -> String {
    format!("{v:?}")
}

fn s2f(s: &str, path: &Path) -> Result<f64> {
    s.parse().map_err(|_| Error::BadPart {
        path: path.to_owned(),
        reason: format!("{s:?} is not a number"),
    })
}

impl PartRow {
    fn from_row(r: &Row) -> Self {
        Self {
            model: r.model.clone(),
            family: r.family.clone(),
            d: r.d,
            checkpoint: r.checkpoint.clone(),
            step: r.step,
            layer: r.layer,
            n_layers: r.n_layers,
            relative_depth: f2s(r.relative_depth),
            metric: r.metric.clone(),
            variant: r.variant.clone(),
            value: f2s(r.value),
            null_mean: r.null_mean.map(f2s),
            null_std: r.null_std.map(f2s),
            p_value: r.p_value.map(f2s),
            other_model: r.other_model.clone(),
            synthetic: r.synthetic,
            extra: r.extra.iter().map(|(k, v)| (k.clone(), f2s(*v))).collect(),
        }
    }

    fn to_row(&self, path: &Path) -> Result<Row> {
        let opt = |o: &Option<String>| o.as_deref().map(|s| s2f(s, path)).transpose();
        Ok(Row {
            model: self.model.clone(),
            family: self.family.clone(),
            d: self.d,
            checkpoint: self.checkpoint.clone(),
            step: self.step,
            layer: self.layer,
            n_layers: self.n_layers,
            relative_depth: s2f(&self.relative_depth, path)?,
            metric: self.metric.clone(),
            variant: self.variant.clone(),
            value: s2f(&self.value, path)?,
            null_mean: opt(&self.null_mean)?,
            null_std: opt(&self.null_std)?,
            p_value: opt(&self.p_value)?,
            other_model: self.other_model.clone(),
            synthetic: self.synthetic,
            extra: (self.extra.iter())
                .map(|(k, v)| Ok((k.clone(), s2f(v, path)?)))
                .collect::<Result<_>>()?,
        })
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PartFile {
    format: String,
    id: String,
    config_hash: String,
    unit: Unit,
    /// Where the unit was computed, when not on the CPU (part files of CPU runs are
    /// unchanged).
    #[serde(default, skip_serializing_if = "repgeom_cuda::Device::is_cpu")]
    device: repgeom_cuda::Device,
    rows: Vec<PartRow>,
}

/// A part file read back.
#[derive(Debug, Clone)]
pub struct Part {
    /// Where it was read from.
    pub path: PathBuf,
    /// Unit id it claims.
    pub id: String,
    /// Config hash it was computed with.
    pub config_hash: String,
    /// The unit.
    pub unit: Unit,
    /// The device it was computed on (the manifest's `device`).
    pub device: repgeom_cuda::Device,
    /// Its rows.
    pub rows: Vec<Row>,
}

/// Writes one unit's rows, computed on `device`, atomically to `DIR/parts/<id>.json`.
pub fn write_part(
    dir: &Path,
    unit: &PlannedUnit,
    rows: &[Row],
    device: repgeom_cuda::Device,
) -> Result<PathBuf> {
    let path = part_path(dir, &unit.id);
    let file = PartFile {
        format: PART_FORMAT.into(),
        id: unit.id.clone(),
        config_hash: unit.config_hash.clone(),
        unit: unit.unit.clone(),
        device,
        rows: rows.iter().map(PartRow::from_row).collect(),
    };
    let mut text = serde_json::to_string_pretty(&file).expect("plain data serialises");
    text.push('\n');
    repgeom_io::atomic_write(&path, |w| w.write_all(text.as_bytes()))?;
    Ok(path)
}

/// Reads one part file.
pub fn read_part(path: &Path) -> Result<Part> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        op: "read part",
        path: path.to_owned(),
        source,
    })?;
    let f: PartFile = serde_json::from_str(&text).map_err(|e| Error::BadPart {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    if f.format != PART_FORMAT {
        return Err(Error::BadPart {
            path: path.to_owned(),
            reason: format!("format {:?}, expected {PART_FORMAT:?}", f.format),
        });
    }
    let rows = f
        .rows
        .iter()
        .map(|r| r.to_row(path))
        .collect::<Result<_>>()?;
    Ok(Part {
        path: path.to_owned(),
        id: f.id,
        config_hash: f.config_hash,
        unit: f.unit,
        device: f.device,
        rows,
    })
}

/// True when the unit's part exists and carries the unit's current config hash.
pub fn is_done(dir: &Path, unit: &PlannedUnit) -> bool {
    match read_part(&part_path(dir, &unit.id)) {
        Ok(p) => p.config_hash == unit.config_hash && p.id == unit.id && p.unit == unit.unit,
        Err(_) => false,
    }
}

/// The plan file: the manifest and every unit with its hash.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    /// [`PLAN_FORMAT`].
    pub format: String,
    /// Where the manifest came from.
    pub origin: String,
    /// The manifest (paths resolved).
    pub manifest: Manifest,
    /// Every unit of the study.
    pub units: Vec<PlannedUnit>,
}

/// Writes `DIR/plan.json` atomically (identical bytes for an identical study, so concurrent
/// array tasks may all write it).
pub fn write_plan(dir: &Path, study: &Study) -> Result<()> {
    std::fs::create_dir_all(parts_dir(dir)).map_err(|source| Error::Io {
        op: "create directory",
        path: parts_dir(dir),
        source,
    })?;
    let plan = PlanFile {
        format: PLAN_FORMAT.into(),
        origin: study.origin.clone(),
        // Without the device: the plan is the same bytes whichever device a shard runs on
        // (each part file records its own).
        manifest: Manifest {
            device: repgeom_cuda::Device::Cpu,
            ..study.manifest.clone()
        },
        units: study.units.clone(),
    };
    let mut text = serde_json::to_string_pretty(&plan).expect("plain data serialises");
    text.push('\n');
    repgeom_io::atomic_write(&plan_path(dir), |w| w.write_all(text.as_bytes()))?;
    Ok(())
}

/// Reads `DIR/plan.json`.
pub fn read_plan(dir: &Path) -> Result<PlanFile> {
    let path = plan_path(dir);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::NoPlan {
                dir: dir.to_owned(),
            });
        }
        Err(source) => {
            return Err(Error::Io {
                op: "read plan",
                path,
                source,
            });
        }
    };
    let plan: PlanFile = serde_json::from_str(&text).map_err(|e| Error::BadPart {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    if plan.format != PLAN_FORMAT {
        return Err(Error::BadPart {
            path,
            reason: format!("format {:?}, expected {PLAN_FORMAT:?}", plan.format),
        });
    }
    Ok(plan)
}

/// What [`merge`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeReport {
    /// Units in the plan.
    pub planned: usize,
    /// Units merged.
    pub merged: usize,
    /// Planned units without a part file (ids).
    pub missing: Vec<String>,
    /// Units found in more than one part file (id, files); identical copies are merged once.
    pub duplicates: Vec<(String, Vec<PathBuf>)>,
    /// Part files for units not in the plan (left out of the table).
    pub extra: Vec<PathBuf>,
}

impl MergeReport {
    /// True when every planned unit was merged.
    pub fn complete(&self) -> bool {
        self.missing.is_empty()
    }
}

/// Collects `DIR/parts/*.json` into one table, checked against `DIR/plan.json`.
///
/// Refuses (error) a part whose config hash differs from the plan's for its unit, and
/// duplicates whose rows differ. Missing units and stray parts are reported, not fatal: the
/// caller decides (the sweep and `xtask paper` refuse an incomplete table).
pub fn merge(dir: &Path) -> Result<(ResultsTable, MergeReport)> {
    let plan = read_plan(dir)?;
    let expected: BTreeMap<&str, &PlannedUnit> =
        plan.units.iter().map(|u| (u.id.as_str(), u)).collect();
    let pdir = parts_dir(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&pdir)
        .map_err(|source| Error::Io {
            op: "list parts",
            path: pdir.clone(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            !name.starts_with('.') && name.ends_with(".json")
        })
        .collect();
    files.sort();
    let mut found: BTreeMap<String, Vec<Part>> = BTreeMap::new();
    let mut report = MergeReport {
        planned: plan.units.len(),
        ..Default::default()
    };
    for f in files {
        let part = read_part(&f)?;
        match expected.get(part.id.as_str()) {
            None => report.extra.push(f),
            Some(u) => {
                if u.config_hash != part.config_hash || u.unit != part.unit {
                    return Err(Error::MixedSettings {
                        path: f,
                        plan: plan_path(dir),
                        unit: part.id,
                        expected: u.config_hash.clone(),
                        found: part.config_hash,
                    });
                }
                found.entry(part.id.clone()).or_default().push(part);
            }
        }
    }
    let mut rows = Vec::new();
    for u in &plan.units {
        match found.remove(&u.id) {
            None => report.missing.push(u.id.clone()),
            Some(parts) => {
                if parts.len() > 1 {
                    let first = &parts[0];
                    for p in &parts[1..] {
                        if !same_rows(&p.rows, &first.rows) {
                            return Err(Error::BadPart {
                                path: p.path.clone(),
                                reason: format!(
                                    "unit {} also in {} with different rows",
                                    u.id,
                                    first.path.display()
                                ),
                            });
                        }
                    }
                    report
                        .duplicates
                        .push((u.id.clone(), parts.iter().map(|p| p.path.clone()).collect()));
                }
                report.merged += 1;
                rows.extend(parts.into_iter().next().map(|p| p.rows).unwrap_or_default());
            }
        }
    }
    Ok((ResultsTable::new(rows)?, report))
}

fn same_rows(a: &[Row], b: &[Row]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| PartRow::from_row(x) == PartRow::from_row(y))
}
