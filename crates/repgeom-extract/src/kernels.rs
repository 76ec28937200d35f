//! Elementwise kernels of the forward pass, written for the vectoriser: the MLP activations,
//! attention's scale-mask-softmax and the loss's log-sum-exp, which candle and libm evaluate
//! one scalar call (and one fresh buffer) at a time.
//!
//! Every function here is branch-free arithmetic on `f32` (no `mul_add`, so no contraction
//! differs between instruction sets), compiled for the best instruction set the CPU has and
//! chosen at run time (`repgeom_linalg::vectorize`: AVX-512 where the CPU has it, else
//! through `pulp`'s dispatch; each level gives the same bits, a NaN's payload aside); the
//! activations are split over rayon's threads by element, the softmax runs one row at a time
//! inside attention's tasks (`attention.rs`).
//! Each output depends only on its own input element (activations) or its own row (softmax,
//! log-sum-exp), so results are identical at any thread count.
//!
//! Accuracy (checked against `f64` references in the tests): `exp` within 2 ulp over the
//! range where `f32` does not overflow; the erf GELU (Numerical Recipes' `erfcc`, fractional
//! error below 1.2e-7, evaluated in `f32`), the tanh GELU and SiLU within 1e-6 relative on
//! `[-3, 3]`, a few `f32` ulp. HuggingFace transformers' CPU kernels (PyTorch's vectorised
//! `erf`, Abramowitz–Stegun 7.1.26) are no closer to the exact functions than these.

use candle_core::{CpuStorage, InplaceOp1, Layout};
use rayon::prelude::*;
use repgeom_linalg::vectorize;

use crate::config::Activation;

/// Elements per rayon task of an activation.
const CHUNK: usize = 1 << 14;

/// `e^x` in `f32` (Cephes `expf`: `x = n ln 2 + r`, degree-6 polynomial in `r`, `2^n` built
/// from its bits). Inputs are clamped to `[-87.3, 88.3]`: below, the result is about
/// `1e-38` instead of a denormal or zero; above, `2e38` instead of infinity.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // adding and subtracting 1.5 · 2^23 rounds to the nearest integer on every SIMD level
    const ROUND: f32 = 12_582_912.0;
    // compare-and-select rather than `clamp`, whose NaN handling stops the vectoriser
    let x = if x < -87.336_54 { -87.336_54 } else { x };
    let x = if x > 88.376_26 { 88.376_26 } else { x };
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    // the integer n sits in t's low mantissa bits: no float-to-int conversion
    let ni = t.to_bits() as i32 - ROUND.to_bits() as i32;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.987_569_2e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5; // Cephes 5.000_000_1e-1, the same f32
    let e = p * (r * r) + r + 1.0;
    let scale = f32::from_bits(((ni + 127) as u32) << 23);
    e * scale
}

/// `erfc(z)` for `z ≥ 0` (Numerical Recipes' `erfcc`, fractional error below 1.2e-7).
#[inline(always)]
fn erfc_nonneg(z: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.5 * z);
    let mut p = 0.170_872_77_f32;
    p = p * t - 0.822_152_23;
    p = p * t + 1.488_515_9;
    p = p * t - 1.135_204;
    p = p * t + 0.278_868_07;
    p = p * t - 0.186_288_06;
    p = p * t + 0.096_784_18;
    p = p * t + 0.374_091_96;
    p = p * t + 1.000_023_7;
    p = p * t - 1.265_512_2;
    t * exp(p - z * z)
}

/// One activation of one element.
#[inline(always)]
fn act(a: Activation, x: f32) -> f32 {
    match a {
        // x Φ(x) = x · erfc(−x/√2) / 2
        Activation::GeluErf => {
            let e = erfc_nonneg(x.abs() * std::f32::consts::FRAC_1_SQRT_2);
            let phi = if x >= 0.0 { 1.0 - 0.5 * e } else { 0.5 * e };
            x * phi
        }
        // x (1 + tanh y) / 2 = x / (1 + e^{−2y}), y = √(2/π) (x + 0.044715 x³)
        Activation::GeluTanh => {
            const C: f32 = 0.797_884_6; // √(2/π)
            let y = C * (x + 0.044_715 * (x * x * x));
            x / (1.0 + exp(-2.0 * y))
        }
        Activation::Silu => x / (1.0 + exp(-x)),
        Activation::Relu => {
            if x > 0.0 {
                x
            } else {
                0.0
            }
        }
    }
}

