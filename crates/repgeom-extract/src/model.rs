//! The forward passes: one decoder skeleton (embedding, L layers, final norm, readout) whose
//! pieces — norms, attention layout, MLP, residual wiring, positions — are chosen per family,
//! returning every layer's hidden states in HuggingFace's `output_hidden_states` order.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use repgeom_io::{Arch, GainConvention, NormKind};
use repgeom_linalg::{
    HalfMatrix, HalfType, MatMut, MatRef, Par, matmul_abt_add_f32, matmul_abt_add_half,
    matmul_abt_f32,
};

use crate::attention::{Heads, HeadsIn, Rotary, Scores, attention};
use crate::config::{Activation, Family, ModelConfig, RopeScaling};
use crate::kernels::{Act, Pairwise, row_lse};
use crate::{Error, Result};

mod device;
mod wiring;
pub use device::Precision;

/// Rows × vocabulary entries of one tile of logits for the loss: 256 × 1024 `f32` (1 MiB) stays
/// in a core's cache while its log-sum-exp is taken, so logits never travel to memory, and
/// the readout's GEMM ran fastest at this size (measured 256 × 1024 against 2048 × 256,
/// 512 × 512, 512 × 2048 and 1024 × 1024 tiles and against 64 MiB row blocks).
const LOSS_TILE_ROWS: usize = 256;
const LOSS_TILE_VOCAB: usize = 1024;

/// One tile's reduction of its rows' logits: per row the maximum, `Σ e^{x − max}`, and the
/// target's logit when the tile holds the target.
type TileRows = Vec<(f32, f64, Option<f32>)>;

/// A loaded decoder-only language model, ready to run on the CPU with f32 arithmetic (or at
/// [`Precision::Stored`], or on a CUDA device: [`Model::place`]).
///
/// Weight matrices stored as f16 or bf16 stay in that precision in memory and are widened to
/// f32 one matrix at a time as they are used (vectors are widened at load), so the numbers
/// match a HuggingFace model run in f32 on the same weights while a bf16 checkpoint takes
/// about its file size in memory. At `stored`, on a CPU with AMX, each bf16 matrix is instead
/// laid out for the tiles at its first use and kept (`repgeom_linalg::HalfMatrix`); without
/// AMX, and for f16, it is widened as in f32 and multiplies inputs rounded to its type.
#[derive(Debug)]
pub struct Model {
    config: ModelConfig,
    embed: Tensor,
    /// GPT-2's learned position embedding `[max_positions, d]`.
    positions: Option<Tensor>,
    /// Gemma's `√d`, applied to the embedding output.
    embed_scale: Option<f64>,
    layers: Vec<Layer>,
    final_norm: Norm,
    /// [V, d]; the embedding itself when tied.
    readout: Tensor,
    /// `readout` laid out for AMX tiles, as [`Linear::packed`].
    readout_packed: std::sync::OnceLock<HalfMatrix>,
    /// Whether `readout` is the embedding.
    tied: bool,
    /// Phi's `lm_head.bias` [V].
    readout_bias: Option<Tensor>,
    device: Device,
    /// The precision of the forward passes, on either device ([`Model::place`]).
    precision: Precision,
    /// The weights on a CUDA device, when the forward passes run there ([`Model::place`]).
    on_device: Option<Box<device::OnDevice>>,
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

/// The model's pieces are generic over where their weights live: candle tensors on the CPU,
/// [`repgeom_cuda::Weight`]s on a device (`model/device.rs`), one structure for both.
#[derive(Debug)]
pub(crate) struct Linear<W = Tensor> {
    /// [out, in]
    pub(crate) weight: W,
    pub(crate) bias: Option<W>,
    /// The weight laid out for AMX tiles, made at its first product at `stored` on the CPU
    /// ([`kept_tiles`]) and kept until the model is placed elsewhere.
    pub(crate) packed: std::sync::OnceLock<HalfMatrix>,
}

/// Converts every weight of a piece, keeping its structure.
pub(crate) type Convert<'a, W> = dyn FnMut(&Tensor) -> Result<W> + 'a;

impl Linear {
    fn map<W>(&self, f: &mut Convert<'_, W>) -> Result<Linear<W>> {
        Ok(Linear {
            weight: f(&self.weight)?,
            bias: self.bias.as_ref().map(&mut *f).transpose()?,
            packed: std::sync::OnceLock::new(),
        })
    }
}

impl Linear {
    /// `x: [..., in]` to `[..., out]`: `y = x Wᵀ + b` ([`product_into`]), with `y` pre-filled
    /// with the bias rows.
    fn forward(&self, x: &Tensor, precision: Precision) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        let inp = dims[dims.len() - 1];
        let rows = x.elem_count() / inp.max(1);
        let x = x.to_dtype(DType::F32)?.contiguous()?;
        let out = self.weight.dim(0)?;
        let (xs, xl) = x.storage_and_layout();
        // zeroed and the bias rows written on the pool (the product adds to them)
        let mut y = crate::kernels::zeros(rows * out);
        if let Some(b) = &self.bias {
            let b = b.to_dtype(DType::F32)?.to_vec1::<f32>()?;
            if b.len() != out {
                return Err(Error::InvalidParams {
                    field: "bias",
                    reason: format!("{} values for {out} outputs", b.len()),
                });
            }
            y.par_chunks_mut(out * 64)
                .for_each(|rows| rows.chunks_mut(out).for_each(|r| r.copy_from_slice(&b)));
        }
        let x = f32_slice(&xs, xl, rows * inp)?;
        product_into(&mut y, x, &self.weight, &self.packed, precision)?;
        let mut shape = dims;
        let last = shape.len() - 1;
        shape[last] = out;
        Ok(Tensor::from_vec(y, shape, &Device::Cpu)?)
    }
}

#[derive(Debug)]
pub(crate) enum Norm<W = Tensor> {
    Layer {
        weight: W,
        bias: W,
        eps: f32,
    },
    /// `x / rms(x) * weight`; Gemma's `(1 + w)` is folded into `weight` at load.
    Rms {
        weight: W,
        eps: f32,
    },
}

