//! Reading `config.json` into the architecture descriptions the forward passes need.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{Error, Result};

/// The model families this crate has a forward pass for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Family {
    /// GPT-NeoX / Pythia (`model_type` `gpt_neox`).
    GptNeoX,
    /// Llama-style decoders (`model_type` `llama`).
    Llama,
    /// OLMo (`model_type` `olmo`, the `-hf` conversions): Llama with weight-less LayerNorms
    /// and optional clipping of q, k and v.
    Olmo,
}

/// The activation function of the MLP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Activation {
    /// Exact GELU, `x Φ(x)` (HF `gelu`).
    GeluErf,
    /// The tanh approximation of GELU (HF `gelu_new`, `gelu_pytorch_tanh`, `gelu_fast`).
    GeluTanh,
    /// ReLU.
    Relu,
    /// SiLU / swish.
    Silu,
}

impl Activation {
    fn parse(path: &Path, name: &str) -> Result<Self> {
        Ok(match name {
            "gelu" => Self::GeluErf,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Self::GeluTanh,
            "relu" => Self::Relu,
            "silu" | "swish" => Self::Silu,
            other => {
                return Err(Error::Config {
                    path: path.to_path_buf(),
                    field: "hidden_act".into(),
                    reason: format!(
                        "activation {other:?} is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu, silu)"
                    ),
                });
            }
        })
    }
}

/// One decoder's shape and options, as read from `config.json` (or built by hand for benches).
///
/// Fields that only one family uses are ignored by the other: `use_parallel_residual` and
/// `attention_bias` by Llama's defaults, `n_kv_heads` by GPT-NeoX (which has none).
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// Which forward pass.
    pub family: Family,
    /// Model width d.
    pub hidden_size: usize,
    /// Number of decoder layers L (the output has L + 1 hidden states).
    pub n_layers: usize,
    /// Number of attention heads.
    pub n_heads: usize,
    /// Number of key/value heads (grouped-query attention); equals `n_heads` for GPT-NeoX.
    pub n_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Width of the MLP.
    pub intermediate_size: usize,
    /// Rows of the embedding (and of the readout), padding rows included.
    pub vocab_size: usize,
    /// Longest sequence the model accepts.
    pub max_positions: usize,
    /// Number of leading dimensions of each head that are rotated (`head_dim * rotary_pct`).
    pub rotary_dims: usize,
    /// RoPE base θ.
    pub rope_theta: f64,
    /// LayerNorm / RMSNorm epsilon.
    pub norm_eps: f64,
    /// MLP activation.
    pub activation: Activation,
    /// GPT-NeoX: attention and MLP read the same input and both add to the residual.
    pub use_parallel_residual: bool,
    /// Whether the attention projections have biases.
    pub attention_bias: bool,
    /// Whether the MLP projections have biases (Llama `mlp_bias`; always true for GPT-NeoX).
    pub mlp_bias: bool,
    /// Whether the readout reuses the input embedding.
    pub tie_word_embeddings: bool,
    /// OLMo: q, k and v are clamped to `[-clip, clip]` after projection.
    pub clip_qkv: Option<f64>,
}

impl ModelConfig {
    /// A randomly initialisable GPT-NeoX of Pythia-70M's shape (d = 512, 6 layers, 8 heads,
    /// MLP 2048, vocabulary 50304, rotary_pct 0.25, parallel residual).
    pub fn pythia_70m() -> Self {
        Self {
            family: Family::GptNeoX,
            hidden_size: 512,
            n_layers: 6,
            n_heads: 8,
            n_kv_heads: 8,
            head_dim: 64,
            intermediate_size: 2048,
            vocab_size: 50304,
            max_positions: 2048,
            rotary_dims: 16,
            rope_theta: 10000.0,
            norm_eps: 1e-5,
            activation: Activation::GeluErf,
            use_parallel_residual: true,
            attention_bias: true,
            mlp_bias: true,
            tie_word_embeddings: false,
            clip_qkv: None,
        }
    }

