//! Reading the unembedding matrix `W_U` (V x d) from a file or a HuggingFace checkpoint.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use crate::activations::extension;
use crate::arch::{Arch, GainConvention, NormKind};
use crate::checkpoint::{Checkpoint, open_checkpoint_partial, read_json};
use crate::st::{StFile, list_names};
use crate::{Error, Matrix, Result, mmap, npy};

/// Options for [`read_readout`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadoutOptions {
    /// Keep only the first `vocab_rows` rows (drop padding rows past the real vocabulary).
    /// When `None` and the checkpoint directory has a `tokenizer.json`, its vocabulary size is used.
    pub vocab_rows: Option<usize>,
    /// Read this tensor instead of choosing one by architecture.
    pub tensor: Option<String>,
}

/// The readout (unembedding) matrix and where it came from.
#[derive(Debug, Clone)]
pub struct Readout {
    /// `W_U`, V x d, row-major f32 (after dropping padding rows).
    pub matrix: Matrix,
    /// The file or checkpoint directory read.
    pub source: PathBuf,
    /// The tensor used (e.g. `embed_out.weight`).
    pub tensor: String,
    /// Rows the tensor has in the file, before any rows were dropped.
    pub rows_in_file: usize,
    /// A human-readable remark on choices made (tied fallback, rows dropped), if any.
    pub note: Option<String>,
}

/// Untied output-embedding names, most specific first, probed when the checkpoint's
/// `model_type` is not in [`crate::ARCHS`] (and for a bare `.safetensors` file).
const HEAD_NAMES: &[&str] = &[
    "embed_out.weight",
    "lm_head.weight",
    "model.transformer.ff_out.weight",
];
/// Input-embedding names used when the readout is tied, probed like [`HEAD_NAMES`].
const TIED_NAMES: &[&str] = &[
    "model.embed_tokens.weight",
    "gpt_neox.embed_in.weight",
    "transformer.wte.weight",
    "model.transformer.wte.weight",
];

/// Every tensor name [`read_readout`] may take as `W_U` from a checkpoint directory: the
/// output embeddings (untied) and the input embeddings (tied) of every [`crate::ARCHS`] entry
/// and of the name probes, each list in order and without repeats. For a hub client that fetches
/// only the shard holding the readout.
pub fn readout_tensor_names() -> (Vec<&'static str>, Vec<&'static str>) {
    let mut untied: Vec<&'static str> = Vec::new();
    let mut tied: Vec<&'static str> = Vec::new();
    let add = |list: &mut Vec<&'static str>, names: &[&'static str]| {
        for n in names {
            if !list.contains(n) {
                list.push(n);
            }
        }
    };
    for arch in crate::ARCHS {
        add(&mut untied, arch.readout);
        add(&mut tied, arch.tied);
    }
    add(&mut untied, HEAD_NAMES);
    add(&mut tied, TIED_NAMES);
    (untied, tied)
}

/// What `W_U` goes through before its SVD, beyond choosing the tensor and rows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadoutPrep {
    /// Tensor and rows ([`read_readout`]).
    pub options: ReadoutOptions,
    /// Multiply every column by the final norm's effective gain γ (`1 + w` for Gemma), read
    /// from the checkpoint directory ([`read_final_norm_gain`], [`Readout::fold_gain`]).
    pub fold_norm: bool,
    /// Subtract the mean row ([`Readout::center_rows`]).
    pub center: bool,
}

/// Reads `W_U` from `path` prepared for analysis: [`read_readout`], then the final norm's gain
/// folded in and the rows centred as `prep` asks, then a check that every value is finite. The
/// one loader of the readout matrix behind `repgeom pga`, `repgeom metrics`, `repgeom compare`
/// and the study's units (the caller checks the width against its activations, naming them).
pub fn read_readout_prepared(path: &Path, prep: &ReadoutPrep) -> Result<Readout> {
    let mut r = read_readout(path, &prep.options)?;
    if prep.fold_norm {
        let g = read_final_norm_gain(path)?;
        r.fold_gain(&g.gain, &g.tensor)?;
    }
    if prep.center {
        r.center_rows();
    }
    let (rows, cols) = (r.matrix.rows, r.matrix.cols);
    if let Some(i) = r.matrix.data.iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFinite {
            file: path.to_path_buf(),
            tensor: r.tensor.clone(),
            rows,
            cols,
            row: i / cols.max(1),
            col: i % cols.max(1),
        });
    }
    Ok(r)
}

