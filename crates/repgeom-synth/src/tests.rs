use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use repgeom_linalg::{MatRef, Par};

use super::*;

/// Tolerances, named by what they absorb.
const ORTHO_TOL: f64 = 1e-10; // f64 Gram-Schmidt of well-conditioned Gaussians
const SUBSPACE_TOL: f64 = 1e-4; // W_U is stored in f32; the singular gap at k is 2 : 1

fn small_zoo(seed: u64) -> ValidZooParams {
    ZooParams {
        seed,
        widths: vec![64, 96],
        n_layers: 5,
        detour_max_width: 64,
        steps: vec![100, 1000, 10000],
        model: ModelParams {
            n_points: 60,
            ..ModelParams::default()
        },
        ..ZooParams::default()
    }
    .check()
    .unwrap()
}

fn bits(m: MatRef<'_, f32>) -> Vec<u32> {
    let mut out = Vec::with_capacity(m.nrows() * m.ncols());
    for i in 0..m.nrows() {
        for j in 0..m.ncols() {
            out.push(m[(i, j)].to_bits());
        }
    }
    out
}

fn model_bits(m: &SyntheticModel) -> Vec<u32> {
    let mut out = bits(m.readout.as_ref());
    for l in &m.layers {
        out.extend(bits(l.as_ref()));
    }
    out
}

/// Largest absolute entry of `aᵀ b`.
fn max_cross(a: MatRef<'_, f64>, b: MatRef<'_, f64>) -> f64 {
    let mut worst = 0.0f64;
    for i in 0..a.ncols() {
        for j in 0..b.ncols() {
            let dot: f64 = (0..a.nrows()).map(|r| a[(r, i)] * b[(r, j)]).sum();
            worst = worst.max(dot.abs());
        }
    }
    worst
}

/// Frobenius distance between the projectors onto the column spans of two orthonormal bases.
fn projector_distance(a: MatRef<'_, f64>, b: MatRef<'_, f64>) -> f64 {
    let d = a.nrows();
    let pa = a * a.transpose();
    let pb = b * b.transpose();
    let mut s = 0.0;
    for i in 0..d {
        for j in 0..d {
            s += (pa[(i, j)] - pb[(i, j)]).powi(2);
        }
    }
    s.sqrt()
}

/// Share of the leading principal direction of the centred layer inside the span of `basis`.
fn pc1_share(layer: MatRef<'_, f32>, basis: MatRef<'_, f64>) -> f64 {
    let xc = repgeom_linalg::center_columns(layer, Par::Seq);
    let pd = repgeom_linalg::principal_directions(xc.as_ref(), 1, Par::Seq).unwrap();
    let u = pd.directions.col(0);
    (0..basis.ncols())
        .map(|j| {
            let dot: f64 = (0..basis.nrows()).map(|r| basis[(r, j)] * u[r]).sum();
            dot * dot
        })
        .sum()
}

#[test]
fn same_seed_gives_identical_bits_and_other_seed_differs() {
    let a = generate_zoo(&small_zoo(7)).unwrap();
    let b = generate_zoo(&small_zoo(7)).unwrap();
    let c = generate_zoo(&small_zoo(8)).unwrap();
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(model_bits(x), model_bits(y), "{}", x.label);
        assert_eq!(x.labels, y.labels);
    }
    assert_ne!(model_bits(&a[0]), model_bits(&c[0]));
}

#[test]
fn zoo_equals_last_checkpoint_of_study() {
    let p = small_zoo(3);
    let zoo = generate_zoo(&p).unwrap();
    let study = generate_study(&p).unwrap();
    assert!(study.synthetic);
    for (m, run) in zoo.iter().zip(&study.runs) {
        let last = run.model_at(run.checkpoints.len() - 1);
        assert_eq!(model_bits(m), model_bits(&last), "{}", m.label);
        assert_eq!(m.regimes, last.regimes);
    }
}