impl Norm {
    pub(crate) fn map<W>(&self, f: &mut Convert<'_, W>) -> Result<Norm<W>> {
        Ok(match self {
            Norm::Layer { weight, bias, eps } => Norm::Layer {
                weight: f(weight)?,
                bias: f(bias)?,
                eps: *eps,
            },
            Norm::Rms { weight, eps } => Norm::Rms {
                weight: f(weight)?,
                eps: *eps,
            },
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(match self {
            Norm::Layer { weight, bias, eps } => candle_nn::ops::layer_norm(x, weight, bias, *eps)?,
            Norm::Rms { weight, eps } => candle_nn::ops::rms_norm(x, weight, *eps)?,
        })
    }
}

/// How the fused qkv projection's output columns are laid out.
#[derive(Clone, Copy, Debug)]
pub(crate) enum FusedLayout {
    /// GPT-NeoX: per head `[q | k | v]` (`[T, H, 3·hd]`).
    PerHead,
    /// GPT-2 `c_attn`: `[q (d) | k (d) | v (d)]`.
    Blocks,
}

#[derive(Debug)]
pub(crate) enum Attention<W = Tensor> {
    /// One fused projection (GPT-NeoX, GPT-2), as many key/value heads as query heads.
    Fused {
        qkv: Linear<W>,
        out: Linear<W>,
        layout: FusedLayout,
    },
    /// Separate projections, grouped-query attention, optional norms on the whole q and k
    /// projections (OLMo-2).
    Split {
        q: Linear<W>,
        k: Linear<W>,
        v: Linear<W>,
        o: Linear<W>,
        q_norm: Option<Norm<W>>,
        k_norm: Option<Norm<W>>,
    },
}

#[derive(Debug)]
pub(crate) enum Mlp<W = Tensor> {
    /// `down(act(up(x)))`.
    Plain { up: Linear<W>, down: Linear<W> },
    /// `down(act(gate(x)) * up(x))`.
    Gated {
        gate: Linear<W>,
        up: Linear<W>,
        down: Linear<W>,
    },
}

/// One decoder layer. Sequential wiring:
/// `h = x + attn_post(attn(attn_pre(x)))`, `x' = h + mlp_post(mlp(mlp_pre(h)))`, a missing
/// norm being the identity. Parallel wiring (GPT-NeoX parallel, Phi):
/// `x' = x + attn(attn_pre(x)) + mlp(mlp_pre(x))`, where a missing `mlp_pre` means the MLP
/// reads `attn_pre(x)` (Phi's one LayerNorm).
#[derive(Debug)]
pub(crate) struct Layer<W = Tensor> {
    pub(crate) attn_pre: Option<Norm<W>>,
    pub(crate) attn_post: Option<Norm<W>>,
    pub(crate) mlp_pre: Option<Norm<W>>,
    pub(crate) mlp_post: Option<Norm<W>>,
    pub(crate) attn: Attention<W>,
    pub(crate) mlp: Mlp<W>,
    /// Sliding-window width, `None` for full causal attention.
    pub(crate) window: Option<usize>,
}

impl Layer {
    /// Every linear layer's weight laid out for AMX, dropped.
    fn drop_packed(&mut self) {
        let linears: Vec<&mut Linear> = match (&mut self.attn, &mut self.mlp) {
            (Attention::Fused { qkv, out, .. }, Mlp::Plain { up, down }) => {
                vec![qkv, out, up, down]
            }
            (Attention::Fused { qkv, out, .. }, Mlp::Gated { gate, up, down }) => {
                vec![qkv, out, gate, up, down]
            }
            (Attention::Split { q, k, v, o, .. }, Mlp::Plain { up, down }) => {
                vec![q, k, v, o, up, down]
            }
            (Attention::Split { q, k, v, o, .. }, Mlp::Gated { gate, up, down }) => {
                vec![q, k, v, o, gate, up, down]
            }
        };
        for l in linears {
            l.packed.take();
        }
    }

    /// The same layer with every weight converted by `f`.
    pub(crate) fn map<W>(&self, f: &mut Convert<'_, W>) -> Result<Layer<W>> {
        let mut norm = |n: &Option<Norm>| n.as_ref().map(|n| n.map(&mut *f)).transpose();
        let (attn_pre, attn_post, mlp_pre, mlp_post) = (
            norm(&self.attn_pre)?,
            norm(&self.attn_post)?,
            norm(&self.mlp_pre)?,
            norm(&self.mlp_post)?,
        );
        let attn = match &self.attn {
            Attention::Fused { qkv, out, layout } => Attention::Fused {
                qkv: qkv.map(f)?,
                out: out.map(f)?,
                layout: *layout,
            },
            Attention::Split {
                q,
                k,
                v,
                o,
                q_norm,
                k_norm,
            } => Attention::Split {
                q: q.map(f)?,
                k: k.map(f)?,
                v: v.map(f)?,
                o: o.map(f)?,
                q_norm: q_norm.as_ref().map(|n| n.map(&mut *f)).transpose()?,
                k_norm: k_norm.as_ref().map(|n| n.map(&mut *f)).transpose()?,
            },
        };
        let mlp = match &self.mlp {
            Mlp::Plain { up, down } => Mlp::Plain {
                up: up.map(f)?,
                down: down.map(f)?,
            },
            Mlp::Gated { gate, up, down } => Mlp::Gated {
                gate: gate.map(f)?,
                up: up.map(f)?,
                down: down.map(f)?,
            },
        };
        Ok(Layer {
            attn_pre,
            attn_post,
            mlp_pre,
            mlp_post,
            attn,
            mlp,
            window: self.window,
        })
    }
}

/// Precomputed rotary tables for one sequence length, `[T, rotary_dims / 2]` (the causal and
/// sliding-window masks are applied inside the softmax, [`attention`]).
struct Context {
    cos: Vec<f32>,
    sin: Vec<f32>,
}

/// The CPU's operations for one batch of `b` sequences of `t` tokens: candle tensors
/// `[B, T, width]`, products through `repgeom_linalg`'s GEMM ([`Linear::forward`]).
struct Cpu<'a> {
    model: &'a Model,
    precision: Precision,
    ctx: Context,
    b: usize,
    t: usize,
}

impl wiring::Ops for Cpu<'_> {
    type W = Tensor;
    type X = Tensor;

    fn embed(&self, table: &Tensor, flat: &[u32]) -> Result<Tensor> {
        let idx = Tensor::from_slice(flat, self.b * self.t, &self.model.device)?;
        Ok(table
            .index_select(&idx, 0)?
            .to_dtype(DType::F32)?
            .reshape((self.b, self.t, self.model.config.hidden_size))?)
    }

    fn add_positions(&self, x: Tensor, positions: &Tensor) -> Result<Tensor> {
        Ok(x.broadcast_add(&positions.narrow(0, 0, self.t)?)?)
    }

    fn scale(&self, x: Tensor, s: f32) -> Result<Tensor> {
        Ok(x.affine(f64::from(s), 0.0)?)
    }

    fn norm(&self, n: &Norm, x: &Tensor) -> Result<Tensor> {
        n.forward(x)
    }

    fn linear(&self, l: &Linear, x: &Tensor) -> Result<Tensor> {
        l.forward(x, self.precision)
    }

    /// In place and on the pool: the wiring adds to fresh activations only.
    fn add(&self, a: Tensor, b: &Tensor) -> Result<Tensor> {
        pairwise(Pairwise::Add, a, b)
    }

    /// In place and on the pool: the wiring multiplies fresh activations only.
    fn mul(&self, a: Tensor, b: &Tensor) -> Result<Tensor> {
        pairwise(Pairwise::Mul, a, b)
    }

    /// In place: the wiring activates fresh projections only.
    fn activate(&self, x: Tensor, f: Activation) -> Result<Tensor> {
        let x = x.contiguous()?;
        x.inplace_op1(&Act(f))?;
        Ok(x)
    }

    fn clamp(&self, x: Tensor, c: f32) -> Result<Tensor> {
        Ok(x.clamp(-c, c)?)
    }

    /// Heads are read where the projections put them (`HeadsIn`), not copied into
    /// `[B, H, T, hd]` first; attention's tasks rotate and copy their own.
    fn attend(&self, qkv: wiring::Qkv<'_, Tensor>, window: Option<usize>) -> Result<Tensor> {
        let c = &self.model.config;
        let (b, t) = (self.b, self.t);
        let (hd, nh) = (c.head_dim, c.n_heads);
        let rows = b * t;
        let run = |[q, k, v]: [HeadsIn<'_>; 3], kv_heads: usize| -> Result<Tensor> {
            let shape = Heads {
                batch: b,
                len: t,
                q_heads: nh,
                kv_heads,
                head_dim: hd,
            };
            let rotary = (c.rotary_dims > 0).then_some(Rotary {
                cos: &self.ctx.cos,
                sin: &self.ctx.sin,
                dims: c.rotary_dims,
            });
            let scores = Scores {
                scale: c.attention_scale,
                cap: c.attn_logit_softcap,
                window,
            };
            let out = attention(shape, q, k, v, rotary, scores);
            Ok(Tensor::from_vec(out, (b, t, nh * hd), &Device::Cpu)?)
        };
        match qkv {
            wiring::Qkv::Fused(y, layout) => {
                let row = 3 * nh * hd;
                let (s, l) = y.storage_and_layout();
                let data = f32_slice(&s, l, rows * row)?;
                let at = |first: usize, step: usize| HeadsIn {
                    data,
                    row,
                    first,
                    step,
                };
                let heads = match layout {
                    // per head [q | k | v]
                    FusedLayout::PerHead => [at(0, 3 * hd), at(hd, 3 * hd), at(2 * hd, 3 * hd)],
                    // [q (d) | k (d) | v (d)]
                    FusedLayout::Blocks => [at(0, hd), at(nh * hd, hd), at(2 * nh * hd, hd)],
                };
                run(heads, nh)
            }
            wiring::Qkv::Split { q, k, v } => {
                let nkv = c.n_kv_heads;
                let (sq, lq) = q.storage_and_layout();
                let (sk, lk) = k.storage_and_layout();
                let (sv, lv) = v.storage_and_layout();
                run(
                    [
                        HeadsIn::separate(f32_slice(&sq, lq, rows * nh * hd)?, nh, hd),
                        HeadsIn::separate(f32_slice(&sk, lk, rows * nkv * hd)?, nkv, hd),
                        HeadsIn::separate(f32_slice(&sv, lv, rows * nkv * hd)?, nkv, hd),
                    ],
                    nkv,
                )
            }
        }
    }
}

type Getter<'a> = dyn FnMut(&str, &[usize]) -> Result<Tensor> + 'a;

/// Builds the pieces from named tensors.
struct Loader<'a, 'b> {
    get: &'a mut Getter<'b>,
    has: &'a dyn Fn(&str) -> bool,
    eps: f32,
}

