//! The forward pass on a CUDA device: the wiring both devices share (`model/wiring.rs`) over
//! [`repgeom_cuda`]'s operations, the weights uploaded once ([`Model::place`]), and the
//! loss on the device. Hidden states come back to the host one at a time, in the CPU
//! path's order and layout, so everything downstream of [`Model::forward_batch`] (points,
//! line means, words, accumulators) is the same code on either device.

use std::str::FromStr;
use std::sync::Arc;

use candle_core::{DType, Tensor};
use repgeom_cuda::{Act, ActFn, AttentionSpec, Gpu, Heads, HostData, Rope, Uploads, Weight};

use super::wiring::{self, Qkv};
use super::{FusedLayout, Layer, Linear, Model, Norm, loss_pairs, per_sequence, widths};
use crate::config::Activation;
use crate::{Error, Result};

/// How the forward passes compute, on either device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Every weight widened to `f32`, every product in `f32` (within 1e-4 of transformers in
    /// f32; a CUDA device's numbers are the CPU's to the rounding of the products).
    #[default]
    F32,
    /// Products of bf16/f16 inputs accumulated in `f32`: the weights as stored (bf16, f16; an
    /// `f32` weight stays `f32`), the activations rounded to the weight's type for each
    /// product; norms, softmax, residuals and the loss's reduction in `f32`. As transformers
    /// computes in that dtype's matrix products on a GPU (and PyTorch on a CPU with AMX),
    /// about its numbers. A CUDA device multiplies with `cublasGemmEx`; the CPU with AMX
    /// tiles for bf16 where it has them (`repgeom_linalg::amx_bf16`), else by widening both
    /// sides to `f32` (exact) for faer's `f32` product: the same products, summed in another
    /// order.
    Stored,
}

impl Precision {
    /// The names `--dtype` takes.
    pub const NAMES: &'static str = "f32, stored";

    /// The name, as `--dtype` and the metadata spell it.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Stored => "stored",
        }
    }
}

impl FromStr for Precision {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(Precision::F32),
            "stored" => Ok(Precision::Stored),
            other => Err(Error::InvalidParams {
                field: "dtype",
                reason: format!("unknown dtype `{other}`: expected {}", Precision::NAMES),
            }),
        }
    }
}

/// The model's weights on a device.
pub(crate) struct OnDevice {
    gpu: Arc<Gpu>,
    precision: Precision,
    embed: Weight,
    positions: Option<Weight>,
    layers: Vec<Layer<Weight>>,
    final_norm: Norm<Weight>,
    /// `None` when tied to `embed`.
    readout: Option<Weight>,
    readout_bias: Option<Weight>,
    /// Bytes the weights take on the device.
    bytes: u64,
}

impl std::fmt::Debug for OnDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnDevice")
            .field("gpu", &self.gpu)
            .field("precision", &self.precision)
            .field("bytes", &self.bytes)
            .finish()
    }
}

/// Uploads one weight: matrices as stored (or widened, for [`Precision::F32`]), vectors in
/// the `f32` the CPU path widened them to at load. A contiguous tensor is uploaded from its
/// own storage, without a host copy (a 6.9B checkpoint is 14 GB).
fn upload(device: &Uploads<'_>, t: &Tensor, widen: bool) -> Result<Weight> {
    use half::slice::HalfFloatSliceExt;
    let t = t.contiguous()?;
    let what = format!("a weight of {} values", t.elem_count());
    let (storage, layout) = t.storage_and_layout();
    let Some((start, end)) = layout.contiguous_offsets() else {
        return Err(Error::InvalidParams {
            field: "tensor",
            reason: "a weight that is not contiguous after contiguous()".into(),
        });
    };
    Ok(match &*storage {
        candle_core::Storage::Cpu(candle_core::CpuStorage::BF16(x)) => device.upload(
            HostData::Bf16(x[start..end].reinterpret_cast()),
            widen,
            &what,
        )?,
        candle_core::Storage::Cpu(candle_core::CpuStorage::F16(x)) => device.upload(
            HostData::F16(x[start..end].reinterpret_cast()),
            widen,
            &what,
        )?,
        candle_core::Storage::Cpu(candle_core::CpuStorage::F32(x)) => {
            device.upload(HostData::F32(&x[start..end]), widen, &what)?
        }
        _ => {
            drop(storage);
            let x = t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
            device.upload(HostData::F32(&x), widen, &what)?
        }
    })
}

/// Bytes a tensor takes on the device at `precision`.
fn device_bytes(t: &Tensor, precision: Precision) -> u64 {
    let size = match precision {
        Precision::F32 => 4,
        Precision::Stored => t.dtype().size_in_bytes().min(4),
    };
    (t.elem_count() * size) as u64
}