#[test]
fn a_layer_keeps_its_embedding_across_checkpoints() {
    // Layer 0 is direct at every checkpoint: only the noise level and noise draw change, so the
    // layers at two checkpoints stay strongly correlated entry by entry.
    let study = generate_study(&small_zoo(5)).unwrap();
    let run = &study.runs[1];
    let (a, b) = (&run.checkpoints[1].layers[0], &run.checkpoints[2].layers[0]);
    let (mut sab, mut saa, mut sbb) = (0.0f64, 0.0f64, 0.0f64);
    for i in 0..a.nrows() {
        for j in 0..a.ncols() {
            let (x, y) = (a[(i, j)] as f64, b[(i, j)] as f64);
            sab += x * y;
            saa += x * x;
            sbb += y * y;
        }
    }
    assert!(
        sab / (saa * sbb).sqrt() > 0.9,
        "cosine {}",
        sab / (saa * sbb).sqrt()
    );
}

#[test]
fn shapes_labels_and_synthetic_markers() {
    let p = small_zoo(1);
    let zoo = generate_zoo(&p).unwrap();
    for (m, mp) in zoo.iter().zip(p.models()) {
        assert!(m.synthetic);
        assert!(m.label.contains("synthetic"), "{}", m.label);
        assert_eq!((m.readout.nrows(), m.readout.ncols()), (mp.vocab(), m.d));
        assert_eq!(
            (m.readout_basis.nrows(), m.readout_basis.ncols()),
            (m.d, m.k)
        );
        assert_eq!(m.dark_basis.nrows(), m.d);
        assert_eq!(m.layers.len(), 5);
        assert_eq!(m.regimes.len(), 5);
        for l in &m.layers {
            assert_eq!((l.nrows(), l.ncols()), (60, m.d));
        }
        let mut counts = vec![0usize; m.n_classes];
        m.labels.iter().for_each(|&c| counts[c] += 1);
        assert_eq!(counts, vec![15; 4]);
    }
}

#[test]
fn bases_are_orthonormal_and_dark_is_orthogonal_to_readout() {
    let p = ModelParams {
        d: 96,
        k: Some(20),
        ..ModelParams::default()
    }
    .check()
    .unwrap();
    let space = SyntheticSpace::generate(&p, &mut ChaCha8Rng::seed_from_u64(11));
    assert!(repgeom_linalg::orthonormal_basis_check(space.readout_basis.as_ref()) < ORTHO_TOL);
    assert!(repgeom_linalg::orthonormal_basis_check(space.dark_basis.as_ref()) < ORTHO_TOL);
    let cross = max_cross(space.readout_basis.as_ref(), space.dark_basis.as_ref());
    assert!(cross < ORTHO_TOL, "readout·dark = {cross}");
}

#[test]
fn readout_basis_is_the_top_k_right_singular_subspace() {
    for (d, k) in [(64, 8), (96, 24), (128, 32)] {
        let p = ModelParams {
            d,
            k: Some(k),
            ..ModelParams::default()
        }
        .check()
        .unwrap();
        let space = SyntheticSpace::generate(&p, &mut ChaCha8Rng::seed_from_u64(d as u64));
        let (v, sv) =
            repgeom_linalg::top_right_singular_vectors(space.readout.as_ref(), k, Par::Seq)
                .unwrap();
        let dist = projector_distance(v.as_ref(), space.readout_basis.as_ref());
        assert!(
            dist < SUBSPACE_TOL,
            "d={d} k={k}: projector distance {dist}"
        );
        for (got, want) in sv.iter().zip(&space.readout_singular_values) {
            assert!(
                (got - want).abs() < SUBSPACE_TOL * want,
                "singular value {got} vs {want}"
            );
        }
    }
}

#[test]
fn pc1_lies_in_the_readout_for_direct_and_in_the_dark_for_detour() {
    let p = ModelParams {
        d: 128,
        k: Some(16),
        n_points: 200,
        ..ModelParams::default()
    }
    .check()
    .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let space = SyntheticSpace::generate(&p, &mut rng);
    let direct = space.layer(Regime::Direct, &mut rng).unwrap();
    let detour = space
        .layer(
            Regime::Detour {
                dark_dims: 4,
                strength: 1.5,
            },
            &mut rng,
        )
        .unwrap();
    let rb = space.readout_basis.as_ref();
    let dark = space.dark_basis.subcols(0, 4);
    // 1 - leak² = 0.98 of the direct signal is in the readout; k/d = 0.125 would be chance.
    assert!(
        pc1_share(direct.as_ref(), rb) > 0.9,
        "{}",
        pc1_share(direct.as_ref(), rb)
    );
    assert!(
        pc1_share(detour.as_ref(), rb) < 0.01,
        "{}",
        pc1_share(detour.as_ref(), rb)
    );
    assert!(
        pc1_share(detour.as_ref(), dark) > 0.99,
        "{}",
        pc1_share(detour.as_ref(), dark)
    );
}

