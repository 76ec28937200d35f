//! The decoder's wiring, once for both devices: the embedding (with GPT-2's positions and
//! Gemma's scale), each layer's residual stream (sequential or parallel, with its optional
//! norms), the MLP (plain or gated), the attention's projections (fused or separate, OLMo's
//! clip, OLMo-2's q/k norms) and the final norm, over the operations of one device ([`Ops`]:
//! candle tensors on the CPU, `repgeom_cuda`'s activations on a CUDA device). What differs
//! between the devices is how an operation computes, never which operations run in which
//! order, so the CPU's transformers parity tests check the wiring the device runs too.

use super::{Attention, FusedLayout, Layer, Linear, Mlp, Model, Norm};
use crate::Result;
use crate::config::Activation;

/// The weights the wiring reads, on one device.
pub(super) struct Weights<'a, W> {
    /// `[V, d]`, the token embedding.
    pub(super) embed: &'a W,
    /// GPT-2's learned position embedding.
    pub(super) positions: Option<&'a W>,
    pub(super) layers: &'a [Layer<W>],
    pub(super) final_norm: &'a Norm<W>,
}

/// The query, key and value projections of one layer, as attention receives them.
pub(super) enum Qkv<'a, X> {
    /// One fused projection's output (`n_heads` heads of each), laid out per the layout.
    Fused(&'a X, FusedLayout),
    /// Separate projections: queries of `n_heads` heads, keys and values of `n_kv_heads`.
    Split { q: &'a X, k: &'a X, v: &'a X },
}

/// The operations the wiring composes, for one batch of `[B, T]` tokens on one device.
/// Activations are row-major `[B·T, width]` (or `[B, T, width]`); an operation given an
/// activation by value may overwrite it.
pub(super) trait Ops {
    /// A weight on this device.
    type W;
    /// An activation on this device.
    type X;
    /// The embedding rows of the batch's tokens (`flat`, `[B·T]`), in `f32`.
    fn embed(&self, table: &Self::W, flat: &[u32]) -> Result<Self::X>;
    /// `x + positions[0..T]` for every sequence of the batch.
    fn add_positions(&self, x: Self::X, positions: &Self::W) -> Result<Self::X>;
    /// `x · s`.
    fn scale(&self, x: Self::X, s: f32) -> Result<Self::X>;
    fn norm(&self, n: &Norm<Self::W>, x: &Self::X) -> Result<Self::X>;
    /// `x Wᵀ + b`.
    fn linear(&self, l: &Linear<Self::W>, x: &Self::X) -> Result<Self::X>;
    /// `a + b`, element by element.
    fn add(&self, a: Self::X, b: &Self::X) -> Result<Self::X>;
    /// `a · b`, element by element.
    fn mul(&self, a: Self::X, b: &Self::X) -> Result<Self::X>;
    fn activate(&self, x: Self::X, f: Activation) -> Result<Self::X>;
    /// `x` clamped to `[-c, c]`.
    fn clamp(&self, x: Self::X, c: f32) -> Result<Self::X>;
    /// Causal self-attention (rotary embedding, scaled scores, soft cap, mask, softmax,
    /// weighted values) of projected queries, keys and values, heads merged back to
    /// `[B·T, n_heads · head_dim]`; `window` for sliding-window layers.
    fn attend(&self, qkv: Qkv<'_, Self::X>, window: Option<usize>) -> Result<Self::X>;
}

/// Runs the batch `flat` (`[B·T]` token ids) through the model, reporting the L + 1 hidden
/// states in `output_hidden_states` order (`report(i, h)`), and returns the last one (after
/// the final norm).
pub(super) fn forward<O: Ops>(
    o: &O,
    model: &Model,
    w: &Weights<'_, O::W>,
    flat: &[u32],
    report: &mut dyn FnMut(usize, &O::X) -> Result<()>,
) -> Result<O::X> {
    let mut h = o.embed(w.embed, flat)?;
    if let Some(p) = w.positions {
        h = o.add_positions(h, p)?;
    }
    if let Some(s) = model.embed_scale {
        // transformers multiplies by √d rounded to the model's dtype (f32 here)
        h = o.scale(h, s as f32)?;
    }
    report(0, &h)?;
    let n = w.layers.len();
    for (i, l) in w.layers.iter().enumerate() {
        h = layer(o, model, l, &h)?;
        if i + 1 < n {
            report(i + 1, &h)?;
        }
    }
    let h = o.norm(w.final_norm, &h)?;
    report(n, &h)?;
    Ok(h)
}

/// `n(x)`, or `None` for a missing norm (the identity).
fn maybe_norm<O: Ops>(o: &O, n: &Option<Norm<O::W>>, x: &O::X) -> Result<Option<O::X>> {
    n.as_ref().map(|n| o.norm(n, x)).transpose()
}

/// One decoder layer: sequential, or parallel residual ([`Layer`] gives the formulas).
fn layer<O: Ops>(o: &O, model: &Model, l: &Layer<O::W>, x: &O::X) -> Result<O::X> {
    let act = model.config.activation;
    let xn = maybe_norm(o, &l.attn_pre, x)?;
    let a = attention(o, model, &l.attn, xn.as_ref().unwrap_or(x), l.window)?;
    if model.config.use_parallel_residual {
        let m = match &l.mlp_pre {
            Some(n) => mlp(o, &l.mlp, &o.norm(n, x)?, act)?,
            None => mlp(o, &l.mlp, xn.as_ref().unwrap_or(x), act)?,
        };
        let a = o.add(a, &m)?;
        return o.add(a, x);
    }
    let h = maybe_norm(o, &l.attn_post, &a)?.unwrap_or(a);
    let h = o.add(h, x)?;
    let hn = maybe_norm(o, &l.mlp_pre, &h)?;
    let m = mlp(o, &l.mlp, hn.as_ref().unwrap_or(&h), act)?;
    let m = maybe_norm(o, &l.mlp_post, &m)?.unwrap_or(m);
    o.add(m, &h)
}

fn mlp<O: Ops>(o: &O, m: &Mlp<O::W>, x: &O::X, act: Activation) -> Result<O::X> {
    match m {
        Mlp::Plain { up, down } => {
            let u = o.activate(o.linear(up, x)?, act)?;
            o.linear(down, &u)
        }
        Mlp::Gated { gate, up, down } => {
            let g = o.activate(o.linear(gate, x)?, act)?;
            let g = o.mul(g, &o.linear(up, x)?)?;
            o.linear(down, &g)
        }
    }
}

/// The attention block: projections, attention, output projection.
fn attention<O: Ops>(
    o: &O,
    model: &Model,
    attn: &Attention<O::W>,
    x: &O::X,
    window: Option<usize>,
) -> Result<O::X> {
    match attn {
        Attention::Fused { qkv, out, layout } => {
            let p = o.linear(qkv, x)?;
            let y = o.attend(Qkv::Fused(&p, *layout), window)?;
            o.linear(out, &y)
        }
        Attention::Split {
            q,
            k,
            v,
            o: out,
            q_norm,
            k_norm,
        } => {
            let proj = |l: &Linear<O::W>, norm: &Option<Norm<O::W>>| -> Result<O::X> {
                let mut y = o.linear(l, x)?;
                if let Some(clip) = model.config.clip_qkv {
                    y = o.clamp(y, clip as f32)?;
                }
                Ok(maybe_norm(o, norm, &y)?.unwrap_or(y))
            };
            let (q, k, v) = (proj(q, q_norm)?, proj(k, k_norm)?, proj(v, &None)?);
            let y = o.attend(
                Qkv::Split {
                    q: &q,
                    k: &k,
                    v: &v,
                },
                window,
            )?;
            o.linear(out, &y)
        }
    }
}
