//! Turning a text into sampled hidden states: tokenising, splitting, sampling, pooling, loss.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokenizers::Tokenizer;

use crate::model::Model;
use crate::{Error, Result};

/// How hidden states become points.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pool {
    /// One point per sampled token position.
    #[default]
    Tokens,
    /// One point per input line: the mean of the line's hidden states (for probes).
    Mean,
}

impl Pool {
    /// The name written to the metadata (`tokens`, `mean`).
    pub fn name(self) -> &'static str {
        match self {
            Pool::Tokens => "tokens",
            Pool::Mean => "mean",
        }
    }
}

/// Extraction options, unchecked. [`ExtractParams::check`] gives [`ValidExtractParams`].
#[derive(Clone, Debug, PartialEq)]
pub struct ExtractParams {
    /// Tokens per sequence (`Pool::Tokens`), or the most tokens kept of one line (`Pool::Mean`).
    pub seq_len: usize,
    /// Points to sample (`Pool::Tokens`, required), or the first lines to use (`Pool::Mean`;
    /// `None` = every line).
    pub n_points: Option<usize>,
    /// Seed of the position sampler.
    pub seed: u64,
    /// Never sample position 0 of a sequence (and leave it out of line means when the line
    /// has more than one token).
    pub skip_first: bool,
    /// Points are token positions or line means.
    pub pool: Pool,
    /// Also compute the mean next-token cross-entropy (runs every sequence, not only those
    /// holding sampled points).
    pub loss: bool,
    /// Sequences (or lines) per forward pass. Results do not depend on it beyond f32
    /// rounding.
    pub batch_size: usize,
    /// Bytes the activations of one batch may take (`None`: no check). A batch whose
    /// estimate ([`Model::activation_bytes`]) exceeds it is refused before anything runs,
    /// with the largest batch size that fits.
    pub memory_budget: Option<u64>,
}

/// The default `batch_size`: the best tokens/s of a Pythia-70M-shaped model on a 2-core CPU
/// (`cargo xtask bench extract`, see `docs/extraction.md`).
pub const DEFAULT_BATCH_SIZE: usize = 8;

impl Default for ExtractParams {
    fn default() -> Self {
        Self {
            seq_len: 256,
            n_points: Some(2048),
            seed: 0,
            skip_first: true,
            pool: Pool::Tokens,
            loss: false,
            batch_size: DEFAULT_BATCH_SIZE,
            memory_budget: None,
        }
    }
}

/// Checked [`ExtractParams`].
#[derive(Clone, Debug, PartialEq)]
pub struct ValidExtractParams(ExtractParams);

impl ExtractParams {
    /// Checks the ranges that do not depend on the text or the model.
    pub fn check(self) -> Result<ValidExtractParams> {
        let bad = |field, reason: &str| {
            Err(Error::InvalidParams {
                field,
                reason: reason.into(),
            })
        };
        if self.seq_len < 2 {
            return bad("seq_len", "must be at least 2");
        }
        if self.batch_size == 0 {
            return bad("batch_size", "must be at least 1");
        }
        match (self.pool, self.n_points) {
            (_, Some(0)) => return bad("n_points", "must be at least 1"),
            (Pool::Tokens, None) => return bad("n_points", "required with Pool::Tokens"),
            _ => {}
        }
        Ok(ValidExtractParams(self))
    }
}

impl ValidExtractParams {
    /// The checked values.
    pub fn get(&self) -> &ExtractParams {
        &self.0
    }
}

/// Progress reported after each sequence (or line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Sequences run so far.
    pub sequences_done: usize,
    /// Sequences to run in all.
    pub sequences_total: usize,
    /// Tokens run so far.
    pub tokens_done: usize,
    /// Tokens to run in all.
    pub tokens_total: usize,
}

/// Mean next-token cross-entropy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Loss {
    /// Mean over all predicted tokens, in nats.
    pub mean: f64,
    /// Number of predicted tokens (T - 1 per sequence).
    pub tokens: usize,
}

/// The sampled hidden states of every layer, with what is needed to trace each point back.
#[derive(Clone, Debug)]
pub struct Extraction {
    /// L + 1 entries (HuggingFace order), each row-major `[n_points, hidden_size]`.
    pub hidden_states: Vec<Vec<f32>>,
    /// Number of points (rows).
    pub n_points: usize,
    /// Model width d (columns).
    pub hidden_size: usize,
    /// `Pool::Tokens`: (sequence, position in the sequence) of each point.
    /// `Pool::Mean`: (0-based line, number of tokens averaged).
    pub positions: Vec<(usize, usize)>,
    /// `Pool::Tokens`: the token at each point (one id). `Pool::Mean`: the line's token ids.
    pub token_ids: Vec<Vec<u32>>,
    /// The loss, when asked for.
    pub loss: Option<Loss>,
    /// The header metadata written with the tensors (all keys listed in `docs/extraction.md`).
    pub metadata: BTreeMap<String, String>,
}