impl OnDevice {
    /// Uploads `model`'s weights, after checking that they fit in the device's free memory.
    pub(crate) fn new(model: &Model, gpu: Arc<Gpu>, precision: Precision) -> Result<Self> {
        let widen = precision == Precision::F32;
        // The bytes the weights take there, and whether any is bf16.
        let (mut bytes, mut bf16) = (0u64, false);
        let mut count = |t: &Tensor| -> Result<()> {
            bytes += device_bytes(t, precision);
            bf16 |= t.dtype() == DType::BF16;
            Ok(())
        };
        for l in &model.layers {
            l.map(&mut count)?;
        }
        count(&model.embed)?;
        for t in [&model.positions, &model.readout_bias]
            .into_iter()
            .flatten()
        {
            count(t)?;
        }
        if !model.tied {
            count(&model.readout)?;
        }
        // bf16 products (cuBLAS's CUDA_R_16BF) need Ampere or newer: refused before any upload.
        let cc = gpu.compute_capability();
        if precision == Precision::Stored && bf16 && cc < (8, 0) {
            return Err(Error::InvalidParams {
                field: "dtype",
                reason: format!(
                    "stored: the model's bf16 weights need bf16 products, which cuda:{} ({}, \
                     compute capability {}.{}) cannot compute (8.0 or newer); use --dtype f32",
                    gpu.ordinal(),
                    gpu.name(),
                    cc.0,
                    cc.1
                ),
            });
        }
        // Held from the check to the last copy: no other work of this process (a PGA
        // unit's draws, another model) can take the memory in between.
        let device = gpu.uploads()?;
        let free = device.free();
        if bytes > free / 10 * 9 {
            return Err(Error::DeviceTooSmall {
                device: format!("cuda:{}", gpu.ordinal()),
                what: format!("the model's weights at --dtype {}", precision.name()),
                needed: bytes,
                free,
                hint: if widen {
                    "--dtype stored keeps bf16/f16 weights as stored (half the bytes)".into()
                } else {
                    "use a device with more memory, or the CPU".into()
                },
            });
        }
        let mut up = |t: &Tensor| upload(&device, t, widen);
        let layers = model
            .layers
            .iter()
            .map(|l| l.map(&mut up))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            embed: up(&model.embed)?,
            positions: model.positions.as_ref().map(&mut up).transpose()?,
            final_norm: model.final_norm.map(&mut up)?,
            readout: if model.tied {
                None
            } else {
                Some(up(&model.readout)?)
            },
            readout_bias: model.readout_bias.as_ref().map(&mut up).transpose()?,
            layers,
            gpu: gpu.clone(),
            precision,
            bytes,
        })
    }

    /// The device and the precision it computes in.
    pub(crate) fn device(&self) -> (&Arc<Gpu>, Precision) {
        (&self.gpu, self.precision)
    }

    /// An upper estimate of the device bytes one forward pass of `batch` sequences of
    /// `seq_len` tokens allocates beyond the weights: the hidden state and the layer's
    /// temporaries (norm output, projections, heads, scores, MLP), the narrowed inputs of
    /// half-precision products, and the loss's logits of every row (at most 1 GiB at once:
    /// [`repgeom_cuda::loss_bytes`]).
    pub(crate) fn activation_bytes(&self, model: &Model, batch: usize, seq_len: usize) -> u64 {
        let c = &model.config;
        let (b, t) = (batch as u64, seq_len as u64);
        let (d, qkv, ff) = widths(c);
        let rows = b * t;
        let floats = rows * (8 * d + 10 * qkv + 3 * ff) + b * c.n_heads as u64 * t * t;
        4 * floats
            + 2 * rows * ff.max(3 * qkv)
            + repgeom_cuda::loss_bytes(rows, d, c.vocab_size as u64)
    }

    /// [`Model::forward_batch`] on the device.
    pub(crate) fn forward_batch(
        &self,
        model: &Model,
        batch: &[&[u32]],
        nll: bool,
        rows: Option<&[usize]>,
        visit: &mut dyn FnMut(usize, &[f32]) -> Result<()>,
    ) -> Result<Option<Vec<f64>>> {
        let c = &model.config;
        let (t, flat) = model.flat_batch(batch)?;
        let wanted: Option<Vec<u32>> = match rows {
            Some(r) if r.iter().any(|&i| i >= flat.len()) => {
                return Err(Error::InvalidParams {
                    field: "rows",
                    reason: format!("a row past the batch's {} rows", flat.len()),
                });
            }
            Some(r) => Some(r.iter().map(|&i| i as u32).collect()),
            None => None,
        };
        let g = &*self.gpu;
        let rope = if c.rotary_dims > 0 {
            let (cos, sin) = model.rotary_tables(t);
            Some(g.rope(&cos, &sin, t, c.rotary_dims)?)
        } else {
            None
        };
        let ops = Ops {
            gpu: g,
            model,
            rope,
            b: batch.len(),
            t,
        };
        let weights = wiring::Weights {
            embed: &self.embed,
            positions: self.positions.as_ref(),
            layers: &self.layers,
            final_norm: &self.final_norm,
        };
        let mut host = Vec::new();
        let h = wiring::forward(&ops, model, &weights, &flat, &mut |i, h| {
            g.profiled("copy back", || match &wanted {
                Some(r) => g.download_rows(h, r, &mut host),
                None => g.download(h, &mut host),
            })?;
            visit(i, &host)
        })?;
        if !nll {
            return Ok(None);
        }
        let pairs = loss_pairs(batch, t);
        let rows: Vec<u32> = pairs.iter().map(|&(r, _)| r as u32).collect();
        let targets: Vec<u32> = pairs.iter().map(|&(_, target)| target).collect();
        let nll = g.profiled("loss", || {
            g.loss(
                &h,
                &rows,
                &targets,
                self.readout.as_ref().unwrap_or(&self.embed),
                self.readout_bias.as_ref(),
                c.final_logit_softcap.map(|x| x as f32),
            )
        })?;
        Ok(Some(per_sequence(batch, &nll)))
    }
}