impl Loader<'_, '_> {
    /// A matrix, in the precision it was stored in.
    fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        (self.get)(name, shape)
    }

    /// A vector (bias, norm weight) or other small tensor, widened to f32 once.
    fn small(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        Ok((self.get)(name, shape)?.to_dtype(DType::F32)?)
    }

    fn linear(&mut self, name: &str, out: usize, inp: usize, bias: bool) -> Result<Linear> {
        Ok(Linear {
            weight: self.tensor(&format!("{name}.weight"), &[out, inp])?,
            bias: if bias {
                Some(self.small(&format!("{name}.bias"), &[out])?)
            } else {
                None
            },
            packed: std::sync::OnceLock::new(),
        })
    }

    /// GPT-2's `Conv1D`: the weight is stored `[in, out]` (`y = x W + b`); kept as `[out, in]`.
    fn conv1d(&mut self, name: &str, inp: usize, out: usize) -> Result<Linear> {
        let w = self.tensor(&format!("{name}.weight"), &[inp, out])?;
        Ok(Linear {
            weight: w.t()?.contiguous()?,
            bias: Some(self.small(&format!("{name}.bias"), &[out])?),
            packed: std::sync::OnceLock::new(),
        })
    }

    fn layer_norm(&mut self, name: &str, dim: usize) -> Result<Norm> {
        Ok(Norm::Layer {
            weight: self.small(&format!("{name}.weight"), &[dim])?,
            bias: self.small(&format!("{name}.bias"), &[dim])?,
            eps: self.eps,
        })
    }

    /// OLMo's LayerNorm without weight or bias (none stored).
    fn bare_layer_norm(&self, dim: usize) -> Result<Norm> {
        Ok(Norm::Layer {
            weight: Tensor::ones(dim, DType::F32, &Device::Cpu)?,
            bias: Tensor::zeros(dim, DType::F32, &Device::Cpu)?,
            eps: self.eps,
        })
    }

    /// RMSNorm; `plus_one` for Gemma's `x̂ · (1 + w)`.
    fn rms(&mut self, name: &str, dim: usize, plus_one: bool) -> Result<Norm> {
        let w = self.small(&format!("{name}.weight"), &[dim])?;
        Ok(Norm::Rms {
            weight: if plus_one { (w + 1.0)? } else { w },
            eps: self.eps,
        })
    }

    /// A norm of the kind and gain convention the architecture table gives the family.
    fn norm(&mut self, arch: &Arch, name: &str, dim: usize) -> Result<Norm> {
        match arch.norm_kind {
            NormKind::LayerNorm => self.layer_norm(name, dim),
            NormKind::BareLayerNorm => self.bare_layer_norm(dim),
            // `NormKind` is non-exhaustive; the table has no other kind.
            _ => self.rms(name, dim, arch.gain == GainConvention::OnePlusWeight),
        }
    }
}

impl Model {
    /// Loads a checkpoint directory (`config.json` plus safetensors weights, sharded or not).
    pub fn load(dir: &Path) -> Result<Self> {
        Ok(Self::load_inner(dir, false)?.0)
    }

    /// Loads a checkpoint directory and computes its weights hash (`repgeom_hub::weights_hash`'s)
    /// from the same read of the weights
    /// ([`repgeom_io::Checkpoint::read_float_tensors`]): every tensor is read once, hashed and
    /// converted, the hash beside the conversions. `None` for the hash where the directory's weight files
    /// are not exactly the ones loaded (then hash them apart). The model is the one
    /// [`Model::load`] builds, tensor for tensor.
    pub fn load_hashed(dir: &Path) -> Result<(Self, Option<repgeom_io::WeightsDigest>)> {
        Self::load_inner(dir, true)
    }

    fn load_inner(dir: &Path, hash: bool) -> Result<(Self, Option<repgeom_io::WeightsDigest>)> {
        let ckpt = repgeom_io::open_checkpoint(dir)?;
        let config = ModelConfig::from_json(&dir.join("config.json"), &ckpt.config)?;
        // Every float tensor, read in parallel at its stored precision (and hashed from the
        // same read), each matrix kept in its stored type.
        let (tensors, digest) = ckpt.read_float_tensors(hash)?;
        let read = tensors
            .into_par_iter()
            .map(|t| {
                let tensor = stored_tensor(t.values, &t.shape)?;
                Ok((t.name, (t.shape, tensor)))
            })
            .collect::<Vec<Result<_>>>()
            .into_iter()
            .collect::<Result<std::collections::BTreeMap<String, (Vec<usize>, Tensor)>>>()?;
        let mismatch = |name: &str, shape: &[usize], found: Vec<usize>| Error::ShapeMismatch {
            file: ckpt
                .tensor_file(name)
                .map_or_else(|| dir.to_path_buf(), Path::to_path_buf),
            tensor: name.to_string(),
            expected: shape.to_vec(),
            found,
        };
        let mut get = |name: &str, shape: &[usize]| -> Result<Tensor> {
            if let Some((found, t)) = read.get(name) {
                if found != shape {
                    return Err(mismatch(name, shape, found.clone()));
                }
                // A candle tensor's clone shares its storage.
                return Ok(t.clone());
            }
            let (found, data) = ckpt.read_tensor_f32(name)?;
            if found != shape {
                return Err(mismatch(name, shape, found));
            }
            narrowest_exact(data, shape)
        };
        let model = Self::build(config, &mut get, &|name| ckpt.has_tensor(name))?;
        Ok((model, digest))
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
        Self::build(config, &mut get, &|_| false)
    }

