//! The device a computation runs on, as every front end names it.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::{Error, Gpu, Result};

/// What `--device`, a manifest's `device` and Python's `device=` accept.
pub const DEVICE_NAMES: &str = "cpu, cuda (the first CUDA device) or cuda:N (device N, from 0)";

/// Where a computation runs: the CPU (default) or a CUDA device by index.
///
/// ```
/// use repgeom_cuda::Device;
/// assert_eq!("cpu".parse::<Device>().unwrap(), Device::Cpu);
/// assert_eq!("cuda".parse::<Device>().unwrap(), Device::Cuda(0));
/// assert_eq!("cuda:1".parse::<Device>().unwrap().to_string(), "cuda:1");
/// assert!("gpu".parse::<Device>().is_err());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Device {
    /// The CPU, on the run's thread pool.
    #[default]
    Cpu,
    /// The CUDA device with this index (as `nvidia-smi` and `CUDA_VISIBLE_DEVICES` count).
    Cuda(usize),
}

impl Device {
    /// Whether this is the CPU.
    pub fn is_cpu(&self) -> bool {
        matches!(self, Device::Cpu)
    }

    /// Opens the device: `None` for the CPU, the (shared, opened once per process) [`Gpu`]
    /// for a CUDA device. Front ends call it before any work, so a machine without the
    /// driver, the libraries or the device fails with the reason and nothing written.
    pub fn open(&self) -> Result<Option<Arc<Gpu>>> {
        match *self {
            Device::Cpu => Ok(None),
            Device::Cuda(ordinal) => Gpu::open(ordinal).map(Some),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl FromStr for Device {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim();
        let unknown = || Error::UnknownDevice { value: s.into() };
        match t.to_ascii_lowercase().as_str() {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            other => match other.strip_prefix("cuda:") {
                Some(i) => i.parse().map(Device::Cuda).map_err(|_| unknown()),
                None => Err(unknown()),
            },
        }
    }
}

impl serde::Serialize for Device {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Device {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}
