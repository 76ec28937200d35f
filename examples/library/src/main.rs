//! Subspace PGA and two registry metrics on an in-memory layer: what `repgeom pga` and
//! `repgeom metrics` compute, as library calls.

use repgeom_linalg::{Mat, Par};
use repgeom_metrics::params::{PgaParams, Readout};

fn main() -> Result<(), repgeom_metrics::Error> {
    // A toy layer: 300 points in 64 dimensions whose distance structure lies in the first
    // 8 coordinates, and an unembedding W_U (1000 x 64) that reads mostly those coordinates.
    let (n, d, vocab) = (300, 64, 1000);
    let noise = |a: usize, b: usize| {
        // splitmix64 of (a, b): deterministic noise in [-0.5, 0.5), no RNG crate needed
        let mut x = ((a as u64) << 32 | b as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((x ^ (x >> 31)) >> 40) as f32 / (1u32 << 24) as f32 - 0.5
    };
    let scale = |j: usize| if j < 8 { 1.0 } else { 0.05 };
    let acts = Mat::<f32>::from_fn(n, d, |i, j| scale(j) * noise(i, j));
    let w_u = Mat::<f32>::from_fn(vocab, d, |t, j| scale(j) * noise(n + t, j));

    // Params -> check -> run: k = 8 readout directions, CCR-1, 100 Haar null draws, seed 0.
    let pga = PgaParams {
        k: 8,
        n_null: 100,
        ..PgaParams::default()
    }
    .check()?;
    let r = pga.run(acts.as_ref(), Readout::Unembedding(w_u.as_ref()))?;
    println!(
        "PGA ccr{}: rho_readout {:.4}, null {:.4} ± {:.4}, z {:.2}, p (upper) {:.3}",
        r.ccr,
        r.rho_readout,
        r.summary.null_mean,
        r.summary.null_std,
        r.summary.z,
        r.summary.p_value
    );

    // Any registered metric by name, with its default options.
    let layer = repgeom_metrics::LayerInput::new(acts.as_ref(), "toy layer", Par::Seq)?;
    for name in ["rankme", "intrinsic_dim_twonn"] {
        for v in repgeom_metrics::metric(name)?.compute(&layer)? {
            println!("{name}: {:.3}", v.value);
        }
    }
    Ok(())
}