    fn build(
        config: ModelConfig,
        get: &mut Getter<'_>,
        has: &dyn Fn(&str) -> bool,
    ) -> Result<Self> {
        let c = &config;
        if c.windows.len() != c.n_layers {
            return Err(Error::InvalidParams {
                field: "windows",
                reason: format!("{} entries for {} layers", c.windows.len(), c.n_layers),
            });
        }
        let (d, hd, v, ff) = (c.hidden_size, c.head_dim, c.vocab_size, c.intermediate_size);
        let (nh, nkv) = (c.n_heads, c.n_kv_heads);
        let mut ld = Loader {
            get,
            has,
            eps: c.norm_eps as f32,
        };
        let mut layers = Vec::with_capacity(c.n_layers);
        // The readout, the input embedding it is tied to, and the final norm: names, kind and
        // gain convention from the table that the readout loader reads too.
        let arch = c.family.arch();
        let (embed, positions) = match c.family {
            Family::GptNeoX => {
                let embed = ld.tensor(arch.tied[0], &[v, d])?;
                for i in 0..c.n_layers {
                    let l = format!("gpt_neox.layers.{i}");
                    let ab = c.attention_bias;
                    layers.push(Layer {
                        attn_pre: Some(ld.layer_norm(&format!("{l}.input_layernorm"), d)?),
                        attn_post: None,
                        mlp_pre: Some(ld.layer_norm(&format!("{l}.post_attention_layernorm"), d)?),
                        mlp_post: None,
                        attn: Attention::Fused {
                            qkv: ld.linear(
                                &format!("{l}.attention.query_key_value"),
                                3 * d,
                                d,
                                ab,
                            )?,
                            out: ld.linear(
                                &format!("{l}.attention.dense"),
                                d,
                                d,
                                c.attention_out_bias,
                            )?,
                            layout: FusedLayout::PerHead,
                        },
                        mlp: Mlp::Plain {
                            up: ld.linear(&format!("{l}.mlp.dense_h_to_4h"), ff, d, true)?,
                            down: ld.linear(&format!("{l}.mlp.dense_4h_to_h"), d, ff, true)?,
                        },
                        window: c.windows[i],
                    });
                }
                (embed, None)
            }
            Family::Gpt2 => {
                // GPT2LMHeadModel saves `transformer.*`; the original repos saved GPT2Model's
                // bare names.
                let p = if (ld.has)(arch.tied[0]) {
                    "transformer."
                } else {
                    ""
                };
                let embed = ld.tensor(&format!("{p}wte.weight"), &[v, d])?;
                let wpe = ld.small(&format!("{p}wpe.weight"), &[c.max_positions, d])?;
                for i in 0..c.n_layers {
                    let l = format!("{p}h.{i}");
                    layers.push(Layer {
                        attn_pre: Some(ld.layer_norm(&format!("{l}.ln_1"), d)?),
                        attn_post: None,
                        mlp_pre: Some(ld.layer_norm(&format!("{l}.ln_2"), d)?),
                        mlp_post: None,
                        attn: Attention::Fused {
                            qkv: ld.conv1d(&format!("{l}.attn.c_attn"), d, 3 * d)?,
                            out: ld.conv1d(&format!("{l}.attn.c_proj"), d, d)?,
                            layout: FusedLayout::Blocks,
                        },
                        mlp: Mlp::Plain {
                            up: ld.conv1d(&format!("{l}.mlp.c_fc"), d, ff)?,
                            down: ld.conv1d(&format!("{l}.mlp.c_proj"), ff, d)?,
                        },
                        window: c.windows[i],
                    });
                }
                (embed, Some(wpe))
            }
            Family::Phi => {
                let embed = ld.tensor(arch.tied[0], &[v, d])?;
                for i in 0..c.n_layers {
                    let l = format!("model.layers.{i}");
                    layers.push(Layer {
                        attn_pre: Some(ld.layer_norm(&format!("{l}.input_layernorm"), d)?),
                        attn_post: None,
                        mlp_pre: None,
                        mlp_post: None,
                        attn: Attention::Split {
                            q: ld.linear(&format!("{l}.self_attn.q_proj"), nh * hd, d, true)?,
                            k: ld.linear(&format!("{l}.self_attn.k_proj"), nkv * hd, d, true)?,
                            v: ld.linear(&format!("{l}.self_attn.v_proj"), nkv * hd, d, true)?,
                            o: ld.linear(&format!("{l}.self_attn.dense"), d, nh * hd, true)?,
                            q_norm: None,
                            k_norm: None,
                        },
                        mlp: Mlp::Plain {
                            up: ld.linear(&format!("{l}.mlp.fc1"), ff, d, true)?,
                            down: ld.linear(&format!("{l}.mlp.fc2"), d, ff, true)?,
                        },
                        window: c.windows[i],
                    });
                }
                (embed, None)
            }
            family => {
                debug_assert!(family.is_llama_like());
                let embed = ld.tensor(arch.tied[0], &[v, d])?;
                // Every norm of these families is of the final norm's kind and convention.
                let norm = |ld: &mut Loader<'_, '_>, name: &str, dim: usize| -> Result<Norm> {
                    ld.norm(arch, name, dim)
                };
                let (ab, ob, mb) = (c.attention_bias, c.attention_out_bias, c.mlp_bias);
                for i in 0..c.n_layers {
                    let l = format!("model.layers.{i}");
                    let n = |s: &str| format!("{l}.{s}");
                    let (attn_pre, attn_post, mlp_pre, mlp_post) = match family {
                        Family::Olmo2 => (
                            None,
                            Some(norm(&mut ld, &n("post_attention_layernorm"), d)?),
                            None,
                            Some(norm(&mut ld, &n("post_feedforward_layernorm"), d)?),
                        ),
                        Family::Gemma2 => (
                            Some(norm(&mut ld, &n("input_layernorm"), d)?),
                            Some(norm(&mut ld, &n("post_attention_layernorm"), d)?),
                            Some(norm(&mut ld, &n("pre_feedforward_layernorm"), d)?),
                            Some(norm(&mut ld, &n("post_feedforward_layernorm"), d)?),
                        ),
                        _ => (
                            Some(norm(&mut ld, &n("input_layernorm"), d)?),
                            None,
                            Some(norm(&mut ld, &n("post_attention_layernorm"), d)?),
                            None,
                        ),
                    };
                    let (q_norm, k_norm) = if family == Family::Olmo2 {
                        (
                            Some(norm(&mut ld, &n("self_attn.q_norm"), nh * hd)?),
                            Some(norm(&mut ld, &n("self_attn.k_norm"), nkv * hd)?),
                        )
                    } else {
                        (None, None)
                    };
                    layers.push(Layer {
                        attn_pre,
                        attn_post,
                        mlp_pre,
                        mlp_post,
                        attn: Attention::Split {
                            q: ld.linear(&n("self_attn.q_proj"), nh * hd, d, ab)?,
                            k: ld.linear(&n("self_attn.k_proj"), nkv * hd, d, ab)?,
                            v: ld.linear(&n("self_attn.v_proj"), nkv * hd, d, ab)?,
                            o: ld.linear(&n("self_attn.o_proj"), d, nh * hd, ob)?,
                            q_norm,
                            k_norm,
                        },
                        mlp: Mlp::Gated {
                            gate: ld.linear(&n("mlp.gate_proj"), ff, d, mb)?,
                            up: ld.linear(&n("mlp.up_proj"), ff, d, mb)?,
                            down: ld.linear(&n("mlp.down_proj"), d, ff, mb)?,
                        },
                        window: c.windows[i],
                    });
                }
                (embed, None)
            }
        };
        let final_norm = ld.norm(arch, arch.final_norm_in(|n| (ld.has)(n)), d)?;
        let weight_name = arch.readout[0];
        let tied = c.tie_word_embeddings && !(ld.has)(weight_name);
        let readout = if tied {
            embed.clone()
        } else {
            ld.tensor(weight_name, &[v, d])?
        };
        let readout_bias = if c.lm_head_bias {
            // a hand-built config may ask for a bias the table does not list
            let name = arch.readout_bias.map_or_else(
                || format!("{}.bias", weight_name.trim_end_matches(".weight")),
                str::to_string,
            );
            Some(ld.small(&name, &[v])?)
        } else {
            None
        };
        let embed_scale =
            matches!(c.family, Family::Gemma | Family::Gemma2).then(|| (d as f64).sqrt());
        Ok(Self {
            config,
            embed,
            positions,
            embed_scale,
            layers,
            final_norm,
            readout,
            readout_packed: std::sync::OnceLock::new(),
            tied,
            readout_bias,
            device: Device::Cpu,
            precision: Precision::F32,
            on_device: None,
        })
    }

    /// Where and how the forward passes run from now on: on `gpu` (uploading the weights,
    /// once; refused before any upload when they do not fit in the device's free memory) or,
    /// with `None`, on the CPU (freeing an upload), computing at `precision` either way.
    /// [`Self::forward_batch`] then returns the same hidden states and losses, in the same
    /// layout. A model starts on the CPU at [`Precision::F32`]. On the CPU at `stored`, with
    /// AMX, each bf16 matrix is also kept laid out for the tiles after its first use (the
    /// model then holds its linear layers' weights and its readout twice), until it is placed
    /// elsewhere.
    ///
    /// ```
    /// use repgeom_extract::{Model, Precision};
    /// let mut m = Model::load("../../fixtures/extract/gptneox_serial_bf16".as_ref()).unwrap();
    /// m.place(None, Precision::Stored).unwrap();
    /// assert_eq!(m.precision(), Precision::Stored);
    /// ```
    pub fn place(
        &mut self,
        gpu: Option<std::sync::Arc<repgeom_cuda::Gpu>>,
        precision: Precision,
    ) -> Result<()> {
        self.on_device = None; // a second call frees the first upload before the next
        if gpu.is_some() || precision != Precision::Stored {
            self.layers.iter_mut().for_each(Layer::drop_packed);
            self.readout_packed.take();
        }
        if let Some(gpu) = gpu {
            self.on_device = Some(Box::new(device::OnDevice::new(self, gpu, precision)?));
        }
        self.precision = precision;
        Ok(())
    }

    /// The precision the forward passes compute at, on whichever device.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The device the forward passes run on and its precision, `None` on the CPU.
    pub fn device(&self) -> Option<(&std::sync::Arc<repgeom_cuda::Gpu>, Precision)> {
        self.on_device.as_ref().map(|d| d.device())
    }