/// `n` zeros, written by chunks on the current rayon pool. `vec![0.0; n]` is one `calloc`,
/// which mimalloc meets by zeroing reused memory on the calling thread (and the kernel faults
/// fresh pages in there): one serial pass over every new activation while the pool waits.
pub(crate) fn zeros(n: usize) -> Vec<f32> {
    let mut v = Vec::new();
    (0..n)
        .into_par_iter()
        .with_min_len(CHUNK)
        .map(|_| 0.0)
        .collect_into_vec(&mut v);
    v
}

/// `x ← act(x)` for every element, in parallel chunks.
pub(crate) fn activate(a: Activation, xs: &mut [f32]) {
    xs.par_chunks_mut(CHUNK)
        .for_each(|xs| vectorize(ActOp { a, xs }));
}

/// `-log softmax(row)[target]`: the maximum in `f32`, `e^{x − max}` in `f32`, their sum and
/// the logarithm in `f64`.
#[cfg(test)]
pub(crate) fn row_nll(row: &[f32], target: u32) -> f64 {
    let (max, sum) = row_lse(row);
    f64::from(max) + sum.ln() - f64::from(row[target as usize])
}

/// The parts of `log Σ e^x` over `row`: its maximum (`f32`) and `Σ e^{x − max}` (each term in
/// `f32`, summed in `f64`). The loss combines them over tiles of the vocabulary.
pub(crate) fn row_lse(row: &[f32]) -> (f32, f64) {
    vectorize(LseOp { row })
}

/// The body of [`activate`] for one chunk. A `WithSimd` type rather than a closure: pulp
/// compiles `with_simd` (inlined) for the detected instruction set, and a closure's call
/// shim would stay outside it, compiled for the baseline.
struct ActOp<'a> {
    a: Activation,
    xs: &'a mut [f32],
}

impl pulp::WithSimd for ActOp<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let a = self.a;
        for x in self.xs.iter_mut() {
            *x = act(a, *x);
        }
    }
}

/// The body of [`row_lse`]; see [`ActOp`].
struct LseOp<'a> {
    row: &'a [f32],
}

impl pulp::WithSimd for LseOp<'_> {
    type Output = (f32, f64);

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> (f32, f64) {
        let row = self.row;
        let max = lane_max(row);
        let chunks = row.chunks_exact(LANES);
        let tail = chunks.remainder();
        let mut sums = [0f64; LANES];
        for c in chunks {
            // the exponentials of a chunk at full width first, then widened into the sums
            let mut e = [0f32; LANES];
            for (e, &x) in e.iter_mut().zip(c) {
                *e = exp(x - max);
            }
            for (s, &e) in sums.iter_mut().zip(&e) {
                *s += f64::from(e);
            }
        }
        let sum: f64 =
            sums.iter().sum::<f64>() + tail.iter().map(|&x| f64::from(exp(x - max))).sum::<f64>();
        (max, sum)
    }
}

/// `row ← softmax(scale · row)` for row `i` of a `[T, T]` matrix of attention scores, where
/// query `i` sees keys `j ≤ i` (and `i − j < window` on sliding-window layers); masked entries
/// become 0. One pass, in place, instead of scale, mask add and softmax as three new tensors.
pub(crate) fn masked_softmax_row(row: &mut [f32], i: usize, scale: f32, window: Option<usize>) {
    let lo = visible_from(i, window);
    row[..lo].fill(0.0);
    row[i + 1..].fill(0.0);
    vectorize(SoftmaxOp {
        row: &mut row[lo..=i],
        scale,
    });
}

/// The first key query `i` sees: 0, or `i + 1 − window` on a sliding-window layer.
pub(crate) fn visible_from(i: usize, window: Option<usize>) -> usize {
    window.map_or(0, |w| (i + 1).saturating_sub(w))
}

/// The body of [`masked_softmax_row`] for the visible part of one row; see [`ActOp`].
struct SoftmaxOp<'a> {
    row: &'a mut [f32],
    scale: f32,
}

