//! Models by name: a local directory, or a HuggingFace Hub id at a revision, resolved in the
//! hub's cache (downloading what is missing, with a progress bar).

use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};
use repgeom_hub::{DownloadProgress, Files, Hub, ModelRef};

use crate::context::Context;

/// The local path of a `--model`/`--readout` argument: the path itself, or a hub model id's
/// snapshot folder after downloading the `need`ed files (the rule is
/// [`repgeom_hub::ModelRef::parse`], shared with the Python package and the study).
pub(crate) fn model_path(
    spec: &str,
    revision: Option<&str>,
    need: &Files,
    ctx: &Context,
) -> anyhow::Result<PathBuf> {
    let m = ModelRef::parse(spec, revision)?;
    Ok(m.resolve(&Hub::from_env(), need, &mut download_bar(ctx))?)
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
