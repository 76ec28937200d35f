//! One layer of the probe benchmark's workload (`benches/probe.rs`) probed once with each
//! solver: seconds, test accuracy and chosen λ per solver (criterion's ten samples would take
//! minutes with linfa-logistic on the full shape).
//!
//! `cargo run --release -p repgeom-probe --example solver_timing -- [ROWS COLS [correlated]]`
//! (default 7600 4096: the bench's `layer_7600x4096_k4`; `correlated`: its
//! `layer_7600x4096_k4_correlated`).

#![allow(clippy::print_stdout)] // the report is the example's output

use std::time::Instant;

use repgeom_probe::{Features, Labels, ProbeParams, Solver, Split};

#[path = "../benches/common/workload.rs"]
mod workload;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = args.first().map_or(Ok(7600), |a| a.parse())?;
    let d = args.get(1).map_or(Ok(4096), |a| a.parse())?;
    let corr = args.get(2).is_some_and(|a| a == "correlated");
    let k = 4;
    let (x, y) = if corr {
        workload::correlated(n, d, k, 1)
    } else {
        workload::workload(n, d, k, 1)
    };
    let f = Features::new(0, n, d, &x)?;
    let case = if corr { " correlated" } else { "" };
    for solver in [Solver::Lbfgs, Solver::Linfa] {
        let plan = ProbeParams {
            solver,
            ..ProbeParams::default()
        }
        .check()?
        .plan(Labels::unnamed(y.clone())?, &Split::Stratified)?;
        let start = Instant::now();
        let r = plan.probe_layer(0, f)?;
        let secs = start.elapsed().as_secs_f64();
        let control = r.control.as_ref().map_or(f64::NAN, |c| c.accuracy);
        println!(
            "{solver:5} {n} x {d}{case}: {secs:6.1} s  accuracy {:.4} ({} of {} test)  \
             control {control:.4}  l2 {}  converged {}",
            r.accuracy,
            (r.accuracy * r.n_test as f64).round(),
            r.n_test,
            r.chosen_l2,
            r.converged
        );
    }
    Ok(())
}