    /// Parses a HuggingFace `config.json` value; `path` is used in error messages.
    pub fn from_json(path: &Path, cfg: &Value) -> Result<Self> {
        let r = Reader {
            path: path.to_path_buf(),
            cfg,
        };
        let model_type = cfg
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let family = match model_type.as_str() {
            "gpt_neox" => Family::GptNeoX,
            "llama" => Family::Llama,
            "olmo" => Family::Olmo,
            _ => {
                let architectures = cfg
                    .get("architectures")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                return Err(Error::UnsupportedArchitecture {
                    path: path.to_path_buf(),
                    model_type,
                    architectures,
                });
            }
        };
        let hidden_size = r.usize("hidden_size")?;
        let n_layers = r.usize("num_hidden_layers")?;
        let n_heads = r.usize("num_attention_heads")?;
        if n_heads == 0 || hidden_size % n_heads != 0 {
            return Err(r.bad(
                "num_attention_heads",
                format!("{n_heads} does not divide hidden_size {hidden_size}"),
            ));
        }
        let head_dim = match r.opt_usize("head_dim")? {
            Some(h) => h,
            None => hidden_size / n_heads,
        };
        let rope = cfg
            .get("rope_parameters")
            .or_else(|| cfg.get("rope_scaling"))
            .filter(|v| !v.is_null());
        if let Some(rope) = rope {
            let kind = rope
                .get("rope_type")
                .or_else(|| rope.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("default");
            if kind != "default" {
                return Err(r.bad(
                    "rope_parameters",
                    format!("rope_type {kind:?} is not supported (only default RoPE)"),
                ));
            }
        }
        let from_rope = |key: &str| rope.and_then(|p| p.get(key)).and_then(Value::as_f64);
        let rope_theta = r
            .opt_f64("rope_theta")
            .or_else(|| r.opt_f64("rotary_emb_base"))
            .or_else(|| from_rope("rope_theta"))
            .unwrap_or(10000.0);
        let default_pct = if family == Family::GptNeoX { 0.25 } else { 1.0 };
        let rotary_pct = r
            .opt_f64("rotary_pct")
            .or_else(|| r.opt_f64("partial_rotary_factor"))
            .or_else(|| from_rope("partial_rotary_factor"))
            .unwrap_or(default_pct);
        // HF: int(head_size * rotary_pct)
        let rotary_dims = (head_dim as f64 * rotary_pct) as usize;
        if !rotary_dims.is_multiple_of(2)
            || rotary_dims > head_dim
            || !(0.0..=1.0).contains(&rotary_pct)
        {
            return Err(r.bad("rotary_pct", format!("{rotary_pct} gives {rotary_dims} rotary dims of a head of {head_dim}; must be even")));
        }
        let activation = Activation::parse(
            path,
            r.opt_str("hidden_act").unwrap_or(match family {
                Family::GptNeoX => "gelu",
                Family::Llama | Family::Olmo => "silu",
            }),
        )?;
        let vocab_size = r.usize("vocab_size")?;
        let max_positions = r.usize("max_position_embeddings")?;
        let tie_default = family != Family::GptNeoX;
        let tie_word_embeddings = r.opt_bool("tie_word_embeddings").unwrap_or(tie_default);
        let config = match family {
            Family::GptNeoX => Self {
                family,
                hidden_size,
                n_layers,
                n_heads,
                n_kv_heads: n_heads,
                head_dim,
                intermediate_size: r.usize("intermediate_size")?,
                vocab_size,
                max_positions,
                rotary_dims,
                rope_theta,
                norm_eps: r.opt_f64("layer_norm_eps").unwrap_or(1e-5),
                activation,
                use_parallel_residual: r.opt_bool("use_parallel_residual").unwrap_or(true),
                attention_bias: r.opt_bool("attention_bias").unwrap_or(true),
                mlp_bias: true,
                tie_word_embeddings,
                clip_qkv: None,
            },
            Family::Llama | Family::Olmo => {
                let n_kv_heads = r.opt_usize("num_key_value_heads")?.unwrap_or(n_heads);
                if n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
                    return Err(r.bad(
                        "num_key_value_heads",
                        format!("{n_kv_heads} does not divide num_attention_heads {n_heads}"),
                    ));
                }
                if r.opt_usize("pretraining_tp")?.unwrap_or(1) != 1 {
                    return Err(r.bad(
                        "pretraining_tp",
                        "only pretraining_tp = 1 is supported".into(),
                    ));
                }
                Self {
                    family,
                    hidden_size,
                    n_layers,
                    n_heads,
                    n_kv_heads,
                    head_dim,
                    intermediate_size: r.usize("intermediate_size")?,
                    vocab_size,
                    max_positions,
                    rotary_dims,
                    rope_theta,
                    // OLMo's LayerNorm has a fixed eps of 1e-5 in transformers.
                    norm_eps: if family == Family::Olmo {
                        1e-5
                    } else {
                        r.opt_f64("rms_norm_eps").unwrap_or(1e-6)
                    },
                    activation,
                    use_parallel_residual: false,
                    attention_bias: r.opt_bool("attention_bias").unwrap_or(false),
                    mlp_bias: r.opt_bool("mlp_bias").unwrap_or(false),
                    tie_word_embeddings,
                    clip_qkv: if family == Family::Olmo {
                        r.opt_f64("clip_qkv")
                    } else {
                        None
                    },
                }
            }
        };
        Ok(config)
    }
}

struct Reader<'a> {
    path: PathBuf,
    cfg: &'a Value,
}

impl Reader<'_> {
    fn bad(&self, field: &str, reason: String) -> Error {
        Error::Config {
            path: self.path.clone(),
            field: field.into(),
            reason,
        }
    }
    fn usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?
            .ok_or_else(|| self.bad(key, "missing".into()))
    }
    fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.cfg.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0)
                .map(|n| Some(n as usize))
                .ok_or_else(|| self.bad(key, format!("expected a positive integer, found {v}"))),
        }
    }
    fn opt_f64(&self, key: &str) -> Option<f64> {
        self.cfg.get(key).and_then(Value::as_f64)
    }
    fn opt_bool(&self, key: &str) -> Option<bool> {
        self.cfg.get(key).and_then(Value::as_bool)
    }
    fn opt_str(&self, key: &str) -> Option<&str> {
        self.cfg.get(key).and_then(Value::as_str)
    }
}