    /// [`Self::activation_bytes`] for the device the model is on, with the device's free
    /// memory: `None` on the CPU.
    pub fn device_activation_bytes(&self, batch: usize, seq_len: usize) -> Option<u64> {
        self.on_device
            .as_ref()
            .map(|d| d.activation_bytes(self, batch, seq_len))
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// An upper estimate of the bytes one forward pass of `batch` sequences of `seq_len`
    /// tokens allocates beyond the weights: the hidden state and its copies, q/k/v and the
    /// attention output, three MLP-wide buffers, per worker thread one block of attention
    /// scores (`attention::scratch_len`: 64 query rows against `T` keys), and for the loss
    /// the gathered rows, per worker thread one 1 MiB tile of logits and one slice of the
    /// readout in `f32`, and each row's partial log-sum-exp per vocabulary tile.
    pub fn activation_bytes(&self, batch: usize, seq_len: usize) -> u64 {
        let c = &self.config;
        let (b, t) = (batch as u64, seq_len as u64);
        let (d, qkv, ff) = widths(c);
        let per_seq = t * (8 * d + 4 * qkv + 3 * ff);
        let rows = b * t;
        let tiles = c.vocab_size.div_ceil(LOSS_TILE_VOCAB) as u64;
        let workers = rayon::current_num_threads() as u64;
        let per_worker = (LOSS_TILE_ROWS * LOSS_TILE_VOCAB) as u64
            + LOSS_TILE_VOCAB as u64 * d
            + crate::attention::scratch_len(seq_len, c.head_dim) as u64;
        // at `stored`, the half-precision copies (padded to blocks of 32): the largest weight
        // matrix and its input, or the readout and the loss's rows
        let half = match self.precision {
            Precision::F32 => 0,
            Precision::Stored => {
                let pad = |x: u64| x.div_ceil(32) * 32;
                let (v, dp) = (pad(c.vocab_size as u64), pad(d));
                let layer = pad(ff.max(3 * qkv)) * pad(d) + pad(rows) * pad(ff.max(d));
                2 * layer.max(v * dp + pad(rows) * dp)
            }
        };
        4 * (b * per_seq + rows * d + workers * per_worker) + 24 * rows * tiles + half
    }

    /// Runs one sequence of token ids and returns the L + 1 hidden states, plus the logits
    /// when `logits` is true. Always on the CPU (a reference for tests); the work of an
    /// extraction goes through [`Self::forward_batch`], which runs where the model is.
    pub fn forward(&self, ids: &[u32], logits: bool) -> Result<Forward> {
        let t = ids.len();
        let mut hidden_states = Vec::with_capacity(self.config.n_layers + 1);
        let last = self.run(&[ids], &mut |_, h| {
            hidden_states.push(h.to_vec());
            Ok(())
        })?;
        let logits = if logits {
            let h = to_vec(&last)?;
            let v = self.config.vocab_size;
            let mut out = vec![0f32; t * v];
            product_into(
                &mut out,
                &h,
                &self.readout,
                &self.readout_packed,
                self.precision,
            )?;
            self.finish_logits(&mut out, v, self.readout_bias_f32()?.as_deref());
            Some(out)
        } else {
            None
        };
        Ok(Forward {
            hidden_states,
            logits,
        })
    }

    /// Runs a batch of sequences in one forward pass. Sequences may differ in length: the
    /// shorter ones are padded on the right, which changes nothing at their real positions
    /// (attention is causal, positions count from 0 in every row).
    ///
    /// `visit(i, h)` is called for each of the L + 1 hidden states in order with `h`
    /// row-major `[B, T_max, d]` (rows past a sequence's length are padding). With `nll`,
    /// returns each sequence's summed next-token negative log-likelihood (nats, over its own
    /// length), computed tile by tile of logits (256 rows of all sequences of the batch ×
    /// 1024 vocabulary entries) without ever holding a `[rows, V]` matrix; see [`Self::nll`].
    pub fn forward_batch(
        &self,
        batch: &[&[u32]],
        nll: bool,
        visit: &mut dyn FnMut(usize, &[f32]) -> Result<()>,
    ) -> Result<Option<Vec<f64>>> {
        self.forward_batch_rows(batch, nll, None, visit)
    }

    /// [`Self::forward_batch`] for a visitor that reads only `rows` of each hidden state
    /// (indices into its `[B·T_max]` rows): on a device only those rows are copied back to
    /// the host, and what `visit` gets holds their values in their places (the other rows
    /// are unspecified). `None`: every row. The CPU computes every row either way.
    pub fn forward_batch_rows(
        &self,
        batch: &[&[u32]],
        nll: bool,
        rows: Option<&[usize]>,
        visit: &mut dyn FnMut(usize, &[f32]) -> Result<()>,
    ) -> Result<Option<Vec<f64>>> {
        // Every hidden state a caller reads, and every sequence's loss, checked finite on
        // either device before anything uses them.
        let t = batch.iter().map(|s| s.len()).max().unwrap_or(0);
        let d = self.config.hidden_size;
        let mut checked = |layer: usize, h: &[f32]| -> Result<()> {
            self.check_finite(layer, h, rows, batch.len(), t, d)?;
            visit(layer, h)
        };
        let sums = match &self.on_device {
            Some(dev) => dev.forward_batch(self, batch, nll, rows, &mut checked)?,
            None => self.cpu_forward_batch(batch, nll, &mut checked)?,
        };
        if let Some(sums) = &sums
            && let Some((sequence, &value)) = sums.iter().enumerate().find(|(_, v)| !v.is_finite())
        {
            return Err(Error::NonFiniteLoss {
                sequence,
                batch: batch.len(),
                tokens: batch[sequence].len(),
                value,
                hint: self.overflow_hint(),
            });
        }
        Ok(sums)
    }

    /// What to try when the model's numbers overflow.
    fn overflow_hint(&self) -> String {
        match (self.precision, self.device()) {
            (Precision::Stored, Some(_)) => {
                "the weights' stored precision overflows on the device: try --dtype f32".into()
            }
            (Precision::Stored, None) => {
                "the weights' stored precision overflows: try --dtype f32".into()
            }
            _ => "the checkpoint's weights overflow in f32 (check them)".into(),
        }
    }

    /// The first non-finite entry of the rows `rows` (every row when `None`) of a hidden
    /// state `h` (`[batch · t, d]`), as [`Error::NonFinite`].
    fn check_finite(
        &self,
        layer: usize,
        h: &[f32],
        rows: Option<&[usize]>,
        batch: usize,
        t: usize,
        d: usize,
    ) -> Result<()> {
        let bad = |r: usize| {
            h[r * d..(r + 1) * d]
                .iter()
                .position(|v| !v.is_finite())
                .map(|c| (r, c))
        };
        let found = match rows {
            Some(rows) => rows.iter().find_map(|&r| bad(r)),
            None => (0..h.len() / d.max(1)).find_map(bad),
        };
        match found {
            None => Ok(()),
            Some((r, column)) => Err(Error::NonFinite {
                layer,
                sequence: r / t.max(1),
                batch,
                position: r % t.max(1),
                column,
                value: h[r * d + column],
                hint: self.overflow_hint(),
            }),
        }
    }

    /// [`Self::forward_batch_rows`] on the CPU: every row computed.
    fn cpu_forward_batch(
        &self,
        batch: &[&[u32]],
        nll: bool,
        visit: &mut dyn FnMut(usize, &[f32]) -> Result<()>,
    ) -> Result<Option<Vec<f64>>> {
        let last = self.run(batch, visit)?;
        if !nll {
            return Ok(None);
        }
        let (b, t, d) = last.dims3()?;
        let pairs = loss_pairs(batch, t);
        let last = last.contiguous()?;
        let (h_store, h_layout) = last.storage_and_layout();
        let h = f32_slice(&h_store, h_layout, b * t * d)?;
        let mut rows = crate::kernels::zeros(pairs.len() * d);
        (rows.par_chunks_mut(d.max(1)))
            .zip(pairs.par_iter())
            .for_each(|(dst, &(r, _))| dst.copy_from_slice(&h[r * d..(r + 1) * d]));
        let targets: Vec<u32> = pairs.iter().map(|&(_, target)| target).collect();
        let nll = self.nll(&rows, &targets)?;
        Ok(Some(per_sequence(batch, &nll)))
    }

    /// The batch checked (non-empty sequences, at most `max_position_embeddings` tokens, ids
    /// in the vocabulary) and flattened to `[B, T_max]`, shorter sequences padded with id 0
    /// on the right; returns `(T_max, ids)`.
    pub(crate) fn flat_batch(&self, batch: &[&[u32]]) -> Result<(usize, Vec<u32>)> {
        let c = &self.config;
        let t = batch.iter().map(|s| s.len()).max().unwrap_or(0);
        if batch.iter().any(|s| s.is_empty()) || batch.is_empty() {
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
        let b = batch.len();
        let mut flat = Vec::with_capacity(b * t);
        for s in batch {
            if let Some(&bad) = s.iter().find(|&&i| i as usize >= c.vocab_size) {
                return Err(Error::TokenOutOfRange {
                    token: bad,
                    vocab_size: c.vocab_size,
                });
            }
            flat.extend_from_slice(s);
            flat.resize(flat.len() + t - s.len(), 0);
        }
        Ok((t, flat))
    }

    /// Checks the batch, runs it, reports every hidden state and returns the last (normed)
    /// one as `[B, T_max, d]`.
    fn run(
        &self,
        batch: &[&[u32]],
        visit: &mut dyn FnMut(usize, &[f32]) -> Result<()>,
    ) -> Result<Tensor> {
        let (t, flat) = self.flat_batch(batch)?;
        let ops = Cpu {
            model: self,
            precision: self.precision,
            ctx: self.context(t),
            b: batch.len(),
            t,
        };
        // the visitor borrows each state's values (a copy of every state took about 1 % of a
        // Pythia-70M-shaped run)
        wiring::forward(&ops, self, &self.weights(), &flat, &mut |i, h| {
            let h = h.contiguous()?;
            with_f32(&h, h.elem_count(), |h| visit(i, h))
        })
    }

    /// The CPU's weights, as the wiring reads them.
    fn weights(&self) -> wiring::Weights<'_, Tensor> {
        wiring::Weights {
            embed: &self.embed,
            positions: self.positions.as_ref(),
            layers: &self.layers,
            final_norm: &self.final_norm,
        }
    }
    /// Phi's `lm_head.bias` in `f32`, if the model has one.
    fn readout_bias_f32(&self) -> Result<Option<Vec<f32>>> {
        Ok(match &self.readout_bias {
            Some(b) => Some(b.to_dtype(DType::F32)?.to_vec1::<f32>()?),
            None => None,
        })
    }

    /// Adds Phi's `lm_head.bias` (`bias`, one entry per column) to every row of `out` (rows of
    /// `width` logits) and applies Gemma-2's `final_logit_softcapping`.
    fn finish_logits(&self, out: &mut [f32], width: usize, bias: Option<&[f32]>) {
        let cap = self.config.final_logit_softcap.map(|c| c as f32);
        if bias.is_none() && cap.is_none() {
            return;
        }
        out.chunks_mut(width).for_each(|row| {
            if let Some(bias) = bias {
                row.iter_mut().zip(bias).for_each(|(x, b)| *x += b);
            }
            if let Some(cap) = cap {
                row.iter_mut().for_each(|x| *x = (*x / cap).tanh() * cap);
            }
        });
    }

    /// `-log softmax(logits)[target]` for each row of `h` (row-major `[n, d]` final hidden
    /// states) and its target, tile by tile. Each task computes the logits of one block of
    /// `LOSS_TILE_ROWS` rows and one `LOSS_TILE_VOCAB`-row slice of the readout (widened to
    /// `f32` for that task alone: a half-precision readout is never copied whole; at
    /// `stored`, the readout and the rows laid out once for half-precision products) into its
    /// worker's buffer (sequential GEMM), and reduces them at once to each row's maximum and
    /// `Σ e^{x − max}` over the tile (and the target's logit, in the tile that holds it). The tiles of a row are then combined in vocabulary order,
    /// `M = max_j m_j`, `S = Σ_j s_j e^{m_j − M}` in `f64`, so the result does not depend on
    /// the thread count.
    fn nll(&self, h: &[f32], targets: &[u32]) -> Result<Vec<f64>> {
        let (v, d) = (self.config.vocab_size, self.config.hidden_size);
        let n = targets.len();
        let bias = self.readout_bias_f32()?;
        let tiles = v.div_ceil(LOSS_TILE_VOCAB);
        // At `stored`, the rows rounded to a half-precision readout's type once for every
        // tile: laid out for AMX with the readout's kept tiles, else as `f32` values
        let (rounded, half);
        let (h, half) = match stored_type(&self.readout, self.precision) {
            Some(ty) if ty.on_amx() => {
                half = (
                    HalfMatrix::left(h, n, d, ty, Par::rayon(0)),
                    kept_tiles(&self.readout_packed, &self.readout)?,
                );
                (h, Some(&half))
            }
            Some(ty) => {
                rounded = rounded_copy(h, ty);
                (&rounded[..], None)
            }
            None => (h, None),
        };
        // per (row block, vocabulary tile), per row: (max, Σ e^{x − max}, the target's logit
        // if in the tile); a thread's consecutive tasks share their rows, which stay in cache
        let parts: Vec<Result<TileRows>> = (0..n.div_ceil(LOSS_TILE_ROWS) * tiles)
            .into_par_iter()
            .map_init(
                || (vec![0f32; LOSS_TILE_ROWS * LOSS_TILE_VOCAB], Vec::new()),
                |(buf, widened), task| -> Result<_> {
                    let r0 = (task / tiles) * LOSS_TILE_ROWS;
                    let v0 = (task % tiles) * LOSS_TILE_VOCAB;
                    let (m, nv) = ((n - r0).min(LOSS_TILE_ROWS), (v - v0).min(LOSS_TILE_VOCAB));
                    let logits = &mut buf[..m * nv];
                    if let Some((x, w)) = half {
                        logits.fill(0.0);
                        matmul_abt_add_half(logits, x, r0..r0 + m, w, v0..v0 + nv, Par::Seq);
                    } else {
                        // a view for an f32 readout, a widened copy of the slice otherwise
                        with_f32_in(
                            &self.readout,
                            v0 * d..(v0 + nv) * d,
                            widened,
                            Par::Seq,
                            |w| {
                                matmul_abt_f32(
                                    MatMut::from_row_major_slice_mut(logits, m, nv),
                                    MatRef::from_row_major_slice(&h[r0 * d..(r0 + m) * d], m, d),
                                    MatRef::from_row_major_slice(w, nv, d),
                                    Par::Seq,
                                );
                                Ok(())
                            },
                        )?;
                    }
                    self.finish_logits(logits, nv, bias.as_ref().map(|b| &b[v0..v0 + nv]));
                    Ok(logits
                        .chunks(nv)
                        .zip(&targets[r0..r0 + m])
                        .map(|(row, &target)| {
                            let (max, sum) = row_lse(row);
                            let at = (target as usize).checked_sub(v0).filter(|&j| j < nv);
                            (max, sum, at.map(|j| row[j]))
                        })
                        .collect())
                },
            )
            .collect();
        // collected as an indexed iterator (a `Result` collect would split the tasks
        // differently and lose the shared rows' cache)
        let parts = parts.into_iter().collect::<Result<Vec<_>>>()?;
        Ok((0..n)
            .map(|r| {
                let (block, k) = (r / LOSS_TILE_ROWS, r % LOSS_TILE_ROWS);
                let row = || {
                    parts[block * tiles..(block + 1) * tiles]
                        .iter()
                        .map(|p| p[k])
                };
                let max = row().fold(f32::NEG_INFINITY, |a, (m, _, _)| a.max(m));
                let sum: f64 = row()
                    .map(|(m, s, _)| s * (f64::from(m) - f64::from(max)).exp())
                    .sum();
                let target = row().find_map(|(_, _, x)| x).unwrap_or(f32::NAN);
                f64::from(max) + sum.ln() - f64::from(target)
            })
            .collect())
    }

    /// The rotary tables `cos`, `sin` (`[t, rotary_dims / 2]`, row-major) for positions
    /// `0..t`: as transformers, the angle in f32, cos and sin of that f32 angle.
    pub(crate) fn rotary_tables(&self, t: usize) -> (Vec<f32>, Vec<f32>) {
        let inv = inv_freq(&self.config);
        let mut cos = Vec::with_capacity(t * inv.len());
        let mut sin = Vec::with_capacity(t * inv.len());
        for pos in 0..t {
            for &f in &inv {
                let a = (pos as f32 * f) as f64;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        (cos, sin)
    }

    fn context(&self, t: usize) -> Context {
        let (cos, sin) = self.rotary_tables(t);
        Context { cos, sin }
    }

    /// The readout matrix `W_U` ([V, d], row-major), tied or not.
    pub fn readout(&self) -> Result<Vec<f32>> {
        Ok(self
            .readout
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?)
    }

    /// Bytes the model's weights take in memory (a tied readout counted once).
    pub fn weight_bytes(&self) -> usize {
        let bytes = |t: &Tensor| t.elem_count() * t.dtype().size_in_bytes();
        let lin = |l: &Linear| bytes(&l.weight) + l.bias.as_ref().map_or(0, bytes);
        let norm = |n: &Norm| match n {
            Norm::Layer { weight, bias, .. } => bytes(weight) + bytes(bias),
            Norm::Rms { weight, .. } => bytes(weight),
        };
        let opt = |n: &Option<Norm>| n.as_ref().map_or(0, norm);
        let mut total = bytes(&self.embed)
            + self.positions.as_ref().map_or(0, bytes)
            + norm(&self.final_norm)
            + self.readout_bias.as_ref().map_or(0, bytes);
        if !self.tied {
            total += bytes(&self.readout);
        }
        for l in &self.layers {
            total += opt(&l.attn_pre) + opt(&l.attn_post) + opt(&l.mlp_pre) + opt(&l.mlp_post);
            total += match &l.attn {
                Attention::Fused { qkv, out, .. } => lin(qkv) + lin(out),
                Attention::Split {
                    q,
                    k,
                    v,
                    o,
                    q_norm,
                    k_norm,
                } => lin(q) + lin(k) + lin(v) + lin(o) + opt(q_norm) + opt(k_norm),
            };
            total += match &l.mlp {
                Mlp::Plain { up, down } => lin(up) + lin(down),
                Mlp::Gated { gate, up, down } => lin(gate) + lin(up) + lin(down),
            };
        }
        total
    }
}

/// The widths an activation estimate counts in: hidden size, all heads' q width, MLP width.
fn widths(c: &ModelConfig) -> (u64, u64, u64) {
    (
        c.hidden_size as u64,
        (c.n_heads * c.head_dim) as u64,
        c.intermediate_size as u64,
    )
}

/// Every predicting position of every sequence of a batch padded to `t`, in order: (row of
/// the `[B·t, d]` hidden states, target id).
fn loss_pairs(batch: &[&[u32]], t: usize) -> Vec<(usize, u32)> {
    batch
        .iter()
        .enumerate()
        .flat_map(|(s, ids)| (0..ids.len().saturating_sub(1)).map(move |r| (s * t + r, ids[r + 1])))
        .collect()
}

/// Per-position losses in [`loss_pairs`]' order, summed per sequence in position order, as
/// one sequence at a time would.
fn per_sequence(batch: &[&[u32]], nll: &[f64]) -> Vec<f64> {
    let mut sums = Vec::with_capacity(batch.len());
    let mut rest = nll;
    for ids in batch {
        let (mine, tail) = rest.split_at(ids.len().saturating_sub(1));
        sums.push(mine.iter().sum());
        rest = tail;
    }
    sums
}

/// RoPE inverse frequencies in f32, as transformers computes them (`default` and `llama3`).
fn inv_freq(c: &ModelConfig) -> Vec<f32> {
    let dim = c.rotary_dims;
    let base: Vec<f32> = (0..dim / 2)
        .map(|i| 1.0 / (c.rope_theta as f32).powf((2 * i) as f32 / dim as f32))
        .collect();
    match c.rope_scaling {
        RopeScaling::Default => base,
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_positions,
        } => {
            let (factor, low, high, old) = (
                factor as f32,
                low_freq_factor as f32,
                high_freq_factor as f32,
                original_max_positions as f32,
            );
            let (low_wavelen, high_wavelen) = (old / low, old / high);
            base.into_iter()
                .map(|f| {
                    let wavelen = 2.0 * std::f32::consts::PI / f;
                    let scaled = if wavelen > low_wavelen { f / factor } else { f };
                    let medium = wavelen >= high_wavelen && wavelen <= low_wavelen;
                    if medium {
                        let smooth = (old / wavelen - low) / (high - low);
                        (1.0 - smooth) * scaled / factor + smooth * scaled
                    } else {
                        scaled
                    }
                })
                .collect()
        }
    }
}

/// A tensor read at its stored precision ([`repgeom_io::FloatValues`]), kept in that type:
/// matrices as stored (a 6.9B bf16 checkpoint is never 28 GB of f32), vectors widened to
/// f32 (exactly). The type is what [`Precision::Stored`] computes in, so an f32 matrix stays
/// f32 even when its values fit a narrower type, and an f16 one f16.
fn stored_tensor(values: repgeom_io::FloatValues, shape: &[usize]) -> Result<Tensor> {
    use repgeom_io::FloatValues;
    let dev = &Device::Cpu;
    if shape.len() < 2 {
        return Ok(Tensor::from_vec(values.to_f32(), shape, dev)?);
    }
    Ok(match values {
        FloatValues::Bf16(v) => Tensor::from_vec(v, shape, dev)?,
        FloatValues::F16(v) => Tensor::from_vec(v, shape, dev)?,
        FloatValues::F32(v) => Tensor::from_vec(v, shape, dev)?,
    })
}

/// `data` in the narrowest storage that holds every value exactly: bf16, else f16, else f32
/// (matrices only; vectors stay f32). For tensors read as f32 from other types (f64) and
/// random models.
fn narrowest_exact(data: Vec<f32>, shape: &[usize]) -> Result<Tensor> {
    let dev = &Device::Cpu;
    if shape.len() >= 2 {
        if data.iter().all(|x| x.to_bits() & 0xffff == 0) {
            let v: Vec<half::bf16> = data.into_iter().map(half::bf16::from_f32).collect();
            return Ok(Tensor::from_vec(v, shape, dev)?);
        }
        if data
            .iter()
            .all(|&x| half::f16::from_f32(x).to_f32().to_bits() == x.to_bits())
        {
            let v: Vec<half::f16> = data.into_iter().map(half::f16::from_f32).collect();
            return Ok(Tensor::from_vec(v, shape, dev)?);
        }
    }
    Ok(Tensor::from_vec(data, shape, dev)?)
}

/// `a ← a op b` for two `f32` activations of one shape, in place on the pool
/// ([`crate::kernels::pairwise`]) where both are contiguous (candle's in-place operation
/// handles a `b` that shares `a`'s storage), through candle's operation otherwise: the same
/// values either way.
fn pairwise(op: Pairwise, a: Tensor, b: &Tensor) -> Result<Tensor> {
    let fits = a.dtype() == DType::F32
        && b.dtype() == DType::F32
        && a.shape() == b.shape()
        && a.is_contiguous()
        && b.is_contiguous();
    if !fits {
        return Ok(match op {
            Pairwise::Add => (a + b)?,
            Pairwise::Mul => (a * b)?,
        });
    }
    a.inplace_op2(b, &op)?;
    Ok(a)
}

/// The `len` f32 values of a contiguous tensor's storage, borrowed.
fn f32_slice<'a>(
    storage: &'a candle_core::Storage,
    layout: &candle_core::Layout,
    len: usize,
) -> Result<&'a [f32]> {
    match (storage, layout.contiguous_offsets()) {
        (candle_core::Storage::Cpu(candle_core::CpuStorage::F32(x)), Some((start, end)))
            if end - start == len =>
        {
            Ok(&x[start..end])
        }
        _ => Err(Error::InvalidParams {
            field: "tensor",
            reason: format!("expected {len} contiguous f32 values on the CPU"),
        }),
    }
}

