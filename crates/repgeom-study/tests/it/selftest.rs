//! `repgeom selftest`'s checks, run through the same library function as the command.

use repgeom_study::selftest::{CheckGroup, selftest};

#[test]
fn every_selftest_check_passes() {
    let report = selftest(&|_| {}).unwrap();
    let failed: Vec<String> = report
        .checks
        .iter()
        .filter(|c| c.held && !c.passed)
        .map(|c| {
            format!(
                "{} {}: {} [{}]",
                c.group.name(),
                c.subject,
                c.figure,
                c.rule
            )
        })
        .collect();
    assert!(failed.is_empty(), "failed checks:\n{}", failed.join("\n"));
    // All three groups ran: 7 pair metrics; rotation + shuffle each; 5 planted cases × 2 nulls.
    let count = |g| report.checks.iter().filter(|c| c.group == g).count();
    assert_eq!(count(CheckGroup::LayerIdentification), 7);
    assert_eq!(count(CheckGroup::Specificity), 14);
    assert_eq!(count(CheckGroup::PlantedPga), 10);
}

#[test]
fn selftest_figures_are_reproducible() {
    let a = selftest(&|_| {}).unwrap();
    let b = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap()
        .install(|| selftest(&|_| {}).unwrap());
    assert_eq!(a, b);
}
