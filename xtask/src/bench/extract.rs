//! `cargo xtask bench extract`: extraction tokens/s beside transformers.

use anyhow::{Context as _, bail};

use crate::root;

/// `cargo xtask bench extract`: the `forward` criterion bench of repgeom-extract (8 sequences
/// of 256 tokens through a random Pythia-70M-shaped model, batch 1 and the default batch,
/// hidden states only and with the loss), then, in the same run, transformers on the same
/// shape (`fixtures/extract/time_torch.py`, when `python3` has torch and transformers), and
/// one table of tokens/s with the ratio.
pub(crate) fn bench_extract() -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = std::process::Command::new(&cargo)
        .current_dir(root())
        .args(["bench", "-p", "repgeom-extract", "--bench", "forward"])
        .status()
        .context("run cargo bench")?;
    if !status.success() {
        bail!("cargo bench failed ({status})");
    }
    let tokens = 8.0 * 256.0;
    let mut ours = Vec::new();
    for loss in [false, true] {
        for batch in [1, 8] {
            let name = format!(
                "batch{batch}_{}",
                if loss { "with_loss" } else { "hidden_states" }
            );
            let path = root()
                .join("target/criterion/pythia70m_random_8x256")
                .join(&name)
                .join("new/estimates.json");
            let est: serde_json::Value = serde_json::from_slice(
                &std::fs::read(&path).with_context(|| format!("read {}", path.display()))?,
            )?;
            let ns = est["mean"]["point_estimate"]
                .as_f64()
                .context("criterion estimate")?;
            ours.push((batch, loss, tokens / (ns * 1e-9)));
        }
    }
    let torch = std::process::Command::new("python3")
        .current_dir(root())
        .arg("fixtures/extract/time_torch.py")
        .output();
    let mut theirs = Vec::new();
    match torch {
        Ok(out) if out.status.success() => {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let v: serde_json::Value = serde_json::from_str(line)?;
                theirs.push((
                    v["batch"].as_u64().unwrap_or(0) as usize,
                    v["loss"].as_bool().unwrap_or(false),
                    v["tokens_per_s"].as_f64().unwrap_or(f64::NAN),
                ));
            }
        }
        Ok(out) => println!(
            "transformers side not run: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .next_back()
                .unwrap_or("")
        ),
        Err(e) => println!("transformers side not run: {e}"),
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "extract bench: tokens/s, 8 x 256 tokens, random Pythia-70M shape (load average {})",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "{:<8} {:<6} {:>12} {:>14}",
        "batch", "loss", "repgeom", "transformers"
    );
    for &(b, l, t) in &ours {
        let hf = theirs
            .iter()
            .find(|x| x.0 == b && x.1 == l)
            .map_or("-".to_string(), |x| format!("{:.0}", x.2));
        println!("{b:<8} {l:<6} {t:>12.0} {hf:>14}");
    }
    for loss in [false, true] {
        let best = |v: &[(usize, bool, f64)]| {
            v.iter()
                .filter(|x| x.1 == loss)
                .map(|x| x.2)
                .fold(f64::NAN, f64::max)
        };
        let (a, b) = (best(&ours), best(&theirs));
        if b.is_finite() {
            println!(
                "best of batch 1 and 8, loss {loss}: repgeom {a:.0}, transformers {b:.0}, ratio {:.2}",
                a / b
            );
        }
    }
    Ok(())
}
