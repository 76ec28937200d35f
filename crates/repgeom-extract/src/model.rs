//! The forward passes: GPT-NeoX and Llama-style decoders on candle, returning every layer's
//! hidden states in HuggingFace's `output_hidden_states` order.

use std::path::Path;

use candle_core::{D, DType, Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::{Activation, Family, ModelConfig};
use crate::{Error, Result};

/// A loaded decoder-only language model, ready to run on the CPU in f32.
///
/// Weights stored as f16 or bf16 are widened to f32 at load time, so the numbers match a
/// HuggingFace model run in f32 on the same weights.
#[derive(Debug)]
pub struct Model {
    config: ModelConfig,
    embed: Tensor,
    layers: Vec<Layer>,
    final_norm: Norm,
    /// [V, d]; the embedding itself when tied.
    readout: Tensor,
    device: Device,
}

/// What one forward pass of one sequence returns.
#[derive(Clone, Debug)]
pub struct Forward {
    /// L + 1 tensors, each row-major `[T, d]`: index 0 the embedding output, index L the last
    /// layer's output after the final norm (HuggingFace `output_hidden_states`).
    pub hidden_states: Vec<Vec<f32>>,
    /// Row-major `[T, V]` logits, when asked for.
    pub logits: Option<Vec<f32>>,
}

#[derive(Debug)]
struct Linear {
    /// [out, in]
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // x: [T, in]
        let y = x.matmul(&self.weight.t()?)?;
        Ok(match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }
}

#[derive(Debug)]
enum Norm {
    Layer {
        weight: Tensor,
        bias: Tensor,
        eps: f32,
    },
    Rms {
        weight: Tensor,
        eps: f32,
    },
}

impl Norm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(match self {
            Norm::Layer { weight, bias, eps } => candle_nn::ops::layer_norm(x, weight, bias, *eps)?,
            Norm::Rms { weight, eps } => candle_nn::ops::rms_norm(x, weight, *eps)?,
        })
    }
}

#[derive(Debug)]
enum Attention {
    /// GPT-NeoX: one fused projection, per head `[q | k | v]`.
    Fused { qkv: Linear, dense: Linear },
    /// Llama: separate projections, grouped-query attention.
    Split {
        q: Linear,
        k: Linear,
        v: Linear,
        o: Linear,
    },
}

#[derive(Debug)]
enum Mlp {
    /// `down(act(up(x)))`.
    Plain { up: Linear, down: Linear },
    /// `down(act(gate(x)) * up(x))`.
    Gated {
        gate: Linear,
        up: Linear,
        down: Linear,
    },
}

#[derive(Debug)]
struct Layer {
    norm1: Norm,
    norm2: Norm,
    attn: Attention,
    mlp: Mlp,
}

/// Precomputed rotary tables and causal mask for one sequence length.
struct Context {
    cos: Tensor,
    sin: Tensor,
    mask: Tensor,
}

impl Model {
    /// Loads a checkpoint directory (`config.json` plus safetensors weights, sharded or not).
    pub fn load(dir: &Path) -> Result<Self> {
        let ckpt = repgeom_io::open_checkpoint(dir)?;
        let config = ModelConfig::from_json(&dir.join("config.json"), &ckpt.config)?;
        let mut get = |name: &str, shape: &[usize]| -> Result<Tensor> {
            let (found, data) = ckpt.read_tensor_f32(name)?;
            if found != shape {
                return Err(Error::ShapeMismatch {
                    file: ckpt
                        .tensor_file(name)
                        .map_or_else(|| dir.to_path_buf(), Path::to_path_buf),
                    tensor: name.to_string(),
                    expected: shape.to_vec(),
                    found,
                });
            }
            Ok(Tensor::from_vec(data, shape, &Device::Cpu)?)
        };
        Self::build(config, &mut get, |name| ckpt.has_tensor(name))
    }

