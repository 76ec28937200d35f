//! The extraction stage: hub checkpoints to activations, through a content-addressed cache
//! under the sweep's work directory.
//!
//! ```text
//! DIR/activations/<key>.safetensors     hidden states at the [extract] points
//! DIR/activations/<key>.json            what the key stands for, and the validation loss
//! DIR/activations/<pkey>.probe.safetensors   mean-pooled features of the [probe] texts
//! DIR/activations/<key>.lock            held while one process extracts
//! DIR/checkpoints/<model>__<checkpoint>.json  revision, commit, weights hash
//! ```
//!
//! `key` is the SHA-256 of the weights hash, the corpus's SHA-256 and the extraction
//! settings, so reruns, other shards and other analyses reuse an extraction, and a changed
//! corpus or setting never does. A corpus named by hub dataset is the rows of its text column,
//! each ended by a line break ([`read_corpus`]): the same text in a file has the same key. Files are written atomically and the `.json` last, so a
//! process killed mid-extraction leaves nothing that counts as done.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use repgeom_extract::{ExtractParams, Extractor, Pool};
use repgeom_hub::{Files, Hub};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::manifest::{CheckpointSpec, DataSource, ExtractSpec, Manifest, ModelSpec, ProbeSpec};
use crate::run::Step;
use crate::{Error, Result};

/// Format of the cache keys and records.
const FORMAT: &str = "repgeom-activations/1";

/// One hub checkpoint, resolved and audited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    /// Model label.
    pub model: String,
    /// Checkpoint name.
    pub checkpoint: String,
    /// Hub model id.
    pub hub: String,
    /// Revision asked for.
    pub revision: String,
    /// Commit it resolved to.
    pub commit: String,
    /// `repgeom_hub::weights_hash` of its weights.
    pub weights_sha256: String,
    /// Parameters.
    pub parameters: u64,
}

/// A checkpoint whose weights are identical to an earlier one's of the same model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Duplicate {
    /// Model label.
    pub model: String,
    /// The checkpoint.
    pub checkpoint: String,
    /// Its revision.
    pub revision: String,
    /// The first checkpoint (plan order) with the same weights.
    pub duplicate_of: String,
}

/// What the extraction of one checkpoint produced.
#[derive(Debug, Clone)]
pub(crate) struct Extracted {
    pub(crate) acts: PathBuf,
    pub(crate) val_loss: Option<f64>,
    /// The loss's standard error over the held-out sequences it ran.
    pub(crate) val_loss_se: Option<f64>,
    /// Mean-pooled features of the `[probe]` texts, when asked for.
    pub(crate) probe: Option<PathBuf>,
    /// The spectra of every token (`analysis.spectral_tokens`), when asked for: a JSON map
    /// from hidden state to its spectra at each convergence checkpoint ([`read_spectra`]).
    pub(crate) spectra: Option<PathBuf>,
}

/// The covariance spectra a checkpoint's extraction also accumulates over every token of the
/// points' part of the corpus (`analysis.spectral_tokens`).
pub(crate) struct SpectraJob {
    /// The most tokens to run (`None`: all).
    pub(crate) max_tokens: Option<usize>,
    /// The hidden states whose covariance is accumulated (the spectral units' layers).
    pub(crate) layers: Vec<usize>,
}

/// Every hidden state's spectra at the convergence checkpoints, by hidden state.
pub(crate) type Spectra =
    std::collections::BTreeMap<usize, Vec<repgeom_metrics::CovarianceSpectrum>>;

