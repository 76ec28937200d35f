//! HuggingFace checkpoint directories: `config.json` plus one or more safetensors shards.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::st::{StFile, list_names};
use crate::{Error, Result};

/// An opened HuggingFace checkpoint directory.
///
/// Shards are memory-mapped and only their headers are parsed at open time; tensor data is
/// read and converted to f32 on demand by [`Checkpoint::read_tensor_f32`].
#[derive(Debug)]
pub struct Checkpoint {
    /// The checkpoint directory.
    pub dir: PathBuf,
    /// The parsed `config.json`.
    pub config: serde_json::Value,
    /// `architectures[0]` from the config, else `model_type`, else `unknown`.
    pub architecture: String,
    /// `model_type` from the config, if present.
    pub model_type: Option<String>,
    /// Whether the output embedding is tied to the input embedding: `tie_word_embeddings`
    /// (or hf_olmo's `weight_tying`); HuggingFace's default, `true`, when neither is present.
    pub tie_word_embeddings: bool,
    shards: Vec<StFile>,
    /// Tensor name -> index into `shards`.
    index: BTreeMap<String, usize>,
}

/// Opens a checkpoint directory: reads `config.json`, then maps `model.safetensors.index.json`'s
/// shards, or `model.safetensors`, or every `*.safetensors` file in the directory.
pub fn open_checkpoint(dir: &Path) -> Result<Checkpoint> {
    let fail = |reason: String| Error::Checkpoint {
        dir: dir.to_path_buf(),
        reason,
    };
    if !dir.is_dir() {
        return Err(fail("not a directory".into()));
    }
    let config_path = dir.join("config.json");
    if !config_path.is_file() {
        return Err(fail("no config.json in the checkpoint directory".into()));
    }
    let config = read_json(&config_path)?;
    if !config.is_object() {
        return Err(Error::format(
            &config_path,
            "json",
            "config is not a JSON object",
        ));
    }
    let model_type = config
        .get("model_type")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    let architecture = config
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .or_else(|| model_type.clone())
        .unwrap_or_else(|| "unknown".into());
    let tie_word_embeddings = config
        .get("tie_word_embeddings")
        .and_then(|v| v.as_bool())
        .or_else(|| config.get("weight_tying").and_then(|v| v.as_bool()))
        .unwrap_or(true);

    let index_path = dir.join("model.safetensors.index.json");
    let mut shards = Vec::new();
    let mut index = BTreeMap::new();
    if index_path.is_file() {
        let js = read_json(&index_path)?;
        let map = js
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| Error::format(&index_path, "json", "no `weight_map` object"))?;
        let mut files: BTreeMap<String, usize> = BTreeMap::new();
        for v in map.values() {
            let f = v.as_str().ok_or_else(|| {
                Error::format(&index_path, "json", "`weight_map` values must be strings")
            })?;
            let next = files.len();
            files.entry(f.to_string()).or_insert(next);
        }
        // Deterministic shard order: sorted by file name.
        let names: Vec<String> = files.keys().cloned().collect();
        for (i, f) in names.iter().enumerate() {
            files.insert(f.clone(), i);
            let p = dir.join(f);
            if Path::new(f).components().count() != 1 || !p.is_file() {
                return Err(Error::MissingShard {
                    index: index_path.clone(),
                    shard: f.clone(),
                });
            }
            shards.push(StFile::open(&p)?);
        }
        for (name, v) in map {
            let f = v.as_str().unwrap_or_default();
            let i = files[f];
            if !shards[i].has(name) {
                return Err(Error::MissingTensor {
                    file: shards[i].path.clone(),
                    tensor: name.clone(),
                    available: format!(
                        "the index lists it in this shard, which holds: {}",
                        list_names(&shards[i].names())
                    ),
                });
            }
            index.insert(name.clone(), i);
        }
    } else {
        let single = dir.join("model.safetensors");
        let files: Vec<PathBuf> = if single.is_file() {
            vec![single]
        } else {
            let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
            let mut v: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "safetensors") && p.is_file())
                .collect();
            v.sort();
            v
        };
        if files.is_empty() {
            let bin = dir.join("pytorch_model.bin").is_file();
            return Err(fail(if bin {
                "no safetensors weights (only pytorch_model.bin, which is not read: convert it to safetensors)".into()
            } else {
                "no model.safetensors, model.safetensors.index.json or *.safetensors file".into()
            }));
        }
        for p in files {
            let f = StFile::open(&p)?;
            let i = shards.len();
            for n in f.names() {
                if let Some(prev) = index.insert(n.clone(), i) {
                    return Err(fail(format!(
                        "tensor `{n}` appears in both {} and {}",
                        shards[prev].path.display(),
                        f.path.display()
                    )));
                }
            }
            shards.push(f);
        }
    }
    Ok(Checkpoint {
        dir: dir.to_path_buf(),
        config,
        architecture,
        model_type,
        tie_word_embeddings,
        shards,
        index,
    })
}

pub(crate) fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_slice(&text).map_err(|e| Error::format(path, "json", e.to_string()))
}

impl Checkpoint {
    /// All tensor names, sorted.
    pub fn tensor_names(&self) -> Vec<String> {
        self.index.keys().cloned().collect()
    }

    /// Whether the checkpoint holds a tensor of this name.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The shape of a tensor, if present.
    pub fn tensor_shape(&self, name: &str) -> Option<Vec<usize>> {
        self.shards[*self.index.get(name)?].shape(name)
    }

    /// The shard file holding a tensor, if present.
    pub fn tensor_file(&self, name: &str) -> Option<&Path> {
        Some(&self.shards[*self.index.get(name)?].path)
    }

    /// Reads one tensor as f32 (from f32, f16, bf16 or f64), C order; returns (shape, data).
    pub fn read_tensor_f32(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        let i = *self.index.get(name).ok_or_else(|| Error::MissingTensor {
            file: self.dir.clone(),
            tensor: name.to_string(),
            available: list_names(&self.tensor_names()),
        })?;
        let shard = &self.shards[i];
        let t = shard.tensor(name)?;
        let data = t.to_f32(&shard.path)?;
        Ok((t.shape, data))
    }
}
