//! The example metric is in the registry, builds from its name, and gives the hand value.

use repgeom_linalg::{Mat, Par};
use repgeom_metrics::{LayerInput, metric, metric_names};

#[test]
fn joins_the_registry_by_being_linked() {
    assert!(metric_names().contains(&"participation_ratio"));
    let m = metric("participation_ratio").expect("default config from the name alone");
    assert_eq!(m.info().name, "participation_ratio");
    let json = serde_json::to_string(&m).unwrap();
    assert_eq!(
        json,
        r#"{"metric":"participation_ratio","normalize":false}"#
    );
}

#[test]
fn participation_ratio_of_three_equal_axes_is_three() {
    // Rows ±e1, ±e2, ±e3 (6 points in 5 dims): three equal covariance eigenvalues.
    let x = Mat::from_fn(6, 5, |i, j| {
        if i / 2 == j {
            if i % 2 == 0 { 1.0f32 } else { -1.0 }
        } else {
            0.0
        }
    });
    let input = LayerInput::new(x.as_ref(), "example", Par::Seq).unwrap();
    let v = metric("participation_ratio")
        .unwrap()
        .compute(&input)
        .unwrap();
    assert!((v[0].value - 3.0).abs() < 1e-9, "{}", v[0].value);
}

/// The plugin passes the registry's conformance suite in both configurations, so its declared
/// properties (rotation invariance, documented options, determinism) are checked, not asserted.
#[test]
fn conforms() {
    use crate::ParticipationRatio;
    for normalize in [false, true] {
        repgeom_metrics::conformance::check_metric(&ParticipationRatio { normalize });
    }
}