impl Extraction {
    /// Writes `hidden_states.{i}` tensors (`[n_points, d]`, f32) and the metadata as one
    /// safetensors file, atomically.
    pub fn write(&self, path: &Path) -> Result<()> {
        let names: Vec<String> = (0..self.hidden_states.len())
            .map(|i| format!("hidden_states.{i}"))
            .collect();
        let tensors: Vec<(String, Vec<usize>, &[f32])> = names
            .into_iter()
            .zip(&self.hidden_states)
            .map(|(n, h)| (n, vec![self.n_points, self.hidden_size], h.as_slice()))
            .collect();
        repgeom_io::write_safetensors(path, &tensors, &self.metadata)?;
        Ok(())
    }
}

/// A model and its tokenizer, loaded from one checkpoint directory.
#[derive(Debug)]
pub struct Extractor {
    model: Model,
    tokenizer: Tokenizer,
    tokenizer_path: PathBuf,
    name: String,
    revision: Option<String>,
}

impl Extractor {
    /// Loads `config.json`, the safetensors weights and `tokenizer.json` from `dir`.
    pub fn load(dir: &Path) -> Result<Self> {
        let model = Model::load(dir)?;
        let tokenizer_path = dir.join("tokenizer.json");
        if !tokenizer_path.is_file() {
            return Err(Error::MissingFile {
                path: tokenizer_path,
                what: "the checkpoint's tokenizer (tokenizer.json)",
            });
        }
        let mut tokenizer =
            Tokenizer::from_file(&tokenizer_path).map_err(|e| Error::Tokenizer {
                path: tokenizer_path.clone(),
                reason: e.to_string(),
            })?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| Error::Tokenizer {
                path: tokenizer_path.clone(),
                reason: e.to_string(),
            })?;
        let (name, revision) = model_name(dir);
        Ok(Self {
            model,
            tokenizer,
            tokenizer_path,
            name,
            revision,
        })
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The model's name (HF cache `org/name`, else the directory name) and revision (the HF
    /// cache snapshot hash), as written to the metadata.
    pub fn name(&self) -> (&str, Option<&str>) {
        (&self.name, self.revision.as_deref())
    }