/// Reads `W_U` from an `.npy` / `.safetensors` [V, d] file or a checkpoint directory.
pub fn read_readout(path: &Path, opts: &ReadoutOptions) -> Result<Readout> {
    let mut notes = Vec::new();
    let (tensor, shape, data, tokenizer_rows) = if path.is_dir() {
        let ck = open_checkpoint_partial(path)?;
        let (name, note) = choose_tensor(&ck, opts)?;
        notes.extend(note);
        let (shape, data) = ck.read_tensor_f32(&name)?;
        let tok = path.join("tokenizer.json");
        let tok_rows = if opts.vocab_rows.is_none() && tok.is_file() {
            Some(tokenizer_vocab_size(&tok)?)
        } else {
            None
        };
        (name, shape, data, tok_rows)
    } else {
        match extension(path).as_str() {
            "npy" => {
                let map = mmap::map_file(path)?;
                let t = npy::parse(Cow::Borrowed(map.bytes()), path, "array")?.into_c_order();
                let data = t.to_f32(path)?;
                (t.name.clone(), t.shape.clone(), data, None)
            }
            "safetensors" => {
                let f = StFile::open(path)?;
                let name = match &opts.tensor {
                    Some(n) => n.clone(),
                    None => {
                        let names = f.names();
                        let two_d: Vec<&String> = names
                            .iter()
                            .filter(|n| f.shape(n).is_some_and(|s| s.len() == 2))
                            .collect();
                        if let Some(n) = HEAD_NAMES.iter().chain(TIED_NAMES).find(|n| f.has(n)) {
                            n.to_string()
                        } else if two_d.len() == 1 {
                            two_d[0].clone()
                        } else {
                            return Err(Error::MissingTensor {
                                file: path.to_path_buf(),
                                tensor: "a single 2-D tensor or one of embed_out.weight, lm_head.weight (set the tensor name)"
                                    .into(),
                                available: list_names(&names),
                            });
                        }
                    }
                };
                let t = f.tensor(&name)?;
                let data = t.to_f32(path)?;
                (name, t.shape.clone(), data, None)
            }
            _ => {
                return Err(Error::UnknownFormat {
                    file: path.to_path_buf(),
                    expected: ".npy, .safetensors or a HuggingFace checkpoint directory",
                });
            }
        }
    };
    if shape.len() != 2 {
        return Err(Error::ShapeMismatch {
            file: path.to_path_buf(),
            tensor,
            expected: "[V, d] (vocabulary x hidden size)".into(),
            found: shape,
        });
    }
    let (rows, cols) = (shape[0], shape[1]);
    let keep = match (opts.vocab_rows, tokenizer_rows) {
        (Some(v), _) => {
            if v == 0 || v > rows {
                return Err(Error::VocabRows {
                    file: path.to_path_buf(),
                    tensor,
                    requested: v,
                    available: rows,
                });
            }
            if v < rows {
                notes.push(format!("using {v} rows as requested (file has {rows})"));
            }
            v
        }
        (None, Some(t)) if t < rows => {
            notes.push(format!(
                "using {t} rows from tokenizer.json (file has {rows})"
            ));
            t
        }
        (None, Some(t)) if t > rows => {
            notes.push(format!(
                "tokenizer.json has {t} tokens but the readout only {rows} rows; using all {rows}"
            ));
            rows
        }
        _ => rows,
    };
    let mut data = data;
    data.truncate(keep * cols);
    Ok(Readout {
        matrix: Matrix::new(keep, cols, data)?,
        source: path.to_path_buf(),
        tensor,
        rows_in_file: rows,
        note: if notes.is_empty() {
            None
        } else {
            Some(notes.join("; "))
        },
    })
}

/// Picks the readout tensor of a checkpoint; returns the name and a note when it fell back.
fn choose_tensor(ck: &Checkpoint, opts: &ReadoutOptions) -> Result<(String, Option<String>)> {
    if let Some(n) = &opts.tensor {
        if !ck.has_tensor(n) {
            return Err(Error::MissingTensor {
                file: ck.dir.clone(),
                tensor: n.clone(),
                available: list_names(&ck.tensor_names()),
            });
        }
        return Ok((n.clone(), None));
    }
    let (heads, tied): (&[&str], &[&str]) =
        match ck.model_type.as_deref().and_then(Arch::for_model_type) {
            Some(arch) => (arch.readout, arch.tied),
            None if ck.architecture.contains("GPTNeoX") => (&["embed_out.weight"], TIED_NAMES),
            None => (HEAD_NAMES, TIED_NAMES),
        };
    if let Some(n) = heads.iter().find(|n| ck.has_tensor(n)) {
        return Ok((n.to_string(), None));
    }
    if ck.tie_word_embeddings
        && let Some(n) = tied.iter().find(|n| ck.has_tensor(n))
    {
        return Ok((
            n.to_string(),
            Some(format!(
                "tied embeddings: using the input embedding `{n}` as W_U"
            )),
        ));
    }
    let mut wanted: Vec<&str> = heads.to_vec();
    if ck.tie_word_embeddings {
        wanted.extend(tied);
    }
    Err(Error::MissingTensor {
        file: ck.dir.clone(),
        tensor: format!(
            "{} ({}, tie_word_embeddings = {})",
            wanted.join(" | "),
            ck.architecture,
            ck.tie_word_embeddings
        ),
        available: list_names(&ck.tensor_names()),
    })
}

