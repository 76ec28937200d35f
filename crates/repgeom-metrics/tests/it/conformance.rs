//! The conformance suite (`repgeom_metrics::conformance`, exported so that plugin crates run it
//! on their own metrics) over every registered metric and pair metric.

use repgeom_metrics::{Metric, PairMetric, conformance};

#[test]
fn every_registered_metric_conforms() {
    conformance::check_registry();
}

#[test]
fn metrics_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync + ?Sized>() {}
    assert_send_sync::<dyn Metric>();
    assert_send_sync::<dyn PairMetric>();
}
