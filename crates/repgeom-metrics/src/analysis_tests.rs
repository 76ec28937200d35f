//! The model run against the per-layer metric and the engine called by hand: one PGA, however
//! it is reached.

use repgeom_linalg::{Mat, MatRef, Par};
use repgeom_null::NullParams;

use super::*;
use crate::Metric as _;
use crate::Pga;
use crate::pga::BootstrapOptions;

/// The committed PGA fixture: layers `[N, d]` and `W_U`.
fn fixture() -> (Vec<Mat<f32>>, Mat<f32>) {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/pga");
    let acts = repgeom_io::read_activations(&dir.join("acts.npy"), None).unwrap();
    let layers = acts
        .layers
        .iter()
        .map(|l| MatRef::from_row_major_slice(&l.acts.data, l.acts.rows, l.acts.cols).to_owned())
        .collect();
    let w = repgeom_io::read_array_f64(&dir.join("readout.npy")).unwrap();
    let w32: Vec<f32> = w.data.iter().map(|&v| v as f32).collect();
    let w_u = MatRef::from_row_major_slice(&w32, w.shape[0], w.shape[1]).to_owned();
    (layers, w_u)
}

fn input<'a>(layers: &'a [Mat<f32>], readout: Readout<'a>, ks: &[usize]) -> ModelInput<'a> {
    ModelInput {
        layers: layers
            .iter()
            .enumerate()
            .map(|(layer, m)| ModelLayer {
                layer,
                acts: m.as_ref(),
                what: format!("layer {layer}"),
            })
            .collect(),
        readout,
        ks: ks.to_vec(),
        null: NullSource::Draw(NullParams {
            n_null: 12,
            seed: 3,
        }),
        sequences: None,
        memory_budget: Some(1 << 30),
        device: Default::default(),
    }
}

/// `run_model`'s rows equal the registry metric on [`ModelContext`] layers, bit for bit, for
/// each `pga` option set, and its `k` list equals one run per `k`.
fn check(pga: Pga, ks: &[usize]) {
    let (layers, w_u) = fixture();
    let d = w_u.ncols();
    let run = pga
        .run_model(
            &input(&layers, Readout::Unembedding(w_u.as_ref()), ks),
            Par::rayon(2),
            &Hooks::default(),
        )
        .unwrap();
    assert_eq!(run.rows.len(), layers.len() * ks.len() * pga.ccr.len());
    for &k in ks {
        let model = ModelContext::new(
            d,
            k,
            Some(Readout::Unembedding(w_u.as_ref())),
            Some(NullSource::Draw(NullParams {
                n_null: 12,
                seed: 3,
            })),
            "fixture",
            Par::rayon(2),
        )
        .unwrap();
        for (l, m) in layers.iter().enumerate() {
            let values = pga
                .compute(&model.layer(m.as_ref(), format!("layer {l}")).unwrap())
                .unwrap();
            for row in run.rows.iter().filter(|r| r.layer == l && r.result.k == k) {
                let variant = Pga::variant(pga.engine.null, row.result.ccr);
                let z = values
                    .iter()
                    .find(|v| v.metric == "pga_z" && v.variant == variant)
                    .unwrap();
                assert_eq!(
                    z.value.to_bits(),
                    row.result.summary.z.to_bits(),
                    "{pga:?} k {k}"
                );
                if let Some(ci) = &row.result.bootstrap {
                    let lo = values
                        .iter()
                        .find(|v| v.metric == "pga_z_lo" && v.variant == variant)
                        .unwrap();
                    assert_eq!(lo.value.to_bits(), ci.z_lo.to_bits());
                }
            }
        }
    }
    // The basis it returns, passed back, gives the same rows at the largest k.
    let kmax = *ks.iter().max().unwrap();
    let again = pga
        .run_model(
            &input(&layers, Readout::Basis(run.readout_basis.as_ref()), &[]),
            Par::Seq,
            &Hooks::default(),
        )
        .unwrap();
    let at_kmax: Vec<_> = run.rows.iter().filter(|r| r.result.k == kmax).collect();
    assert_eq!(again.rows.len(), at_kmax.len());
    for (a, b) in again.rows.iter().zip(at_kmax) {
        assert_eq!(a.result.summary.z.to_bits(), b.result.summary.z.to_bits());
    }
}

