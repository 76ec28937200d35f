//! `repgeom selftest`: the checks of `repgeom_study::selftest` (and with `--bench` the field's
//! benchmarks of `repgeom_study::field_bench`), printed as they finish, optionally written as
//! `selftest.json` and a one-page HTML card.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use repgeom_study::selftest::{Check, SelftestReport, selftest, selftest_bench};

/// Arguments of `repgeom selftest` (the data are built in).
#[derive(clap::Args, Debug)]
pub(crate) struct SelftestArgs {
    /// Also run the field's validation tests for similarity metrics: E[CKA] of independent
    /// inputs (biased and debiased), PCA deletion (Ding et al. 2021), layer monotonicity
    /// (ReSi test 6) and the scale confound of unrelated networks (raw and calibrated maxima).
    #[arg(long)]
    bench: bool,
    /// Write selftest.json and selftest.html (a card of every check) into this directory.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

fn line(c: &Check) -> String {
    let status = match (c.held, c.passed) {
        (true, true) => "PASS",
        (true, false) => "FAIL",
        (false, true) => "pass*",
        (false, false) => "fail*",
    };
    format!(
        "{status:<5}  {:<20}  {:<44}  {}  [{}]",
        c.group.name(),
        c.subject,
        c.figure,
        c.rule
    )
}

#[allow(clippy::print_stdout)] // the command's output is this report
pub(crate) fn run(args: &SelftestArgs) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    println!("repgeom selftest on built-in synthetic data (SYNTHETIC DATA)");
    let print = |c: &Check| println!("{}", line(c));
    let report = if args.bench {
        selftest_bench(&print)?
    } else {
        selftest(&print)?
    };
    let held = report.checks.iter().filter(|c| c.held).count();
    let failed = report.checks.iter().filter(|c| c.held && !c.passed).count();
    let reported = report.checks.len() - held;
    println!(
        "{} of {held} checks passed in {:.1} s{}",
        held - failed,
        start.elapsed().as_secs_f64(),
        if reported > 0 {
            format!(" ({reported} more reported, not held: marked *)")
        } else {
            String::new()
        }
    );
    if let Some(dir) = &args.out {
        write_card(&report, dir)?;
        println!(
            "wrote {} and {}",
            dir.join("selftest.json").display(),
            dir.join("selftest.html").display()
        );
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `selftest.json` (every check with its group, source, figure, rule, outcome and numbers) and
/// `selftest.html`, both written atomically into `dir`.
fn write_card(report: &SelftestReport, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let checks: Vec<serde_json::Value> = (report.checks.iter())
        .map(|c| {
            serde_json::json!({
                "group": c.group.name(),
                "source": c.group.source(),
                "subject": c.subject,
                "figure": c.figure,
                "rule": c.rule,
                "passed": c.passed,
                "held": c.held,
                "values": c.values.iter()
                    .map(|(k, v)| (k.clone(), if v.is_finite() { serde_json::json!(v) } else { serde_json::Value::Null }))
                    .collect::<serde_json::Map<_, _>>(),
            })
        })
        .collect();
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "format": "repgeom.selftest.v1",
        "synthetic": true,
        "passed": report.passed(),
        "checks": checks,
    }))?;
    let path = dir.join("selftest.json");
    repgeom_io::atomic_write(&path, |w| w.write_all(json.as_bytes()))
        .with_context(|| format!("writing {}", path.display()))?;
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let mut html = String::from(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>repgeom selftest</title>\n\
         <style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}\
         td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}\
         .pass{color:#1a7f37}.fail{color:#b00}.note{color:#666}</style></head><body>\n\
         <p style=\"background:#b00;color:#fff;padding:4px\">SYNTHETIC DATA: built-in inputs, not real models</p>\n\
         <h1>repgeom selftest</h1>\n",
    );
    let held = report.checks.iter().filter(|c| c.held).count();
    let failed = report.checks.iter().filter(|c| c.held && !c.passed).count();
    html.push_str(&format!(
        "<p>{} of {held} held checks passed; checks marked * are reported, not held.</p>\n",
        held - failed
    ));
    let mut group = None;
    for c in &report.checks {
        if group != Some(c.group) {
            if group.is_some() {
                html.push_str("</table>\n");
            }
            group = Some(c.group);
            html.push_str(&format!(
                "<h2>{}</h2>\n<p class=\"note\">Source: {}</p>\n<table><tr><th>outcome</th><th>subject</th><th>figure</th><th>pass band</th></tr>\n",
                esc(c.group.name()),
                esc(c.group.source())
            ));
        }
        let (class, word) = match (c.held, c.passed) {
            (true, true) => ("pass", "PASS"),
            (true, false) => ("fail", "FAIL"),
            (false, true) => ("note", "pass*"),
            (false, false) => ("note", "fail*"),
        };
        html.push_str(&format!(
            "<tr><td class=\"{class}\">{word}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            esc(&c.subject),
            esc(&c.figure),
            esc(&c.rule)
        ));
    }
    if group.is_some() {
        html.push_str("</table>\n");
    }
    html.push_str("</body></html>\n");
    let path = dir.join("selftest.html");
    repgeom_io::atomic_write(&path, |w| w.write_all(html.as_bytes()))
        .with_context(|| format!("writing {}", path.display()))
}
