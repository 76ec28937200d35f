//! One module per subcommand.

pub(crate) mod compare;
pub(crate) mod demo;
pub(crate) mod extract;
pub(crate) mod metrics;
pub(crate) mod pga;
pub(crate) mod probe;
pub(crate) mod sweep;

use indicatif::{ProgressBar, ProgressStyle};

/// Settings every subcommand sees.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    pub(crate) quiet: bool,
    pub(crate) threads: usize,
}

impl Context {
    /// The rayon-backed faer parallelism for this run.
    pub(crate) fn par(&self) -> repgeom_linalg::Par {
        if self.threads <= 1 {
            repgeom_linalg::Par::Seq
        } else {
            repgeom_linalg::Par::rayon(self.threads)
        }
    }

    /// A progress bar on stderr (hidden with --quiet or when stderr is not a terminal).
    pub(crate) fn progress(&self, total: u64, what: &str) -> ProgressBar {
        if self.quiet {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed}, eta {eta})",
            )
            .expect("static template")
            .progress_chars("=> "),
        );
        bar.set_prefix(what.to_string());
        bar
    }
}

/// Parses a layer list like `0,5,10-12` into sorted, deduplicated indices.
pub(crate) fn parse_layers(spec: &str) -> anyhow::Result<Vec<usize>> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some((a, b)) = part.split_once('-') {
            let (a, b): (usize, usize) = (a.trim().parse()?, b.trim().parse()?);
            anyhow::ensure!(a <= b, "bad layer range {part:?}: start after end");
            out.extend(a..=b);
        } else {
            out.push(
                part.parse()
                    .map_err(|_| anyhow::anyhow!("bad layer {part:?} in {spec:?}"))?,
            );
        }
    }
    anyhow::ensure!(!out.is_empty(), "empty layer list {spec:?}");
    out.sort_unstable();
    out.dedup();
    Ok(out)
}
