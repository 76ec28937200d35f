use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use repgeom_linalg::{Mat, MatRef, Par, RankScratch, RankedReference};
use repgeom_synth::{ModelParams, Regime, SyntheticSpace, ZooParams, generate_study};

const N_NULL: usize = 20;

/// Haar `d × k` basis (Gram-Schmidt of a Gaussian), drawn from `rng`.
fn haar(d: usize, k: usize, rng: &mut ChaCha8Rng) -> Mat<f64> {
    use rand_distr::{Distribution, StandardNormal};
    let mut q = Mat::<f64>::zeros(d, k);
    for j in 0..k {
        for i in 0..d {
            q[(i, j)] = StandardNormal.sample(rng);
        }
    }
    for j in 0..k {
        for _ in 0..2 {
            for p in 0..j {
                let dot: f64 = (0..d).map(|i| q[(i, p)] * q[(i, j)]).sum();
                for i in 0..d {
                    q[(i, j)] -= dot * q[(i, p)];
                }
            }
        }
        let n: f64 = (0..d).map(|i| q[(i, j)].powi(2)).sum::<f64>().sqrt();
        for i in 0..d {
            q[(i, j)] /= n;
        }
    }
    q
}

/// PGA z of one layer at CCR-`c` with `N_NULL` Haar nulls.
fn pga_z(layer: MatRef<'_, f32>, readout: MatRef<'_, f32>, k: usize, c: usize, seed: u64) -> f64 {
    let hc = repgeom_linalg::ccr(layer, c, Par::Seq).unwrap();
    let vk = repgeom_linalg::readout_subspace(readout, k, Par::Seq).unwrap();
    let full = repgeom_linalg::cosine_distances(hc.as_ref(), "full", Par::Seq).unwrap();
    let reference = RankedReference::new(&full, "full", Par::Seq).unwrap();
    let mut scratch = RankScratch::default();
    let mut rho = |basis: MatRef<'_, f64>| {
        let proj = repgeom_linalg::project(hc.as_ref(), basis, Par::Seq);
        let dp = repgeom_linalg::cosine_distances(proj.as_ref(), "proj", Par::Seq).unwrap();
        reference.spearman(&dp, &mut scratch, "proj").unwrap()
    };
    let r = rho(vk.as_ref());
    // A stream of its own: seeding it like the generator would replay the readout's own
    // Gaussian draws as the first null basis.
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x005E_ED0F_4E55);
    let nulls: Vec<f64> = (0..N_NULL)
        .map(|_| rho(haar(layer.ncols(), k, &mut rng).as_ref()))
        .collect();
    let mean = nulls.iter().sum::<f64>() / N_NULL as f64;
    let var = nulls.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (N_NULL - 1) as f64;
    (r - mean) / var.sqrt()
}

/// Asserts the planted signs of the three regimes for one geometry.
fn check(n: usize, d: usize, k: usize, seed: u64) {
    let p = ModelParams {
        d,
        k: Some(k),
        n_points: n,
        ..ModelParams::default()
    }
    .check()
    .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let s = SyntheticSpace::generate(&p, &mut rng);
    let w = s.readout.as_ref();
    let m = 4;
    let direct = s.layer(Regime::Direct, &mut rng).unwrap();
    let detour = s
        .layer(
            Regime::Detour {
                dark_dims: m,
                strength: 1.5,
            },
            &mut rng,
        )
        .unwrap();
    let iso = s.layer(Regime::Isotropic, &mut rng).unwrap();
    let z = |h: &Mat<f32>, c| pga_z(h.as_ref(), w, k, c, seed);
    let (zd, zx1, zxm, zi) = (z(&direct, 1), z(&detour, 1), z(&detour, m), z(&iso, 1));
    let ctx = format!(
        "N={n} d={d} k={k} seed={seed}: direct {zd:.1}, detour CCR-1 {zx1:.1}, detour CCR-{m} {zxm:.1}, isotropic {zi:.1}"
    );
    // The rotation detour: same spectrum as the direct layer, PGA many σ lower and below the
    // null at CCR-1;
    // variance-only: the readout holds the top variance, so the Haar null reads z > 0.
    let rot = s
        .layer(
            Regime::Rotation {
                dims: m,
                angle: 1.0,
            },
            &mut rng,
        )
        .unwrap();
    let var = s
        .layer(Regime::VarianceOnly { strength: 1.0 }, &mut rng)
        .unwrap();
    let (zr, zv) = (z(&rot, 1), z(&var, 1));
    let ctx = format!("{ctx}, rotation CCR-1 {zr:.1}, variance-only CCR-1 {zv:.1}");
    assert!(zr < 0.0 && zr < zd - 6.0, "{ctx}");
    assert!(zv > 4.0, "{ctx}");
    assert!(zd > 4.0, "{ctx}");
    assert!(zx1 < -4.0, "{ctx}");
    assert!(zxm > 2.0, "{ctx}");
    assert!(zi.abs() < 4.0, "{ctx}");
}

#[test]
fn planted_signs_small() {
    check(200, 64, 8, 1);
    check(200, 64, 16, 2);
}

#[test]
fn planted_signs_medium() {
    check(240, 128, 16, 3);
    check(240, 128, 32, 4);
}

#[test]
fn study_small_width_detours_late_and_large_width_does_not() {
    let p = ZooParams {
        widths: vec![64, 256],
        steps: vec![100, 143000],
        model: ModelParams {
            n_points: 200,
            ..ModelParams::default()
        },
        ..ZooParams::default()
    }
    .check()
    .unwrap();
    let study = generate_study(&p).unwrap();
    let detour_layer = 5; // relative depth 5/7 lies in the default detour zone [0.6, 0.95)
    let z_at = |run: usize, ckpt: usize, layer: usize| {
        let r = &study.runs[run];
        pga_z(
            r.checkpoints[ckpt].layers[layer].as_ref(),
            r.space.readout.as_ref(),
            r.space.k,
            1,
            9,
        )
    };
    let small_early = z_at(0, 0, detour_layer);
    let small_late = z_at(0, 1, detour_layer);
    let small_final = z_at(0, 1, 7);
    let large_late = z_at(1, 1, detour_layer);
    let ctx = format!(
        "small early {small_early:.1}, small late {small_late:.1}, small final layer {small_final:.1}, large late {large_late:.1}"
    );
    assert!(small_early > 2.0, "{ctx}");
    assert!(small_late < -4.0, "{ctx}");
    assert!(small_final > 2.0, "{ctx}");
    assert!(large_late > 4.0, "{ctx}");
}