    /// A model of the given shape with seeded random weights (for benchmarks and tests of the
    /// pipeline; the numbers mean nothing).
    pub fn random(config: ModelConfig, seed: u64) -> Result<Self> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut get = |name: &str, shape: &[usize]| -> Result<Tensor> {
            let n: usize = shape.iter().product();
            let fan_in = *shape.last().unwrap_or(&1) as f32;
            let scale = if name.contains("norm") && name.ends_with("weight") {
                0.0
            } else if shape.len() == 1 {
                0.02
            } else {
                1.0 / fan_in.sqrt()
            };
            let offset = if scale == 0.0 { 1.0 } else { 0.0 };
            let data: Vec<f32> = (0..n)
                .map(|_| offset + scale * (rng.random::<f32>() * 2.0 - 1.0) * 1.7)
                .collect();
            Ok(Tensor::from_vec(data, shape, &Device::Cpu)?)
        };
        Self::build(config, &mut get, |_| false)
    }

    fn build(
        config: ModelConfig,
        get: &mut dyn FnMut(&str, &[usize]) -> Result<Tensor>,
        has: impl Fn(&str) -> bool,
    ) -> Result<Self> {
        let c = &config;
        let (d, hd, v) = (c.hidden_size, c.head_dim, c.vocab_size);
        let linear = |get: &mut dyn FnMut(&str, &[usize]) -> Result<Tensor>,
                      name: &str,
                      out: usize,
                      inp: usize,
                      bias: bool|
         -> Result<Linear> {
            Ok(Linear {
                weight: get(&format!("{name}.weight"), &[out, inp])?,
                bias: if bias {
                    Some(get(&format!("{name}.bias"), &[out])?)
                } else {
                    None
                },
            })
        };
        let eps = c.norm_eps as f32;
        let (embed, layers, final_norm, readout) = match c.family {
            Family::GptNeoX => {
                let p = "gpt_neox";
                let embed = get(&format!("{p}.embed_in.weight"), &[v, d])?;
                let ln = |get: &mut dyn FnMut(&str, &[usize]) -> Result<Tensor>,
                          name: &str|
                 -> Result<Norm> {
                    Ok(Norm::Layer {
                        weight: get(&format!("{name}.weight"), &[d])?,
                        bias: get(&format!("{name}.bias"), &[d])?,
                        eps,
                    })
                };
                let mut layers = Vec::with_capacity(c.n_layers);
                for i in 0..c.n_layers {
                    let l = format!("{p}.layers.{i}");
                    layers.push(Layer {
                        norm1: ln(get, &format!("{l}.input_layernorm"))?,
                        norm2: ln(get, &format!("{l}.post_attention_layernorm"))?,
                        attn: Attention::Fused {
                            qkv: linear(
                                get,
                                &format!("{l}.attention.query_key_value"),
                                3 * d,
                                d,
                                c.attention_bias,
                            )?,
                            dense: linear(
                                get,
                                &format!("{l}.attention.dense"),
                                d,
                                d,
                                c.attention_bias,
                            )?,
                        },
                        mlp: Mlp::Plain {
                            up: linear(
                                get,
                                &format!("{l}.mlp.dense_h_to_4h"),
                                c.intermediate_size,
                                d,
                                true,
                            )?,
                            down: linear(
                                get,
                                &format!("{l}.mlp.dense_4h_to_h"),
                                d,
                                c.intermediate_size,
                                true,
                            )?,
                        },
                    });
                }
                let final_norm = ln(get, &format!("{p}.final_layer_norm"))?;
                let readout = if c.tie_word_embeddings && !has("embed_out.weight") {
                    embed.clone()
                } else {
                    get("embed_out.weight", &[v, d])?
                };
                (embed, layers, final_norm, readout)
            }
            Family::Llama | Family::Olmo => {
                let p = "model";
                let olmo = c.family == Family::Olmo;
                let embed = get(&format!("{p}.embed_tokens.weight"), &[v, d])?;
                let rms = |get: &mut dyn FnMut(&str, &[usize]) -> Result<Tensor>,
                           name: &str|
                 -> Result<Norm> {
                    if olmo {
                        // OLMo: LayerNorm without weight or bias (none stored)
                        return Ok(Norm::Layer {
                            weight: Tensor::ones(d, DType::F32, &Device::Cpu)?,
                            bias: Tensor::zeros(d, DType::F32, &Device::Cpu)?,
                            eps,
                        });
                    }
                    Ok(Norm::Rms {
                        weight: get(&format!("{name}.weight"), &[d])?,
                        eps,
                    })
                };
                let (nh, nkv, ff) = (c.n_heads, c.n_kv_heads, c.intermediate_size);
                let mut layers = Vec::with_capacity(c.n_layers);
                for i in 0..c.n_layers {
                    let l = format!("{p}.layers.{i}");
                    let ab = c.attention_bias;
                    layers.push(Layer {
                        norm1: rms(get, &format!("{l}.input_layernorm"))?,
                        norm2: rms(get, &format!("{l}.post_attention_layernorm"))?,
                        attn: Attention::Split {
                            q: linear(get, &format!("{l}.self_attn.q_proj"), nh * hd, d, ab)?,
                            k: linear(get, &format!("{l}.self_attn.k_proj"), nkv * hd, d, ab)?,
                            v: linear(get, &format!("{l}.self_attn.v_proj"), nkv * hd, d, ab)?,
                            o: linear(get, &format!("{l}.self_attn.o_proj"), d, nh * hd, ab)?,
                        },
                        mlp: Mlp::Gated {
                            gate: linear(get, &format!("{l}.mlp.gate_proj"), ff, d, c.mlp_bias)?,
                            up: linear(get, &format!("{l}.mlp.up_proj"), ff, d, c.mlp_bias)?,
                            down: linear(get, &format!("{l}.mlp.down_proj"), d, ff, c.mlp_bias)?,
                        },
                    });
                }
                let final_norm = rms(get, &format!("{p}.norm"))?;
                let readout = if c.tie_word_embeddings && !has("lm_head.weight") {
                    embed.clone()
                } else {
                    get("lm_head.weight", &[v, d])?
                };
                (embed, layers, final_norm, readout)
            }
        };
        Ok(Self {
            config,
            embed,
            layers,
            final_norm,
            readout,
            device: Device::Cpu,
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Runs one sequence of token ids (no batching: sequences never need padding) and returns
    /// the L + 1 hidden states, plus the logits when `logits` is true.
    pub fn forward(&self, ids: &[u32], logits: bool) -> Result<Forward> {
        let c = &self.config;
        let t = ids.len();
        if t == 0 {
            return Err(Error::InvalidParams {
                field: "ids",
                reason: "empty sequence".into(),
            });
        }
        if t > c.max_positions {
            return Err(Error::InvalidParams {
                field: "seq_len",
                reason: format!(
                    "{t} tokens exceed the model's max_position_embeddings {}",
                    c.max_positions
                ),
            });
        }
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= c.vocab_size) {
            return Err(Error::TokenOutOfRange {
                token: bad,
                vocab_size: c.vocab_size,
            });
        }
        let ctx = self.context(t)?;
        let idx = Tensor::from_slice(ids, t, &self.device)?;
        let mut h = self.embed.index_select(&idx, 0)?; // [T, d]
        let mut out = Vec::with_capacity(c.n_layers + 1);
        out.push(h.clone());
        for (i, layer) in self.layers.iter().enumerate() {
            h = self.layer_forward(layer, &h, &ctx)?;
            if i + 1 < self.layers.len() {
                out.push(h.clone());
            }
        }
        let h = self.final_norm.forward(&h)?;
        out.push(h.clone());
        let logits = if logits {
            Some(
                h.matmul(&self.readout.t()?)?
                    .flatten_all()?
                    .to_vec1::<f32>()?,
            )
        } else {
            None
        };
        let hidden_states = out
            .iter()
            .map(|x| x.flatten_all()?.to_vec1::<f32>())
            .collect::<candle_core::Result<_>>()?;
        Ok(Forward {
            hidden_states,
            logits,
        })
    }

    fn context(&self, t: usize) -> Result<Context> {
        let c = &self.config;
        let half = c.rotary_dims / 2;
        // As HF: inv_freq and the angles in f32, cos/sin of the f32 angle.
        let inv: Vec<f32> = (0..half)
            .map(|i| 1.0 / (c.rope_theta as f32).powf((2 * i) as f32 / c.rotary_dims as f32))
            .collect();
        let mut cos = Vec::with_capacity(t * half);
        let mut sin = Vec::with_capacity(t * half);
        for pos in 0..t {
            for &f in &inv {
                let a = (pos as f32 * f) as f64;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        let mut mask = vec![0f32; t * t];
        for i in 0..t {
            for j in i + 1..t {
                mask[i * t + j] = f32::NEG_INFINITY;
            }
        }
        Ok(Context {
            cos: Tensor::from_vec(cos, (t, half), &self.device)?,
            sin: Tensor::from_vec(sin, (t, half), &self.device)?,
            mask: Tensor::from_vec(mask, (t, t), &self.device)?,
        })
    }

    fn layer_forward(&self, layer: &Layer, x: &Tensor, ctx: &Context) -> Result<Tensor> {
        let a = self.attention(&layer.attn, &layer.norm1.forward(x)?, ctx)?;
        match self.config.family {
            Family::GptNeoX if self.config.use_parallel_residual => {
                let m = self.mlp(&layer.mlp, &layer.norm2.forward(x)?)?;
                Ok(((m + a)? + x)?)
            }
            _ => {
                let h = (a + x)?;
                let m = self.mlp(&layer.mlp, &layer.norm2.forward(&h)?)?;
                Ok((m + h)?)
            }
        }
    }

    fn mlp(&self, mlp: &Mlp, x: &Tensor) -> Result<Tensor> {
        let act = self.config.activation;
        match mlp {
            Mlp::Plain { up, down } => down.forward(&activate(act, &up.forward(x)?)?),
            Mlp::Gated { gate, up, down } => {
                let g = activate(act, &gate.forward(x)?)?;
                down.forward(&(g * up.forward(x)?)?)
            }
        }
    }

    /// Causal self-attention of one sequence `x: [T, d]`.
    fn attention(&self, attn: &Attention, x: &Tensor, ctx: &Context) -> Result<Tensor> {
        let c = &self.config;
        let (t, hd, nh) = (x.dim(0)?, c.head_dim, c.n_heads);
        let (q, k, v, o) = match attn {
            Attention::Fused { qkv, dense } => {
                // [T, 3d] -> [H, T, 3hd]; per head the columns are q | k | v.
                let qkv = qkv.forward(x)?.reshape((t, nh, 3 * hd))?.transpose(0, 1)?;
                let q = qkv.narrow(D::Minus1, 0, hd)?.contiguous()?;
                let k = qkv.narrow(D::Minus1, hd, hd)?.contiguous()?;
                let v = qkv.narrow(D::Minus1, 2 * hd, hd)?.contiguous()?;
                (q, k, v, dense)
            }
            Attention::Split { q, k, v, o } => {
                let nkv = c.n_kv_heads;
                let heads = |y: Tensor, n: usize| -> Result<Tensor> {
                    Ok(y.reshape((t, n, hd))?.transpose(0, 1)?.contiguous()?)
                };
                let proj = |l: &Linear| -> Result<Tensor> {
                    let y = l.forward(x)?;
                    Ok(match c.clip_qkv {
                        Some(clip) => y.clamp(-clip as f32, clip as f32)?,
                        None => y,
                    })
                };
                let q = heads(proj(q)?, nh)?;
                let mut k = heads(proj(k)?, nkv)?;
                let mut v = heads(proj(v)?, nkv)?;
                if nkv != nh {
                    let rep = nh / nkv;
                    k = k
                        .unsqueeze(1)?
                        .expand((nkv, rep, t, hd))?
                        .contiguous()?
                        .reshape((nh, t, hd))?;
                    v = v
                        .unsqueeze(1)?
                        .expand((nkv, rep, t, hd))?
                        .contiguous()?
                        .reshape((nh, t, hd))?;
                }
                (q, k, v, o)
            }
        };
        let q = self.rotate(&q, ctx)?;
        let k = self.rotate(&k, ctx)?;
        let scale = 1.0 / (hd as f64).sqrt();
        let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(&ctx.mask)?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let y = probs.matmul(&v)?; // [H, T, hd]
        let y = y.transpose(0, 1)?.contiguous()?.reshape((t, nh * hd))?;
        o.forward(&y)
    }

    /// Rotary embedding on the first `rotary_dims` of each head (rotate-half convention).
    fn rotate(&self, x: &Tensor, ctx: &Context) -> Result<Tensor> {
        let (rot, hd) = (self.config.rotary_dims, self.config.head_dim);
        if rot == 0 {
            return Ok(x.clone());
        }
        let x4 = x.unsqueeze(0)?; // [1, H, T, hd]
        let r = candle_nn::rotary_emb::rope(
            &x4.narrow(D::Minus1, 0, rot)?.contiguous()?,
            &ctx.cos,
            &ctx.sin,
        )?;
        let y = if rot == hd {
            r
        } else {
            Tensor::cat(&[&r, &x4.narrow(D::Minus1, rot, hd - rot)?], D::Minus1)?
        };
        Ok(y.squeeze(0)?.contiguous()?)
    }

    /// The readout matrix `W_U` ([V, d], row-major), tied or not.
    pub fn readout(&self) -> Result<Vec<f32>> {
        Ok(self.readout.flatten_all()?.to_vec1::<f32>()?)
    }
}

fn activate(act: Activation, x: &Tensor) -> Result<Tensor> {
    Ok(match act {
        Activation::GeluErf => x.gelu_erf()?,
        Activation::GeluTanh => x.gelu()?,
        Activation::Relu => x.relu()?,
        Activation::Silu => candle_nn::ops::silu(x)?,
    })
}
