//! Models by name: a local directory, or a HuggingFace Hub id at a revision, resolved in the
//! hub's cache (downloading what is missing, with a progress bar).

use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use repgeom_hub::{DownloadProgress, Files, Hub};

use super::Context;

/// Where a `--model`/`--readout` argument points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ModelSource {
    /// A file or directory on disk.
    Local(PathBuf),
    /// A hub model id at a revision.
    Hub { id: String, revision: String },
}

impl ModelSource {
    /// A path that exists is local; otherwise `org/name` is a hub id (revision default `main`).
    pub(crate) fn parse(spec: &str, revision: Option<&str>) -> anyhow::Result<Self> {
        let path = Path::new(spec);
        if path.exists() {
            anyhow::ensure!(
                revision.is_none(),
                "--revision applies to hub model ids, but {spec} is a local path"
            );
            return Ok(ModelSource::Local(path.to_path_buf()));
        }
        // A missing path that looks like a file (a tensor extension) is a typo, never a
        // reason to ask the hub.
        let file_like = [".npy", ".npz", ".safetensors", ".json", ".csv", ".txt"]
            .iter()
            .any(|ext| spec.ends_with(ext));
        if file_like || repgeom_hub::check_id(spec).is_err() || spec.matches('/').count() != 1 {
            anyhow::bail!("{spec}: no such file or directory, and not a hub model id (org/name)");
        }
        Ok(ModelSource::Hub {
            id: spec.to_string(),
            revision: revision.unwrap_or("main").to_string(),
        })
    }

    /// The local path, downloading a hub model's `need`ed files into the cache first.
    pub(crate) fn resolve(&self, need: &Files, ctx: &Context) -> anyhow::Result<PathBuf> {
        match self {
            ModelSource::Local(p) => Ok(p.clone()),
            ModelSource::Hub { id, revision } => {
                let hub = Hub::from_env();
                let snap = hub.snapshot(id, revision, need, &mut download_bar(ctx))?;
                Ok(snap.dir)
            }
        }
    }
}

/// A progress callback drawing one bar per file on stderr (hidden with --quiet).
pub(crate) fn download_bar(ctx: &Context) -> impl FnMut(&DownloadProgress<'_>) {
    let quiet = ctx.quiet;
    let mut bar: Option<(String, ProgressBar)> = None;
    move |p: &DownloadProgress<'_>| {
        if quiet {
            return;
        }
        if bar.as_ref().is_none_or(|(f, _)| f != p.file) {
            if let Some((_, b)) = bar.take() {
                b.finish_and_clear();
            }
            let b = ProgressBar::new(p.total);
            b.set_style(
                ProgressStyle::with_template(
                    "download {msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})",
                )
                .expect("static template")
                .progress_chars("=> "),
            );
            b.set_message(p.file.to_string());
            bar = Some((p.file.to_string(), b));
        }
        if let Some((_, b)) = &bar {
            b.set_position(p.done);
            if p.done >= p.total {
                b.finish_and_clear();
            }
        }
    }
}
