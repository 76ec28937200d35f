//! Runtime dispatch of elementwise kernels to the widest instruction set the CPU has.
//!
//! `pulp`'s own dispatch stops at AVX2 unless its `x86-v4` feature is on, and that feature
//! (unified across the build) would also switch faer's `f64` kernels, and so the order of
//! their sums and the last digits of every decomposition, by whether the CPU has AVX-512.
//! [`vectorize`] reaches AVX-512 for the kernels handed to it alone.
#![allow(unsafe_code)] // a call into a function compiled for CPU features checked at run time

use pulp::WithSimd;

/// Runs `op` compiled for AVX-512 (F, BW, DQ, VL) where the CPU has it, else through `pulp`'s
/// dispatch (AVX2 and FMA, or the baseline). For kernels whose body vectorises itself and
/// ignores the `Simd` token it is given (a baseline one here): `with_simd` should be
/// `#[inline(always)]`, so that it is compiled into the chosen level. A body made of IEEE
/// operations on single elements, and of reductions in an order it writes out, gives the
/// same bits at every level; no contraction into fused multiply-adds happens unless the body
/// asks for one.
///
/// ```
/// struct Double<'a>(&'a mut [f32]);
/// impl pulp::WithSimd for Double<'_> {
///     type Output = ();
///     #[inline(always)]
///     fn with_simd<S: pulp::Simd>(self, _: S) {
///         self.0.iter_mut().for_each(|x| *x *= 2.0);
///     }
/// }
/// let mut v = [1.0f32, 2.5, -3.0];
/// repgeom_linalg::vectorize(Double(&mut v));
/// assert_eq!(v, [2.0, 5.0, -6.0]);
/// ```
#[inline]
pub fn vectorize<Op: WithSimd>(op: Op) -> Op::Output {
    #[cfg(target_arch = "x86_64")]
    if avx512() {
        // SAFETY: the CPU has every feature `on_avx512` is compiled for (checked once).
        return unsafe { on_avx512(op) };
    }
    pulp::Arch::new().dispatch(op)
}

/// Whether the CPU has AVX-512 F, BW, DQ and VL, AVX2 and FMA. Decided once per process.
#[cfg(target_arch = "x86_64")]
fn avx512() -> bool {
    use std::arch::is_x86_feature_detected as has;
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        has!("avx512f")
            && has!("avx512bw")
            && has!("avx512dq")
            && has!("avx512vl")
            && has!("avx2")
            && has!("fma")
    })
}

/// `op`'s body compiled for AVX-512.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
fn on_avx512<Op: WithSimd>(op: Op) -> Op::Output {
    op.with_simd(pulp::Scalar::new())
}
