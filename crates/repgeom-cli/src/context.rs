//! What every command shares that is not an argument group: the run's [`Context`] (threads,
//! `--quiet`, notes, warnings, progress bars) and the parsers of layer lists and byte sizes.

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

    /// A note on stderr (`note: ...`): something the user may want to know that does not
    /// change how to read the result. Silenced by --quiet, like the progress bars.
    #[allow(clippy::print_stderr)] // the CLI's one channel for notes
    pub(crate) fn note(&self, msg: impl std::fmt::Display) {
        if !self.quiet {
            eprintln!("note: {msg}");
        }
    }

    /// A warning on stderr (`warning: ...`): it qualifies a result (e.g. a bootstrap that
    /// resamples points because the file records no sequences), so --quiet does not hide it.
    #[allow(clippy::print_stderr)] // the CLI's one channel for warnings
    pub(crate) fn warn(&self, msg: impl std::fmt::Display) {
        eprintln!("warning: {msg}");
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

/// Parses a byte size: a plain number of bytes, or with a unit (KiB, MiB, GiB, TiB; KB, MB,
/// GB, TB; K, M, G, T as binary units), case-insensitive, e.g. `4GiB`, `512M`.
pub(crate) fn parse_bytes(s: &str) -> Result<u64, String> {
    repgeom_metrics::parse_size(s)
}

/// A library error about an option, named by its command-line spelling: the libraries name
/// options by their field (`k_frac`), the flags spell them `--k-frac`.
pub(crate) fn flag_error(e: repgeom_metrics::Error) -> anyhow::Error {
    match &e {
        repgeom_metrics::Error::InvalidOption { name, value, .. } => {
            let flag = format!("--{} {value}", name.replace('_', "-"));
            anyhow::Error::new(e).context(flag)
        }
        _ => e.into(),
    }
}