/// Runs `f` on the `len` values of a contiguous CPU tensor in `f32`: borrowed where they are
/// stored in `f32`, widened (exactly) otherwise, bf16 and f16 in parallel chunks on the
/// current rayon pool, so that a weight kept at its stored precision costs no serial pass
/// each time it is used.
fn with_f32<R>(t: &Tensor, len: usize, f: impl FnOnce(&[f32]) -> Result<R>) -> Result<R> {
    if t.elem_count() != len {
        return Err(Error::InvalidParams {
            field: "tensor",
            reason: format!("expected {len} values, found {}", t.elem_count()),
        });
    }
    with_f32_in(t, 0..len, &mut Vec::new(), Par::rayon(0), f)
}

/// [`with_f32`] for the values `range` (offsets into a contiguous CPU tensor), widened into
/// `buf` (reused across calls), in parallel chunks with `par`, one after another with
/// `Par::Seq` (a task's own share of parallel work).
fn with_f32_in<R>(
    t: &Tensor,
    range: std::ops::Range<usize>,
    buf: &mut Vec<f32>,
    par: Par,
    f: impl FnOnce(&[f32]) -> Result<R>,
) -> Result<R> {
    use candle_core::{CpuStorage, Storage};
    use half::slice::HalfFloatSliceExt;
    const CHUNK: usize = 1 << 16;
    fn widen<'b>(
        buf: &'b mut Vec<f32>,
        len: usize,
        par: Par,
        x: &(dyn Fn(&mut [f32], usize) + Sync),
    ) -> &'b [f32] {
        if buf.len() < len {
            // zeroed by the system (not written here): the writers touch the pages first
            *buf = vec![0.0; len];
        }
        let out = &mut buf[..len];
        match par {
            Par::Seq => x(out, 0),
            _ => out
                .par_chunks_mut(CHUNK)
                .enumerate()
                .for_each(|(i, out)| x(out, i * CHUNK)),
        }
        out
    }
    let (storage, layout) = t.storage_and_layout();
    let base = layout
        .contiguous_offsets()
        .filter(|(start, end)| range.start <= range.end && range.end <= end - start)
        .map(|(start, _)| start);
    let (a, b) = (range.start, range.end);
    match (&*storage, base) {
        (Storage::Cpu(CpuStorage::F32(x)), Some(o)) => f(&x[o + a..o + b]),
        (Storage::Cpu(CpuStorage::BF16(x)), Some(o)) => {
            let x = &x[o + a..o + b];
            f(widen(buf, b - a, par, &|out, at| {
                x[at..at + out.len()].convert_to_f32_slice(out);
            }))
        }
        (Storage::Cpu(CpuStorage::F16(x)), Some(o)) => {
            let x = &x[o + a..o + b];
            f(widen(buf, b - a, par, &|out, at| {
                x[at..at + out.len()].convert_to_f32_slice(out);
            }))
        }
        (Storage::Cpu(_), Some(_)) => {
            drop(storage);
            let w = t.flatten_all()?.narrow(0, a, b - a)?.to_dtype(DType::F32)?;
            let (store, layout) = w.storage_and_layout();
            f(f32_slice(&store, layout, b - a)?)
        }
        _ => Err(Error::InvalidParams {
            field: "tensor",
            reason: format!("expected values {a}..{b} of a contiguous tensor on the CPU"),
        }),
    }
}

