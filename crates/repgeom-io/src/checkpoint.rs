//! HuggingFace checkpoint directories: `config.json` plus one or more safetensors shards.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::arch::Arch;
use crate::digest::{WeightsDigest, WeightsHasher};
use crate::st::{StFile, list_names};
use crate::tensor::FloatValues;
use crate::{Error, RelPath, Result};

/// An opened HuggingFace checkpoint directory.
///
/// Shards are memory-mapped and only their headers are parsed at open time; tensor data is
/// read on demand: one tensor in f32 by [`Checkpoint::read_tensor_f32`], every float tensor
/// at its stored precision (and the weights hash) by [`Checkpoint::read_float_tensors`].
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
    /// (or hf_olmo's `weight_tying`); when neither is present, the family's default from
    /// [`crate::ARCHS`] (`false` for Llama, GPT-NeoX, ...), else HuggingFace's
    /// `PretrainedConfig` default, `true`.
    pub tie_word_embeddings: bool,
    /// Mapped shards; `None` for a shard the index lists but that is absent (only with
    /// [`open_checkpoint_partial`]).
    shards: Vec<Option<StFile>>,
    /// Path of each shard, mapped or not.
    shard_paths: Vec<PathBuf>,
    /// `model.safetensors.index.json`, when the checkpoint is sharded.
    index_path: Option<PathBuf>,
    /// Tensor name -> index into `shards`.
    index: BTreeMap<String, usize>,
}

/// One floating-point tensor of a checkpoint at its stored precision
/// ([`Checkpoint::read_float_tensors`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FloatTensor {
    /// The tensor's name in the checkpoint.
    pub name: String,
    /// Its shape (C order).
    pub shape: Vec<usize>,
    /// Its values.
    pub values: FloatValues,
}

/// Opens a checkpoint directory: reads `config.json`, then maps `model.safetensors.index.json`'s
/// shards, or `model.safetensors`, or every `*.safetensors` file in the directory.
pub fn open_checkpoint(dir: &Path) -> Result<Checkpoint> {
    open(dir, true)
}

/// Like [`open_checkpoint`], but a shard that the index lists and that is absent from the
/// directory is tolerated: its tensors are known by name (so the choice between an output and
/// a tied input embedding is the same as with every shard present), and reading one is a
/// [`Error::MissingShard`]. This opens a hub snapshot holding only the readout's shard.
pub fn open_checkpoint_partial(dir: &Path) -> Result<Checkpoint> {
    open(dir, false)
}

