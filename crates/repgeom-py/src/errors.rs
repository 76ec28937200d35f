//! Errors across the boundary: every library error becomes a subclass of `repgeom.Error`
//! carrying the message the command line prints; panics become `repgeom.InternalError`.

use pyo3::prelude::*;
use pyo3::types::PyType;

/// Why a call failed, carried out of the GIL-free computation (hence `Send`).
#[derive(Debug)]
pub(crate) enum Failure {
    /// Bad input or options (`repgeom.InvalidInputError`, a `ValueError`).
    Invalid(String),
    /// A file that is not there (`repgeom.FileNotFoundError`).
    NotFound(String),
    /// Any other operating-system error while reading (`repgeom.IOError`, an `OSError`).
    Os(String),
    /// A Python exception raised while talking to Python objects; re-raised as is.
    Py(PyErr),
    /// The user pressed Ctrl-C; re-raised as the `KeyboardInterrupt` Python delivered.
    Interrupted(PyErr),
    /// A Rust panic: a bug, reported as `repgeom.InternalError`.
    Panic(String),
}

impl Failure {
    pub(crate) fn from_py(e: PyErr) -> Self {
        Failure::Py(e)
    }

    pub(crate) fn into_py(self, py: Python<'_>) -> PyErr {
        let (class, msg) = match self {
            Failure::Py(e) | Failure::Interrupted(e) => return e,
            Failure::Invalid(m) => ("InvalidInputError", m),
            Failure::NotFound(m) => ("FileNotFoundError", m),
            Failure::Os(m) => ("IOError", m),
            Failure::Panic(m) => (
                "InternalError",
                format!("internal error (a bug in repgeom; please report it): {m}"),
            ),
        };
        match py
            .import("repgeom._errors")
            .and_then(|m| m.getattr(class))
            .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from))
        {
            Ok(cls) => PyErr::from_type(cls, msg),
            Err(e) => e,
        }
    }
}

fn io_kind(e: &std::io::Error, msg: String) -> Failure {
    if e.kind() == std::io::ErrorKind::NotFound {
        Failure::NotFound(msg)
    } else {
        Failure::Os(msg)
    }
}

impl From<repgeom_io::Error> for Failure {
    fn from(e: repgeom_io::Error) -> Self {
        let msg = e.to_string();
        match &e {
            repgeom_io::Error::Io { source, .. } => io_kind(source, msg),
            repgeom_io::Error::MissingShard { .. } => Failure::NotFound(msg),
            _ => Failure::Invalid(msg),
        }
    }
}

impl From<repgeom_metrics::Error> for Failure {
    fn from(e: repgeom_metrics::Error) -> Self {
        Failure::Invalid(e.to_string())
    }
}

impl From<repgeom_null::Error> for Failure {
    fn from(e: repgeom_null::Error) -> Self {
        Failure::Invalid(e.to_string())
    }
}

impl From<repgeom_linalg::Error> for Failure {
    fn from(e: repgeom_linalg::Error) -> Self {
        Failure::Invalid(e.to_string())
    }
}

impl From<repgeom_probe::Error> for Failure {
    fn from(e: repgeom_probe::Error) -> Self {
        Failure::Invalid(e.to_string())
    }
}

#[cfg(feature = "extract")]
impl From<repgeom_extract::Error> for Failure {
    fn from(e: repgeom_extract::Error) -> Self {
        let msg = e.to_string();
        match &e {
            repgeom_extract::Error::Io { source, .. } => io_kind(source, msg),
            repgeom_extract::Error::MissingFile { .. } => Failure::NotFound(msg),
            repgeom_extract::Error::Checkpoint(repgeom_io::Error::Io { source, .. }) => {
                io_kind(source, msg)
            }
            _ => Failure::Invalid(msg),
        }
    }
}

impl From<repgeom_hub::Error> for Failure {
    fn from(e: repgeom_hub::Error) -> Self {
        use repgeom_hub::Error as E;
        // The readout loader's error, classed as when the loader is called directly.
        let e = match e {
            E::Readout { source } => return Failure::from(*source),
            e => e,
        };
        let msg = e.to_string();
        match &e {
            E::NoSuchModel { .. }
            | E::ModelNotFound { .. }
            | E::RevisionNotFound { .. }
            | E::FileNotFound { .. }
            | E::NoSafetensors { .. }
            | E::NoWeights { .. }
            | E::DatasetNotFound { .. }
            | E::NoSuchConfig { .. }
            | E::NoSuchSplit { .. }
            | E::NoParquet { .. }
            | E::Offline { .. } => Failure::NotFound(msg),
            E::Io { source, .. } => io_kind(source, msg),
            E::Network { .. }
            | E::Http { .. }
            | E::Download { .. }
            | E::RetriesExhausted { .. } => Failure::Os(msg),
            _ => Failure::Invalid(msg),
        }
    }
}

impl From<PyErr> for Failure {
    fn from(e: PyErr) -> Self {
        Failure::Py(e)
    }
}