/// Reads a spectra file written by [`extract`].
pub(crate) fn read_spectra(path: &Path) -> Result<Spectra> {
    let text = fs::read_to_string(path).map_err(io("read", path))?;
    serde_json::from_str(&text).map_err(|e| Error::BadPart {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

#[derive(Serialize, Deserialize)]
struct ActsRecord {
    format: String,
    key: String,
    hub: String,
    revision: String,
    commit: String,
    weights_sha256: String,
    text_sha256: String,
    /// The corpus: its file, or the hub dataset, commit, config and split.
    #[serde(default)]
    text: Option<String>,
    settings: serde_json::Value,
    n_points: usize,
    val_loss: Option<f64>,
    #[serde(default)]
    val_loss_se: Option<f64>,
    val_tokens: Option<usize>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { op, path, source }
}

/// `DIR/checkpoints/<model>__<checkpoint>.json`.
pub fn checkpoint_record_path(dir: &Path, model: &str, checkpoint: &str) -> PathBuf {
    let safe = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._+-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    dir.join("checkpoints")
        .join(format!("{}__{}.json", safe(model), safe(checkpoint)))
}

/// A hub checkpoint resolved to a snapshot folder, with its record when one for that commit is
/// on disk already.
pub(crate) struct Resolved {
    pub(crate) dir: PathBuf,
    pub(crate) commit: String,
    pub(crate) record: Option<CheckpointRecord>,
}

/// Resolves a hub checkpoint (downloading what is missing) and reads its record from
/// `DIR/checkpoints/` when the commit is unchanged; hashes nothing.
pub(crate) fn resolve(
    hub: &Hub,
    dir: &Path,
    model: &ModelSpec,
    ckpt: &CheckpointSpec,
) -> Result<Resolved> {
    let id = model.hub.as_deref().expect("hub checkpoint");
    let rev = ckpt.revision.as_deref().expect("hub checkpoint");
    let snap = hub.snapshot(id, rev, &Files::Full, &mut |_| {})?;
    let path = checkpoint_record_path(dir, &model.label, &ckpt.name);
    let record = fs::read_to_string(&path)
        .ok()
        .and_then(|text| serde_json::from_str::<CheckpointRecord>(&text).ok())
        .filter(|r| r.commit == snap.commit && r.hub == id);
    Ok(Resolved {
        dir: snap.dir,
        commit: snap.commit,
        record,
    })
}

/// Writes the record of a resolved checkpoint whose weights hash is `digest` (computed apart,
/// or while its weights were loaded).
pub(crate) fn write_record(
    dir: &Path,
    model: &ModelSpec,
    ckpt: &CheckpointSpec,
    commit: &str,
    digest: repgeom_hub::WeightsDigest,
) -> Result<CheckpointRecord> {
    let rec = CheckpointRecord {
        model: model.label.clone(),
        checkpoint: ckpt.name.clone(),
        hub: model.hub.clone().expect("hub checkpoint"),
        revision: ckpt.revision.clone().expect("hub checkpoint"),
        commit: commit.into(),
        weights_sha256: digest.sha256,
        parameters: digest.parameters,
    };
    let path = checkpoint_record_path(dir, &model.label, &ckpt.name);
    let json = serde_json::to_string_pretty(&rec).expect("plain data serialises");
    let parent = path.parent().expect("record path has a parent");
    fs::create_dir_all(parent).map_err(io("create", parent))?;
    repgeom_io::atomic_write(&path, |w| w.write_all(json.as_bytes()))?;
    Ok(rec)
}

/// Resolves a hub checkpoint (downloading what is missing) and hashes its weights on their
/// own; the record is kept in `DIR/checkpoints/` (reused when the commit is unchanged). A
/// checkpoint about to be extracted is hashed while it loads instead ([`extract`]).
pub(crate) fn audit(
    hub: &Hub,
    dir: &Path,
    model: &ModelSpec,
    ckpt: &CheckpointSpec,
) -> Result<(CheckpointRecord, PathBuf)> {
    let r = resolve(hub, dir, model, ckpt)?;
    if let Some(rec) = r.record {
        return Ok((rec, r.dir));
    }
    let digest = repgeom_hub::weights_hash(&r.dir)?;
    Ok((write_record(dir, model, ckpt, &r.commit, digest)?, r.dir))
}

/// Duplicates among `records` (in order): each later checkpoint of a model whose weights
/// equal an earlier one's.
pub fn duplicates(records: &[CheckpointRecord]) -> Vec<Duplicate> {
    let mut out = Vec::new();
    for (i, r) in records.iter().enumerate() {
        if let Some(first) = records[..i]
            .iter()
            .find(|o| o.model == r.model && o.weights_sha256 == r.weights_sha256)
        {
            out.push(Duplicate {
                model: r.model.clone(),
                checkpoint: r.checkpoint.clone(),
                revision: r.revision.clone(),
                duplicate_of: first.checkpoint.clone(),
            });
        }
    }
    out
}

/// Every record under `DIR/checkpoints/`, sorted by (model, checkpoint).
pub fn read_checkpoint_records(dir: &Path) -> Result<Vec<CheckpointRecord>> {
    let d = dir.join("checkpoints");
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(&d) else {
        return Ok(out);
    };
    for e in entries {
        let p = e.map_err(io("read checkpoint records", &d))?.path();
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        if name.starts_with('.') || !name.ends_with(".json") {
            continue;
        }
        let text = fs::read_to_string(&p).map_err(io("read checkpoint record", &p))?;
        let r: CheckpointRecord = serde_json::from_str(&text).map_err(|e| Error::BadPart {
            path: p.clone(),
            reason: e.to_string(),
        })?;
        out.push(r);
    }
    out.sort_by(|a, b| (&a.model, &a.checkpoint).cmp(&(&b.model, &b.checkpoint)));
    Ok(out)
}

fn settings(e: &ExtractSpec) -> serde_json::Value {
    // batch_size changes the speed (and the numbers at most by f32 rounding): not part of
    // the key, so a rerun with another batch size reuses the cache.
    let mut s = serde_json::json!({
        "n_points": e.params.n_points,
        "seq_len": e.params.seq_len,
        "seed": e.params.seed,
        "skip_first": e.params.skip_first,
        "loss": e.params.loss,
        "val_fraction": if e.params.loss { Some(e.val_fraction) } else { None },
    });
    // Added when they came in, and only away from the design before them, so that caches of
    // that design keep their keys.
    let density = e.params().density();
    if density != 1 {
        s["points_per_sequence"] = density.into();
    }
    if e.params.loss {
        s["loss_tokens"] = e.loss_tokens().into();
    }
    if let Some(d) = e.design_keys() {
        s["points"] = d;
    }
    if e.params.dtype != repgeom_extract::Precision::F32 {
        s["dtype"] = e.params.dtype.name().into();
    }
    s
}

/// The corpus split into the part points are sampled from and the held-out part for the
/// loss (the last `val_fraction` of its lines, at least one line).
fn split_text(text: &str, e: &ExtractSpec) -> (String, Option<String>) {
    if !e.params.loss {
        return (text.to_string(), None);
    }
    let lines: Vec<&str> = text.lines().collect();
    let n_val =
        ((lines.len() as f64 * e.val_fraction).ceil() as usize).clamp(1, lines.len().max(1));
    let cut = lines.len().saturating_sub(n_val);
    (lines[..cut].join("\n"), Some(lines[cut..].join("\n")))
}

/// Texts read from `[extract] text` or `[probe] labels`, with where they came from.
#[derive(Debug)]
pub(crate) struct Corpus {
    /// The texts, one line each for the probe's.
    pub(crate) text: String,
    /// The file, or the dataset with the commit it resolved to, config and split.
    pub(crate) origin: String,
    /// The file, or the split's first parquet file (named in extraction errors).
    pub(crate) file: PathBuf,
}

/// The hub dataset split `h`: its parquet files in the hub cache (downloaded if missing) and
/// how to name it (with the commit it resolved to).
fn dataset_files(hub: &Hub, h: &crate::HubData) -> Result<(repgeom_hub::DatasetFiles, String)> {
    let files = hub.dataset(&h.dataset_ref(), &mut |_| {})?;
    let origin = format!(
        "hub dataset {}@{} ({}) config {} split {}",
        files.dataset, files.revision, files.commit, files.config, files.split
    );
    Ok((files, origin))
}

/// The `[extract]` corpus: a file's text, or the rows of a hub dataset's text column, each
/// ended by a line break (one already there is kept, not doubled), so that a file holding
/// those lines is the same text, with the same hash and cache keys.
pub(crate) fn read_corpus(hub: &Hub, src: &DataSource) -> Result<Corpus> {
    let bad = |reason: String| Error::Data {
        place: "extract.text",
        data: src.to_string(),
        reason,
    };
    match src {
        DataSource::File(path) => {
            let bytes = fs::read(path).map_err(io("read corpus", path))?;
            let text =
                String::from_utf8(bytes).map_err(|_| bad("the corpus is not UTF-8".into()))?;
            Ok(Corpus {
                text,
                origin: path.display().to_string(),
                file: path.clone(),
            })
        }
        DataSource::Hub(h) => {
            let (files, origin) = dataset_files(hub, h)?;
            let column = h.column.as_deref().unwrap_or("text");
            let rows = repgeom_io::read_parquet_texts(&files.files, column)?;
            let mut text = String::with_capacity(rows.iter().map(|r| r.len() + 1).sum());
            for r in &rows {
                text.push_str(r);
                if !r.ends_with('\n') {
                    text.push('\n');
                }
            }
            if text.is_empty() {
                return Err(bad(format!("{origin}: column `{column}` has no rows")));
            }
            Ok(Corpus {
                text,
                origin,
                file: files.files.first().cloned().unwrap_or(files.dir),
            })
        }
    }
}

/// The labelled texts of the `[probe]` table.
#[derive(Debug)]
pub(crate) struct ProbeTexts {
    /// The texts, one per line.
    pub(crate) texts: Corpus,
    /// The class of each.
    pub(crate) labels: Vec<usize>,
}

/// Labelled texts of the `[probe]` table: the texts, one per line, and their labels.
pub(crate) fn probe_texts(hub: &Hub, p: &ProbeSpec) -> Result<ProbeTexts> {
    let bad = |reason: String| Error::Data {
        place: "probe.labels",
        data: p.labels.to_string(),
        reason,
    };
    let (raw, labels, origin, file) = match &p.labels {
        DataSource::File(path) => {
            let (raw, labels) = csv_texts(path, p).map_err(bad)?;
            (raw, labels, path.display().to_string(), path.clone())
        }
        DataSource::Hub(h) => {
            let (files, origin) = dataset_files(hub, h)?;
            let texts = repgeom_io::read_parquet_texts(
                &files.files,
                p.text_column.as_deref().unwrap_or("text"),
            )?;
            let labels = repgeom_io::read_parquet_labels(
                &files.files,
                p.label_column.as_deref().unwrap_or("label"),
            )?
            .values;
            let file = files.files.first().cloned().unwrap_or(files.dir);
            (texts, labels, origin, file)
        }
    };
    let mut texts: Vec<String> = raw
        .into_iter()
        .map(|t| {
            // One example per line: newlines become spaces, and (unless turned off)
            // backslashes, AG News's escaped line breaks.
            let t = t.replace(['\n', '\r'], " ");
            let t = if p.backslash_to_space {
                t.replace('\\', " ")
            } else {
                t
            };
            t.trim().to_string()
        })
        .collect();
    let mut values = labels;
    if values.len() != texts.len() {
        return Err(bad(format!(
            "{} labels but {} texts",
            values.len(),
            texts.len()
        )));
    }
    if let Some(n) = p.n_examples {
        if n > texts.len() {
            return Err(bad(format!(
                "n_examples = {n} but it has {} rows",
                texts.len()
            )));
        }
        texts.truncate(n);
        values.truncate(n);
    }
    if let Some(i) = texts.iter().position(|t| t.is_empty()) {
        return Err(bad(format!("row {} has an empty text", i + 1)));
    }
    let corpus = Corpus {
        text: texts.join("\n"),
        origin,
        file,
    };
    Ok(ProbeTexts {
        texts: corpus,
        labels: values,
    })
}

/// The texts and labels of a labelled CSV, as they stand.
fn csv_texts(path: &Path, p: &ProbeSpec) -> std::result::Result<(Vec<String>, Vec<usize>), String> {
    let labels =
        repgeom_io::read_labels(path, p.label_column.as_deref()).map_err(|e| e.to_string())?;
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(p.text_column.is_some())
        .flexible(true)
        .from_path(path)
        .map_err(|e| e.to_string())?;
    let text_idx = match &p.text_column {
        Some(c) => Some(
            rdr.headers()
                .map_err(|e| e.to_string())?
                .iter()
                .position(|h| h == c.as_str())
                .ok_or_else(|| format!("no column {c:?}"))?,
        ),
        None => None,
    };
    let mut texts = Vec::new();
    for (i, rec) in rdr.records().enumerate() {
        let rec = rec.map_err(|e| format!("row {}: {e}", i + 1))?;
        texts.push(match text_idx {
            Some(j) => rec.get(j).unwrap_or("").to_string(),
            None => rec.iter().skip(1).collect::<Vec<_>>().join(" "),
        });
    }
    Ok((texts, labels.values))
}

/// An extraction's points and its loss on the held-out part (when [extract] asks for it).
type PointsAndLoss = (repgeom_extract::Extraction, Option<repgeom_extract::Loss>);

/// The probe features a checkpoint's extraction also computes: the `[probe]` table, its
/// texts and how many labels they have.
pub(crate) struct ProbeJob<'a> {
    pub(crate) spec: &'a ProbeSpec,
    pub(crate) texts: &'a Corpus,
    pub(crate) n_labels: usize,
}

/// Told the wall time of each [`Step`] of an extraction.
pub(crate) type OnStep<'a> = dyn Fn(Step, Duration) + Sync + 'a;

/// `f()`, and its wall time told to `on_step` when it succeeds.
fn timed<R>(on_step: &OnStep<'_>, step: Step, f: impl FnOnce() -> Result<R>) -> Result<R> {
    let t = Instant::now();
    let r = f()?;
    on_step(step, t.elapsed());
    Ok(r)
}

/// The activations, validation loss and (with `probe`) probe features of one hub checkpoint,
/// from the cache under `dir` or computed now (one process at a time per key), loading its
/// weights at most once: a checkpoint without a record yet (`resolved.record` is `None`) is
/// hashed (`repgeom_hub::weights_hash`) on its own thread while it loads and computes its
/// points and loss; that thread writes the record and takes the points' lock as soon as the
/// hash is known, and the points computed are then stored under their key, or dropped where
/// the cache holds them. `on_step` is told the wall time of each step as it finishes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn extract(
    manifest: &Manifest,
    corpus: &Corpus,
    probe: Option<ProbeJob<'_>>,
    spectra: Option<SpectraJob>,
    dir: &Path,
    model: &ModelSpec,
    ckpt: &CheckpointSpec,
    resolved: Resolved,
    on_step: &OnStep<'_>,
) -> Result<(CheckpointRecord, Extracted)> {
    let e = manifest
        .extract
        .as_ref()
        .expect("checked: [extract] with revisions");
    let revision = ckpt.revision.clone().unwrap_or_default();
    let fail = |file: &Path, reason: String| Error::Extract {
        model: model.label.clone(),
        revision: revision.clone(),
        file: file.to_path_buf(),
        reason,
    };
    let snapshot = resolved.dir.as_path();
    // The model on the manifest's device, at [extract]'s dtype: in f32 the CPU's numbers to
    // the rounding of the products, so the device is in no cache key and a cache filled on
    // either serves both; `stored` is a setting of [extract] and in its keys.
    let load = || -> Result<Extractor> {
        timed(on_step, Step::Load, || {
            let mut x = Extractor::load(snapshot).map_err(|err| fail(snapshot, err.to_string()))?;
            x.place(manifest.device.open()?, e.params.dtype)
                .map_err(|err| fail(snapshot, err.to_string()))?;
            Ok(x)
        })
    };
    // The points and the loss ([extract]'s work), with the model's loss on the held-out part.
    let points_and_loss = |x: &Extractor| -> Result<PointsAndLoss> {
        let (points_text, val_text) = split_text(&corpus.text, e);
        let params = e
            .params()
            .check()
            .map_err(|err| fail(&corpus.file, err.to_string()))?;
        let out = timed(on_step, Step::Points, || {
            x.extract(&points_text, &params, &mut |_| {})
                .map_err(|err| fail(&corpus.file, err.to_string()))
        })?;
        let val = match &val_text {
            Some(v) => Some(timed(on_step, Step::Loss, || {
                x.loss(v, &params, &mut |_| {})
                    .map_err(|err| fail(&corpus.file, format!("held-out part for the loss: {err}")))
            })?),
            None => None,
        };
        Ok((out, val))
    };
    let cache = dir.join("activations");
    fs::create_dir_all(&cache).map_err(io("create", &cache))?;
    let lock = |name: String| -> Result<File> {
        let path = cache.join(name);
        let f = File::create(&path).map_err(io("create", &path))?;
        f.lock().map_err(io("lock", &path))?;
        Ok(f)
    };
    // The points and the loss: their key (of the weights hash, the text and [extract]'s
    // settings), taken under its lock.
    let text = &corpus.text;
    let text_sha = sha256_hex(text.as_bytes());
    let points_key = |rec: &CheckpointRecord| -> Result<(String, File)> {
        let key_src = serde_json::json!({
            "format": FORMAT,
            "weights_sha256": rec.weights_sha256,
            "text_sha256": text_sha,
            "settings": settings(e),
        });
        let key = sha256_hex(key_src.to_string().as_bytes());
        let held = lock(format!("{key}.lock"))?;
        Ok((key, held))
    };
    let mut loaded: Option<Extractor> = None;
    let mut early: Option<PointsAndLoss> = None;
    let (rec, (key, _acts_lock)) = match resolved.record {
        Some(r) => {
            let locked = points_key(&r)?;
            (r, locked)
        }
        None => {
            // A checkpoint met for the first time: its weights hash (one sequential SHA-256
            // pass over every tensor, 14 GB at 6.9B) runs on its own thread while the model
            // loads, moves to the device and computes the points and the loss, which do not
            // depend on it. The cache keys do: as soon as the hash is known, that thread
            // writes the record and takes the points' lock (so that another process meeting
            // this checkpoint waits for these points rather than computing its own), and the
            // points are stored under the key below, unless the cache already holds them
            // (the same weights under another revision).
            let (keyed, work) = std::thread::scope(|s| {
                let keyed = s.spawn(|| -> Result<_> {
                    let digest = timed(on_step, Step::WeightsHash, || {
                        Ok(repgeom_hub::weights_hash(snapshot)?)
                    })?;
                    let rec = write_record(dir, model, ckpt, &resolved.commit, digest)?;
                    let locked = points_key(&rec)?;
                    Ok((rec, locked))
                });
                let work = load().and_then(|x| {
                    let done = points_and_loss(&x)?;
                    Ok((x, done))
                });
                let keyed = keyed
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                (keyed, work)
            });
            let (x, done) = work?;
            loaded = Some(x);
            early = Some(done);
            keyed?
        }
    };
    let acts = cache.join(format!("{key}.safetensors"));
    let meta = cache.join(format!("{key}.json"));
    let done: Option<ActsRecord> = fs::read_to_string(&meta)
        .ok()
        .and_then(|t| serde_json::from_str::<ActsRecord>(&t).ok())
        .filter(|r| r.key == key && acts.is_file());

    // The probe features (locked after the points, always in this order).
    let probe_out = match &probe {
        Some(p) => {
            let mut src = serde_json::json!({
                "format": FORMAT,
                "weights_sha256": rec.weights_sha256,
                "texts_sha256": sha256_hex(p.texts.text.as_bytes()),
                "seq_len": p.spec.seq_len,
                "pool": "mean",
            });
            // The precision the features are computed at: [extract]'s (recorded when not
            // f32 only, so that earlier keys stay).
            if e.params.dtype != repgeom_extract::Precision::F32 {
                src["dtype"] = e.params.dtype.name().into();
            }
            // Recorded when off only, so that the keys of earlier runs (backslashes
            // replaced) stay.
            if !p.spec.backslash_to_space {
                src["backslash_to_space"] = false.into();
            }
            let pkey = sha256_hex(src.to_string().as_bytes());
            let lock = lock(format!("{pkey}.probe.lock"))?;
            Some((cache.join(format!("{pkey}.probe.safetensors")), lock))
        }
        None => None,
    };
    // The spectra over every token (locked after the probe features).
    let spectra_out = match &spectra {
        Some(job) => {
            let src = serde_json::json!({
                "format": FORMAT,
                "weights_sha256": rec.weights_sha256,
                "text_sha256": text_sha,
                "settings": settings(e),
                "spectral_tokens": job.max_tokens,
                "layers": job.layers,
            });
            let skey = sha256_hex(src.to_string().as_bytes());
            let lock = lock(format!("{skey}.spectra.lock"))?;
            Some((cache.join(format!("{skey}.spectra.json")), lock))
        }
        None => None,
    };
    let probe_done = probe_out.as_ref().is_none_or(|(p, _)| p.is_file());
    let spectra_done = spectra_out.as_ref().is_none_or(|(p, _)| p.is_file());
    if let Some(r) = &done
        && probe_done
        && spectra_done
    {
        return Ok((
            rec,
            Extracted {
                acts,
                val_loss: r.val_loss,
                val_loss_se: r.val_loss_se,
                probe: probe_out.map(|(p, _)| p),
                spectra: spectra_out.map(|(p, _)| p),
            },
        ));
    }
    let extractor = match loaded {
        Some(x) => x,
        None => load()?,
    };
    let (val_loss, val_loss_se) = match done {
        Some(r) => (r.val_loss, r.val_loss_se),
        None => {
            let (out, val) = match early.take() {
                Some(computed) => computed,
                None => points_and_loss(&extractor)?,
            };
            out.write(&acts)
                .map_err(|err| fail(&acts, err.to_string()))?;
            let r = ActsRecord {
                format: FORMAT.into(),
                key: key.clone(),
                hub: rec.hub.clone(),
                revision: rec.revision.clone(),
                commit: rec.commit.clone(),
                weights_sha256: rec.weights_sha256.clone(),
                text_sha256: text_sha,
                text: Some(corpus.origin.clone()),
                settings: settings(e),
                n_points: out.n_points,
                val_loss: val.map(|l| l.mean),
                val_loss_se: val.map(|l| l.se),
                val_tokens: val.map(|l| l.tokens),
            };
            let json = serde_json::to_string_pretty(&r).expect("plain data serialises");
            repgeom_io::atomic_write(&meta, |w| w.write_all(json.as_bytes()))?;
            (r.val_loss, r.val_loss_se)
        }
    };
    if let (Some(p), Some((path, _))) = (&probe, &probe_out)
        && !path.is_file()
    {
        let batch_size = e.params.batch_size;
        let params = ExtractParams {
            seq_len: p.spec.seq_len,
            n_points: None,
            seed: 0,
            skip_first: true,
            pool: Pool::Mean,
            loss: false,
            batch_size: batch_size.max(1),
            dtype: e.params.dtype,
            ..Default::default()
        }
        .check()
        .map_err(|err| fail(&p.texts.file, err.to_string()))?;
        let out = timed(on_step, Step::ProbeFeatures, || {
            extractor
                .extract(&p.texts.text, &params, &mut |_| {})
                .map_err(|err| fail(&p.texts.file, err.to_string()))
        })?;
        if out.n_points != p.n_labels {
            return Err(fail(
                &p.texts.file,
                format!("{} features for {} labels", out.n_points, p.n_labels),
            ));
        }
        out.write(path).map_err(|err| fail(path, err.to_string()))?;
    }
    if let (Some(job), Some((path, _))) = (&spectra, &spectra_out)
        && !path.is_file()
    {
        let (points_text, _) = split_text(text, e);
        let params = e
            .params()
            .check()
            .map_err(|err| fail(&corpus.file, err.to_string()))?;
        let d = extractor.model().config().hidden_size;
        let mut records: Vec<repgeom_metrics::SpectralConvergence> = (job.layers.iter())
            .map(|l| {
                repgeom_metrics::SpectralConvergence::new(
                    d,
                    format!("{} {revision} hidden state {l}", model.label),
                )
            })
            .collect();
        /// What can fail while streaming: the model, or an accumulator.
        enum Failed {
            Extract(repgeom_extract::Error),
            Metric(repgeom_metrics::Error),
        }
        impl From<repgeom_extract::Error> for Failed {
            fn from(e: repgeom_extract::Error) -> Self {
                Self::Extract(e)
            }
        }
        timed(on_step, Step::Spectra, || {
            extractor
                .stream(
                    &points_text,
                    &params,
                    job.max_tokens,
                    &job.layers,
                    &mut |views| -> std::result::Result<(), Failed> {
                        repgeom_metrics::SpectralConvergence::update_each(&mut records, views)
                            .map_err(Failed::Metric)
                    },
                    &mut |_| {},
                )
                .map_err(|err| {
                    let reason = match err {
                        Failed::Extract(e) => e.to_string(),
                        Failed::Metric(e) => e.to_string(),
                    };
                    fail(&corpus.file, format!("spectral_tokens: {reason}"))
                })
        })?;
        let mut out = Spectra::new();
        for (r, &l) in records.iter().zip(&job.layers) {
            out.insert(l, r.spectra()?);
        }
        let json = serde_json::to_string(&out).expect("plain data serialises");
        repgeom_io::atomic_write(path, |w| w.write_all(json.as_bytes()))?;
    }
    Ok((
        rec,
        Extracted {
            acts,
            val_loss,
            val_loss_se,
            probe: probe_out.map(|(p, _)| p),
            spectra: spectra_out.map(|(p, _)| p),
        },
    ))
}