fn fmt_err<T>(r: Result<T>) -> String {
    match r {
        Ok(_) => "ok".to_string(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn invalid_parameters_are_rejected_with_named_messages() {
    let cases = [
        fmt_err(
            ModelParams {
                d: 4,
                ..ModelParams::default()
            }
            .check(),
        ),
        fmt_err(
            ModelParams {
                d: 64,
                k: Some(60),
                ..ModelParams::default()
            }
            .check(),
        ),
        fmt_err(
            ModelParams {
                vocab: Some(10),
                ..ModelParams::default()
            }
            .check(),
        ),
        fmt_err(
            ModelParams {
                leak: 1.0,
                ..ModelParams::default()
            }
            .check(),
        ),
        fmt_err(
            ModelParams {
                noise: f64::NAN,
                ..ModelParams::default()
            }
            .check(),
        ),
        fmt_err(
            ModelParams {
                n_points: 3,
                ..ModelParams::default()
            }
            .check(),
        ),
        fmt_err(
            ZooParams {
                steps: vec![10, 10],
                ..ZooParams::default()
            }
            .check(),
        ),
        fmt_err(
            ZooParams {
                widths: vec![64, 64],
                ..ZooParams::default()
            }
            .check(),
        ),
        fmt_err(
            ZooParams {
                dark_dims: 9,
                ..ZooParams::default()
            }
            .check(),
        ),
        fmt_err(
            ZooParams {
                detour_depth: (0.9, 0.1),
                ..ZooParams::default()
            }
            .check(),
        ),
        {
            let p = ModelParams {
                d: 64,
                ..ModelParams::default()
            }
            .check()
            .unwrap();
            let mut rng = ChaCha8Rng::seed_from_u64(0);
            let s = SyntheticSpace::generate(&p, &mut rng);
            fmt_err(s.layer(
                Regime::Detour {
                    dark_dims: 9,
                    strength: 1.0,
                },
                &mut rng,
            ))
        },
        {
            let p = ModelParams {
                d: 64,
                ..ModelParams::default()
            }
            .check()
            .unwrap();
            let mut rng = ChaCha8Rng::seed_from_u64(0);
            let s = SyntheticSpace::generate(&p, &mut rng);
            fmt_err(s.layer(
                Regime::Detour {
                    dark_dims: 2,
                    strength: -1.0,
                },
                &mut rng,
            ))
        },
    ];
    insta::assert_snapshot!(cases.join("\n"));
}

#[test]
fn default_study_plan() {
    // The planted schedule of the default study: regimes per layer and checkpoint, and loss.
    let p = ZooParams::default().check().unwrap();
    let mut out = String::new();
    for mp in p.models() {
        out.push_str(&format!("{} (k = {})\n", mp.label(), mp.k()));
        for (c, &step) in p.params().steps.iter().enumerate() {
            let t = progress(&p.params().steps, c);
            let plan: Vec<String> = (0..p.params().n_layers)
                .map(|l| match planned_regime(&p, mp.d(), l, t) {
                    Regime::Detour { strength, .. } => format!("X{strength:.2}"),
                    Regime::Rotation { angle, .. } => format!("R{angle:.2}"),
                    r => r.name()[..1].to_string(),
                })
                .collect();
            out.push_str(&format!(
                "  step {step:>6}  t {t:.2}  loss {:.3}  {}\n",
                validation_loss(mp.d(), step),
                plan.join(" ")
            ));
        }
    }
    insta::assert_snapshot!(out);
}

#[test]
fn regime_display() {
    let r = [
        Regime::Direct,
        Regime::Detour {
            dark_dims: 4,
            strength: 1.5,
        },
        Regime::Isotropic,
    ];
    let s: Vec<String> = r.iter().map(|r| r.to_string()).collect();
    assert_eq!(s, ["direct", "detour(m=4, strength=1.500)", "isotropic"]);
}

/// Fraction of the centred variance of `x` inside the span of `basis`.
fn captured_variance(x: MatRef<'_, f32>, basis: MatRef<'_, f64>) -> f64 {
    let c = repgeom_linalg::center_columns(x, Par::Seq);
    let p = repgeom_linalg::project(c.as_ref(), basis, Par::Seq);
    p.norm_l2().powi(2) / c.norm_l2().powi(2)
}

fn rotation_space() -> SyntheticSpace {
    let p = ModelParams {
        d: 128,
        k: Some(16),
        n_points: 200,
        ..ModelParams::default()
    }
    .check()
    .unwrap();
    SyntheticSpace::generate(&p, &mut ChaCha8Rng::seed_from_u64(31))
}

fn same_streams(space: &SyntheticSpace, regime: Regime) -> repgeom_linalg::Mat<f32> {
    let noise = space.params().params().noise;
    space
        .layer_with(
            regime,
            noise,
            &mut ChaCha8Rng::seed_from_u64(5),
            &mut ChaCha8Rng::seed_from_u64(6),
        )
        .unwrap()
}

#[test]
fn rotation_keeps_the_spectrum_and_moves_the_top_directions_into_the_dark() {
    let space = rotation_space();
    let direct = same_streams(&space, Regime::Direct);
    let rotated = same_streams(
        &space,
        Regime::Rotation {
            dims: 4,
            angle: 1.0,
        },
    );
    // Singular values, centred and raw, agree to f32 storage rounding.
    for centred in [true, false] {
        let sv = |x: &repgeom_linalg::Mat<f32>| {
            let m = if centred {
                repgeom_linalg::center_columns(x.as_ref(), Par::Seq)
            } else {
                repgeom_linalg::to_f64(x.as_ref())
            };
            repgeom_linalg::singular_values(m.as_ref(), "layer", Par::Seq).unwrap()
        };
        let (a, b) = (sv(&direct), sv(&rotated));
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x - y).abs() <= 1e-5 * a[0],
                "centred {centred}: {x} vs {y}"
            );
        }
    }
    let rb = space.readout_basis.as_ref();
    let dark = space.dark_basis.subcols(0, 4);
    let (vd, vr) = (
        captured_variance(direct.as_ref(), rb),
        captured_variance(rotated.as_ref(), rb),
    );
    assert!(vd > 0.5 && vr < vd - 0.2, "readout variance {vd} -> {vr}");
    assert!(pc1_share(rotated.as_ref(), rb) < 0.05);
    assert!(pc1_share(rotated.as_ref(), dark) > 0.9);
    // Angle 0 is the direct layer itself (up to rounding).
    let still = same_streams(
        &space,
        Regime::Rotation {
            dims: 4,
            angle: 0.0,
        },
    );
    for i in 0..direct.nrows() {
        for j in 0..direct.ncols() {
            assert!((direct[(i, j)] - still[(i, j)]).abs() <= 1e-5);
        }
    }
}

