//! A model's readout `W_U` for analysis, from a local path or a hub id: the one resolver that
//! every front end calls (the CLI's `pga`, `metrics` and `compare`, Python's readout
//! arguments).

use std::path::PathBuf;

use crate::{DownloadProgress, Error, Files, Hub, ModelRef, Result};

/// A readout read for analysis, and the local file or folder it was read from.
#[derive(Debug, Clone)]
pub struct ResolvedReadout {
    /// The local file or checkpoint folder read: the reference itself when it is a path,
    /// else the hub snapshot folder (the path the loader's messages name).
    pub path: PathBuf,
    /// `W_U` (`V × d`) prepared as asked ([`repgeom_io::read_readout_prepared`]): rows kept,
    /// final norm's gain folded and rows centred on request, every value finite; its `note`
    /// says which choices the loader made (tied fallback, rows dropped).
    pub readout: repgeom_io::Readout,
}

/// Reads the readout `W_U` of the model `reference` names, prepared as `prep` asks.
///
/// `reference` follows the rule of every model argument ([`ModelRef::parse`]): an existing
/// file or checkpoint folder is read where it is; otherwise a hub model id `org/name` is
/// resolved at `revision` (default `main`) in `hub`'s cache, downloading first what the cache
/// lacks, each download reported to `progress`. Only the weight shards that hold the readout
/// are fetched ([`Files::Readout`]), unless [`ReadoutPrep::fold_norm`] asks for the final
/// norm's gain, which lives outside them ([`Files::Full`]). The loader is
/// [`repgeom_io::read_readout_prepared`], so a local folder and the same checkpoint by hub id
/// give the same matrix bit for bit.
///
/// The caller checks the readout against its activations (width, `k`), naming both.
///
/// [`ReadoutPrep::fold_norm`]: repgeom_io::ReadoutPrep::fold_norm
///
/// # Errors
///
/// Every error of [`ModelRef::parse`] and of the download ([`Hub::snapshot`]); a readout that
/// cannot be read or prepared is [`Error::Readout`], whose message is the loader's (the file,
/// the tensor and its shape).
///
/// # Example
///
/// ```
/// use repgeom_hub::{Hub, read_readout};
/// use repgeom_io::{ReadoutOptions, ReadoutPrep};
///
/// // A checkpoint folder on disk is read where it is; a hub id such as
/// // "EleutherAI/pythia-70m" at Some("step3000") would be downloaded into the cache first.
/// let prep = ReadoutPrep { options: ReadoutOptions::default(), fold_norm: true, center: true };
/// let mut files = Vec::new();
/// let r = read_readout(
///     "../../fixtures/extract/gptneox_serial_bf16",
///     None,
///     &prep,
///     &Hub::from_env(),
///     &mut |p| files.push(p.file.to_owned()),
/// )?;
/// assert!(files.is_empty(), "nothing to download for a local folder");
/// assert_eq!(r.readout.tensor, "embed_out.weight");
/// assert_eq!(r.readout.matrix.cols, 32);
/// # Ok::<(), repgeom_hub::Error>(())
/// ```
pub fn read_readout(
    reference: &str,
    revision: Option<&str>,
    prep: &repgeom_io::ReadoutPrep,
    hub: &Hub,
    progress: &mut dyn FnMut(&DownloadProgress<'_>),
) -> Result<ResolvedReadout> {
    ModelRef::parse(reference, revision)?.read_readout(prep, hub, progress)
}

impl ModelRef {
    /// [`read_readout`] for a reference already parsed (a manifest that says which it is: a
    /// `readout` path, or a `hub` id at a revision): the same resolver.
    pub fn read_readout(
        &self,
        prep: &repgeom_io::ReadoutPrep,
        hub: &Hub,
        progress: &mut dyn FnMut(&DownloadProgress<'_>),
    ) -> Result<ResolvedReadout> {
        // A hub id downloads only the readout's shard, unless the final norm's gain is needed too.
        let need = if prep.fold_norm {
            Files::Full
        } else {
            Files::Readout
        };
        let path = self.resolve(hub, &need, progress)?;
        let readout =
            repgeom_io::read_readout_prepared(&path, prep).map_err(|e| Error::Readout {
                source: Box::new(e),
            })?;
        Ok(ResolvedReadout { path, readout })
    }
}
