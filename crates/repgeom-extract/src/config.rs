//! Reading `config.json` into the architecture descriptions the forward passes need.

use std::path::{Path, PathBuf};

use repgeom_io::Arch;
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
    /// OLMo-2 (`model_type` `olmo2`): Llama with RMSNorm on the whole q and k projections and
    /// norms after (not before) attention and MLP.
    Olmo2,
    /// Qwen2 (`model_type` `qwen2`): Llama with biases on q, k and v.
    Qwen2,
    /// Mistral (`model_type` `mistral`): Llama with sliding-window attention.
    Mistral,
    /// GPT-2 (`model_type` `gpt2`): learned positions, LayerNorm, `Conv1D` weights stored
    /// `[in, out]`, tied readout.
    Gpt2,
    /// Phi-1 / Phi-1.5 / Phi-2 (`model_type` `phi`): attention and MLP in parallel on one
    /// LayerNorm, biases everywhere, partial rotary, `lm_head` with a bias.
    Phi,
    /// Gemma (`model_type` `gemma`): `(1 + w)` RMSNorm, `√d` embedding scale, GeGLU MLP.
    Gemma,
    /// Gemma-2 (`model_type` `gemma2`): Gemma plus post-norms, `query_pre_attn_scalar`,
    /// attention and final-logit soft-capping, and sliding windows on alternating layers.
    Gemma2,
}

impl Family {
    /// Every `model_type` with a forward pass, in the order the docs list them.
    pub const MODEL_TYPES: &'static str =
        "gpt_neox, gpt2, llama, mistral, qwen2, olmo, olmo2, phi, gemma, gemma2";

    /// The HuggingFace `config.json` `model_type` of the family.
    pub fn model_type(self) -> &'static str {
        match self {
            Family::GptNeoX => "gpt_neox",
            Family::Llama => "llama",
            Family::Olmo => "olmo",
            Family::Olmo2 => "olmo2",
            Family::Qwen2 => "qwen2",
            Family::Mistral => "mistral",
            Family::Gpt2 => "gpt2",
            Family::Phi => "phi",
            Family::Gemma => "gemma",
            Family::Gemma2 => "gemma2",
        }
    }

    /// The family's entry of `repgeom-io`'s architecture table ([`repgeom_io::ARCHS`]): its
    /// readout and input-embedding tensors, the tie default, and the final norm's tensor,
    /// kind, gain convention and epsilon, which the forward pass and the readout loader share.
    pub fn arch(self) -> &'static Arch {
        Arch::for_model_type(self.model_type())
            .expect("every Family has an entry in repgeom_io::ARCHS (tested)")
    }

    /// Whether the family's decoder is Llama-shaped (`model.layers.{i}.self_attn.q_proj` ...).
    pub(crate) fn is_llama_like(self) -> bool {
        matches!(
            self,
            Family::Llama
                | Family::Olmo
                | Family::Olmo2
                | Family::Qwen2
                | Family::Mistral
                | Family::Gemma
                | Family::Gemma2
        )
    }
}

