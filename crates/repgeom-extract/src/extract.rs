//! Turning a text into sampled hidden states: tokenising, splitting, sampling, pooling, loss.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokenizers::Tokenizer;

use crate::cuts::Cuts;
use crate::model::Model;
use crate::model::Precision;
use crate::words::{WordPool, sample_words, word_tokens};
use crate::{Error, Result};

/// How hidden states become points.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pool {
    /// One point per sampled token position.
    #[default]
    Tokens,
    /// One point per input line: the mean of the line's hidden states (for probes).
    Mean,
    /// One point per sampled word of the text (`--points words`): words, their windows and
    /// the sample come from the text alone ([`crate::sample_words`]), so every model given
    /// the same text and settings holds the same points whatever its tokenizer; the word's
    /// state is read from its tokens as the [`WordPool`] says.
    Words(WordPool),
}

impl Pool {
    /// The name written to the metadata (`tokens`, `mean`).
    pub fn name(self) -> &'static str {
        match self {
            Pool::Tokens => "tokens",
            Pool::Mean => "mean",
            Pool::Words(_) => "words",
        }
    }

    /// The point design as one phrase (`tokens`, `line means`, `words (last token)`, `words
    /// (mean over tokens)`), for messages that refuse to mix designs.
    ///
    /// ```
    /// use repgeom_extract::{Pool, WordPool};
    /// assert_eq!(Pool::Words(WordPool::Mean).design(), "words (mean over tokens)");
    /// assert_eq!(Pool::Tokens.design(), "tokens");
    /// ```
    pub fn design(self) -> &'static str {
        match self {
            Pool::Tokens => "tokens",
            Pool::Mean => "line means",
            Pool::Words(WordPool::Last) => "words (last token)",
            Pool::Words(WordPool::Mean) => "words (mean over tokens)",
        }
    }

    /// The point design a points file's metadata records (`pool`, and `word_pool` for word
    /// points), as [`Pool::design`] words it; a file without `pool` (written by an earlier
    /// version, or not by `repgeom extract`) holds token points.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use repgeom_extract::Pool;
    /// let meta = BTreeMap::from([("pool".to_string(), "words".to_string()),
    ///                            ("word_pool".to_string(), "last".to_string())]);
    /// assert_eq!(Pool::design_of(&meta), "words (last token)");
    /// assert_eq!(Pool::design_of(&BTreeMap::new()), "tokens");
    /// ```
    pub fn design_of(metadata: &BTreeMap<String, String>) -> String {
        let pool = metadata.get("pool").map_or("tokens", String::as_str);
        let word_pool = metadata
            .get("word_pool")
            .and_then(|w| WordPool::from_name(w));
        match (pool, word_pool) {
            ("tokens", _) => Pool::Tokens.design().into(),
            ("mean", _) => Pool::Mean.design().into(),
            ("words", Some(w)) => Pool::Words(w).design().into(),
            (other, _) => match metadata.get("word_pool") {
                Some(w) => format!("{other} ({w})"),
                None => other.into(),
            },
        }
    }
}