/// Vocabulary size of a HuggingFace `tokenizer.json`: entries of `model.vocab` plus
/// `added_tokens` whose content is not already in it (and at least the largest id + 1).
pub(crate) fn tokenizer_vocab_size(path: &Path) -> Result<usize> {
    let js = read_json(path)?;
    let bad = |r: &str| Error::format(path, "json", r.to_string());
    let vocab = js
        .get("model")
        .and_then(|m| m.get("vocab"))
        .ok_or_else(|| bad("no `model.vocab`"))?;
    let mut max_id: Option<u64> = None;
    let mut bump = |id: Option<u64>| {
        if let Some(id) = id {
            max_id = Some(max_id.map_or(id, |m| m.max(id)));
        }
    };
    let (mut count, contents): (usize, std::collections::BTreeSet<String>) = match vocab {
        serde_json::Value::Object(m) => {
            for v in m.values() {
                bump(v.as_u64());
            }
            (m.len(), m.keys().cloned().collect())
        }
        // Unigram models store `[[piece, score], ...]`; the id is the position.
        serde_json::Value::Array(a) => {
            if !a.is_empty() {
                bump(Some(a.len() as u64 - 1));
            }
            let pieces = a
                .iter()
                .filter_map(|p| p.get(0).and_then(|s| s.as_str()).map(str::to_string))
                .collect();
            (a.len(), pieces)
        }
        _ => return Err(bad("`model.vocab` is neither an object nor an array")),
    };
    if let Some(added) = js.get("added_tokens").and_then(|a| a.as_array()) {
        for t in added {
            let content = t
                .get("content")
                .and_then(|c| c.as_str())
                .unwrap_or_default();
            bump(t.get("id").and_then(|i| i.as_u64()));
            if !contents.contains(content) {
                count += 1;
            }
        }
    }
    let by_id = max_id.map_or(0, |m| {
        usize::try_from(m).unwrap_or(usize::MAX).saturating_add(1)
    });
    Ok(count.max(by_id))
}

/// Final-norm gain names, most specific first: GPT-NeoX, Llama/OLMo-2/Mistral, GPT-2, OLMo
/// (hf_olmo); probed when the checkpoint's `model_type` is not in [`crate::ARCHS`].
const FINAL_NORM_NAMES: &[&str] = &[
    "gpt_neox.final_layer_norm.weight",
    "model.norm.weight",
    "transformer.ln_f.weight",
    "model.transformer.ln_f.weight",
];

/// The gain of the final norm before the readout, as [`read_final_norm_gain`] returns it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FinalNormGain {
    /// The stored weight tensor (e.g. `model.norm.weight`).
    pub tensor: String,
    /// How the stored weight became [`FinalNormGain::gain`] ([`GainConvention::Weight`] when
    /// the `model_type` is not in [`crate::ARCHS`]).
    pub convention: GainConvention,
    /// The effective gain γ, one per hidden dimension, that the norm multiplies by: the
    /// stored weight `w`, or `1 + w` (Gemma, Gemma-2), computed in `f32`.
    pub gain: Vec<f32>,
}

