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
//! corpus or setting never does. Files are written atomically and the `.json` last, so a
//! process killed mid-extraction leaves nothing that counts as done.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use repgeom_extract::{ExtractParams, Extractor, Pool};
use repgeom_hub::{Files, Hub};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::manifest::{CheckpointSpec, ExtractSpec, Manifest, ModelSpec, ProbeSpec};
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

/// Resolves a hub checkpoint (downloading what is missing) and hashes its weights; the
/// record is kept in `DIR/checkpoints/` (reused when the commit is unchanged).
pub(crate) fn audit(
    hub: &Hub,
    dir: &Path,
    model: &ModelSpec,
    ckpt: &CheckpointSpec,
) -> Result<(CheckpointRecord, PathBuf)> {
    let id = model.hub.as_deref().expect("hub checkpoint");
    let rev = ckpt.revision.as_deref().expect("hub checkpoint");
    let snap = hub.snapshot(id, rev, &Files::Full, &mut |_| {})?;
    let path = checkpoint_record_path(dir, &model.label, &ckpt.name);
    if let Ok(text) = fs::read_to_string(&path)
        && let Ok(r) = serde_json::from_str::<CheckpointRecord>(&text)
        && r.commit == snap.commit
        && r.hub == id
    {
        return Ok((r, snap.dir));
    }
    let digest = repgeom_hub::weights_hash(&snap.dir)?;
    let rec = CheckpointRecord {
        model: model.label.clone(),
        checkpoint: ckpt.name.clone(),
        hub: id.into(),
        revision: rev.into(),
        commit: snap.commit.clone(),
        weights_sha256: digest.sha256,
        parameters: digest.parameters,
    };
    let json = serde_json::to_string_pretty(&rec).expect("plain data serialises");
    let parent = path.parent().expect("record path has a parent");
    fs::create_dir_all(parent).map_err(io("create", parent))?;
    repgeom_io::atomic_write(&path, |w| w.write_all(json.as_bytes()))?;
    Ok((rec, snap.dir))
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
        "n_points": e.n_points,
        "seq_len": e.seq_len,
        "seed": e.seed,
        "skip_first": true,
        "loss": e.loss,
        "val_fraction": if e.loss { Some(e.val_fraction) } else { None },
    });
    // Added when they came in, and only away from the design before them, so that caches of
    // that design keep their keys.
    let density = e.params().density();
    if density != 1 {
        s["points_per_sequence"] = density.into();
    }
    if e.loss {
        s["loss_tokens"] = e.loss_tokens.into();
    }
    s
}

/// The corpus split into the part points are sampled from and the held-out part for the
/// loss (the last `val_fraction` of its lines, at least one line).
fn split_text(text: &str, e: &ExtractSpec) -> (String, Option<String>) {
    if !e.loss {
        return (text.to_string(), None);
    }
    let lines: Vec<&str> = text.lines().collect();
    let n_val =
        ((lines.len() as f64 * e.val_fraction).ceil() as usize).clamp(1, lines.len().max(1));
    let cut = lines.len().saturating_sub(n_val);
    (lines[..cut].join("\n"), Some(lines[cut..].join("\n")))
}

/// Labelled texts of the `[probe]` table: (texts, one per line, and labels).
pub(crate) fn probe_texts(p: &ProbeSpec) -> std::result::Result<(String, Vec<usize>), String> {
    let labels =
        repgeom_io::read_labels(&p.labels, p.label_column.as_deref()).map_err(|e| e.to_string())?;
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(p.text_column.is_some())
        .flexible(true)
        .from_path(&p.labels)
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
        let t = match text_idx {
            Some(j) => rec.get(j).unwrap_or("").to_string(),
            None => rec.iter().skip(1).collect::<Vec<_>>().join(" "),
        };
        // One example per line: newlines become spaces, and (unless turned off) backslashes,
        // AG News's escaped line breaks.
        let t = t.replace(['\n', '\r'], " ");
        let t = if p.backslash_to_space {
            t.replace('\\', " ")
        } else {
            t
        };
        texts.push(t.trim().to_string());
    }
    let mut values = labels.values;
    if values.len() != texts.len() {
        return Err(format!("{} labels but {} texts", values.len(), texts.len()));
    }
    if let Some(n) = p.n_examples {
        if n > texts.len() {
            return Err(format!(
                "n_examples = {n} but the file has {} rows",
                texts.len()
            ));
        }
        texts.truncate(n);
        values.truncate(n);
    }
    if let Some(i) = texts.iter().position(|t| t.is_empty()) {
        return Err(format!("row {} has an empty text", i + 1));
    }
    Ok((texts.join("\n"), values))
}