/// The type a product with the CPU weight `w` rounds its input to at `precision`: `None` in
/// `f32` (and for an `f32` weight at `stored`), the weight's bf16/f16 at `stored`, where the
/// product runs on AMX tiles if `HalfType::on_amx` says so and as an `f32` product of the
/// rounded input otherwise.
fn stored_type(w: &Tensor, precision: Precision) -> Option<HalfType> {
    match (precision, w.dtype()) {
        (Precision::Stored, DType::BF16) => Some(HalfType::Bf16),
        (Precision::Stored, DType::F16) => Some(HalfType::F16),
        _ => None,
    }
}

/// `y += x wᵀ` for `x` row-major `[rows, in]` and a CPU weight `w` `[out, in]`, at
/// `precision`. In `f32`, a half-precision weight is widened for this product alone (the
/// model holds it in its stored type). At [`Precision::Stored`], a bf16/f16 weight multiplies
/// `x` rounded to its type, summed in `f32`: on AMX tiles where the CPU has them (`w` laid out
/// at its first product and kept in `tiles`, [`kept_tiles`]), else with both sides widened
/// exactly and multiplied as in `f32` (the same sums as `repgeom_linalg`'s widened kernel,
/// without a copy of the weight in its own type).
fn product_into(
    y: &mut [f32],
    x: &[f32],
    w: &Tensor,
    tiles: &std::sync::OnceLock<HalfMatrix>,
    precision: Precision,
) -> Result<()> {
    let (out, inp) = w.dims2()?;
    let rows = x.len() / inp.max(1);
    let rounded;
    let x = match stored_type(w, precision) {
        Some(ty) if ty.on_amx() => {
            let w = kept_tiles(tiles, w)?;
            let x = HalfMatrix::left(x, rows, inp, ty, Par::rayon(0));
            matmul_abt_add_half(y, &x, 0..rows, w, 0..out, Par::rayon(0));
            return Ok(());
        }
        Some(ty) => {
            rounded = rounded_copy(x, ty);
            &rounded[..]
        }
        None => x,
    };
    with_f32(w, out * inp, |w| {
        matmul_abt_add_f32(
            MatMut::from_row_major_slice_mut(y, rows, out),
            MatRef::from_row_major_slice(x, rows, inp),
            MatRef::from_row_major_slice(w, out, inp),
            Par::rayon(0),
        );
        Ok(())
    })
}