/// Reads the effective gain γ (length d) of the final norm before the readout from a
/// checkpoint directory. The `config.json` `model_type` picks the tensor and the convention
/// from [`crate::ARCHS`] (Gemma's `(1 + w)` is applied); for a `model_type` not in the table
/// the first present of a fixed list of names is read as γ. A model whose final norm has no
/// gain (OLMo-1's non-parametric LayerNorm) is an [`Error::NoNormGain`]; a checkpoint without
/// the tensor, or a path that is not a directory, an [`Error::MissingTensor`] naming the
/// tensors present.
pub fn read_final_norm_gain(dir: &Path) -> Result<FinalNormGain> {
    if !dir.is_dir() {
        return Err(Error::MissingTensor {
            file: dir.to_path_buf(),
            tensor: format!("the final norm's gain ({})", FINAL_NORM_NAMES.join(" | ")),
            available:
                "none: the gain is read from a checkpoint directory, not a single matrix file"
                    .into(),
        });
    }
    let ck = open_checkpoint_partial(dir)?;
    let (name, convention) = match ck.model_type.as_deref().and_then(Arch::for_model_type) {
        Some(arch) => {
            let module = arch.final_norm_in(|n| ck.has_tensor(n));
            let name = format!("{module}.weight");
            if arch.norm_kind == NormKind::BareLayerNorm {
                return Err(Error::NoNormGain {
                    file: dir.to_path_buf(),
                    model_type: arch.model_type.to_string(),
                    tensor: name,
                });
            }
            if !ck.has_tensor(&name) {
                let wanted: Vec<String> = arch
                    .final_norm
                    .iter()
                    .map(|n| format!("{n}.weight"))
                    .collect();
                return Err(Error::MissingTensor {
                    file: dir.to_path_buf(),
                    tensor: format!(
                        "the final norm's gain ({}, model_type {})",
                        wanted.join(" | "),
                        arch.model_type
                    ),
                    available: list_names(&ck.tensor_names()),
                });
            }
            (name, arch.gain)
        }
        None => {
            let Some(name) = FINAL_NORM_NAMES.iter().find(|n| ck.has_tensor(n)) else {
                return Err(Error::MissingTensor {
                    file: dir.to_path_buf(),
                    tensor: format!("the final norm's gain ({})", FINAL_NORM_NAMES.join(" | ")),
                    available: list_names(&ck.tensor_names()),
                });
            };
            (name.to_string(), GainConvention::Weight)
        }
    };
    let (shape, mut gain) = ck.read_tensor_f32(&name)?;
    if shape.len() != 1 {
        return Err(Error::ShapeMismatch {
            file: dir.to_path_buf(),
            tensor: name,
            expected: "[d] (one gain per hidden dimension)".into(),
            found: shape,
        });
    }
    convention.apply(&mut gain);
    Ok(FinalNormGain {
        tensor: name,
        convention,
        gain,
    })
}

impl Readout {
    /// Folds the final norm's effective gain into `W_U`: column `j` is multiplied by
    /// `gamma[j]`, so the logits are `W_U diag(γ) n(h)` (plus `W_U β` for a LayerNorm's bias)
    /// with `n` the gain-free normalisation. `gamma` is the effective gain
    /// ([`FinalNormGain::gain`], `1 + w` for Gemma), not necessarily the stored tensor.
    pub fn fold_gain(&mut self, gamma: &[f32], gamma_name: &str) -> Result<()> {
        let (rows, cols) = (self.matrix.rows, self.matrix.cols);
        if gamma.len() != cols {
            return Err(Error::ShapeMismatch {
                file: self.source.clone(),
                tensor: gamma_name.to_string(),
                expected: format!("[{cols}] to match W_U `{}` [{rows}, {cols}]", self.tensor),
                found: vec![gamma.len()],
            });
        }
        for row in self.matrix.data.chunks_exact_mut(cols) {
            for (w, g) in row.iter_mut().zip(gamma) {
                *w *= g;
            }
        }
        Ok(())
    }

    /// Centres the rows of `W_U`: subtracts the mean over the vocabulary (accumulated in
    /// `f64`) from every row. Adding one vector to every row shifts all logits of a hidden
    /// state by the same amount, which the softmax ignores; centring removes that direction.
    /// ([`Matrix::center_rows`] on the matrix.)
    pub fn center_rows(&mut self) {
        self.matrix.center_rows();
    }
}

impl Matrix {
    /// Subtracts the mean row (accumulated in `f64` over the rows in order) from every row.
    pub fn center_rows(&mut self) {
        let (rows, cols) = (self.rows, self.cols);
        if rows == 0 {
            return;
        }
        let mut mean = vec![0.0f64; cols];
        for row in self.data.chunks_exact(cols) {
            for (m, w) in mean.iter_mut().zip(row) {
                *m += f64::from(*w);
            }
        }
        mean.iter_mut().for_each(|m| *m /= rows as f64);
        for row in self.data.chunks_exact_mut(cols) {
            for (w, m) in row.iter_mut().zip(&mean) {
                *w = (f64::from(*w) - m) as f32;
            }
        }
    }
}