fn open(dir: &Path, strict: bool) -> Result<Checkpoint> {
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
        .unwrap_or_else(|| Arch::for_config(&config).is_none_or(|a| a.tie_default));

    let index_path = dir.join("model.safetensors.index.json");
    let mut shards: Vec<Option<StFile>> = Vec::new();
    let mut shard_paths = Vec::new();
    let mut index = BTreeMap::new();
    let sharded = index_path.is_file();
    if sharded {
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
            // The index is untrusted: a shard name that would leave the checkpoint folder is
            // refused before anything is opened.
            let p = RelPath::new(f)
                .map_err(|name| Error::UnsafeName {
                    file: index_path.clone(),
                    dir: dir.to_path_buf(),
                    name,
                })?
                .under(dir);
            let missing = Error::MissingShard {
                index: index_path.clone(),
                shard: f.clone(),
            };
            if !p.is_file() {
                if strict {
                    return Err(missing);
                }
                shards.push(None);
            } else {
                shards.push(Some(StFile::open(&p)?));
            }
            shard_paths.push(p);
        }
        for (name, v) in map {
            let f = v.as_str().unwrap_or_default();
            let i = files[f];
            if let Some(shard) = &shards[i]
                && !shard.has(name)
            {
                return Err(Error::MissingTensor {
                    file: shard.path.clone(),
                    tensor: name.clone(),
                    available: format!(
                        "the index lists it in this shard, which holds: {}",
                        list_names(&shard.names())
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
                        shard_paths[prev].display(),
                        f.path.display()
                    )));
                }
            }
            shard_paths.push(f.path.clone());
            shards.push(Some(f));
        }
    }
    Ok(Checkpoint {
        dir: dir.to_path_buf(),
        config,
        architecture,
        model_type,
        tie_word_embeddings,
        shards,
        shard_paths,
        index_path: sharded.then_some(index_path),
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
        self.shards[*self.index.get(name)?].as_ref()?.shape(name)
    }

    /// The shard file holding a tensor, if present.
    pub fn tensor_file(&self, name: &str) -> Option<&Path> {
        Some(&self.shard_paths[*self.index.get(name)?])
    }

    /// Reads every floating-point tensor of the checkpoint's files once, at the precision it is
    /// stored in ([`FloatValues`]: f16 and bf16 as they are), in parallel over tensors on
    /// rayon's current pool, and returns them in byte-wise order of the names. With `hash`,
    /// the weights hash ([`WeightsHasher`]) of every tensor's stored bytes is computed at the
    /// same time on one worker, from the same mapped pages, so that loading a model and
    /// hashing it cost one read of the weights and the hash's one sequential pass overlaps the
    /// conversions. A tensor's mapped pages are released once it has been converted and
    /// hashed. Results and errors do not depend on the thread count: the first tensor in name
    /// order that fails is the one reported.
    ///
    /// The hash is `repgeom_hub::weights_hash`'s of the directory, or `None` (also without
    /// `hash`) where that would cover other bytes: a shard the index lists is absent
    /// ([`open_checkpoint_partial`]), `model.safetensors` sits beside other `*.safetensors`
    /// files (which this checkpoint does not read), or a name is in two files.
    pub fn read_float_tensors(
        &self,
        hash: bool,
    ) -> Result<(Vec<FloatTensor>, Option<WeightsDigest>)> {
        use rayon::prelude::*;
        use std::sync::atomic::{AtomicU8, Ordering};

        let mut exact = true;
        let mut all: BTreeMap<String, usize> = BTreeMap::new();
        for (i, shard) in self.shards.iter().enumerate() {
            let Some(shard) = shard else {
                exact = false;
                continue;
            };
            for n in shard.names() {
                if all.insert(n, i).is_some() {
                    exact = false;
                }
            }
        }
        if self.index_path.is_none()
            && self
                .shard_paths
                .iter()
                .any(|p| p.file_name().is_some_and(|n| n == "model.safetensors"))
        {
            let rd = std::fs::read_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
            exact &= !rd.filter_map(|e| e.ok().map(|e| e.path())).any(|p| {
                p.extension().is_some_and(|e| e == "safetensors")
                    && p.file_name().is_some_and(|n| n != "model.safetensors")
            });
        }
        let names: Vec<(&str, &StFile)> = all
            .iter()
            .filter_map(|(n, &i)| self.shards[i].as_ref().map(|s| (n.as_str(), s)))
            .collect();
        // Per tensor, the readers (the hash, the conversion) still to pass: the last one
        // releases its mapped pages.
        let left: Vec<AtomicU8> = names
            .iter()
            .map(|(n, s)| AtomicU8::new(u8::from(hash) + u8::from(s.is_float(n))))
            .collect();
        let done = |k: usize| {
            if left[k].fetch_sub(1, Ordering::AcqRel) == 1 {
                names[k].1.release_tensor(names[k].0);
            }
        };
        // Each side's first failure as (tensor index, error).
        let hashing = || -> std::result::Result<WeightsDigest, (usize, Error)> {
            let mut h = WeightsHasher::new();
            for (k, &(name, shard)) in names.iter().enumerate() {
                let (dtype, shape, bytes) = shard.raw(name).ok_or_else(|| {
                    let e = Error::format(
                        &shard.path,
                        "safetensors",
                        format!("tensor `{name}` lies outside the file"),
                    );
                    (k, e)
                })?;
                let dims: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
                h.tensor(name, &dtype, &dims, bytes.len() as u64);
                h.update(bytes);
                done(k);
            }
            Ok(h.finish())
        };
        let converting = || -> std::result::Result<Vec<FloatTensor>, (usize, Error)> {
            let parts: Vec<_> = (0..names.len())
                .into_par_iter()
                .filter(|&k| names[k].1.is_float(names[k].0))
                .map(|k| {
                    let (name, shard) = names[k];
                    let read = shard.tensor(name).and_then(|t| {
                        let values = t.to_stored(&shard.path)?;
                        Ok(FloatTensor {
                            name: name.to_string(),
                            shape: t.shape.clone(),
                            values,
                        })
                    });
                    done(k);
                    read.map_err(|e| (k, e))
                })
                .collect();
            // in name order, so the first failure is the same at any thread count
            parts.into_iter().collect()
        };
        let (digest, tensors) = if hash {
            rayon::join(|| hashing().map(Some), converting)
        } else {
            (Ok(None), converting())
        };
        match (digest, tensors) {
            (Ok(digest), Ok(tensors)) => Ok((tensors, digest.filter(|_| exact))),
            (Err((a, e)), Err((b, _))) if a <= b => Err(e),
            (_, Err((_, e))) | (Err((_, e)), _) => Err(e),
        }
    }

    /// Reads one tensor as f32 (from f32, f16, bf16 or f64), C order; returns (shape, data).
    pub fn read_tensor_f32(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        let i = *self.index.get(name).ok_or_else(|| Error::MissingTensor {
            file: self.dir.clone(),
            tensor: name.to_string(),
            available: list_names(&self.tensor_names()),
        })?;
        let Some(shard) = &self.shards[i] else {
            return Err(Error::MissingShard {
                index: self.index_path.clone().unwrap_or_else(|| self.dir.clone()),
                shard: self.shard_paths[i]
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
            });
        };
        let t = shard.tensor(name)?;
        let data = t.to_f32(&shard.path)?;
        // The mapped bytes are not needed again: without this, a model loaded from its maps
        // would hold the file's pages (file size) beside its own copy of the weights.
        shard.release_tensor(name);
        Ok((t.shape, data))
    }
}
