//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong while loading a checkpoint, tokenising text or extracting
/// hidden states. Messages name the file, tensor and shape involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read or written.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A required file of the checkpoint is missing.
    #[error("{} not found: {what}", path.display())]
    MissingFile {
        /// The missing file.
        path: PathBuf,
        /// What the file would have held and what to do instead.
        what: &'static str,
    },
    /// A JSON file (config.json, the shard index) could not be parsed.
    #[error("cannot parse {}: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// `config.json` names an architecture this crate has no forward pass for.
    #[error(
        "{}: unsupported architecture (model_type {model_type:?}, architectures {architectures:?}); supported: {}", path.display(), crate::Family::MODEL_TYPES
    )]
    UnsupportedArchitecture {
        /// The config file.
        path: PathBuf,
        /// Its `model_type`.
        model_type: String,
        /// Its `architectures` list.
        architectures: Vec<String>,
    },
    /// `config.json` lacks a field or has a value this crate cannot honour.
    #[error("{}: config field {field}: {reason}", path.display())]
    Config {
        /// The config file.
        path: PathBuf,
        /// The field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A weight has a shape other than the config implies.
    #[error("{}: tensor {tensor} has shape {found:?}, expected {expected:?}", file.display())]
    ShapeMismatch {
        /// The checkpoint directory or file.
        file: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The shape the config implies.
        expected: Vec<usize>,
        /// The shape on disk.
        found: Vec<usize>,
    },
    /// The tokenizer could not be loaded or failed on the text.
    #[error("tokenizer {}: {reason}", path.display())]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// What the tokenizer said.
        reason: String,
    },
    /// A token id is outside the model's embedding table.
    #[error("token id {token} is outside the model's vocabulary of {vocab_size}")]
    TokenOutOfRange {
        /// The token id.
        token: u32,
        /// The number of rows of the embedding.
        vocab_size: usize,
    },
    /// The text gives fewer tokens than one sequence needs.
    #[error("the text has {tokens} tokens, fewer than one sequence of {seq_len}")]
    TextTooShort {
        /// Tokens in the text.
        tokens: usize,
        /// The requested sequence length.
        seq_len: usize,
    },
    /// More points were requested than the text offers.
    #[error(
        "--n-points {requested} is larger than the {available} token positions available ({detail})"
    )]
    TooManyPoints {
        /// Points requested.
        requested: usize,
        /// Positions (or lines) available.
        available: usize,
        /// How `available` was counted.
        detail: String,
    },
    /// A word-point design asked for more words than the text offers.
    #[error("n_points = {requested} words asked for, but the text offers {available} ({detail})")]
    TooFewWords {
        /// Points requested.
        requested: usize,
        /// Words that can be sampled.
        available: usize,
        /// How `available` was counted.
        detail: String,
    },
    /// A word window made more tokens than `seq_len` (windows hold at most `seq_len - 1`
    /// bytes, which fits any tokenizer making at most one token per byte).
    #[error(
        "tokenizer {}: the word window at characters {start}..{end} of the text is {tokens} tokens, more than seq_len {seq_len} (the tokenizer makes more than one token per byte; word points cannot give this model the same characters as others)", path.display()
    )]
    WindowTooLong {
        /// The tokenizer file.
        path: PathBuf,
        /// First character of the window.
        start: usize,
        /// One past its last character.
        end: usize,
        /// Tokens of the window.
        tokens: usize,
        /// The sequence length.
        seq_len: usize,
    },
    /// A sampled word has no token of its own (the tokenizer dropped its characters).
    #[error(
        "tokenizer {}: no token covers the word {word:?} at characters {start}..{end} of the text", path.display()
    )]
    WordWithoutTokens {
        /// The tokenizer file.
        path: PathBuf,
        /// The word.
        word: String,
        /// Its first character.
        start: usize,
        /// One past its last character.
        end: usize,
    },
    /// A line of the input is empty in `Pool::Mean` mode (one line is one example).
    #[error("line {line} of the text is empty; with --pool mean every line is one example")]
    EmptyLine {
        /// The 1-based line number.
        line: usize,
    },
    /// The text has too few sequences for `n_points` at `points_per_sequence` each.
    #[error(
        "n_points = {n_points} at points_per_sequence = {points_per_sequence} needs {needed} sequences, but {detail}: lower n_points or raise points_per_sequence"
    )]
    TooSparse {
        /// Points requested.
        n_points: usize,
        /// Points per sequence.
        points_per_sequence: usize,
        /// Sequences that needs.
        needed: usize,
        /// Sequences the text gives.
        sequences: usize,
        /// How the sequences were counted.
        detail: String,
    },
    /// Two models asked to run on the same batches tokenise the text differently.
    #[error(
        "{} and {} tokenise the text differently (token {position} of the block at byte {byte}: id {a} vs {b}); models of a pair run on the same batches only with one tokenizer",
        a_tokenizer.display(), b_tokenizer.display()
    )]
    TokenizersDiffer {
        /// The first model's tokenizer file.
        a_tokenizer: PathBuf,
        /// The second model's.
        b_tokenizer: PathBuf,
        /// Byte offset in the text of the block where they first differ.
        byte: usize,
        /// Token index within that block of the first difference.
        position: usize,
        /// The first model's id there (`u32::MAX`: its encoding ended).
        a: u32,
        /// The second model's id there (`u32::MAX`: its encoding ended).
        b: u32,
    },
    /// An extraction parameter is out of range.
    #[error("invalid parameter {field}: {reason}")]
    InvalidParams {
        /// The parameter.
        field: &'static str,
        /// Why it is invalid.
        reason: String,
    },
    /// One batch's activations would not fit in the memory budget.
    #[error(
        "--batch-size {batch_size} with --seq-len {seq_len} needs about {} MB of activations, more than the {} MB budget (available memory); {}",
        needed / 1_000_000, budget / 1_000_000,
        if *fits > 0 { format!("--batch-size {fits} fits") } else { "even --batch-size 1 does not fit: use a shorter --seq-len".to_string() }
    )]
    BatchTooLarge {
        /// The requested batch size.
        batch_size: usize,
        /// The sequence length.
        seq_len: usize,
        /// Estimated bytes of one batch's activations.
        needed: u64,
        /// The budget in bytes.
        budget: u64,
        /// The largest batch size that fits (0 if none).
        fits: usize,
    },
    /// Work that does not fit in a device's free memory.
    #[error("{device}: {what} needs {needed} bytes of device memory and {free} are free; {hint}")]
    DeviceTooSmall {
        /// The device (`cuda:0`).
        device: String,
        /// The work.
        what: String,
        /// Bytes needed.
        needed: u64,
        /// Bytes free.
        free: u64,
        /// What to do.
        hint: String,
    },
    /// A hidden state holds NaN or Inf: the weights overflow, or their precision does.
    #[error(
        "hidden state {layer} is not finite (NaN or Inf: {value}) at position {position} of sequence {sequence} of its batch of {batch}, column {column}; {hint}"
    )]
    NonFinite {
        /// The hidden state (0 = embeddings, HuggingFace order).
        layer: usize,
        /// The sequence's index in its batch.
        sequence: usize,
        /// How many sequences the batch held.
        batch: usize,
        /// The token position in the sequence.
        position: usize,
        /// The column (hidden dimension).
        column: usize,
        /// The value found.
        value: f32,
        /// What to try.
        hint: String,
    },
    /// A sequence's next-token loss is NaN or Inf (its logits overflow).
    #[error(
        "the next-token loss of sequence {sequence} of its batch of {batch} ({tokens} tokens) is not finite ({value}); {hint}"
    )]
    NonFiniteLoss {
        /// The sequence's index in its batch.
        sequence: usize,
        /// How many sequences the batch held.
        batch: usize,
        /// Its tokens.
        tokens: usize,
        /// The summed loss found.
        value: f64,
        /// What to try.
        hint: String,
    },
    /// A device could not be opened or failed.
    #[error(transparent)]
    Device(#[from] repgeom_cuda::Error),
    /// The checkpoint could not be opened or read (missing config, missing shard, missing
    /// tensor, bad dtype), or the output could not be written.
    #[error(transparent)]
    Checkpoint(#[from] repgeom_io::Error),
    /// A tensor operation failed inside candle.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