impl pulp::WithSimd for SoftmaxOp<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let scale = self.scale;
        for o in self.row.iter_mut() {
            *o *= scale;
        }
        let max = lane_max(self.row);
        for o in self.row.iter_mut() {
            *o = exp(*o - max);
        }
        // in LANES independent sums, combined in a fixed order (a single running sum waits
        // on each addition's latency: about a tenth of a Pythia-70M-shaped run)
        let chunks = self.row.chunks_exact(LANES);
        let tail: f32 = chunks.remainder().iter().sum();
        let mut sums = [0f32; LANES];
        for c in chunks {
            for (s, &x) in sums.iter_mut().zip(c) {
                *s += x;
            }
        }
        let inv = 1.0 / (sums.iter().sum::<f32>() + tail);
        for o in self.row.iter_mut() {
            *o *= inv;
        }
    }
}

/// Independent lanes of a reduction over a row: its elements `i`, `i + LANES`, ... go to lane
/// `i % LANES`, and the lanes are combined in order at the end, at every instruction set.
const LANES: usize = 16;

/// The largest value of `row` (`−∞` for an empty row; NaNs are passed over), in
/// [`LANES`] lanes.
#[inline(always)]
fn lane_max(row: &[f32]) -> f32 {
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    let mut lanes = [f32::NEG_INFINITY; LANES];
    for c in chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            *m = if x > *m { x } else { *m };
        }
    }
    tail.iter()
        .chain(&lanes)
        .fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a })
}

/// [`activate`] as an in-place candle operation (CPU, contiguous `f32`), for a tensor no
/// other reads: a fresh projection.
#[derive(Debug)]
pub(crate) struct Act(pub(crate) Activation);

impl InplaceOp1 for Act {
    fn name(&self) -> &'static str {
        "repgeom-activation"
    }

    fn cpu_fwd(&self, s: &mut CpuStorage, l: &Layout) -> candle_core::Result<()> {
        let a = self.0;
        with_f32(self.name(), s, l, |x| activate(a, x))
    }
}

/// An element-by-element operation of two activations of one shape.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pairwise {
    Add,
    Mul,
}

/// `a ← a + b` or `a ← a · b`, element by element, in parallel chunks (each element's one
/// rounding, as candle's own operation, which runs on one thread).
pub(crate) fn pairwise(op: Pairwise, a: &mut [f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "pairwise: lengths differ");
    a.par_chunks_mut(CHUNK)
        .zip(b.par_chunks(CHUNK))
        .for_each(|(a, b)| match op {
            Pairwise::Add => a.iter_mut().zip(b).for_each(|(x, &y)| *x += y),
            Pairwise::Mul => a.iter_mut().zip(b).for_each(|(x, &y)| *x *= y),
        });
}

impl candle_core::InplaceOp2 for Pairwise {
    fn name(&self) -> &'static str {
        match self {
            Pairwise::Add => "repgeom-add",
            Pairwise::Mul => "repgeom-mul",
        }
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<()> {
        let name = candle_core::InplaceOp2::name(self);
        if l1.shape() != l2.shape() {
            candle_core::bail!("{name}: shapes {:?} and {:?}", l1.shape(), l2.shape());
        }
        let CpuStorage::F32(b) = s2 else {
            candle_core::bail!("{name}: f32 input only");
        };
        let Some((start, end)) = l2.contiguous_offsets() else {
            candle_core::bail!("{name}: contiguous input only");
        };
        let b = &b[start..end];
        with_f32(name, s1, l1, |a| pairwise(*self, a, b))
    }
}