/// Extraction options, unchecked. [`ExtractParams::check`] gives [`ValidExtractParams`].
///
/// Also the keys of a settings table (a study manifest's `[extract]`): every field but `pool`
/// and `memory_budget` by its name, a missing one at its [`Default`], an unknown one an
/// error that lists them.
///
/// ```
/// use repgeom_extract::ExtractParams;
/// let p: ExtractParams = serde_json::from_str(r#"{"n_points": 512, "seed": 3}"#).unwrap();
/// assert_eq!((p.n_points, p.seq_len), (Some(512), repgeom_extract::DEFAULT_SEQ_LEN));
/// let e = serde_json::from_str::<ExtractParams>(r#"{"npoints": 512}"#).unwrap_err();
/// assert!(e.to_string().contains("expected one of `seq_len`, `n_points`"));
/// ```
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExtractParams {
    /// Tokens per sequence (`Pool::Tokens`), the most tokens kept of one line (`Pool::Mean`),
    /// or, with `Pool::Words`, one more than the bytes of a word window (which then always
    /// fits in `seq_len` tokens).
    pub seq_len: usize,
    /// Points to sample (`Pool::Tokens` and `Pool::Words`, required), or the first lines to
    /// use (`Pool::Mean`; `None` = every line).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n_points: Option<usize>,
    /// Seed of the position sampler (and of the loss's sequence sample).
    pub seed: u64,
    /// `Pool::Tokens`: how points are spread over sequences. `Some(1)`: each point is drawn
    /// uniformly from all positions of the text, so nearly every point costs a sequence of
    /// its own. `Some(M)`, `M ≥ 2`: `ceil(n_points / M)` sequences are drawn, and `M` distinct
    /// positions from each (the last drawn sequence holds the remainder): `M` times fewer
    /// tokens run; more than a sequence's positions is an error. `None`: the default density,
    /// [`DEFAULT_POINTS_PER_SEQUENCE`] or every position of shorter sequences
    /// ([`ExtractParams::density`]). `Pool::Words`: words per window, the same way (`None`:
    /// the default, lowered until the text's windows hold enough words).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub points_per_sequence: Option<usize>,
    /// Never sample position 0 of a sequence (and leave it out of line means when the line
    /// has more than one token); with `Pool::Words`, never the first word of a window.
    /// Written only when `false` (the default is `true`).
    #[serde(skip_serializing_if = "is_true")]
    pub skip_first: bool,
    /// Points are token positions, line means or words (set by the caller, not a settings
    /// key).
    #[serde(skip)]
    pub pool: Pool,
    /// Also compute the mean next-token cross-entropy, over every sequence of the text or
    /// over the sample `loss_tokens` asks for.
    pub loss: bool,
    /// With `loss`: the loss over a seeded sample of the text's sequences predicting at least
    /// this many tokens in all (`None`: every sequence). Its standard error over sequences
    /// is reported beside it ([`Loss::se`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_tokens: Option<usize>,
    /// Sequences (or lines) per forward pass. Results do not depend on it beyond f32
    /// rounding.
    pub batch_size: usize,
    /// Bytes the activations of one batch may take (`None`: no check). A batch whose
    /// estimate ([`Model::activation_bytes`]) exceeds it is refused before anything runs,
    /// with the largest batch size that fits. Set by the caller (from the run's memory
    /// budget), not a settings key.
    #[serde(skip)]
    pub memory_budget: Option<u64>,
    /// The precision of the forward passes ([`Precision`]): `f32` (the default, on any
    /// device) or `stored` (weights as stored, on either device). The model must have
    /// been placed at this precision ([`Extractor::place`]); a mismatch is an error before
    /// any work. Written only when not `f32`, so that settings hashed before
    /// it existed keep their hash.
    #[serde(skip_serializing_if = "is_f32")]
    pub dtype: Precision,
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_f32(p: &Precision) -> bool {
    *p == Precision::F32
}

/// The default `n_points`: token positions sampled per checkpoint (the study's 2,048 points).
/// `repgeom extract`, a manifest's `[extract]` and Python's `extract` read it from here.
pub const DEFAULT_N_POINTS: usize = 2048;

/// The default `seq_len`: tokens per sequence.
pub const DEFAULT_SEQ_LEN: usize = 256;

/// The default `points_per_sequence`: chosen by measurement on trained models (how z, its
/// bootstrap interval and the spectral metrics move with the density; `docs/extraction.md`):
/// no density up to 64 moved them beyond their uncertainty, and 16 keeps 128 sequences for
/// 2,048 points, enough for the sequence bootstrap, at 16 tokens run per point kept.
pub const DEFAULT_POINTS_PER_SEQUENCE: usize = 16;

/// The default `loss_tokens`: predicted tokens of the loss sample, chosen so that the loss's
/// standard error over sequences stays below 0.02 nats on the trained fixture models (see
/// `docs/extraction.md`).
pub const DEFAULT_LOSS_TOKENS: usize = 32_768;

/// The default `batch_size`: the best tokens/s of a Pythia-70M-shaped model on a 2-core CPU
/// (`cargo xtask bench extract`, see `docs/extraction.md`).
pub const DEFAULT_BATCH_SIZE: usize = 8;

impl Default for ExtractParams {
    fn default() -> Self {
        Self {
            seq_len: DEFAULT_SEQ_LEN,
            n_points: Some(DEFAULT_N_POINTS),
            seed: 0,
            points_per_sequence: None,
            skip_first: true,
            pool: Pool::Tokens,
            loss: false,
            loss_tokens: Some(DEFAULT_LOSS_TOKENS),
            batch_size: DEFAULT_BATCH_SIZE,
            memory_budget: None,
            dtype: Precision::F32,
        }
    }
}

/// Checked [`ExtractParams`].
#[derive(Clone, Debug, PartialEq)]
pub struct ValidExtractParams(ExtractParams);

impl ExtractParams {
    /// The points taken per sequence: `points_per_sequence` when given, else
    /// [`DEFAULT_POINTS_PER_SEQUENCE`] or, for sequences offering fewer positions, all of them.
    ///
    /// ```
    /// use repgeom_extract::ExtractParams;
    /// assert_eq!(ExtractParams::default().density(), 16);
    /// let short = ExtractParams { seq_len: 8, ..Default::default() };
    /// assert_eq!(short.density(), 7); // position 0 is skipped
    /// ```
    pub fn density(&self) -> usize {
        self.points_per_sequence.unwrap_or_else(|| {
            DEFAULT_POINTS_PER_SEQUENCE.min(self.seq_len - usize::from(self.skip_first))
        })
    }

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
        let per = self.seq_len - usize::from(self.skip_first);
        if self.points_per_sequence == Some(0) {
            return bad("points_per_sequence", "must be at least 1");
        }
        if let Some(m) = self
            .points_per_sequence
            .filter(|&m| m > per && self.pool == Pool::Tokens)
        {
            return Err(Error::InvalidParams {
                field: "points_per_sequence",
                reason: format!(
                    "{} exceeds the {per} positions a sequence offers (seq_len {}{})",
                    m,
                    self.seq_len,
                    if self.skip_first {
                        ", position 0 skipped"
                    } else {
                        ""
                    }
                ),
            });
        }
        if self.loss_tokens == Some(0) {
            return bad(
                "loss_tokens",
                "must be at least 1 (leave it out for every sequence)",
            );
        }
        match (self.pool, self.n_points) {
            (_, Some(0)) => return bad("n_points", "must be at least 1"),
            (Pool::Tokens, None) => return bad("n_points", "required with Pool::Tokens"),
            (Pool::Words(_), None) => return bad("n_points", "required with Pool::Words"),
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

/// What [`Extractor::stream`] hands each batch to: one `[rows, d]` view per requested hidden
/// state.
pub type Visit<'a, E> =
    dyn FnMut(&[repgeom_linalg::MatRef<'_, f32>]) -> std::result::Result<(), E> + 'a;

/// What [`Extractor::stream`] ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Streamed {
    /// Tokens handed to `visit` (every position of the sequences run, less the first ones
    /// when `skip_first`, up to `n_points`).
    pub tokens_kept: usize,
    /// Tokens run through the model.
    pub tokens_run: usize,
    /// Sequences run.
    pub sequences: usize,
    /// Tokens of the whole text.
    pub text_tokens: usize,
}

/// Mean next-token cross-entropy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Loss {
    /// Mean over all predicted tokens, in nats.
    pub mean: f64,
    /// Number of predicted tokens (T - 1 per sequence).
    pub tokens: usize,
    /// Sequences the loss ran over.
    pub sequences: usize,
    /// Standard error of `mean` over sequences (tokens of one sequence are not independent):
    /// the standard deviation of the per-sequence mean losses, token-weighted, over
    /// `sqrt(sequences)`; NaN with one sequence.
    pub se: f64,
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
    /// `Pool::Words`: the word's characters (first, one past the last) in the text: the same
    /// for every tokenizer.
    pub positions: Vec<(usize, usize)>,
    /// `Pool::Tokens`: the token at each point (one id). `Pool::Mean`: the line's token ids.
    /// `Pool::Words`: the word's token ids.
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
    /// Where the tokenizer's texts may be cut ([`Cuts::of`]).
    cuts: Cuts,
    name: String,
    revision: Option<String>,
}

impl Extractor {
    /// Loads `config.json`, the safetensors weights and `tokenizer.json` from `dir`.
    pub fn load(dir: &Path) -> Result<Self> {
        Ok(Self::load_inner(dir, false)?.0)
    }

    /// Loads a checkpoint directory as [`Extractor::load`] does and computes its weights hash
    /// from the same read of the weights ([`Model::load_hashed`]; `None` where the directory's
    /// weight files are not exactly the ones loaded).
    pub fn load_hashed(dir: &Path) -> Result<(Self, Option<repgeom_io::WeightsDigest>)> {
        Self::load_inner(dir, true)
    }

    fn load_inner(dir: &Path, hash: bool) -> Result<(Self, Option<repgeom_io::WeightsDigest>)> {
        let (model, digest) = if hash {
            Model::load_hashed(dir)?
        } else {
            (Model::load(dir)?, None)
        };
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
        let cuts = Cuts::of(&tokenizer);
        let extractor = Self {
            model,
            tokenizer,
            tokenizer_path,
            cuts,
            name,
            revision,
        };
        Ok((extractor, digest))
    }

    /// Where (a CUDA device, or the CPU with `None`) and at which precision the model runs
    /// from now on ([`Model::place`]); an extraction's `dtype` must be this precision.
    pub fn place(
        &mut self,
        gpu: Option<std::sync::Arc<repgeom_cuda::Gpu>>,
        precision: crate::Precision,
    ) -> Result<()> {
        self.model.place(gpu, precision)
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
    ///
    /// On a pool of several threads, a long text is cut at line starts into pieces of about
    /// [`ENCODE_PIECE_BYTES`] tokenised side by side, where the tokenizer's pipeline makes the
    /// pieces' ids the whole text's (byte-level BPE as in GPT-2, GPT-NeoX, Llama 3, Qwen2 and
    /// OLMo; see `docs/extraction.md`); else, and on one thread, the text is tokenised whole.
    /// The ids are the same either way.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_from(text, true)
    }

    /// Whether this tokenizer's texts may be cut at line starts ([`text_blocks`]) and their
    /// pieces tokenised apart with the whole text's ids; else why not.
    pub fn cuts_at_lines(&self) -> std::result::Result<(), &str> {
        match &self.cuts {
            Cuts::Lines { .. } => Ok(()),
            Cuts::Whole(why) => Err(why),
        }
    }

    /// The ids of `text`, the text's start where `at_start`, else a piece cut at a line start
    /// (only asked where [`Cuts::Lines`]).
    fn encode_from(&self, text: &str, at_start: bool) -> Result<Vec<u32>> {
        let one = |piece: &str, first: bool| -> Result<Vec<u32>> {
            let tokenizer = match &self.cuts {
                Cuts::Lines { rest: Some(rest) } if !first => rest,
                _ => &self.tokenizer,
            };
            Ok(self.encode_by(tokenizer, piece)?.get_ids().to_vec())
        };
        let parallel = matches!(self.cuts, Cuts::Lines { .. })
            && rayon::current_num_threads() > 1
            && text.len() >= 2 * ENCODE_PIECE_BYTES;
        if !parallel {
            return one(text, at_start);
        }
        use rayon::prelude::*;
        let pieces: Vec<&str> = text_blocks(text, ENCODE_PIECE_BYTES).collect();
        let ids: Vec<Vec<u32>> = pieces
            .par_iter()
            .enumerate()
            .map(|(i, piece)| one(piece, at_start && i == 0))
            .collect::<Result<_>>()?;
        Ok(ids.concat())
    }

    /// Runs the extraction; `progress` is called after every sequence (or line).
    pub fn extract(
        &self,
        text: &str,
        params: &ValidExtractParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Extraction> {
        let p = params.get();
        self.check_budget(p)?;
        let (mut ex, extra) = match p.pool {
            Pool::Tokens => self.extract_tokens(text, p, progress)?,
            Pool::Mean => self.extract_mean(text, p, progress)?,
            Pool::Words(wp) => self.extract_words(text, p, wp, progress)?,
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
        if let Some((gpu, _)) = self.model.device() {
            put("device", format!("cuda:{} ({})", gpu.ordinal(), gpu.name()));
        }
        // the precision wherever it is not the CPU's default f32
        let precision = self.model.precision();
        if self.model.device().is_some() || precision != Precision::F32 {
            put("dtype", precision.name().into());
        }
        if let Pool::Words(wp) = p.pool {
            put("word_pool", wp.name().into());
        }
        let pos: Vec<[usize; 2]> = ex.positions.iter().map(|&(a, b)| [a, b]).collect();
        put("positions", serde_json::to_string(&pos).unwrap_or_default());
        let ids = match p.pool {
            Pool::Tokens => {
                serde_json::to_string(&ex.token_ids.iter().map(|v| v[0]).collect::<Vec<_>>())
            }
            Pool::Mean | Pool::Words(_) => serde_json::to_string(&ex.token_ids),
        };
        put("token_ids", ids.unwrap_or_default());
        for (k, v) in extra {
            put(k, v);
        }
        if let Some(l) = ex.loss {
            put("loss", format!("{:.8}", l.mean));
            put("loss_tokens", l.tokens.to_string());
            put("loss_sequences", l.sequences.to_string());
            put("loss_se", format!("{:.8}", l.se));
        }
        ex.metadata = m;
        Ok(ex)
    }

    /// The checks before anything runs: the model computes at `p.dtype` ([`Self::place`]),
    /// and a batch whose activations would not fit (on a device, in its free memory
    /// beside the weights; on the CPU, in `p.memory_budget`) is refused with the largest
    /// batch size that fits.
    fn check_budget(&self, p: &ExtractParams) -> Result<()> {
        let at = self.model.precision();
        if at != p.dtype {
            let device = match self.model.device() {
                Some((gpu, _)) => format!("cuda:{}", gpu.ordinal()),
                None => "cpu".into(),
            };
            return Err(Error::InvalidParams {
                field: "dtype",
                reason: format!(
                    "{} asked for, but the model was placed on {device} at {} \
                     (Extractor::place)",
                    p.dtype.name(),
                    at.name()
                ),
            });
        }
        if let Some((gpu, _)) = self.model.device() {
            let need = |b| {
                self.model
                    .device_activation_bytes(b, p.seq_len)
                    .unwrap_or(0)
            };
            let (free, _) = gpu.memory()?;
            if need(p.batch_size) > free / 10 * 9 {
                let fits = (1..p.batch_size)
                    .rev()
                    .find(|&b| need(b) <= free / 10 * 9)
                    .unwrap_or(0);
                return Err(Error::DeviceTooSmall {
                    device: format!("cuda:{}", gpu.ordinal()),
                    what: format!(
                        "a batch of {} sequences of {} tokens",
                        p.batch_size, p.seq_len
                    ),
                    needed: need(p.batch_size),
                    free,
                    hint: if fits > 0 {
                        format!("--batch-size {fits} fits")
                    } else {
                        "even --batch-size 1 does not fit: use a shorter --seq-len".into()
                    },
                });
            }
        }
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
        Ok(())
    }

    /// Runs *every* token of `text` (its whole sequences of `params.seq_len` tokens, in
    /// order; position 0 of each left out when `skip_first`; stopping after `max_tokens` kept
    /// tokens when it is `Some`) and hands each batch's hidden states of `layers` to `visit`,
    /// one `[rows, d]` view per entry of `layers`, row `r` of every view the same token.
    /// The text is tokenised block by block ([`text_blocks`]: about 256 KiB, cut only before a
    /// line that starts with a non-space character, which gives the ids of one whole-text
    /// encoding for the byte-level BPE and SentencePiece tokenisers of the supported families;
    /// `stream_tokens_equal_whole_text_encoding` checks every fixture's). Nothing is kept
    /// between batches: memory is one batch's and one block's, whatever the length of the
    /// text, which is what a streaming statistic over a whole corpus needs (e.g.
    /// `repgeom_metrics::CkaAccumulator`, fed each batch). The sampling options
    /// (`n_points`, `points_per_sequence`, `seed`), `pool` and `loss` are not used.
    ///
    /// ```no_run
    /// use repgeom_extract::{ExtractParams, Extractor};
    /// let ex = Extractor::load("pythia-70m".as_ref())?;
    /// let p = ExtractParams::default().check()?;
    /// let mut norms = 0.0f64;
    /// let s = ex.stream("a long corpus ...", &p, None, &[6], &mut |views| {
    ///     let h = views[0];
    ///     for i in 0..h.nrows() {
    ///         norms += (0..h.ncols()).map(|j| f64::from(h[(i, j)]).powi(2)).sum::<f64>();
    ///     }
    ///     Ok::<(), repgeom_extract::Error>(())
    /// }, &mut |_| {})?;
    /// println!("mean squared norm of layer 6 over {} tokens: {}", s.tokens_kept, norms / s.tokens_kept as f64);
    /// # Ok::<(), repgeom_extract::Error>(())
    /// ```
    pub fn stream<E: From<Error>>(
        &self,
        text: &str,
        params: &ValidExtractParams,
        max_tokens: Option<usize>,
        layers: &[usize],
        visit: &mut Visit<'_, E>,
        progress: &mut dyn FnMut(Progress),
    ) -> std::result::Result<Streamed, E> {
        self.stream_shard(text, params, max_tokens, layers, (0, 1), visit, progress)
    }

    /// [`Extractor::stream`] over shard `i` of `n` of the text's sequences: sequence `g` (in
    /// text order, counted over the whole text) is run when `g mod n = i`, the others are
    /// tokenised and skipped. The `n` shards' tokens are every token of one `stream`, each
    /// once, so accumulators fed by the shards and merged equal one pass; `max_tokens` counts
    /// this shard's tokens.
    #[allow(clippy::too_many_arguments)]
    pub fn stream_shard<E: From<Error>>(
        &self,
        text: &str,
        params: &ValidExtractParams,
        max_tokens: Option<usize>,
        layers: &[usize],
        shard: (usize, usize),
        visit: &mut Visit<'_, E>,
        progress: &mut dyn FnMut(Progress),
    ) -> std::result::Result<Streamed, E> {
        stream_models(
            &[(self, layers)],
            text,
            params,
            max_tokens,
            shard,
            visit,
            progress,
        )
    }

    /// [`Extractor::stream_shard`] of two models on the same batches: the text is cut into
    /// sequences once, both models run each batch, and `visit` gets the views of `layers` of
    /// this model, then those of `other_layers` of `other` (widths may differ), row `r` of
    /// every view the same token. Both must tokenise the text identically (one tokenizer:
    /// checked block by block, [`Error::TokenizersDiffer`] otherwise), which is what
    /// cross-model statistics over every token need (`repgeom_metrics::CkaAccumulator` fed
    /// each batch: CKA between two models over a whole corpus).
    #[allow(clippy::too_many_arguments)]
    pub fn stream_pair_shard<E: From<Error>>(
        &self,
        other: &Extractor,
        text: &str,
        params: &ValidExtractParams,
        max_tokens: Option<usize>,
        (layers, other_layers): (&[usize], &[usize]),
        shard: (usize, usize),
        visit: &mut Visit<'_, E>,
        progress: &mut dyn FnMut(Progress),
    ) -> std::result::Result<Streamed, E> {
        stream_models(
            &[(self, layers), (other, other_layers)],
            text,
            params,
            max_tokens,
            shard,
            visit,
            progress,
        )
    }

    /// `text` tokenised by `tokenizer` (this checkpoint's, or its copy for pieces after the
    /// first) without special tokens: its ids and each token's byte span in `text`; an error
    /// names the tokenizer file.
    fn encode_by(&self, tokenizer: &Tokenizer, text: &str) -> Result<tokenizers::Encoding> {
        tokenizer.encode(text, false).map_err(|e| Error::Tokenizer {
            path: self.tokenizer_path.clone(),
            reason: e.to_string(),
        })
    }

    /// `text`'s token ids and the number of whole sequences of `len` tokens they make (an
    /// error when there is none).
    fn sequences(&self, text: &str, len: usize) -> Result<(Vec<u32>, usize)> {
        let ids = self.encode(text)?;
        let n_seq = ids.len() / len;
        if n_seq == 0 {
            return Err(Error::TextTooShort {
                tokens: ids.len(),
                seq_len: len,
            });
        }
        Ok((ids, n_seq))
    }

    /// The mean next-token cross-entropy of `text` alone, no points: over every sequence of
    /// `params.seq_len` tokens, or over the seeded sample `params.loss_tokens` asks for (the
    /// same sample `extract` with `loss` runs). `n_points`, `pool` and
    /// `points_per_sequence` are not used.
    ///
    /// ```no_run
    /// use repgeom_extract::{ExtractParams, Extractor};
    /// let ex = Extractor::load("pythia-70m".as_ref())?;
    /// let p = ExtractParams { loss: true, loss_tokens: Some(32_768), ..Default::default() }.check()?;
    /// let l = ex.loss("held-out text ...", &p, &mut |_| {})?;
    /// println!("{:.4} ± {:.4} nats over {} tokens", l.mean, l.se, l.tokens);
    /// # Ok::<(), repgeom_extract::Error>(())
    /// ```
    pub fn loss(
        &self,
        text: &str,
        params: &ValidExtractParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Loss> {
        self.check_budget(params.get())?;
        self.loss_of(text, params.get(), progress)
    }

    fn loss_of(
        &self,
        text: &str,
        p: &ExtractParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Loss> {
        let len = p.seq_len;
        let (ids, n_seq) = self.sequences(text, len)?;
        let seqs: Vec<usize> = match p.loss_tokens {
            None => (0..n_seq).collect(),
            Some(t) => loss_sample(p.seed, t, n_seq, len),
        };
        let mut loss = LossSum::default();
        let mut done = 0;
        for chunk in seqs.chunks(p.batch_size) {
            let batch: Vec<&[u32]> = chunk
                .iter()
                .map(|&s| &ids[s * len..(s + 1) * len])
                .collect();
            let nll = self.model.forward_batch(&batch, true, &mut |_, _| Ok(()))?;
            for (sum, seq) in nll.unwrap_or_default().into_iter().zip(&batch) {
                loss.add(sum, seq.len());
            }
            done += chunk.len();
            progress(Progress {
                sequences_done: done,
                sequences_total: seqs.len(),
                tokens_done: done * len,
                tokens_total: seqs.len() * len,
            });
        }
        loss.finish().ok_or(Error::TextTooShort {
            tokens: ids.len(),
            seq_len: len,
        })
    }

    fn extract_tokens(
        &self,
        text: &str,
        p: &ExtractParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(Extraction, Vec<(&'static str, String)>)> {
        let len = p.seq_len;
        let (ids, n_seq) = self.sequences(text, len)?;
        let n = p
            .n_points
            .unwrap_or(n_seq * (len - usize::from(p.skip_first)));
        let (points, density) = sample_points(p, n, n_seq, ids.len())?;
        let loss_seqs: Vec<usize> = match (p.loss, p.loss_tokens) {
            (false, _) => Vec::new(),
            (true, None) => (0..n_seq).collect(),
            (true, Some(t)) => loss_sample(p.seed, t, n_seq, len),
        };
        // Sequences with a loss run first, in batches that compute logits; those that only
        // hold points follow, in batches that do not.
        let mut point_seqs: Vec<usize> = points.iter().map(|x| x.0).collect();
        point_seqs.dedup();
        let only_points: Vec<usize> = point_seqs
            .iter()
            .copied()
            .filter(|s| loss_seqs.binary_search(s).is_err())
            .collect();
        let total = loss_seqs.len() + only_points.len();
        // Where each sampled sequence's points are: sequence -> (first point, count).
        let mut where_points = BTreeMap::new();
        for (i, &(s, _)) in points.iter().enumerate() {
            where_points.entry(s).or_insert((i, 0)).1 += 1;
        }
        let mut acc = Accumulator::new(&self.model, n);
        let mut loss = LossSum::default();
        let mut done = 0;
        let batches = loss_seqs
            .chunks(p.batch_size)
            .map(|c| (c, true))
            .chain(only_points.chunks(p.batch_size).map(|c| (c, false)));
        for (chunk, with_loss) in batches {
            let seqs: Vec<&[u32]> = chunk
                .iter()
                .map(|&s| &ids[s * len..(s + 1) * len])
                .collect();
            // (row in the batch's [B * T] rows, point index) of every point of this batch
            let mut rows = Vec::new();
            for (slot, s) in chunk.iter().enumerate() {
                if let Some(&(first, count)) = where_points.get(s) {
                    for (i, &(_, t)) in points.iter().enumerate().skip(first).take(count) {
                        rows.push((slot * len + t, i));
                    }
                }
            }
            let d = acc.d;
            let read: Vec<usize> = rows.iter().map(|&(r, _)| r).collect();
            let nll =
                self.model
                    .forward_batch_rows(&seqs, with_loss, Some(&read), &mut |layer, h| {
                        for &(r, i) in &rows {
                            acc.out[layer][i * d..(i + 1) * d]
                                .copy_from_slice(&h[r * d..(r + 1) * d]);
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
                sequences_total: total,
                tokens_done: done * len,
                tokens_total: total * len,
            });
        }
        let token_ids = points
            .iter()
            .map(|&(s, t)| vec![ids[s * len + t]])
            .collect();
        let mut extra = vec![
            ("n_sequences", n_seq.to_string()),
            ("text_tokens", ids.len().to_string()),
            ("points_per_sequence", density.to_string()),
            ("tokens_run", (total * len).to_string()),
        ];
        if density != p.density() {
            extra.push((
                "points_per_sequence_note",
                format!(
                    "the default {} points per sequence would need {} sequences, but the text gives {n_seq}: took {density} per sequence (set points_per_sequence to choose)",
                    p.density(),
                    n.div_ceil(p.density()),
                ),
            ));
        }
        Ok((acc.finish(points, token_ids, loss.finish()), extra))
    }

    /// `Pool::Words`: the sampled words' states, each window run once (batched, right-padded),
    /// its text tokenised alone; the loss, when asked for, over the text's token sequences as
    /// with `Pool::Tokens`.
    fn extract_words(
        &self,
        text: &str,
        p: &ExtractParams,
        word_pool: WordPool,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(Extraction, Vec<(&'static str, String)>)> {
        let sample = sample_words(text, &ValidExtractParams(p.clone()))?;
        let points = &sample.points;
        let n = points.len();
        // The drawn windows in order, each with the range of its points (points are sorted by
        // window).
        let mut windows: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
        for (i, w) in points.iter().enumerate() {
            match windows.last_mut() {
                Some((win, r)) if *win == w.window_index => r.end = i + 1,
                _ => windows.push((w.window_index, i..i + 1)),
            }
        }
        let mut acc = Accumulator::new(&self.model, n);
        let d = acc.d;
        let mut token_ids: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut last_pos = vec![0usize; n];
        let (mut tokens_run, mut done) = (0, 0);
        for chunk in windows.chunks(p.batch_size) {
            let mut seqs: Vec<Vec<u32>> = Vec::with_capacity(chunk.len());
            // (slot in the batch, point index, the word's token positions in its window)
            let mut rows: Vec<(usize, usize, Vec<usize>)> = Vec::new();
            // Each window is tokenised alone, so the batch's windows run side by side.
            let encodings: Vec<Result<tokenizers::Encoding>> = {
                use rayon::prelude::*;
                chunk
                    .par_iter()
                    .map(|(_, range)| {
                        self.encode_by(
                            &self.tokenizer,
                            &text[points[range.start].window_bytes.clone()],
                        )
                    })
                    .collect()
            };
            for ((slot, (_, range)), enc) in chunk.iter().enumerate().zip(encodings) {
                let first = &points[range.start];
                let at = first.window_bytes.start;
                let enc = enc?;
                let (ids, offsets) = (enc.get_ids().to_vec(), enc.get_offsets());
                if ids.len() > p.seq_len {
                    return Err(Error::WindowTooLong {
                        path: self.tokenizer_path.clone(),
                        start: first.window.start,
                        end: first.window.end,
                        tokens: ids.len(),
                        seq_len: p.seq_len,
                    });
                }
                for i in range.clone() {
                    let w = &points[i];
                    let toks = word_tokens(offsets, w.word_bytes.start - at..w.word_bytes.end - at);
                    let Some(&last) = toks.last() else {
                        return Err(Error::WordWithoutTokens {
                            path: self.tokenizer_path.clone(),
                            word: text[w.word_bytes.clone()].to_string(),
                            start: w.word.start,
                            end: w.word.end,
                        });
                    };
                    token_ids[i] = toks.iter().map(|&t| ids[t]).collect();
                    last_pos[i] = last;
                    rows.push((slot, i, toks));
                }
                seqs.push(ids);
            }
            let batch: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
            let t_max = batch.iter().map(|s| s.len()).max().unwrap_or(0);
            let read: Vec<usize> = rows
                .iter()
                .flat_map(|(slot, _, toks)| toks.iter().map(move |t| slot * t_max + t))
                .collect();
            self.model
                .forward_batch_rows(&batch, false, Some(&read), &mut |layer, h| {
                    for (slot, i, toks) in &rows {
                        let out = &mut acc.out[layer][i * d..(i + 1) * d];
                        let row = |t: usize| &h[(slot * t_max + t) * d..(slot * t_max + t + 1) * d];
                        match word_pool {
                            WordPool::Last => out.copy_from_slice(row(toks[toks.len() - 1])),
                            WordPool::Mean => {
                                let mut mean = vec![0f64; d];
                                for &t in toks {
                                    for (m, x) in mean.iter_mut().zip(row(t)) {
                                        *m += f64::from(*x);
                                    }
                                }
                                let count = toks.len() as f64;
                                for (o, m) in out.iter_mut().zip(&mean) {
                                    *o = (m / count) as f32;
                                }
                            }
                        }
                    }
                    Ok(())
                })?;
            tokens_run += batch.iter().map(|s| s.len()).sum::<usize>();
            done += chunk.len();
            progress(Progress {
                sequences_done: done,
                sequences_total: windows.len(),
                tokens_done: tokens_run,
                tokens_total: tokens_run * windows.len() / done,
            });
        }
        let loss = if p.loss {
            Some(self.loss_of(text, p, progress)?)
        } else {
            None
        };
        let positions = points.iter().map(|w| (w.word.start, w.word.end)).collect();
        let contexts: Vec<usize> = points.iter().map(|w| w.window.start).collect();
        let mut extra = vec![
            (
                repgeom_io::WORD_CONTEXTS_KEY,
                serde_json::to_string(&contexts).unwrap_or_default(),
            ),
            (
                "word_last_tokens",
                serde_json::to_string(&last_pos).unwrap_or_default(),
            ),
            ("text_words", sample.words.to_string()),
            ("word_windows", sample.windows.to_string()),
            ("n_sequences", windows.len().to_string()),
            ("points_per_sequence", sample.words_per_window.to_string()),
            ("tokens_run", tokens_run.to_string()),
        ];
        if sample.words_too_long > 0 {
            extra.push(("words_too_long", sample.words_too_long.to_string()));
        }
        if p.points_per_sequence.is_none() && sample.words_per_window != DEFAULT_POINTS_PER_SEQUENCE
        {
            extra.push((
                "points_per_sequence_note",
                format!(
                    "the default {DEFAULT_POINTS_PER_SEQUENCE} words per window would need more windows holding that many words than the text gives: took {} per window (set points_per_sequence to choose)",
                    sample.words_per_window
                ),
            ));
        }
        Ok((acc.finish(positions, token_ids, loss), extra))
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
        // Each line is tokenised alone, so the lines run side by side; errors are met in order.
        let each: Vec<Result<Vec<u32>>> = {
            use rayon::prelude::*;
            lines[..n]
                .par_iter()
                .map(|line| {
                    if line.trim().is_empty() {
                        Ok(Vec::new())
                    } else {
                        self.encode(line)
                    }
                })
                .collect()
        };
        for (i, ids) in each.into_iter().enumerate() {
            let mut ids = ids?;
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
                    let row = (done_lines + b) * d;
                    for (o, m) in acc.out[layer][row..row + d].iter_mut().zip(&mean) {
                        *o = (m / count) as f32;
                    }
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

/// The streaming loop of [`Extractor::stream_shard`] and [`Extractor::stream_pair_shard`]:
/// the text cut into sequences once (the first model's tokenizer; every other model's must
/// give the same ids), each batch run through every model, and `visit` handed the views of
/// each model's hidden states in order.
fn stream_models<E: From<Error>>(
    models: &[(&Extractor, &[usize])],
    text: &str,
    params: &ValidExtractParams,
    max_tokens: Option<usize>,
    (shard, shards): (usize, usize),
    visit: &mut Visit<'_, E>,
    progress: &mut dyn FnMut(Progress),
) -> std::result::Result<Streamed, E> {
    if shards == 0 || shard >= shards {
        return Err(Error::InvalidParams {
            field: "shard",
            reason: format!("shard {shard} of {shards}: expected 0 <= i < n"),
        }
        .into());
    }
    let p = params.get();
    for &(ex, layers) in models {
        ex.check_budget(p)?;
        let c = ex.model.config();
        if let Some(&bad) = layers.iter().find(|&&l| l > c.n_layers) {
            return Err(Error::InvalidParams {
                field: "layers",
                reason: format!(
                    "hidden state {bad} asked for, but the model has {} (0 = embeddings … {})",
                    c.n_layers + 1,
                    c.n_layers
                ),
            }
            .into());
        }
    }
    let len = p.seq_len;
    let start = usize::from(p.skip_first);
    let per_seq = len - start; // at least 1: a checked seq_len is at least 2
    let wanted = max_tokens.unwrap_or(usize::MAX);
    let mut out = Streamed {
        tokens_kept: 0,
        tokens_run: 0,
        sequences: 0,
        text_tokens: 0,
    };
    // One buffer per (model, hidden state), in the order `visit` gets them.
    let mut bufs: Vec<Vec<f32>> = models
        .iter()
        .flat_map(|(_, layers)| layers.iter().map(|_| Vec::new()))
        .collect();
    // Token ids not yet cut into sequences, and this shard's sequences not yet run (less
    // than a batch of them after each block).
    let mut pending: Vec<u32> = Vec::new();
    let mut queue: Vec<u32> = Vec::new();
    let mut cut = 0usize; // sequences cut from the text so far
    let mut move_whole = |pending: &mut Vec<u32>, queue: &mut Vec<u32>| {
        let whole = pending.len() / len;
        for (k, seq) in pending[..whole * len].chunks(len).enumerate() {
            if (cut + k) % shards == shard {
                queue.extend_from_slice(seq);
            }
        }
        cut += whole;
        pending.drain(..whole * len);
    };
    let mut bytes_done = 0usize;
    let mut blocks = stream_blocks(models, text).peekable();
    while out.tokens_kept < wanted {
        move_whole(&mut pending, &mut queue);
        let last_block = blocks.peek().is_none();
        let n_seq = queue.len() / len;
        if n_seq < p.batch_size && !last_block {
            let block = blocks.next().expect("peeked");
            let ids = block_ids(models, block, bytes_done)?;
            bytes_done += block.len();
            out.text_tokens += ids.len();
            pending.extend(ids);
            continue;
        }
        if n_seq == 0 {
            break;
        }
        let chunk = n_seq.min(p.batch_size);
        let seqs: Vec<&[u32]> = queue[..chunk * len].chunks(len).collect();
        // (row in the batch's [B * T] rows) of every kept token, in order
        let rows: Vec<usize> = (0..chunk)
            .flat_map(|slot| (start..len).map(move |t| slot * len + t))
            .take(wanted - out.tokens_kept)
            .collect();
        // Sequences past the last kept token are not run.
        let seqs = &seqs[..rows.len().div_ceil(per_seq)];
        let mut first = 0; // index of this model's first buffer
        let mut dims = Vec::with_capacity(bufs.len());
        for &(ex, layers) in models {
            let d = ex.model.config().hidden_size;
            let mine = &mut bufs[first..first + layers.len()];
            for buf in mine.iter_mut() {
                buf.clear();
                buf.resize(rows.len() * d, 0.0);
            }
            ex.model.forward_batch(seqs, false, &mut |layer, h| {
                for (k, _) in layers.iter().enumerate().filter(|&(_, &l)| l == layer) {
                    for (dst, &r) in mine[k].chunks_mut(d).zip(&rows) {
                        dst.copy_from_slice(&h[r * d..(r + 1) * d]);
                    }
                }
                Ok(())
            })?;
            dims.extend(layers.iter().map(|_| d));
            first += layers.len();
        }
        let views: Vec<_> = (bufs.iter().zip(&dims))
            .map(|(x, &d)| repgeom_linalg::MatRef::from_row_major_slice(x, rows.len(), d))
            .collect();
        visit(&views)?;
        out.tokens_kept += rows.len();
        out.sequences += seqs.len();
        out.tokens_run += seqs.len() * len;
        queue.drain(..seqs.len() * len);
        // The text's total tokens, estimated from its bytes until all are read.
        let total = if blocks.peek().is_none() {
            out.text_tokens
        } else {
            (out.text_tokens as f64 * text.len() as f64 / bytes_done.max(1) as f64) as usize
        };
        let total_seqs = (total / len / shards)
            .min(wanted.div_ceil(per_seq))
            .max(out.sequences);
        progress(Progress {
            sequences_done: out.sequences,
            sequences_total: total_seqs,
            tokens_done: out.tokens_run,
            tokens_total: total_seqs * len,
        });
    }
    if out.sequences == 0 {
        return Err(Error::TextTooShort {
            tokens: out.text_tokens,
            seq_len: len,
        }
        .into());
    }
    Ok(out)
}

/// The text's blocks as [`stream_models`] tokenises them: [`STREAM_BLOCK_BYTES`] at a time
/// where every model's tokenizer may cut at line starts, else the whole text at once (a piece
/// of it could have other ids than the same bytes inside the whole text).
pub(crate) fn stream_blocks<'t>(
    models: &[(&Extractor, &[usize])],
    text: &'t str,
) -> impl Iterator<Item = &'t str> {
    let whole = models.iter().any(|(m, _)| m.cuts_at_lines().is_err());
    text_blocks(
        text,
        if whole {
            usize::MAX
        } else {
            STREAM_BLOCK_BYTES
        },
    )
}

/// The ids of the block that starts at byte `start` of the text, by the first model's
/// tokenizer; every other model's must be the same ([`Error::TokenizersDiffer`]).
pub(crate) fn block_ids(
    models: &[(&Extractor, &[usize])],
    block: &str,
    start: usize,
) -> Result<Vec<u32>> {
    let (lead, _) = models[0];
    let ids = lead.encode_from(block, start == 0)?;
    for &(other, _) in &models[1..] {
        same_ids(
            lead,
            other,
            &ids,
            &other.encode_from(block, start == 0)?,
            start,
        )?;
    }
    Ok(ids)
}

/// Both models' ids of the block at byte `byte` are the same, or [`Error::TokenizersDiffer`]
/// at the first difference.
fn same_ids(a: &Extractor, b: &Extractor, x: &[u32], y: &[u32], byte: usize) -> Result<()> {
    if x == y {
        return Ok(());
    }
    let position = x.iter().zip(y).take_while(|(p, q)| p == q).count();
    Err(Error::TokenizersDiffer {
        a_tokenizer: a.tokenizer_path.clone(),
        b_tokenizer: b.tokenizer_path.clone(),
        byte,
        position,
        a: x.get(position).copied().unwrap_or(u32::MAX),
        b: y.get(position).copied().unwrap_or(u32::MAX),
    })
}

/// Bytes of text [`Extractor::stream`] tokenises at a time.
pub const STREAM_BLOCK_BYTES: usize = 1 << 18;

/// Bytes of text in each piece [`Extractor::encode`] tokenises side by side.
pub const ENCODE_PIECE_BYTES: usize = 1 << 15;

/// `text` cut into consecutive blocks of at least `target` bytes (the last may be shorter),
/// each cut made at a line start: just after a newline that an ASCII letter or digit
/// follows, so that no block boundary falls inside a word or a run of whitespace (a text
/// without such a place is one block).
///
/// ```
/// let text = "one line\ntwo\n\n  three\nfour\n";
/// let blocks: Vec<&str> = repgeom_extract::text_blocks(text, 4).collect();
/// assert_eq!(blocks, ["one line\n", "two\n\n  three\n", "four\n"]);
/// assert_eq!(blocks.concat(), text);
/// ```
pub fn text_blocks(text: &str, target: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let bytes = rest.as_bytes();
        let cut = (target.max(1)..bytes.len())
            .find(|&i| bytes[i - 1] == b'\n' && bytes[i].is_ascii_alphanumeric())
            .unwrap_or(bytes.len());
        let (block, tail) = rest.split_at(cut);
        rest = tail;
        Some(block)
    })
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
                .map(|_| vec![0.0; n * c.hidden_size])
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

/// Per-sequence summed losses, for the mean and its standard error over sequences.
#[derive(Default)]
struct LossSum {
    /// (summed nll, predicted tokens) of each sequence run with a loss.
    seqs: Vec<(f64, usize)>,
}

impl LossSum {
    /// Adds one sequence's summed next-token cross-entropy: `len - 1` predictions.
    fn add(&mut self, sum: f64, len: usize) {
        self.seqs.push((sum, len.saturating_sub(1)));
    }

    fn finish(self) -> Option<Loss> {
        if self.seqs.is_empty() {
            return None;
        }
        let sum: f64 = self.seqs.iter().map(|s| s.0).sum();
        let tokens: usize = self.seqs.iter().map(|s| s.1).sum();
        let m = self.seqs.len();
        let mean = if tokens == 0 {
            f64::NAN
        } else {
            sum / tokens as f64
        };
        // Ratio estimator's standard error over sequences (cluster sampling): with per-sequence
        // token counts t_i and sums s_i, var = m / (m - 1) * sum((s_i - mean t_i)^2) / T^2.
        let se = if m < 2 || tokens == 0 {
            f64::NAN
        } else {
            let ss: f64 = self
                .seqs
                .iter()
                .map(|&(s, t)| (s - mean * t as f64).powi(2))
                .sum();
            (ss * m as f64 / (m as f64 - 1.0)).sqrt() / tokens as f64
        };
        Some(Loss {
            mean,
            tokens,
            sequences: m,
            se,
        })
    }
}

/// The `n` points of a text of `n_seq` sequences, as (sequence, position) sorted: uniform over
/// all positions (`points_per_sequence` 1), or `M` distinct positions from each of
/// `ceil(n / M)` sequences; and the `M` used. `M` is `points_per_sequence` when the caller set
/// it (too few sequences for it is an error), else the default density, raised to
/// `ceil(n / n_seq)` when the text has too few sequences for the default (a caller who did not
/// choose the density never meets an error about it).
fn sample_points(
    p: &ExtractParams,
    n: usize,
    n_seq: usize,
    text_tokens: usize,
) -> Result<(Vec<(usize, usize)>, usize)> {
    let len = p.seq_len;
    let skip = usize::from(p.skip_first);
    let per = len - skip;
    let available = n_seq * per;
    let detail = || {
        format!(
            "{text_tokens} tokens give {n_seq} sequences of {len}{}",
            if p.skip_first {
                ", position 0 of each skipped"
            } else {
                ""
            }
        )
    };
    if n > available {
        return Err(Error::TooManyPoints {
            requested: n,
            available,
            detail: detail(),
        });
    }
    let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
    let mut m = p.density();
    if p.points_per_sequence.is_none() && m > 1 && n.div_ceil(m) > n_seq {
        // n <= n_seq * per (checked above), so this is at most `per`.
        m = n.div_ceil(n_seq.max(1));
    }
    if m <= 1 {
        let mut flat = rand::seq::index::sample(&mut rng, available, n).into_vec();
        flat.sort_unstable();
        return Ok((flat.iter().map(|&i| (i / per, skip + i % per)).collect(), m));
    }
    let needed = n.div_ceil(m);
    if needed > n_seq {
        return Err(Error::TooSparse {
            n_points: n,
            points_per_sequence: m,
            needed,
            sequences: n_seq,
            detail: detail(),
        });
    }
    let mut seqs = rand::seq::index::sample(&mut rng, n_seq, needed).into_vec();
    seqs.sort_unstable();
    let mut points = Vec::with_capacity(n);
    for (j, &s) in seqs.iter().enumerate() {
        let count = if j + 1 == needed { n - j * m } else { m };
        let mut pos = rand::seq::index::sample(&mut rng, per, count).into_vec();
        pos.sort_unstable();
        points.extend(pos.into_iter().map(|t| (s, skip + t)));
    }
    Ok((points, m))
}

/// The sequences (sorted) of the loss sample: enough of the text's `n_seq` sequences of `len`
/// tokens to predict at least `tokens` tokens (all of them when there are too few), drawn with
/// a stream of `seed` of its own, so that the points do not depend on whether a loss runs.
fn loss_sample(seed: u64, tokens: usize, n_seq: usize, len: usize) -> Vec<usize> {
    let want = tokens.div_ceil(len.saturating_sub(1).max(1)).min(n_seq);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(1);
    let mut seqs = rand::seq::index::sample(&mut rng, n_seq, want).into_vec();
    seqs.sort_unstable();
    seqs
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
