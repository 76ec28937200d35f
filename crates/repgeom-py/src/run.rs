//! How a call runs: on a worker thread with the GIL released, cancelled by Ctrl-C at the next
//! progress report, with its progress bars on stderr.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pyo3::prelude::*;

use crate::errors::Failure;

/// Raised by `on_draw` to unwind the engine after Ctrl-C.
struct Cancelled;

/// Runs `f` on a worker thread with the GIL released. The calling thread checks for signals
/// every 100 ms; on Ctrl-C it sets the flag `f` polls (through its progress callbacks) and
/// returns the `KeyboardInterrupt` once `f` has unwound. A panic becomes `InternalError`.
pub(crate) fn run_blocking<T: Send>(
    py: Python<'_>,
    f: impl FnOnce(&AtomicBool) -> Result<T, Failure> + Send,
) -> PyResult<T> {
    let cancel = AtomicBool::new(false);
    let outcome = py.detach(|| {
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::channel();
            let cancel = &cancel;
            s.spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(cancel)));
                let _ = tx.send(r);
            });
            let mut interrupt: Option<PyErr> = None;
            loop {
                match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(r) => break (r, interrupt),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        if interrupt.is_none()
                            && let Err(e) = Python::attach(|py| py.check_signals())
                        {
                            cancel.store(true, Ordering::SeqCst);
                            interrupt = Some(e);
                        }
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        break (
                            Ok(Err(Failure::Panic("worker thread vanished".into()))),
                            interrupt,
                        );
                    }
                }
            }
        })
    });
    let result = match outcome {
        (Ok(r), None) => r,
        (Ok(Ok(_)), Some(e)) | (Ok(Err(_)), Some(e)) => Err(Failure::Interrupted(e)),
        (Err(payload), interrupt) => {
            if payload.downcast_ref::<Cancelled>().is_some() {
                match interrupt {
                    Some(e) => Err(Failure::Interrupted(e)),
                    None => Err(Failure::Panic("cancelled without an interrupt".into())),
                }
            } else {
                let msg = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "a Rust panic".to_owned());
                Err(Failure::Panic(msg))
            }
        }
    };
    result.map_err(|e| e.into_py(py))
}

/// Unwinds out of the engine when Ctrl-C was pressed (called from progress callbacks).
pub(crate) fn check_cancel(cancel: &AtomicBool) {
    if cancel.load(Ordering::Relaxed) {
        std::panic::resume_unwind(Box::new(Cancelled));
    }
}

/// A progress bar on stderr: drawn in terminals, hidden elsewhere (notebooks, logs, pipes) or
/// when `progress` is false.
pub(crate) fn progress_bar(
    total: u64,
    what: &str,
    progress: Option<bool>,
) -> indicatif::ProgressBar {
    if progress == Some(false) {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed}, eta {eta})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(what.to_string());
    bar
}

/// The progress bar of a hub model's downloads: one bar, set to each file in turn, drawn from
/// the first report on (nothing shows for a local path or a complete cache).
pub(crate) struct DownloadBar {
    progress: Option<bool>,
    bar: Option<indicatif::ProgressBar>,
}

impl DownloadBar {
    pub(crate) fn new(progress: Option<bool>) -> Self {
        DownloadBar {
            progress,
            bar: None,
        }
    }

    pub(crate) fn report(&mut self, p: &repgeom_hub::DownloadProgress<'_>) {
        let progress = self.progress;
        let bar = (self.bar).get_or_insert_with(|| progress_bar(0, "download", progress));
        bar.set_length(p.total);
        bar.set_position(p.done);
        bar.set_message(p.file.to_owned());
    }

    /// Clears the bar once the files are there (whether or not the readout then reads); a
    /// failed download leaves it standing where it stopped.
    pub(crate) fn finish<T>(self, result: repgeom_hub::Result<T>) -> repgeom_hub::Result<T> {
        if let Some(bar) = self.bar
            && matches!(result, Ok(_) | Err(repgeom_hub::Error::Readout { .. }))
        {
            bar.finish_and_clear();
        }
        result
    }
}
