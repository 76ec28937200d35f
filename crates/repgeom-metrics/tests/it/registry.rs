//! The registry holds exactly the expected names, and configurations round-trip.

use repgeom_metrics::{AnalysisParams, metric, metric_names, pair_metric_names};

#[test]
fn registry_holds_exactly_the_expected_names() {
    assert_eq!(
        metric_names(),
        [
            "alpha_req",
            "condition_number",
            "intrinsic_dim_twonn",
            "isotropy",
            "pc_readout_share",
            "pga",
            "pga_spectrum",
            "rankme"
        ]
    );
    assert_eq!(
        pair_metric_names(),
        [
            "cka_linear",
            "cknna",
            "distance_spearman",
            "mutual_knn",
            "procrustes",
            "pwcca",
            "rsa",
            "svcca"
        ]
    );
}

#[test]
fn unknown_names_list_the_known_ones() {
    let err = metric("rank_me").unwrap_err().to_string();
    assert_eq!(
        err,
        "unknown metric \"rank_me\"; known metrics: alpha_req, condition_number, intrinsic_dim_twonn, isotropy, pc_readout_share, pga, pga_spectrum, rankme"
    );
}

#[test]
fn an_analysis_round_trips_through_toml_and_json() {
    let text = r#"
k = 8
[null]
n_null = 20
seed = 5
[[metrics]]
metric = "pga"
ccr = [1, 5, 10]
[[metrics]]
metric = "rankme"
center = true
[[metrics]]
metric = "alpha_req"
fit_start = 2
fit_end = 50
[[pair_metrics]]
metric = "cka_linear"
debiased = true
"#;
    let analysis: AnalysisParams = toml::from_str(text).expect("parses");
    analysis.check().expect("valid");
    assert_eq!(analysis.k, 8);
    assert_eq!(analysis.metrics.len(), 3);
    let json = serde_json::to_string(&analysis).unwrap();
    let back: AnalysisParams = serde_json::from_str(&json).unwrap();
    assert_eq!(serde_json::to_string(&back).unwrap(), json);
    let toml_text = toml::to_string(&back).unwrap();
    let again: AnalysisParams = toml::from_str(&toml_text).unwrap();
    assert_eq!(serde_json::to_string(&again).unwrap(), json);
    insta::assert_snapshot!(json);
}

#[test]
fn bad_configurations_are_clear_errors() {
    let unknown_field = r#"{"metric": "rankme", "centre": true}"#;
    let err = serde_json::from_str::<Box<dyn repgeom_metrics::Metric>>(unknown_field)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `centre`"), "{err}");
    let bad =
        serde_json::from_str::<Box<dyn repgeom_metrics::Metric>>(r#"{"metric": "pga", "ccr": []}"#)
            .unwrap();
    assert_eq!(
        bad.check().unwrap_err().to_string(),
        "invalid option ccr = []: give at least one CCR level"
    );
}
