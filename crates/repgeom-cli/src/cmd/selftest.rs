//! `repgeom selftest`: the checks of `repgeom_study::selftest`, printed as they finish.

use std::process::ExitCode;
use std::time::Instant;

use repgeom_study::selftest::{Check, selftest};

/// Arguments of `repgeom selftest` (none: the data are built in).
#[derive(clap::Args, Debug)]
pub(crate) struct SelftestArgs {}

fn line(c: &Check) -> String {
    format!(
        "{}  {:<20}  {:<44}  {}  [{}]",
        if c.passed { "PASS" } else { "FAIL" },
        c.group.name(),
        c.subject,
        c.figure,
        c.rule
    )
}

#[allow(clippy::print_stdout)] // the command's output is this report
pub(crate) fn run(_args: &SelftestArgs) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    println!("repgeom selftest on built-in synthetic data (SYNTHETIC DATA)");
    let report = selftest(&|c| println!("{}", line(c)))?;
    let failed = report.checks.iter().filter(|c| !c.passed).count();
    println!(
        "{} of {} checks passed in {:.1} s",
        report.checks.len() - failed,
        report.checks.len(),
        start.elapsed().as_secs_f64()
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