    /// Token ids of `text`, without special tokens (no BOS/EOS is added).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| Error::Tokenizer {
                path: self.tokenizer_path.clone(),
                reason: e.to_string(),
            })?;
        Ok(enc.get_ids().to_vec())
    }

    /// Runs the extraction; `progress` is called after every sequence (or line).
    pub fn extract(
        &self,
        text: &str,
        params: &ValidExtractParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Extraction> {
        let p = params.get();
        if let Some(budget) = p.memory_budget {
            let need = self.model.activation_bytes(p.batch_size, p.seq_len);
            if need > budget {
                let fits = (1..p.batch_size)
                    .rev()
                    .find(|&b| self.model.activation_bytes(b, p.seq_len) <= budget)
                    .unwrap_or(0);
                return Err(Error::BatchTooLarge {
                    batch_size: p.batch_size,
                    seq_len: p.seq_len,
                    needed: need,
                    budget,
                    fits,
                });
            }
        }
        let (mut ex, extra) = match p.pool {
            Pool::Tokens => self.extract_tokens(text, p, progress)?,
            Pool::Mean => self.extract_mean(text, p, progress)?,
        };
        let c = self.model.config();
        let mut m = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            m.insert(k.to_string(), v);
        };
        put("format", "repgeom.activations.v1".into());
        put("convention", "hf_output_hidden_states".into());
        put("model", self.name.clone());
        put(
            "revision",
            self.revision.clone().unwrap_or_else(|| "unknown".into()),
        );
        put("architecture", format!("{:?}", c.family));
        put("n_layers", c.n_layers.to_string());
        put("hidden_size", c.hidden_size.to_string());
        put("seed", p.seed.to_string());
        put("seq_len", p.seq_len.to_string());
        put("n_points", ex.n_points.to_string());
        put("skip_first", p.skip_first.to_string());
        put("pool", p.pool.name().into());
        let pos: Vec<[usize; 2]> = ex.positions.iter().map(|&(a, b)| [a, b]).collect();
        put("positions", serde_json::to_string(&pos).unwrap_or_default());
        let ids = match p.pool {
            Pool::Tokens => {
                serde_json::to_string(&ex.token_ids.iter().map(|v| v[0]).collect::<Vec<_>>())
            }
            Pool::Mean => serde_json::to_string(&ex.token_ids),
        };
        put("token_ids", ids.unwrap_or_default());
        for (k, v) in extra {
            put(k, v);
        }
        if let Some(l) = ex.loss {
            put("loss", format!("{:.8}", l.mean));
            put("loss_tokens", l.tokens.to_string());
        }
        ex.metadata = m;
        Ok(ex)
    }

    fn extract_tokens(
        &self,
        text: &str,
        p: &ExtractParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(Extraction, Vec<(&'static str, String)>)> {
        let ids = self.encode(text)?;
        let len = p.seq_len;
        let n_seq = ids.len() / len;
        if n_seq == 0 {
            return Err(Error::TextTooShort {
                tokens: ids.len(),
                seq_len: len,
            });
        }
        let skip = usize::from(p.skip_first);
        let per = len - skip;
        let available = n_seq * per;
        let n = p.n_points.unwrap_or(available);
        if n > available {
            return Err(Error::TooManyPoints {
                requested: n,
                available,
                detail: format!(
                    "{} tokens give {n_seq} sequences of {len}{}",
                    ids.len(),
                    if p.skip_first {
                        ", position 0 of each skipped"
                    } else {
                        ""
                    }
                ),
            });
        }
        let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
        let mut flat = rand::seq::index::sample(&mut rng, available, n).into_vec();
        flat.sort_unstable();
        let points: Vec<(usize, usize)> = flat.iter().map(|&i| (i / per, skip + i % per)).collect();
        let mut run: Vec<usize> = if p.loss {
            (0..n_seq).collect()
        } else {
            points.iter().map(|x| x.0).collect()
        };
        run.dedup();
        let mut acc = Accumulator::new(&self.model, n);
        let mut loss = LossSum::default();
        let mut cursor = 0;
        let mut done = 0;
        for chunk in run.chunks(p.batch_size) {
            let seqs: Vec<&[u32]> = chunk
                .iter()
                .map(|&s| &ids[s * len..(s + 1) * len])
                .collect();
            // the points of this batch, as (row in the batch, position)
            let mut rows = Vec::new();
            while cursor < points.len() && chunk.contains(&points[cursor].0) {
                let slot = chunk
                    .iter()
                    .position(|&s| s == points[cursor].0)
                    .unwrap_or(0);
                rows.push(slot * len + points[cursor].1);
                cursor += 1;
            }
            let d = acc.d;
            let nll = self.model.forward_batch(&seqs, p.loss, &mut |i, h| {
                for &r in &rows {
                    acc.out[i].extend_from_slice(&h[r * d..(r + 1) * d]);
                }
                Ok(())
            })?;
            if let Some(nll) = nll {
                for (sum, seq) in nll.into_iter().zip(&seqs) {
                    loss.add(sum, seq.len());
                }
            }
            done += chunk.len();
            progress(Progress {
                sequences_done: done,
                sequences_total: run.len(),
                tokens_done: done * len,
                tokens_total: run.len() * len,
            });
        }
        let token_ids = points
            .iter()
            .map(|&(s, t)| vec![ids[s * len + t]])
            .collect();
        let extra = vec![
            ("n_sequences", n_seq.to_string()),
            ("text_tokens", ids.len().to_string()),
        ];
        Ok((acc.finish(points, token_ids, loss.finish()), extra))
    }

    fn extract_mean(
        &self,
        text: &str,
        p: &ExtractParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(Extraction, Vec<(&'static str, String)>)> {
        let mut lines: Vec<&str> = text.lines().collect();
        while lines.last().is_some_and(|l| l.trim().is_empty()) {
            lines.pop();
        }
        let n = p.n_points.unwrap_or(lines.len());
        if n > lines.len() {
            return Err(Error::TooManyPoints {
                requested: n,
                available: lines.len(),
                detail: "lines in the text".into(),
            });
        }
        if n == 0 {
            return Err(Error::TextTooShort {
                tokens: 0,
                seq_len: p.seq_len,
            });
        }
        let mut encoded = Vec::with_capacity(n);
        let mut truncated = 0usize;
        for (i, line) in lines[..n].iter().enumerate() {
            let mut ids = if line.trim().is_empty() {
                Vec::new()
            } else {
                self.encode(line)?
            };
            if ids.is_empty() {
                return Err(Error::EmptyLine { line: i + 1 });
            }
            if ids.len() > p.seq_len {
                ids.truncate(p.seq_len);
                truncated += 1;
            }
            encoded.push(ids);
        }
        let total: usize = encoded.iter().map(Vec::len).sum();
        let d = self.model.config().hidden_size;
        let mut acc = Accumulator::new(&self.model, n);
        let mut loss = LossSum::default();
        let mut done_tokens = 0;
        let mut done_lines = 0;
        let mut positions = Vec::with_capacity(n);
        let start_of = |ids: &[u32]| if p.skip_first && ids.len() > 1 { 1 } else { 0 };
        for chunk in encoded.chunks(p.batch_size) {
            let seqs: Vec<&[u32]> = chunk.iter().map(Vec::as_slice).collect();
            let t_max = seqs.iter().map(|s| s.len()).max().unwrap_or(0);
            let nll = self.model.forward_batch(&seqs, p.loss, &mut |layer, h| {
                // each line's mean over its own positions only, never the right padding
                for (b, ids) in seqs.iter().enumerate() {
                    let start = start_of(ids);
                    let mut mean = vec![0f64; d];
                    for t in start..ids.len() {
                        let row = &h[(b * t_max + t) * d..(b * t_max + t + 1) * d];
                        for (m, x) in mean.iter_mut().zip(row) {
                            *m += f64::from(*x);
                        }
                    }
                    let count = (ids.len() - start) as f64;
                    acc.out[layer].extend(mean.iter().map(|m| (m / count) as f32));
                }
                Ok(())
            })?;
            for ids in &seqs {
                positions.push((done_lines, ids.len() - start_of(ids)));
                done_lines += 1;
                done_tokens += ids.len();
            }
            if let Some(nll) = nll {
                for (sum, seq) in nll.into_iter().zip(&seqs) {
                    loss.add(sum, seq.len());
                }
            }
            progress(Progress {
                sequences_done: done_lines,
                sequences_total: n,
                tokens_done: done_tokens,
                tokens_total: total,
            });
        }
        let extra = vec![("lines_truncated", truncated.to_string())];
        Ok((acc.finish(positions, encoded, loss.finish()), extra))
    }
}

/// Collects sampled rows of every layer; holds only the sampled points, never whole sequences.
struct Accumulator {
    out: Vec<Vec<f32>>,
    d: usize,
    n: usize,
}

impl Accumulator {
    fn new(model: &Model, n: usize) -> Self {
        let c = model.config();
        Self {
            out: (0..=c.n_layers)
                .map(|_| Vec::with_capacity(n * c.hidden_size))
                .collect(),
            d: c.hidden_size,
            n,
        }
    }

    fn finish(
        self,
        positions: Vec<(usize, usize)>,
        token_ids: Vec<Vec<u32>>,
        loss: Option<Loss>,
    ) -> Extraction {
        Extraction {
            hidden_states: self.out,
            n_points: self.n,
            hidden_size: self.d,
            positions,
            token_ids,
            loss,
            metadata: BTreeMap::new(),
        }
    }
}

#[derive(Default)]
struct LossSum {
    sum: f64,
    tokens: usize,
    any: bool,
}

impl LossSum {
    /// Adds one sequence's summed next-token cross-entropy: `len - 1` predictions.
    fn add(&mut self, sum: f64, len: usize) {
        self.any = true;
        self.sum += sum;
        self.tokens += len.saturating_sub(1);
    }

    fn finish(self) -> Option<Loss> {
        self.any.then(|| Loss {
            mean: if self.tokens == 0 {
                f64::NAN
            } else {
                self.sum / self.tokens as f64
            },
            tokens: self.tokens,
        })
    }
}

/// (name, revision) of a checkpoint directory: `org/name` and the snapshot hash for the
/// HuggingFace cache layout `models--org--name/snapshots/<hash>/`, else the config's
/// `_name_or_path` or the directory name, and no revision.
fn model_name(dir: &Path) -> (String, Option<String>) {
    let abs = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let file = |p: &Path| p.file_name().map(|s| s.to_string_lossy().into_owned());
    let parent = abs.parent();
    if let (Some(snap), Some(parent)) = (file(&abs), parent)
        && file(parent).as_deref() == Some("snapshots")
        && let Some(repo) = parent.parent().and_then(file)
        && let Some(rest) = repo.strip_prefix("models--")
    {
        return (rest.replacen("--", "/", 1), Some(snap));
    }
    let from_config = std::fs::read(dir.join("config.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| {
            v.get("_name_or_path")
                .and_then(|s| s.as_str())
                .map(str::to_string)
        })
        .filter(|s| !s.is_empty());
    (
        from_config
            .or_else(|| file(&abs))
            .unwrap_or_else(|| "unknown".into()),
        None,
    )
}

/// The memory the system can still give this process (`MemAvailable` of `/proc/meminfo`, in
/// bytes), where the platform reports it.
pub fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Loads the checkpoint in `model_dir` and extracts hidden states from `text`.
pub fn extract(
    model_dir: &Path,
    text: &str,
    params: &ValidExtractParams,
    progress: &mut dyn FnMut(Progress),
) -> Result<Extraction> {
    Extractor::load(model_dir)?.extract(text, params, progress)
}