/// A CUDA device's operations for one batch of `b` sequences of `t` tokens: activations
/// `[B·T, width]` in `f32` on the device, products through cuBLAS at the weights' precision.
struct Ops<'a> {
    gpu: &'a Gpu,
    model: &'a Model,
    rope: Option<Rope>,
    b: usize,
    t: usize,
}

impl wiring::Ops for Ops<'_> {
    type W = Weight;
    type X = Act;

    fn embed(&self, table: &Weight, flat: &[u32]) -> Result<Act> {
        let d = self.model.config.hidden_size;
        Ok(self
            .gpu
            .profiled("embedding", || self.gpu.embed(table, flat, d))?)
    }

    fn add_positions(&self, mut x: Act, positions: &Weight) -> Result<Act> {
        self.gpu.profiled("positions", || {
            self.gpu.add_positions(&mut x, positions, self.t)
        })?;
        Ok(x)
    }

    fn scale(&self, mut x: Act, s: f32) -> Result<Act> {
        self.gpu.profiled("scale", || self.gpu.scale(&mut x, s))?;
        Ok(x)
    }

    fn norm(&self, n: &Norm<Weight>, x: &Act) -> Result<Act> {
        Ok(self.gpu.profiled("norm", || match n {
            Norm::Layer { weight, bias, eps } => self.gpu.norm(x, weight, Some(bias), *eps),
            Norm::Rms { weight, eps } => self.gpu.norm(x, weight, None, *eps),
        })?)
    }

    fn linear(&self, l: &Linear<Weight>, x: &Act) -> Result<Act> {
        let out = l.weight.len() / x.cols().max(1);
        Ok(self.gpu.profiled("linear", || {
            self.gpu.linear(x, &l.weight, out, l.bias.as_ref())
        })?)
    }

    fn add(&self, mut a: Act, b: &Act) -> Result<Act> {
        self.gpu
            .profiled("add", || self.gpu.combine(&mut a, b, false))?;
        Ok(a)
    }

    fn mul(&self, mut a: Act, b: &Act) -> Result<Act> {
        self.gpu
            .profiled("multiply", || self.gpu.combine(&mut a, b, true))?;
        Ok(a)
    }

    fn activate(&self, mut x: Act, f: Activation) -> Result<Act> {
        let f = match f {
            Activation::GeluErf => ActFn::GeluErf,
            Activation::GeluTanh => ActFn::GeluTanh,
            Activation::Relu => ActFn::Relu,
            Activation::Silu => ActFn::Silu,
        };
        self.gpu
            .profiled("activation", || self.gpu.activate(&mut x, f))?;
        Ok(x)
    }

    fn clamp(&self, mut x: Act, c: f32) -> Result<Act> {
        self.gpu.profiled("clamp", || self.gpu.clamp(&mut x, c))?;
        Ok(x)
    }

    fn attend(&self, qkv: Qkv<'_, Act>, window: Option<usize>) -> Result<Act> {
        let c = &self.model.config;
        let (nh, hd) = (c.n_heads, c.head_dim);
        let spec = AttentionSpec {
            batch: self.b,
            t: self.t,
            heads: nh,
            head_dim: hd,
            scale: c.attention_scale as f32,
            cap: c.attn_logit_softcap.map(|x| x as f32),
            window,
        };
        fn heads(src: &Act, col0: usize, stride: usize, n: usize) -> Heads<'_> {
            Heads {
                src,
                col0,
                stride,
                n,
            }
        }
        let (q, k, v) = match qkv {
            Qkv::Fused(p, layout) => {
                let (step, stride) = match layout {
                    FusedLayout::PerHead => (hd, 3 * hd),
                    FusedLayout::Blocks => (nh * hd, hd),
                };
                (
                    heads(p, 0, stride, nh),
                    heads(p, step, stride, nh),
                    heads(p, 2 * step, stride, nh),
                )
            }
            Qkv::Split { q, k, v } => {
                let nkv = c.n_kv_heads;
                (
                    heads(q, 0, hd, nh),
                    heads(k, 0, hd, nkv),
                    heads(v, 0, hd, nkv),
                )
            }
        };
        Ok(self.gpu.profiled("attention", || {
            self.gpu.attention(q, k, v, self.rope.as_ref(), &spec)
        })?)
    }
}