/// `w` (`[out, in]`, bf16, on the CPU) laid out for AMX tiles: the layout kept in `tiles`,
/// made now and kept if there is none yet (re-laying a weight out for every batch took about
/// a tenth of a Pythia-410M-shaped run).
fn kept_tiles<'a>(
    tiles: &'a std::sync::OnceLock<HalfMatrix>,
    w: &Tensor,
) -> Result<&'a HalfMatrix> {
    use candle_core::{CpuStorage, Storage};
    use half::slice::HalfFloatSliceExt;
    if let Some(t) = tiles.get() {
        return Ok(t);
    }
    let (rows, cols) = w.dims2()?;
    let (storage, layout) = w.storage_and_layout();
    let bits: &[u16] = match (&*storage, layout.contiguous_offsets()) {
        (Storage::Cpu(CpuStorage::BF16(x)), Some((a, b))) => x[a..b].reinterpret_cast(),
        _ => {
            return Err(Error::InvalidParams {
                field: "tensor",
                reason: format!(
                    "expected a contiguous bf16 tensor on the CPU, not a {:?} tensor of shape {:?}",
                    w.dtype(),
                    w.dims()
                ),
            });
        }
    };
    let made = HalfMatrix::right(bits, rows, cols, HalfType::Bf16, Par::rayon(0));
    // a second caller that made the same layout meanwhile keeps the first
    let _ = tiles.set(made);
    Ok(tiles.get().expect("set above"))
}

/// `x` rounded to `ty` and widened back (a copy, rounded on the pool).
fn rounded_copy(x: &[f32], ty: HalfType) -> Vec<f32> {
    let mut r = x.to_vec();
    ty.round_in_place(&mut r, Par::rayon(0));
    r
}

fn to_vec(h: &Tensor) -> Result<Vec<f32>> {
    Ok(h.flatten_all()?.to_vec1::<f32>()?)
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};
    use repgeom_io::FloatValues;

    use super::*;

    /// At `stored` on an AMX CPU each bf16 weight (the readout too) is laid out for the tiles
    /// at its first product and kept (the second pass, from the kept tiles, gives the same
    /// bits), and placing the model elsewhere drops them; without AMX nothing is kept.
    #[test]
    fn tile_layouts_are_kept_at_stored_and_dropped_elsewhere() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/extract/gptneox_serial_bf16");
        let mut m = Model::load(&dir).unwrap();
        let kept = |m: &Model| {
            m.layers
                .iter()
                .map(|l| match &l.attn {
                    Attention::Fused { qkv, out, .. } => {
                        usize::from(qkv.packed.get().is_some())
                            + usize::from(out.packed.get().is_some())
                    }
                    Attention::Split { .. } => 0,
                })
                .sum::<usize>()
                + usize::from(m.readout_packed.get().is_some())
        };
        let ids: Vec<u32> = (0..20).map(|i| (i * 37 % 290) as u32).collect();
        m.place(None, Precision::Stored).unwrap();
        let first = m.forward(&ids, true).unwrap();
        let layers = m.layers.len();
        assert_eq!(
            kept(&m),
            if repgeom_linalg::amx_bf16() {
                2 * layers + 1
            } else {
                0
            }
        );
        let second = m.forward(&ids, true).unwrap();
        let bits = |f: &Forward| -> Vec<u32> {
            f.hidden_states
                .iter()
                .flatten()
                .chain(f.logits.iter().flatten())
                .map(|x| x.to_bits())
                .collect()
        };
        assert_eq!(bits(&first), bits(&second));
        m.place(None, Precision::F32).unwrap();
        assert_eq!(kept(&m), 0);
    }

    /// `stored_tensor` keeps a matrix in its stored type, even where a narrower one would hold
    /// its values (that type is what `stored` computes in), and widens a vector to f32: the
    /// same values either way.
    #[test]
    fn stored_tensors_keep_their_stored_type() {
        let check = |values: FloatValues, shape: &[usize], want: DType| {
            let t = stored_tensor(values.clone(), shape).unwrap();
            assert_eq!((t.dtype(), t.dims()), (want, shape), "{values:?}");
            let got = t.flatten_all().unwrap().to_dtype(DType::F32).unwrap();
            let got: Vec<u32> = got
                .to_vec1::<f32>()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect();
            let want: Vec<u32> = values.to_f32().iter().map(|x| x.to_bits()).collect();
            assert_eq!(got, want, "{values:?}");
        };
        let f = [0.1f32, -2.5, 3.0e-5, 1.0, 65504.0, -0.0];
        // values that bf16 (and f16) hold exactly
        let exact = [0.5f32, -1.0, 2.0, 0.0, 0.25, 8.0];
        check(
            FloatValues::Bf16(f.map(bf16::from_f32).to_vec()),
            &[2, 3],
            DType::BF16,
        );
        check(
            FloatValues::F16(f.map(f16::from_f32).to_vec()),
            &[3, 2],
            DType::F16,
        );
        check(
            FloatValues::F16(exact.map(f16::from_f32).to_vec()),
            &[2, 3],
            DType::F16,
        );
        check(FloatValues::F32(f.to_vec()), &[2, 3], DType::F32);
        check(FloatValues::F32(exact.to_vec()), &[2, 3], DType::F32);
        check(
            FloatValues::Bf16(f.map(bf16::from_f32).to_vec()),
            &[6],
            DType::F32,
        );
        check(
            FloatValues::F16(exact.map(f16::from_f32).to_vec()),
            &[6],
            DType::F32,
        );
    }

    /// `with_f32_in` gives candle's widening of the same values bit for bit (bf16, f16, f32,
    /// a dtype it leaves to candle), whole or a range, in parallel chunks or one after
    /// another, with a reused buffer longer than the range; a range past the tensor is an
    /// error, never a short slice.
    #[test]
    fn weights_widen_to_candles_f32() {
        // more values than one parallel chunk (1 << 16), not a multiple of it
        let n = 7 * 18_737;
        let values: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.37).sin() * 100.0).collect();
        let f32s = Tensor::from_vec(values.clone(), (n / 7, 7), &Device::Cpu).unwrap();
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let mut buf = vec![1.0f32; n + 5];
        for dtype in [DType::BF16, DType::F16, DType::F32, DType::F64] {
            let t = f32s.to_dtype(dtype).unwrap();
            let want = t.flatten_all().unwrap().to_dtype(DType::F32).unwrap();
            let want = want.to_vec1::<f32>().unwrap();
            for (range, par) in [
                (0..n, Par::rayon(0)),
                (0..n, Par::Seq),
                (7..(1 << 16) + 9, Par::rayon(0)),
                (1000..1007, Par::Seq),
                (n..n, Par::Seq),
            ] {
                let got = with_f32_in(&t, range.clone(), &mut buf, par, |w| Ok(bits(w))).unwrap();
                assert_eq!(
                    got,
                    bits(&want[range.clone()]),
                    "{dtype:?} {range:?} {par:?}"
                );
            }
            let whole = with_f32(&t, n, |w| Ok(bits(w))).unwrap();
            assert_eq!(whole, bits(&want), "{dtype:?}");
            assert!(with_f32(&t, n - 1, |_| Ok(())).is_err(), "{dtype:?}");
            assert!(with_f32_in(&t, n - 1..n + 1, &mut buf, Par::Seq, |_| Ok(())).is_err());
        }
    }
}
