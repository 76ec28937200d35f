//! The one table of what each model family's readout is: which tensor is `W_U`, which input
//! embedding stands in for it when tied, and the final norm in front of it (its tensors, kind,
//! gain convention and epsilon). [`crate::read_readout`], [`crate::read_final_norm_gain`] and
//! `repgeom-extract`'s forward passes all read these facts from here, so the loader that folds
//! the gain and the forward pass that applies it cannot disagree.
//!
//! Each entry was checked against transformers' modelling code for the family
//! (`modeling_<family>.py`, `configuration_<family>.py`).

use serde_json::Value;

/// What the final norm computes, before its gain and bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NormKind {
    /// LayerNorm: $\gamma \odot (h - \mu)/\sqrt{\sigma^2 + \varepsilon} + \beta$, with a
    /// `weight` and a `bias` tensor.
    LayerNorm,
    /// RMSNorm: $\gamma \odot h / \sqrt{\overline{h^2} + \varepsilon}$, a `weight` tensor
    /// and no bias.
    RmsNorm,
    /// LayerNorm without weight or bias (OLMo-1's `OlmoLayerNorm`): nothing is stored, and
    /// the norm has no gain to fold ($\gamma = 1$, $\beta = 0$).
    BareLayerNorm,
}

/// How a norm's stored `weight` $w$ becomes the gain $\gamma$ it multiplies by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GainConvention {
    /// $\gamma = w$ (every family but Gemma's).
    Weight,
    /// $\gamma = 1 + w$ (Gemma and Gemma-2's `GemmaRMSNorm`: `x̂ * (1.0 + self.weight.float())`).
    OnePlusWeight,
}

impl GainConvention {
    /// Turns the stored weight into the effective gain in place, in `f32` as transformers does
    /// (`1.0 + w` on the weight widened to `f32`).
    pub fn apply(self, weight: &mut [f32]) {
        match self {
            GainConvention::Weight => {}
            GainConvention::OnePlusWeight => weight.iter_mut().for_each(|w| *w += 1.0),
        }
    }

    /// The gain as a formula of the stored tensor, for notes and messages: `w` or `1 + w`.
    pub fn formula(self, tensor: &str) -> String {
        match self {
            GainConvention::Weight => tensor.to_string(),
            GainConvention::OnePlusWeight => format!("1 + {tensor}"),
        }
    }
}

/// The readout facts of one family, keyed by the `model_type` of its `config.json`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Arch {
    /// HuggingFace `config.json` `model_type`.
    pub model_type: &'static str,
    /// The untied readout `W_U` (`[V, d]`), first present wins.
    pub readout: &'static [&'static str],
    /// The readout's bias (`[V]`), for families whose readout has one (Phi's `lm_head.bias`);
    /// it shifts the logits but is not part of `W_U`.
    pub readout_bias: Option<&'static str>,
    /// The input embedding (`[V, d]`) that is the readout when the embeddings are tied, first
    /// present wins.
    pub tied: &'static [&'static str],
    /// `tie_word_embeddings` when `config.json` does not say (the family's config class
    /// default in transformers).
    pub tie_default: bool,
    /// The final norm's module name, first whose `.weight` is present wins (the tensors are
    /// `<name>.weight` and, for a [`NormKind::LayerNorm`], `<name>.bias`). GPT-2 checkpoints
    /// are saved with the `transformer.` prefix or, as the original repos, without one.
    pub final_norm: &'static [&'static str],
    /// What the final norm computes. Every norm of a family is of this kind and convention.
    pub norm_kind: NormKind,
    /// How the final norm's stored weight becomes its gain.
    pub gain: GainConvention,
    /// The `config.json` key of the norms' epsilon; `None` where transformers fixes it.
    pub norm_eps_key: Option<&'static str>,
    /// The epsilon when the key is absent (or fixed).
    pub norm_eps_default: f64,
}

/// `lm_head.weight`, the untied readout of every family but GPT-NeoX.
const LM_HEAD: &[&str] = &["lm_head.weight"];
/// `model.embed_tokens.weight`, the input embedding of the Llama-shaped families and Phi.
const EMBED_TOKENS: &[&str] = &["model.embed_tokens.weight"];
/// `model.norm`, the final norm of the Llama-shaped families.
const MODEL_NORM: &[&str] = &["model.norm"];