/// The activations (and probe features and validation loss) of one hub checkpoint, from
/// the cache under `dir` or extracted now (one process at a time per key).
pub(crate) fn extract(
    manifest: &Manifest,
    dir: &Path,
    model: &ModelSpec,
    rec: &CheckpointRecord,
    snapshot: &Path,
) -> Result<Extracted> {
    let e = manifest
        .extract
        .as_ref()
        .expect("checked: [extract] with revisions");
    let fail = |file: &Path, reason: String| Error::Extract {
        model: model.label.clone(),
        revision: rec.revision.clone(),
        file: file.to_path_buf(),
        reason,
    };
    let text_bytes = fs::read(&e.text).map_err(io("read corpus", &e.text))?;
    let text = String::from_utf8(text_bytes.clone())
        .map_err(|_| fail(&e.text, "the corpus is not UTF-8".into()))?;
    let text_sha = sha256_hex(&text_bytes);
    let key_src = serde_json::json!({
        "format": FORMAT,
        "weights_sha256": rec.weights_sha256,
        "text_sha256": text_sha,
        "settings": settings(e),
    });
    let key = sha256_hex(key_src.to_string().as_bytes());
    let cache = dir.join("activations");
    fs::create_dir_all(&cache).map_err(io("create", &cache))?;
    let acts = cache.join(format!("{key}.safetensors"));
    let meta = cache.join(format!("{key}.json"));

    let lock_path = cache.join(format!("{key}.lock"));
    let lock = File::create(&lock_path).map_err(io("create", &lock_path))?;
    lock.lock().map_err(io("lock", &lock_path))?;
    if let Ok(t) = fs::read_to_string(&meta)
        && let Ok(r) = serde_json::from_str::<ActsRecord>(&t)
        && r.key == key
        && acts.is_file()
    {
        return Ok(Extracted {
            acts,
            val_loss: r.val_loss,
            val_loss_se: r.val_loss_se,
        });
    }
    let extractor = Extractor::load(snapshot).map_err(|err| fail(snapshot, err.to_string()))?;
    let (points_text, val_text) = split_text(&text, e);
    let params = e
        .params()
        .check()
        .map_err(|err| fail(&e.text, err.to_string()))?;
    let out = extractor
        .extract(&points_text, &params, &mut |_| {})
        .map_err(|err| fail(&e.text, err.to_string()))?;
    let val = match &val_text {
        Some(v) => Some(
            extractor
                .loss(v, &params, &mut |_| {})
                .map_err(|err| fail(&e.text, format!("held-out part for the loss: {err}")))?,
        ),
        None => None,
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
        settings: settings(e),
        n_points: out.n_points,
        val_loss: val.map(|l| l.mean),
        val_loss_se: val.map(|l| l.se),
        val_tokens: val.map(|l| l.tokens),
    };
    let json = serde_json::to_string_pretty(&r).expect("plain data serialises");
    repgeom_io::atomic_write(&meta, |w| w.write_all(json.as_bytes()))?;
    Ok(Extracted {
        acts,
        val_loss: val.map(|l| l.mean),
        val_loss_se: val.map(|l| l.se),
    })
}

/// Mean-pooled features of the `[probe]` texts for one hub checkpoint (cached like the
/// activations), and the labels.
pub(crate) fn probe_features(
    p: &ProbeSpec,
    dir: &Path,
    model: &ModelSpec,
    rec: &CheckpointRecord,
    snapshot: &Path,
    batch_size: usize,
) -> Result<(PathBuf, Vec<usize>)> {
    let fail = |file: &Path, reason: String| Error::Extract {
        model: model.label.clone(),
        revision: rec.revision.clone(),
        file: file.to_path_buf(),
        reason,
    };
    let (texts, labels) = probe_texts(p).map_err(|r| fail(&p.labels, r))?;
    let mut src = serde_json::json!({
        "format": FORMAT,
        "weights_sha256": rec.weights_sha256,
        "texts_sha256": sha256_hex(texts.as_bytes()),
        "seq_len": p.seq_len,
        "pool": "mean",
    });
    // Recorded when off only, so that the keys of earlier runs (backslashes replaced) stay.
    if !p.backslash_to_space {
        src["backslash_to_space"] = false.into();
    }
    let key = sha256_hex(src.to_string().as_bytes());
    let cache = dir.join("activations");
    fs::create_dir_all(&cache).map_err(io("create", &cache))?;
    let path = cache.join(format!("{key}.probe.safetensors"));
    let lock_path = cache.join(format!("{key}.probe.lock"));
    let lock = File::create(&lock_path).map_err(io("create", &lock_path))?;
    lock.lock().map_err(io("lock", &lock_path))?;
    if path.is_file() {
        return Ok((path, labels));
    }
    let extractor = Extractor::load(snapshot).map_err(|err| fail(snapshot, err.to_string()))?;
    let params = ExtractParams {
        seq_len: p.seq_len,
        n_points: None,
        seed: 0,
        skip_first: true,
        pool: Pool::Mean,
        loss: false,
        batch_size: batch_size.max(1),
        ..Default::default()
    }
    .check()
    .map_err(|err| fail(&p.labels, err.to_string()))?;
    let out = extractor
        .extract(&texts, &params, &mut |_| {})
        .map_err(|err| fail(&p.labels, err.to_string()))?;
    if out.n_points != labels.len() {
        return Err(fail(
            &p.labels,
            format!("{} features for {} labels", out.n_points, labels.len()),
        ));
    }
    out.write(&path)
        .map_err(|err| fail(&path, err.to_string()))?;
    Ok((path, labels))
}
