//! `repgeom-extract` gets hidden states out of HuggingFace checkpoints on disk, without Python:
//! it tokenises a text with the checkpoint's `tokenizer.json`, runs the model on the CPU and
//! keeps every layer's hidden states at sampled token positions, line means or sampled words
//! (word-aligned points, the same for every tokenizer: [`Pool::Words`], [`sample_words`]), in
//! HuggingFace's `output_hidden_states` convention (L + 1 entries: the embedding output
//! first, the last layer after the final norm).
//!
//! The main type is [`Extractor`] (a [`Model`] plus its tokenizer); [`extract`] is the
//! one-call form, [`Extraction::write`] the output in the `repgeom.activations.v1` layout
//! that `repgeom pga` reads.
//!
//! Key design decision: the forward passes (one decoder skeleton whose norms, attention
//! layout, MLP, residual wiring and positions are chosen per family: GPT-NeoX, GPT-2, Llama,
//! Mistral, Qwen2, OLMo, OLMo-2, Phi, Gemma, Gemma-2) are written here on candle tensors,
//! with f32 arithmetic, rather than taken from candle-transformers, because that crate has
//! no GPT-NeoX and returns only logits; and f32 by default (weights stored as f16/bf16 are
//! widened) because the point is to reproduce transformers' numbers to 1e-4, which
//! half-precision arithmetic does not ([`Precision::Stored`] is the opt-in exception: the
//! linear layers' products from bf16/f16 inputs, as transformers runs in that dtype, on AMX
//! tiles on a CPU that has them). Batches of sequences of different lengths are padded
//! on the right, which needs no attention mask beyond the causal one: no real position ever
//! sees a padding position, and padded rows are never read. Which tensors are the readout,
//! the tied embedding and the final norm, and the norms' kind, gain convention and epsilon,
//! come from `repgeom-io`'s architecture table ([`repgeom_io::ARCHS`], [`Family::arch`]), the
//! one the readout loader folds the final norm by, so analysis and extraction agree.
//!
//! [`Model::place`] runs the same skeleton on a CUDA device through `repgeom-cuda`'s
//! operations (the model's pieces are generic over where their weights live, and the wiring
//! is one function over either device's operations), or on the CPU, in `f32` or with the
//! weights as stored ([`Precision`]); hidden states come back in the CPU path's layout.
//!
//! It is not a general inference engine: no KV cache, no generation, no quantised weights,
//! and only the architectures listed in `docs/extraction.md`.
#![deny(missing_docs)]

mod attention;
mod config;
mod cuts;
mod error;
mod extract;
mod kernels;
mod model;
mod points;
mod words;

pub use config::{Activation, Family, ModelConfig, RopeScaling};
pub use error::{Error, Result};
pub use extract::{
    DEFAULT_BATCH_SIZE, DEFAULT_LOSS_TOKENS, DEFAULT_N_POINTS, DEFAULT_POINTS_PER_SEQUENCE,
    DEFAULT_SEQ_LEN, ENCODE_PIECE_BYTES, ExtractParams, Extraction, Extractor, Loss, Pool,
    Progress, STREAM_BLOCK_BYTES, Streamed, ValidExtractParams, Visit, available_memory, extract,
    text_blocks,
};
pub use model::{Forward, Model, Precision};
pub use points::{POINTS_NAMES, PointsDiffer, PointsRecord, same_points};
pub use words::{WordPoint, WordPool, WordSample, sample_words};

#[cfg(test)]
mod tests;