#[test]
fn run_model_equals_the_metric_per_layer() {
    check(Pga::default(), &[8]);
    check(
        Pga {
            ccr: vec![0, 2],
            ..Pga::default()
        },
        &[4, 8],
    );
    check(
        Pga {
            engine: crate::pga::EngineOptions {
                distance: repgeom_linalg::Distance::Euclidean,
                max_pairs: Some(500),
                ..Default::default()
            },
            bootstrap: Some(BootstrapOptions {
                replicates: 5,
                seed: 1,
                level: 0.9,
            }),
            ..Pga::default()
        },
        &[8],
    );
}

#[test]
fn run_model_refuses_what_it_cannot_honour() {
    let (layers, w_u) = fixture();
    let null = NullBases::draw(
        w_u.ncols(),
        4,
        &NullParams { n_null: 4, seed: 0 }.check().unwrap(),
    )
    .unwrap();
    let mut given = input(&layers, Readout::Unembedding(w_u.as_ref()), &[4, 8]);
    given.null = NullSource::Given(&null);
    let err = Pga::default()
        .run_model(&given, Par::Seq, &Hooks::default())
        .unwrap_err();
    assert!(err.to_string().contains("one k"), "{err}");
    let skewed = Mat::<f64>::from_fn(w_u.ncols(), 2, |i, j| (i + j) as f64);
    let err = Pga::default()
        .run_model(
            &input(&layers, Readout::Basis(skewed.as_ref()), &[]),
            Par::Seq,
            &Hooks::default(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("not orthonormal"), "{err}");
    assert!(k_values(&[], Some(1.5), 16).is_err());
    assert_eq!(k_values(&[], Some(0.5), 16).unwrap(), [8]);
}

/// A model pair: model B's null bases are drawn from `seed + 1` (independent of A's at the
/// same width), a metric that uses the readout refuses a pair without both, and the points
/// that are the same input twice are judged on every layer of both models, not only on the
/// layers compared.
#[test]
fn a_model_pair_owns_its_seeds_readouts_and_duplicates() {
    use crate::calibrate::{CompareSettings, compare};
    let (layers, w_u) = fixture();
    // Point 1 repeats point 0 in layer 0 only (a repeated token at the embedding layer);
    // point 3 repeats point 2 in every layer (the same input twice).
    let edited: Vec<Mat<f32>> = (layers.iter().enumerate())
        .map(|(l, m)| {
            Mat::from_fn(m.nrows(), m.ncols(), |i, j| {
                let src = match i {
                    1 if l == 0 => 0,
                    3 => 2,
                    _ => i,
                };
                m[(src, j)]
            })
        })
        .collect();
    let views: Vec<MatRef<'_, f32>> = edited.iter().map(Mat::as_ref).collect();
    let metrics: Vec<Box<dyn PairMetric>> = vec![
        Box::new(crate::DistanceSpearman::default()),
        Box::new(crate::CkaLinear::default()),
    ];
    let wu = Some(Readout::Unembedding(w_u.as_ref()));
    let side = |readout| PairModel {
        layers: &views,
        k: 8,
        readout,
        what: "toy",
    };
    let null = NullParams {
        n_null: 10,
        seed: 3,
    };
    let e = ModelPair::new(&metrics, side(wu), side(None), null.clone(), Par::Seq)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("distance_spearman needs both readouts") && e.contains("none was given for toy"),
        "{e}"
    );
    let pair = ModelPair::new(&metrics, side(wu), side(wu), null, Par::Seq).unwrap();
    let drawn = |seed: u64| {
        let p = NullParams { n_null: 10, seed }.check().unwrap();
        NullBases::draw(64, 8, &p).unwrap().to_array()
    };
    assert_eq!(pair.a().null().unwrap().to_array(), drawn(3));
    assert_eq!(pair.b().null().unwrap().to_array(), drawn(4));
    assert_ne!(drawn(3), drawn(4));
    // Judged on the three layers of both models: point 3 only, whichever layers are compared.
    assert_eq!(pair.duplicates(), [3]);
    let a0 = pair.a().layer(views[0], "A0").unwrap();
    let b0 = pair.b().layer(views[0], "B0").unwrap();
    let settings = CompareSettings::default();
    let out = pair.compare(&metrics, &[&a0], &[&b0], &[(0, 0)], &settings, &mut |_| {});
    let out = out.unwrap();
    assert!(!out.pairs.is_empty());
    for r in &out.pairs {
        assert_eq!(r.value.extra["duplicates_dropped"], 1.0, "{:?}", r.value);
    }
    // Layer 0 alone would also drop point 1.
    let alone = compare(metrics[1].as_ref(), &[&a0], &[&b0], &[(0, 0)], &settings).unwrap();
    assert_eq!(alone.pairs[0].value.extra["duplicates_dropped"], 2.0);
}