/// How the RoPE inverse frequencies are made.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum RopeScaling {
    /// `inv_freq_i = 1 / θ^(2i / rotary_dims)`.
    Default,
    /// Llama 3.1's `rope_type: llama3`: low frequencies divided by `factor`, high ones kept,
    /// the band between smoothly interpolated.
    Llama3 {
        /// Divisor of the low frequencies.
        factor: f64,
        /// Wavelengths above `original_max_positions / low_freq_factor` are scaled.
        low_freq_factor: f64,
        /// Wavelengths below `original_max_positions / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context length of pre-training.
        original_max_positions: f64,
    },
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
    fn parse(path: &Path, field: &str, name: &str) -> Result<Self> {
        Ok(match name {
            "gelu" => Self::GeluErf,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Self::GeluTanh,
            "relu" => Self::Relu,
            "silu" | "swish" => Self::Silu,
            other => {
                return Err(Error::Config {
                    path: path.to_path_buf(),
                    field: field.into(),
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
    /// Whether the q, k and v (or fused qkv) projections have biases.
    pub attention_bias: bool,
    /// Whether the attention output projection has a bias.
    pub attention_out_bias: bool,
    /// Whether the MLP projections have biases (Llama `mlp_bias`; always true for GPT-NeoX).
    pub mlp_bias: bool,
    /// Whether the readout reuses the input embedding.
    pub tie_word_embeddings: bool,
    /// OLMo: q, k and v are clamped to `[-clip, clip]` after projection.
    pub clip_qkv: Option<f64>,
    /// RoPE frequency scaling.
    pub rope_scaling: RopeScaling,
    /// Attention scores are `q·k · attention_scale`: `1/√head_dim`, or Gemma-2's
    /// `query_pre_attn_scalar^-1/2`.
    pub attention_scale: f64,
    /// Gemma-2: scores become `cap · tanh(scores / cap)` before the mask.
    pub attn_logit_softcap: Option<f64>,
    /// Gemma-2: logits become `cap · tanh(logits / cap)`.
    pub final_logit_softcap: Option<f64>,
    /// Per layer: the sliding-window width (a query sees keys at most `w - 1` positions back),
    /// or `None` for full causal attention. `n_layers` entries.
    pub windows: Vec<Option<usize>>,
    /// Whether the readout has a bias (Phi's `lm_head.bias`, [`repgeom_io::Arch::readout_bias`]).
    pub lm_head_bias: bool,
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
            attention_out_bias: true,
            rope_scaling: RopeScaling::Default,
            attention_scale: 1.0 / 8.0,
            attn_logit_softcap: None,
            final_logit_softcap: None,
            windows: vec![None; 6],
            lm_head_bias: false,
        }
    }

    /// Parses a HuggingFace `config.json` value; `path` is used in error messages.
    ///
    /// Every option that changes the arithmetic is read; a value this crate does not implement
    /// (a RoPE type, an activation, GPT-2's per-layer attention scaling, Phi's QK LayerNorm,
    /// ...) is refused by name rather than ignored.
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
            "olmo2" => Family::Olmo2,
            "qwen2" => Family::Qwen2,
            "mistral" => Family::Mistral,
            "gpt2" => Family::Gpt2,
            "phi" => Family::Phi,
            "gemma" => Family::Gemma,
            "gemma2" => Family::Gemma2,
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
        // GPT-2 spells the shape its own way.
        let gpt2 = family == Family::Gpt2;
        let key = |hf: &'static str, gpt2_key: &'static str| if gpt2 { gpt2_key } else { hf };
        let hidden_size = r.usize(key("hidden_size", "n_embd"))?;
        let n_layers = r.usize(key("num_hidden_layers", "n_layer"))?;
        let heads_key = key("num_attention_heads", "n_head");
        let n_heads = r.usize(heads_key)?;
        let head_dim = match r.opt_usize("head_dim")? {
            Some(h) if !gpt2 => h,
            _ => {
                if hidden_size % n_heads != 0 {
                    return Err(r.bad(
                        heads_key,
                        format!("{n_heads} does not divide hidden_size {hidden_size}"),
                    ));
                }
                hidden_size / n_heads
            }
        };
        let n_kv_heads = match family {
            Family::GptNeoX | Family::Gpt2 => n_heads,
            _ => r.opt_usize("num_key_value_heads")?.unwrap_or(n_heads),
        };
        if n_heads % n_kv_heads != 0 {
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

        // RoPE: theta, the rotated fraction and the frequency scaling.
        let rope = cfg
            .get("rope_parameters")
            .or_else(|| cfg.get("rope_scaling"))
            .filter(|v| !v.is_null());
        let from_rope = |key: &str| rope.and_then(|p| p.get(key)).and_then(Value::as_f64);
        let rope_scaling = match rope
            .and_then(|p| p.get("rope_type").or_else(|| p.get("type")))
            .and_then(Value::as_str)
            .unwrap_or("default")
        {
            _ if gpt2 => RopeScaling::Default,
            "default" => RopeScaling::Default,
            "llama3" => {
                let need = |k: &str| {
                    from_rope(k).ok_or_else(|| {
                        r.bad("rope_parameters", format!("rope_type \"llama3\" needs {k}"))
                    })
                };
                let original = from_rope("original_max_position_embeddings")
                    .or_else(|| r.opt_f64("max_position_embeddings"))
                    .ok_or_else(|| {
                        r.bad(
                            "rope_parameters",
                            "rope_type \"llama3\" needs original_max_position_embeddings".into(),
                        )
                    })?;
                let s = RopeScaling::Llama3 {
                    factor: need("factor")?,
                    low_freq_factor: need("low_freq_factor")?,
                    high_freq_factor: need("high_freq_factor")?,
                    original_max_positions: original,
                };
                if let RopeScaling::Llama3 {
                    low_freq_factor,
                    high_freq_factor,
                    ..
                } = s
                    && high_freq_factor <= low_freq_factor
                {
                    return Err(r.bad(
                        "rope_parameters",
                        format!("llama3 high_freq_factor {high_freq_factor} must exceed low_freq_factor {low_freq_factor}"),
                    ));
                }
                s
            }
            kind => {
                return Err(r.bad(
                    "rope_parameters",
                    format!("rope_type {kind:?} is not supported (default, llama3)"),
                ));
            }
        };
        // `rope_parameters` first, then the keys of older configs: transformers 5 moves those
        // into `rope_parameters` only where it lacks them (`setdefault`), so where both are
        // given, `rope_parameters` holds what the model runs with.
        let rope_theta = from_rope("rope_theta")
            .or_else(|| r.opt_f64("rope_theta"))
            .or_else(|| r.opt_f64("rotary_emb_base"))
            .unwrap_or(10000.0);
        let default_pct = match family {
            Family::GptNeoX => 0.25,
            Family::Phi => 0.5,
            Family::Gpt2 => 0.0,
            _ => 1.0,
        };
        let rotary_pct = if gpt2 {
            0.0
        } else {
            from_rope("partial_rotary_factor")
                .or_else(|| r.opt_f64("rotary_pct"))
                .or_else(|| r.opt_f64("partial_rotary_factor"))
                .unwrap_or(default_pct)
        };
        // HF: int(head_size * rotary_pct)
        let rotary_dims = (head_dim as f64 * rotary_pct) as usize;
        if !rotary_dims.is_multiple_of(2)
            || rotary_dims > head_dim
            || !(0.0..=1.0).contains(&rotary_pct)
        {
            return Err(r.bad("rotary_pct", format!("{rotary_pct} gives {rotary_dims} rotary dims of a head of {head_dim}; must be even")));
        }

        let act_key = match family {
            Family::Gpt2 => "activation_function",
            Family::Gemma2 => "hidden_activation",
            Family::Gemma if r.opt_str("hidden_activation").is_some() => "hidden_activation",
            _ => "hidden_act",
        };
        let act_name = r.opt_str(act_key).unwrap_or(match family {
            Family::GptNeoX => "gelu",
            Family::Gpt2 | Family::Phi => "gelu_new",
            Family::Gemma | Family::Gemma2 => "gelu_pytorch_tanh",
            _ => "silu",
        });
        // transformers' GemmaConfig turns the legacy `gelu` into the tanh approximation.
        let act_name = if family == Family::Gemma && act_name == "gelu" {
            "gelu_pytorch_tanh"
        } else {
            act_name
        };
        let activation = Activation::parse(path, act_key, act_name)?;
        let vocab_size = r.usize("vocab_size")?;
        let max_positions = r.usize(key("max_position_embeddings", "n_positions"))?;
        let arch = family.arch();
        // transformers' default when the key is absent, from the architecture table
        let tie_word_embeddings = arch.tie_word_embeddings(cfg);

        let intermediate_size = match family {
            Family::Gpt2 => r.opt_usize("n_inner")?.unwrap_or(4 * hidden_size),
            _ => r.usize("intermediate_size")?,
        };
        // `layer_norm_eps`, GPT-2's `layer_norm_epsilon` or `rms_norm_eps`, with transformers'
        // defaults; OLMo's LayerNorm has a fixed eps of 1e-5.
        let norm_eps = arch.norm_eps(cfg);
        let (attention_bias, attention_out_bias) = match family {
            Family::GptNeoX => {
                let b = r.opt_bool("attention_bias").unwrap_or(true);
                (b, b)
            }
            Family::Gpt2 | Family::Phi => (true, true),
            Family::Qwen2 => (true, false),
            _ => {
                let b = r.opt_bool("attention_bias").unwrap_or(false);
                (b, b)
            }
        };
        let mlp_bias = match family {
            Family::GptNeoX | Family::Gpt2 | Family::Phi => true,
            Family::Llama => r.opt_bool("mlp_bias").unwrap_or(false),
            _ => false,
        };

        // Options each family refuses rather than ignores.
        let refuse_true = |field: &str, what: &str| -> Result<()> {
            if r.opt_bool(field) == Some(true) {
                return Err(r.bad(field, format!("{what} is not supported")));
            }
            Ok(())
        };
        match family {
            Family::Gpt2 => {
                refuse_true(
                    "scale_attn_by_inverse_layer_idx",
                    "attention scaled by 1 / (layer + 1)",
                )?;
                refuse_true(
                    "add_cross_attention",
                    "cross-attention (an encoder-decoder)",
                )?;
                if r.opt_bool("scale_attn_weights") == Some(false) {
                    return Err(r.bad(
                        "scale_attn_weights",
                        "unscaled attention scores are not supported".into(),
                    ));
                }
            }
            Family::Phi => refuse_true("qk_layernorm", "LayerNorm on q and k")?,
            Family::Gemma2 => {
                refuse_true("use_bidirectional_attention", "bidirectional attention")?
            }
            _ => {}
        }

        let attention_scale = match family {
            Family::Gemma2 => {
                let s = r.opt_f64("query_pre_attn_scalar").unwrap_or(256.0);
                if s <= 0.0 {
                    return Err(r.bad("query_pre_attn_scalar", format!("{s} must be positive")));
                }
                s.powf(-0.5)
            }
            _ => (head_dim as f64).powf(-0.5),
        };
        let softcap = |field: &str, default: Option<f64>| -> Result<Option<f64>> {
            let v = match cfg.get(field) {
                None => default,
                Some(Value::Null) => None,
                Some(v) => Some(v.as_f64().filter(|c| *c > 0.0).ok_or_else(|| {
                    r.bad(
                        field,
                        format!("expected a positive number or null, found {v}"),
                    )
                })?),
            };
            Ok(v)
        };
        let (attn_logit_softcap, final_logit_softcap) = match family {
            Family::Gemma2 => (
                softcap("attn_logit_softcapping", Some(50.0))?,
                softcap("final_logit_softcapping", Some(30.0))?,
            ),
            _ => (None, None),
        };
        let windows = layer_windows(&r, family, n_layers)?;
        Ok(Self {
            family,
            hidden_size,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            intermediate_size,
            vocab_size,
            max_positions,
            rotary_dims,
            rope_theta,
            norm_eps,
            activation,
            use_parallel_residual: match family {
                Family::GptNeoX => r.opt_bool("use_parallel_residual").unwrap_or(true),
                Family::Phi => true,
                _ => false,
            },
            attention_bias,
            attention_out_bias,
            mlp_bias,
            tie_word_embeddings,
            clip_qkv: if family == Family::Olmo {
                r.opt_f64("clip_qkv")
            } else {
                None
            },
            rope_scaling,
            attention_scale,
            attn_logit_softcap,
            final_logit_softcap,
            windows,
            lm_head_bias: arch.readout_bias.is_some(),
        })
    }
}

/// Per-layer sliding windows, as transformers builds them: Mistral's `sliding_window` on every
/// layer; Qwen2's on layers `>= max_window_layers` when `use_sliding_window`; Gemma-2's on the
/// layers `layer_types` marks `sliding_attention` (every other layer, from the first, by
/// default). Other families ignore the keys, as transformers does.
fn layer_windows(r: &Reader<'_>, family: Family, n_layers: usize) -> Result<Vec<Option<usize>>> {
    // transformers' default (4096) when the key is absent; `null` means no window.
    let window = match r.cfg.get("sliding_window") {
        None => Some(4096),
        Some(_) => r.opt_usize("sliding_window")?,
    };
    let from_types = |default: &dyn Fn(usize) -> bool| -> Result<Vec<Option<usize>>> {
        let types: Vec<bool> = match r.cfg.get("layer_types").filter(|v| !v.is_null()) {
            None => (0..n_layers).map(default).collect(),
            Some(v) => {
                let list = v
                    .as_array()
                    .filter(|a| a.len() == n_layers)
                    .ok_or_else(|| {
                        r.bad(
                            "layer_types",
                            format!("expected a list of {n_layers} layer types"),
                        )
                    })?;
                list.iter()
                    .map(|t| match t.as_str() {
                        Some("sliding_attention") => Ok(true),
                        Some("full_attention") => Ok(false),
                        _ => Err(r.bad(
                            "layer_types",
                            format!("layer type {t} is not supported (sliding_attention, full_attention)"),
                        )),
                    })
                    .collect::<Result<_>>()?
            }
        };
        if types.iter().any(|&s| s) && window.is_none() {
            return Err(r.bad(
                "sliding_window",
                "layer_types has sliding layers but sliding_window is missing".into(),
            ));
        }
        Ok(types
            .into_iter()
            .map(|s| if s { window } else { None })
            .collect())
    };
    match family {
        Family::Mistral => Ok(vec![window; n_layers]),
        Family::Gemma2 => from_types(&|i| (i + 1) % 2 == 1),
        Family::Qwen2 => {
            if r.opt_bool("use_sliding_window") != Some(true) {
                return Ok(vec![None; n_layers]);
            }
            let first = match r.cfg.get("max_window_layers") {
                None | Some(Value::Null) => 28,
                Some(v) => v.as_u64().ok_or_else(|| {
                    r.bad(
                        "max_window_layers",
                        format!("expected an integer, found {v}"),
                    )
                })? as usize,
            };
            from_types(&|i| i >= first)
        }
        _ => Ok(vec![None; n_layers]),
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