/// A Llama-shaped family: `lm_head`, `model.embed_tokens`, `model.norm` as an RMSNorm.
const fn llama_like(
    model_type: &'static str,
    tie_default: bool,
    gain: GainConvention,
    eps_default: f64,
) -> Arch {
    Arch {
        model_type,
        readout: LM_HEAD,
        readout_bias: None,
        tied: EMBED_TOKENS,
        tie_default,
        final_norm: MODEL_NORM,
        norm_kind: NormKind::RmsNorm,
        gain,
        norm_eps_key: Some("rms_norm_eps"),
        norm_eps_default: eps_default,
    }
}

/// Every family `repgeom-extract` has a forward pass for, in the order its docs list them.
pub const ARCHS: &[Arch] = &[
    Arch {
        model_type: "gpt_neox",
        readout: &["embed_out.weight"],
        readout_bias: None,
        tied: &["gpt_neox.embed_in.weight"],
        tie_default: false,
        final_norm: &["gpt_neox.final_layer_norm"],
        norm_kind: NormKind::LayerNorm,
        gain: GainConvention::Weight,
        norm_eps_key: Some("layer_norm_eps"),
        norm_eps_default: 1e-5,
    },
    Arch {
        model_type: "gpt2",
        readout: LM_HEAD,
        readout_bias: None,
        tied: &["transformer.wte.weight", "wte.weight"],
        tie_default: true,
        final_norm: &["transformer.ln_f", "ln_f"],
        norm_kind: NormKind::LayerNorm,
        gain: GainConvention::Weight,
        norm_eps_key: Some("layer_norm_epsilon"),
        norm_eps_default: 1e-5,
    },
    llama_like("llama", false, GainConvention::Weight, 1e-6),
    llama_like("mistral", false, GainConvention::Weight, 1e-6),
    llama_like("qwen2", false, GainConvention::Weight, 1e-6),
    Arch {
        // `OlmoLayerNorm`: `F.layer_norm(x, shape, None, None, eps=1e-5)`.
        norm_kind: NormKind::BareLayerNorm,
        norm_eps_key: None,
        ..llama_like("olmo", false, GainConvention::Weight, 1e-5)
    },
    llama_like("olmo2", false, GainConvention::Weight, 1e-5),
    Arch {
        model_type: "phi",
        readout: LM_HEAD,
        readout_bias: Some("lm_head.bias"),
        tied: EMBED_TOKENS,
        tie_default: false,
        final_norm: &["model.final_layernorm"],
        norm_kind: NormKind::LayerNorm,
        gain: GainConvention::Weight,
        norm_eps_key: Some("layer_norm_eps"),
        norm_eps_default: 1e-5,
    },
    llama_like("gemma", true, GainConvention::OnePlusWeight, 1e-6),
    llama_like("gemma2", true, GainConvention::OnePlusWeight, 1e-6),
];

impl Arch {
    /// The entry for a `config.json` `model_type`, if the table has one.
    pub fn for_model_type(model_type: &str) -> Option<&'static Arch> {
        ARCHS.iter().find(|a| a.model_type == model_type)
    }

    /// The entry for a parsed `config.json`, by its `model_type`.
    pub fn for_config(config: &Value) -> Option<&'static Arch> {
        Self::for_model_type(config.get("model_type")?.as_str()?)
    }

    /// `tie_word_embeddings` from `config`, else [`Arch::tie_default`].
    pub fn tie_word_embeddings(&self, config: &Value) -> bool {
        config
            .get("tie_word_embeddings")
            .and_then(Value::as_bool)
            .unwrap_or(self.tie_default)
    }

    /// The norms' epsilon: `config[norm_eps_key]` when the family reads one and it is a
    /// number, else [`Arch::norm_eps_default`].
    pub fn norm_eps(&self, config: &Value) -> f64 {
        self.norm_eps_key
            .and_then(|k| config.get(k))
            .and_then(Value::as_f64)
            .unwrap_or(self.norm_eps_default)
    }

    /// The final norm's module name in a checkpoint: the first of [`Arch::final_norm`] whose
    /// `.weight` `has` reports, else the first (the canonical name, for messages, and the one
    /// to use when nothing is stored, as for a [`NormKind::BareLayerNorm`]).
    pub fn final_norm_in(&self, has: impl Fn(&str) -> bool) -> &'static str {
        self.final_norm
            .iter()
            .copied()
            .find(|n| has(&format!("{n}.weight")))
            .unwrap_or(self.final_norm[0])
    }
}
