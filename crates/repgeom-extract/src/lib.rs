//! `repgeom-extract` gets hidden states out of HuggingFace checkpoints on disk, without Python:
//! it tokenises a text with the checkpoint's `tokenizer.json`, runs the model on the CPU and
//! keeps every layer's hidden states at sampled token positions (or line means), in
//! HuggingFace's `output_hidden_states` convention (L + 1 entries: the embedding output
//! first, the last layer after the final norm).
//!
//! The main type is [`Extractor`] (a [`Model`] plus its tokenizer); [`extract`] is the
//! one-call form, [`Extraction::write`] the output in the `repgeom.activations.v1` layout
//! that `repgeom pga` reads.
//!
//! Key design decision: the forward passes (GPT-NeoX and Llama-style) are written here on
//! candle tensors, in f32, one sequence at a time, rather than taken from
//! candle-transformers, because that crate has no GPT-NeoX and returns only logits; and f32
//! throughout (weights stored as f16/bf16 are widened at load) because the point is to
//! reproduce transformers' numbers to 1e-4, which half-precision arithmetic does not.
//! Running one sequence at a time needs no padding or attention mask beyond the causal one,
//! and bounds memory to one sequence's hidden states plus the sampled rows.
//!
//! It is not a general inference engine: no KV cache, no generation, no GPU, no quantised
//! weights, and only the architectures listed in `docs/extraction.md`.
#![deny(missing_docs)]

mod config;
mod error;
mod extract;
mod model;

pub use config::{Activation, Family, ModelConfig};
pub use error::{Error, Result};
pub use extract::{
    ExtractParams, Extraction, Extractor, Loss, Pool, Progress, ValidExtractParams, extract,
};
pub use model::{Forward, Model};

#[cfg(test)]
mod tests;