/// Runs `f` on the contiguous f32 values a layout selects.
fn with_f32(
    name: &str,
    s: &mut CpuStorage,
    l: &Layout,
    f: impl FnOnce(&mut [f32]),
) -> candle_core::Result<()> {
    let CpuStorage::F32(data) = s else {
        candle_core::bail!("{name}: f32 input only");
    };
    let Some((start, end)) = l.contiguous_offsets() else {
        candle_core::bail!("{name}: contiguous input only");
    };
    f(&mut data[start..end]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Relative error of `got` against the f64 reference `want`.
    fn rel(got: f32, want: f64) -> f64 {
        ((f64::from(got) - want) / want.abs().max(1e-300)).abs()
    }

    /// Every `f32` step of 1/64 over `[lo, hi]`.
    fn grid(lo: f32, hi: f32) -> impl Iterator<Item = f32> {
        let n = ((hi - lo) * 64.0) as i32;
        (0..=n).map(move |i| lo + i as f32 / 64.0)
    }

    fn erf64(x: f64) -> f64 {
        // Abramowitz–Stegun 7.1.5 series: converges for the |x| ≤ 3 the tests use
        let mut term = x;
        let mut sum = x;
        for n in 1..200 {
            term *= -x * x / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    fn applied(a: Activation, xs: &[f32]) -> Vec<f32> {
        let mut y = xs.to_vec();
        activate(a, &mut y);
        y
    }

    fn check(name: &str, a: Activation, tol: f64, f: impl Fn(f64) -> f64) {
        let xs: Vec<f32> = grid(-3.0, 3.0).filter(|&x| x != 0.0).collect();
        let got = applied(a, &xs);
        let worst = xs
            .iter()
            .zip(&got)
            .map(|(&x, &g)| rel(g, f(f64::from(x))))
            .fold(0.0, f64::max);
        assert!(worst <= tol, "{name}: worst relative error {worst:e}");
    }

    /// Each kernel gives the same bits compiled for AVX-512 (where this CPU has it), for
    /// `pulp`'s level and for the baseline, on a spread of bit patterns (every exponent,
    /// subnormals, infinities and NaNs included; a NaN may come out as another NaN) and rows
    /// of every length up to 70.
    #[test]
    fn every_instruction_set_gives_the_same_bits() {
        /// `op` compiled for the baseline (0), `pulp`'s level (1) or `vectorize`'s (2).
        fn at<Op: pulp::WithSimd>(level: usize, op: Op) -> Op::Output {
            match level {
                0 => op.with_simd(pulp::Scalar::new()),
                1 => pulp::Arch::new().dispatch(op),
                _ => vectorize(op),
            }
        }
        // a NaN's payload and sign may differ (they are reported as non-finite either way)
        let bits = |v: &[f32]| {
            v.iter()
                .map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() })
                .collect::<Vec<_>>()
        };
        let x: Vec<f32> = (0..1u32 << 16)
            .map(|i| f32::from_bits(i.wrapping_mul(0x9e37_79b9) ^ (i << 7)))
            .collect();
        let acts = [
            Activation::GeluErf,
            Activation::GeluTanh,
            Activation::Relu,
            Activation::Silu,
        ];
        for a in acts {
            let outs: Vec<Vec<u32>> = (0..3)
                .map(|level| {
                    let mut xs = x.clone();
                    at(level, ActOp { a, xs: &mut xs });
                    bits(&xs)
                })
                .collect();
            assert!(outs.iter().all(|o| *o == outs[0]), "{a:?}");
        }
        // rows of moderate values, as scores and logits are
        let row: Vec<f32> = (0..70)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.37)
            .collect();
        for len in 1..=row.len() {
            let r = &row[..len];
            let lse: Vec<(u32, u64)> = (0..3)
                .map(|level| {
                    let (m, s) = at(level, LseOp { row: r });
                    (m.to_bits(), s.to_bits())
                })
                .collect();
            assert!(lse.iter().all(|l| *l == lse[0]), "lse of {len}");
            let outs: Vec<Vec<u32>> = (0..3)
                .map(|level| {
                    let mut r = r.to_vec();
                    at(
                        level,
                        SoftmaxOp {
                            row: &mut r,
                            scale: 0.125,
                        },
                    );
                    bits(&r)
                })
                .collect();
            assert!(outs.iter().all(|o| *o == outs[0]), "softmax of {len}");
        }
    }

    #[test]
    fn exp_is_within_two_ulp() {
        const TOL: f64 = 2.5e-7;
        for x in grid(-87.0, 88.0) {
            let e = rel(exp(x), f64::from(x).exp());
            assert!(e < TOL, "exp({x}): relative error {e:e}");
        }
        assert_eq!(exp(0.0), 1.0);
    }

    #[test]
    fn activations_match_f64_references() {
        const TOL: f64 = 1e-6;
        let s2 = std::f64::consts::SQRT_2;
        check("gelu", Activation::GeluErf, TOL, |x| {
            0.5 * x * (1.0 + erf64(x / s2))
        });
        check("gelu_tanh", Activation::GeluTanh, TOL, |x| {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        });
        check("silu", Activation::Silu, TOL, |x| x / (1.0 + (-x).exp()));
        check("relu", Activation::Relu, 0.0, |x| x.max(0.0));
    }

    #[test]
    fn activations_are_finite_far_out() {
        let xs = [-1e4f32, -100.0, -20.0, 20.0, 100.0, 1e4];
        for a in [Activation::GeluErf, Activation::GeluTanh, Activation::Silu] {
            for (&x, y) in xs.iter().zip(applied(a, &xs)) {
                assert!(y.is_finite(), "{a:?}({x}) = {y}");
                let want = if x > 0.0 { x } else { 0.0 };
                assert!((y - want).abs() <= 1e-6 * x.abs(), "{a:?}({x}) = {y}");
            }
        }
    }

    #[test]
    fn masked_softmax_matches_f64_reference() {
        // f32 rounding of `scale · x − max` (up to about 20 here) dominates: ~20 ε relative
        const TOL: f64 = 3e-6;
        let t = 37;
        let scores: Vec<f32> = (0..2 * t * t)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 5.0)
            .collect();
        for window in [None, Some(1), Some(6), Some(100)] {
            let mut got = scores.clone();
            for (r, row) in got.chunks_mut(t).enumerate() {
                masked_softmax_row(row, r % t, 0.7, window);
            }
            for (r, (g, x)) in got.chunks(t).zip(scores.chunks(t)).enumerate() {
                let i = r % t;
                let seen = |j: usize| j <= i && window.is_none_or(|w| i - j < w);
                let max = (0..t)
                    .filter(|&j| seen(j))
                    .map(|j| 0.7 * f64::from(x[j]))
                    .fold(f64::MIN, f64::max);
                let sum: f64 = (0..t)
                    .filter(|&j| seen(j))
                    .map(|j| (0.7 * f64::from(x[j]) - max).exp())
                    .sum();
                for j in 0..t {
                    let want = if seen(j) {
                        (0.7 * f64::from(x[j]) - max).exp() / sum
                    } else {
                        0.0
                    };
                    assert!(
                        (f64::from(g[j]) - want).abs() <= TOL * want.max(1e-30),
                        "window {window:?} row {i} key {j}: {} vs {want}",
                        g[j]
                    );
                }
            }
        }
    }

    #[test]
    fn pairwise_equals_candles_operations() {
        use candle_core::{Device, Tensor};
        // three chunks and a partial one, on a pool of three threads
        let n = 3 * CHUNK + 17;
        let a: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 1013) as f32 / 37.0 - 13.0)
            .collect();
        let b: Vec<f32> = (0..n)
            .map(|i| ((i * 104_729) % 997) as f32 / 41.0 - 11.0)
            .collect();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let (ta, tb) = (
            Tensor::from_slice(&a, n, &Device::Cpu).unwrap(),
            Tensor::from_slice(&b, n, &Device::Cpu).unwrap(),
        );
        for (op, want) in [
            (Pairwise::Add, (&ta + &tb).unwrap()),
            (Pairwise::Mul, (&ta * &tb).unwrap()),
        ] {
            let mut got = a.clone();
            pool.install(|| pairwise(op, &mut got, &b));
            let want = want.to_vec1::<f32>().unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(bits(&got) == bits(&want), "{op:?}");
        }
    }

    #[test]
    fn nll_matches_f64_log_softmax() {
        const TOL: f64 = 1e-6;
        let row: Vec<f32> = (0..1003)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let max = row.iter().fold(f64::MIN, |a, &b| a.max(f64::from(b)));
        let lse = max
            + row
                .iter()
                .map(|&x| (f64::from(x) - max).exp())
                .sum::<f64>()
                .ln();
        for t in [0u32, 5, 1002] {
            let want = lse - f64::from(row[t as usize]);
            let got = row_nll(&row, t);
            assert!(
                (got - want).abs() < TOL * want.abs(),
                "target {t}: {got} vs {want}"
            );
        }
    }
}
