//! `cargo xtask validate`: every check CI runs, cheapest first.

use std::time::Instant;

use anyhow::{Context as _, bail};

use crate::root;

/// `cargo xtask validate`: CI's checks, cheapest first, stopping at the first failure.
pub(crate) fn validate() -> anyhow::Result<()> {
    let steps: [(&str, &[&str]); 4] = [
        ("format", &["fmt", "--all", "--check"]),
        (
            "lints",
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ],
        ),
        ("tests", &["test", "--workspace"]),
        ("figures", &["xtask", "paper", "--check"]),
    ];
    for (what, args) in steps {
        let t = Instant::now();
        eprintln!("validate: {what}: cargo {}", args.join(" "));
        let status = std::process::Command::new(std::env::var("CARGO").unwrap_or("cargo".into()))
            .current_dir(root())
            .args(args)
            .status()
            .with_context(|| format!("validate: could not run cargo {}", args.join(" ")))?;
        if !status.success() {
            bail!(
                "validate: {what} failed (cargo {}: {status})",
                args.join(" ")
            );
        }
        eprintln!("validate: {what} ok ({:.0} s)", t.elapsed().as_secs_f64());
    }
    eprintln!("validate: all checks passed");
    Ok(())
}