#[test]
fn variance_only_puts_the_top_variance_in_the_readout_and_the_structure_elsewhere() {
    let space = rotation_space();
    let layer = same_streams(&space, Regime::VarianceOnly { strength: 1.0 });
    let rb = space.readout_basis.as_ref();
    assert!(pc1_share(layer.as_ref(), rb) > 0.99);
    assert!(captured_variance(layer.as_ref(), rb) > 0.5);
}

#[test]
fn new_regimes_are_validated() {
    let space = rotation_space();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for (regime, expect) in [
        (
            Regime::Rotation {
                dims: 0,
                angle: 1.0,
            },
            "dims = 0",
        ),
        (
            Regime::Rotation {
                dims: 2,
                angle: 1.5,
            },
            "angle = 1.5",
        ),
        (
            Regime::Rotation {
                dims: 17,
                angle: 1.0,
            },
            "dims = 17",
        ),
        (Regime::VarianceOnly { strength: -1.0 }, "strength = -1"),
    ] {
        let err = space.layer(regime, &mut rng).unwrap_err().to_string();
        assert!(err.contains(expect), "{err}");
    }
    assert_eq!(
        Regime::Rotation {
            dims: 4,
            angle: 0.5
        }
        .to_string(),
        "rotation(m=4, angle=0.500)"
    );
    assert_eq!(
        Regime::VarianceOnly { strength: 2.0 }.to_string(),
        "variance_only(strength=2.000)"
    );
}
