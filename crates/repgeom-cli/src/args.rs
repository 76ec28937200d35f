//! Argument groups flattened into several commands (`#[command(flatten)]`), so a flag means
//! the same, with the same help, wherever it appears: [`ActsArgs`], [`ReadoutArgs`],
//! [`NullArgs`]; `--format`/`--out` are [`crate::output::OutputArgs`].

use std::path::PathBuf;

use repgeom_null::NullParams;

use crate::load::ReadoutChoice;

/// `--acts` and `--layers`: the activation file of `pga` and `metrics` and which layers of it.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ActsArgs {
    /// Activations: .npy [L, N, d] or [N, d], .npz (one array per layer) or .safetensors.
    #[arg(long)]
    pub(crate) acts: PathBuf,
    /// Layers to analyse, e.g. 0,5,10-12 (default: all).
    #[arg(long)]
    pub(crate) layers: Option<String>,
}

impl ActsArgs {
    /// Reads the chosen layers (an error names the file when none is left).
    pub(crate) fn read(&self) -> anyhow::Result<repgeom_io::Activations> {
        let layers = self
            .layers
            .as_deref()
            .map(crate::context::parse_layers)
            .transpose()?;
        let acts = repgeom_io::read_activations(&self.acts, layers.as_deref())?;
        anyhow::ensure!(
            !acts.layers.is_empty(),
            "{}: no layers to analyse",
            self.acts.display()
        );
        Ok(acts)
    }
}

/// `--device`: where `extract` runs its forward passes, `pga` and `metrics` PGA's null
/// draws and `compare` its kernel metrics' nulls.
#[derive(clap::Args, Debug, Clone, Copy)]
pub(crate) struct DeviceArgs {
    /// Where the command computes: cpu, cuda (the first CUDA device) or cuda:N (extract: the
    /// forward passes and the loss; pga and metrics: PGA's null draws and readout statistic;
    /// compare: the permutation nulls of kernel metrics such as cka_linear).
    /// The CUDA libraries are loaded at run time; without them, or without the device, the
    /// command fails before reading its inputs (docs/gpu.md).
    #[arg(long, default_value = "cpu", value_parser = parse_device)]
    pub(crate) device: repgeom_cuda::Device,
}

pub(crate) fn parse_precision(s: &str) -> Result<repgeom_extract::Precision, String> {
    s.parse().map_err(|e: repgeom_extract::Error| e.to_string())
}

pub(crate) fn parse_device(s: &str) -> Result<repgeom_cuda::Device, String> {
    s.parse().map_err(|e: repgeom_cuda::Error| e.to_string())
}

impl DeviceArgs {
    /// Opens the device (nothing for the CPU): the check front ends make before any work.
    pub(crate) fn open(&self) -> anyhow::Result<repgeom_cuda::Device> {
        self.device.open()?;
        Ok(self.device)
    }
}

/// With `REPGEOM_CUDA_PROFILE` set and a CUDA `device` opened: where its time went, one line
/// on stderr (asked for, so printed even with `--quiet`).
pub(crate) fn print_profile(device: repgeom_cuda::Device) {
    let gpu = device.open().ok().flatten();
    if let Some(ops) = gpu.as_ref().and_then(|g| g.profile()) {
        #[allow(clippy::print_stderr)] // the profile asked for, beside the command's report
        {
            eprintln!("{}", repgeom_cuda::profile_line(&ops));
        }
    }
}

/// `--n-null` and `--seed`: the random-subspace null of `pga`, `metrics` and `compare`.
#[derive(clap::Args, Debug, Clone, Copy)]
pub(crate) struct NullArgs {
    /// Number of random subspaces in the null [default: 100, or the --config file's].
    #[arg(long)]
    pub(crate) n_null: Option<usize>,
    /// Seed of the null draws (and of --max-pairs' pair sample) [default: 0, or the --config
    /// file's]; `compare` draws model B's subspaces from seed + 1.
    #[arg(long)]
    pub(crate) seed: Option<u64>,
}

impl NullArgs {
    /// The flags over `base` (the defaults, or an analysis file's settings).
    pub(crate) fn over(&self, base: NullParams) -> NullParams {
        NullParams {
            n_null: self.n_null.unwrap_or(base.n_null),
            seed: self.seed.unwrap_or(base.seed),
        }
    }
}

/// `--revision`, `--vocab-rows` and `--readout-tensor`: which readout `--readout` names and
/// which of its rows count, in `pga` and `metrics`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ReadoutArgs {
    /// Hub revision (branch such as step3000, tag or commit) when --readout is a hub id.
    #[arg(long, requires = "readout")]
    pub(crate) revision: Option<String>,
    /// Keep only the first N rows of W_U (drop padding rows past the real vocabulary).
    #[arg(long)]
    pub(crate) vocab_rows: Option<usize>,
    /// Name of the readout tensor, overriding the architecture's default.
    #[arg(long)]
    pub(crate) readout_tensor: Option<String>,
    #[command(flatten)]
    pub(crate) prep: ReadoutPrepArgs,
}

/// `--readout-fold-norm` and `--readout-center`: what `W_U` goes through before its SVD, the
/// same flags in `pga`, `metrics` and `compare` (`repgeom_io::ReadoutPrep`).
#[derive(clap::Args, Debug, Clone, Copy)]
pub(crate) struct ReadoutPrepArgs {
    /// Multiply W_U by the final norm's effective gain (read from the checkpoint by its
    /// architecture: γ, or 1 + γ for Gemma) before the SVD.
    #[arg(long)]
    pub(crate) readout_fold_norm: bool,
    /// Centre W_U's rows (subtract the mean over the vocabulary) before the SVD.
    #[arg(long)]
    pub(crate) readout_center: bool,
}

impl ReadoutPrepArgs {
    /// Whether either flag is set (they need a `W_U`, not a given basis).
    pub(crate) fn any(&self) -> bool {
        self.readout_fold_norm || self.readout_center
    }
}

impl ReadoutArgs {
    /// The readout to read, with W_U folded by the final norm's gain and/or row-centred.
    pub(crate) fn choice(&self) -> ReadoutChoice {
        ReadoutChoice {
            prep: repgeom_io::ReadoutPrep {
                options: repgeom_io::ReadoutOptions {
                    vocab_rows: self.vocab_rows,
                    tensor: self.readout_tensor.clone(),
                },
                fold_norm: self.prep.readout_fold_norm,
                center: self.prep.readout_center,
            },
            revision: self.revision.clone(),
        }
    }
}
