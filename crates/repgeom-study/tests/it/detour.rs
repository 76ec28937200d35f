//! Issue 4's downstream check on the planted zoo: the small model's detour layers have negative
//! PGA z at CCR-1, yet a linear probe still reads the classes from them about as well as from
//! the aligned layers (the features survive; they are misaligned with the readout).

use repgeom_linalg::Par;
use repgeom_metrics::pga::pga;
use repgeom_null::{NullBases, NullParams};
use repgeom_probe::{Features, Labels, ProbeParams, Split};
use repgeom_synth::{Regime, ZooParams, generate_zoo};

#[test]
fn detour_layers_probe_well_while_z_is_negative() {
    let params = ZooParams {
        widths: vec![64],
        ..Default::default()
    }
    .check()
    .unwrap();
    let model = generate_zoo(&params).unwrap().remove(0);
    let null = NullBases::draw(
        model.d,
        model.k,
        &NullParams {
            n_null: 30,
            seed: 0,
        }
        .check()
        .unwrap(),
    )
    .unwrap();
    let plan = ProbeParams::default()
        .check()
        .unwrap()
        .plan(
            Labels::unnamed(model.labels.clone()).unwrap(),
            &Split::Stratified,
        )
        .unwrap();
    let (mut direct_acc, mut detour_acc) = (Vec::new(), Vec::new());
    for (layer, (acts, regime)) in model.layers.iter().zip(&model.regimes).enumerate() {
        let z = pga(
            acts.as_ref(),
            model.readout_basis.as_ref(),
            &null,
            1,
            "zoo",
            Par::Seq,
            &|| {},
        )
        .unwrap()
        .summary
        .z;
        let data: Vec<f32> = (0..acts.nrows())
            .flat_map(|i| (0..acts.ncols()).map(move |j| (i, j)))
            .map(|(i, j)| acts[(i, j)])
            .collect();
        let probe = plan
            .probe_layer(
                layer,
                Features::new(layer, acts.nrows(), acts.ncols(), &data).unwrap(),
            )
            .unwrap();
        assert!(
            probe.accuracy > probe.majority_baseline + 0.2,
            "layer {layer} ({regime:?}): accuracy {} vs majority {}",
            probe.accuracy,
            probe.majority_baseline
        );
        match regime {
            Regime::Detour { .. } | Regime::Rotation { .. } => {
                assert!(z < -2.0, "detour layer {layer}: z = {z}");
                detour_acc.push(probe.accuracy);
            }
            _ => {
                assert!(z > 2.0, "layer {layer}: z = {z}");
                direct_acc.push(probe.accuracy);
            }
        }
    }
    assert!(
        !detour_acc.is_empty(),
        "the d = 64 model must plant detour layers"
    );
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    // Within a few test examples of the aligned layers (64 test points: one example = 0.016).
    assert!(
        mean(&detour_acc) >= mean(&direct_acc) - 0.15,
        "detour accuracy {:?} vs direct {:?}",
        detour_acc,
        direct_acc
    );
}
