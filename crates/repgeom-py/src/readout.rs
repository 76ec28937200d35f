//! The readout and null arguments: what Python hands in (a path, a hub id or an array; a
//! basis or `W_U`; null bases drawn, from a file or an array), read and checked against the
//! activations with the command line's messages. A readout by path or hub id is loaded by the
//! libraries' one resolver, [`repgeom_hub::read_readout`].

use std::path::PathBuf;

use pyo3::prelude::*;
use repgeom_linalg::{Mat, MatRef};
use repgeom_metrics::analysis::Readout;
use repgeom_null::NullBases;

use crate::errors::Failure;
use crate::input::{self, Keep, Raw, read_array};
use crate::run::DownloadBar;

/// Where the readout comes from: a file or checkpoint directory, or an array.
pub(crate) enum ReadoutArg<'py> {
    Path(PathBuf),
    Array(Raw<'py>),
}

pub(crate) fn read_readout_arg<'py>(
    readout: Option<Bound<'py, PyAny>>,
    keep: &mut Keep<'py>,
) -> Result<Option<ReadoutArg<'py>>, Failure> {
    let Some(obj) = readout else {
        return Ok(None);
    };
    if let Ok(path) = obj.extract::<PathBuf>() {
        return Ok(Some(ReadoutArg::Path(path)));
    }
    let arr = read_array(&obj, "readout", keep)?;
    if arr.shape.len() != 2 {
        return Err(Failure::Invalid(format!(
            "readout: expected W_U [V, d] or a basis [d, k], got shape {:?}",
            arr.shape
        )));
    }
    Ok(Some(ReadoutArg::Array(arr.slice(0))))
}

/// Options of the readout, mirroring `repgeom pga`'s flags.
pub(crate) struct ReadoutSpec<'py> {
    pub(crate) arg: ReadoutArg<'py>,
    pub(crate) is_basis: bool,
    pub(crate) k: usize,
    pub(crate) vocab_rows: Option<usize>,
    pub(crate) tensor: Option<String>,
    /// Hub revision when the path is a hub model id (`org/name`).
    pub(crate) revision: Option<String>,
    pub(crate) progress: Option<bool>,
    /// `repgeom_io::ReadoutPrep`: fold the final norm's effective gain, centre the rows.
    pub(crate) fold_norm: bool,
    pub(crate) center: bool,
}

/// A readout read and checked: a basis to use as it is, or `W_U` (`V × d`, the rows kept)
/// whose top-`k` subspace is still to be computed.
pub(crate) enum Loaded {
    Basis(Mat<f64>),
    Unembedding(Mat<f32>),
}

impl Loaded {
    /// The readout as the library takes it.
    pub(crate) fn view(&self) -> Readout<'_> {
        match self {
            Loaded::Basis(b) => Readout::Basis(b.as_ref()),
            Loaded::Unembedding(w) => Readout::Unembedding(w.as_ref()),
        }
    }
}

/// Reads the readout `spec` names (a path or hub id through [`repgeom_hub::read_readout`],
/// downloading what a hub id's cache lacks) and checks it against the activations' `d` (and
/// `k`), with the command line's messages: every error of the readout shows here, before any
/// decomposition.
pub(crate) fn load_readout(
    spec: &ReadoutSpec<'_>,
    d: usize,
    acts: &str,
) -> Result<Loaded, Failure> {
    let check_basis = |b: Mat<f64>, name: &str| -> Result<Mat<f64>, Failure> {
        repgeom_metrics::analysis::check_readout_basis(b.as_ref(), d, name)?;
        Ok(b)
    };
    let k = spec.k;
    if let (Some(r), true) = (
        &spec.revision,
        spec.is_basis || matches!(spec.arg, ReadoutArg::Array(_)),
    ) {
        return Err(Failure::Invalid(format!(
            "revision = {r:?}: a revision selects a checkpoint of a hub model id; the readout here is an array or a basis"
        )));
    }
    match (&spec.arg, spec.is_basis) {
        (ReadoutArg::Path(path), true) => {
            let arr = repgeom_io::read_array_f64(path)?;
            let what = path.display().to_string();
            Ok(Loaded::Basis(repgeom_metrics::analysis::basis_from_array(
                &arr.shape, &arr.data, d, &what,
            )?))
        }
        (ReadoutArg::Array(raw), true) => check_basis(raw.to_f64(), "readout").map(Loaded::Basis),
        (ReadoutArg::Path(path), false) => {
            let prep = repgeom_io::ReadoutPrep {
                options: repgeom_io::ReadoutOptions {
                    vocab_rows: spec.vocab_rows,
                    tensor: spec.tensor.clone(),
                },
                fold_norm: spec.fold_norm,
                center: spec.center,
            };
            // The libraries' one resolver: a local path, or a hub id's files downloaded first
            // (the whole checkpoint only when the final norm's gain is folded).
            let mut bar = DownloadBar::new(spec.progress);
            let resolved = repgeom_hub::read_readout(
                &path.to_string_lossy(),
                spec.revision.as_deref(),
                &prep,
                &repgeom_hub::Hub::from_env(),
                &mut |p| bar.report(p),
            );
            let r = bar.finish(resolved)?;
            let m = &r.readout.matrix;
            let view = MatRef::from_row_major_slice(&m.data, m.rows, m.cols);
            check_unembedding(
                view,
                &r.path.display().to_string(),
                &r.readout.tensor,
                k,
                d,
                acts,
            )
        }
        (ReadoutArg::Array(raw), false) => {
            if spec.fold_norm {
                return Err(Failure::Invalid(
                    "readout_fold_norm: the final norm's gain is read from a checkpoint directory or hub id; the readout here is an array".into(),
                ));
            }
            let m = raw.to_f32();
            let rows = spec.vocab_rows.unwrap_or(raw.rows).min(raw.rows);
            let view = m.as_ref().subrows(0, rows);
            if !spec.center {
                return check_unembedding(view, "readout", "W_U", k, d, acts);
            }
            // Centred as a file's W_U is (`repgeom_io::ReadoutPrep`): one copy, then the rows.
            let mut w = repgeom_io::Matrix {
                rows,
                cols: view.ncols(),
                data: (0..rows * view.ncols())
                    .map(|x| view[(x / view.ncols(), x % view.ncols())])
                    .collect(),
            };
            w.center_rows();
            check_unembedding(
                MatRef::from_row_major_slice(&w.data, w.rows, w.cols),
                "readout",
                "W_U",
                k,
                d,
                acts,
            )
        }
    }
}

/// `W_U` (`name`'s tensor `tensor`) checked against the activations `acts` (width `d`) and
/// `k`, with the command line's messages, then copied out of the view: its width is `d`,
/// `0 < k < d`, and every value is finite. The one place of these checks here.
fn check_unembedding(
    view: MatRef<'_, f32>,
    name: &str,
    tensor: &str,
    k: usize,
    d: usize,
    acts: &str,
) -> Result<Loaded, Failure> {
    repgeom_metrics::check_readout_for(view, d, k, acts, name, tensor)?;
    Ok(Loaded::Unembedding(view.to_owned()))
}

/// Null bases: drawn (by the model run, from `n_null` and `seed`), read from a `.npy` file, or
/// given as an array.
pub(crate) enum NullArg<'py> {
    Draw,
    Path(PathBuf),
    Array(input::RawNd<'py>),
}

/// Supplied null bases (`None` when they are to be drawn, by the library's model run), checked
/// against `(d, k)`.
pub(crate) fn supplied_null(
    arg: &NullArg<'_>,
    d: usize,
    k: usize,
) -> Result<Option<NullBases>, Failure> {
    let tol = repgeom_metrics::analysis::BASIS_TOL;
    match arg {
        NullArg::Draw => Ok(None),
        NullArg::Path(path) => {
            let arr = repgeom_io::read_array_f64(path)?;
            NullBases::from_array(&arr.shape, &arr.data, d, k, tol)
                .map(Some)
                .map_err(|e| {
                    Failure::Invalid(format!("reading null bases from {}: {e}", path.display()))
                })
        }
        NullArg::Array(arr) => {
            let n = arr.shape[0];
            let mut data = Vec::with_capacity(arr.shape.iter().product());
            for i in 0..n {
                let m = arr.slice(i).to_f64();
                for r in 0..m.nrows() {
                    for c in 0..m.ncols() {
                        data.push(m[(r, c)]);
                    }
                }
            }
            NullBases::from_array(&arr.shape, &data, d, k, tol)
                .map(Some)
                .map_err(|e| Failure::Invalid(format!("null_bases: {e}")))
        }
    }
}

pub(crate) fn read_null_arg<'py>(
    null_bases: Option<Bound<'py, PyAny>>,
    keep: &mut Keep<'py>,
) -> Result<NullArg<'py>, Failure> {
    let Some(obj) = null_bases else {
        return Ok(NullArg::Draw);
    };
    if let Ok(path) = obj.extract::<PathBuf>() {
        return Ok(NullArg::Path(path));
    }
    let arr = read_array(&obj, "null_bases", keep)?;
    if arr.shape.len() != 3 {
        return Err(Failure::Invalid(format!(
            "null_bases: expected an [n_null, d, k] array, got shape {:?}",
            arr.shape
        )));
    }
    Ok(NullArg::Array(arr))
}
