//! The weights hash: one SHA-256 over a checkpoint's tensors, independent of how they are
//! split into files. `repgeom_hub::weights_hash` computes it from a directory's files alone;
//! [`crate::Checkpoint::read_float_tensors`] from the bytes it reads to load a model, so
//! that loading and hashing read the weights once.

use sha2::{Digest, Sha256};

/// A checkpoint's weights hash and what it covered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightsDigest {
    /// Hex SHA-256 over the tensors (see [`WeightsHasher`] for exactly what is hashed).
    pub sha256: String,
    /// Number of tensors.
    pub tensors: usize,
    /// Number of parameters (sum of the tensors' element counts).
    pub parameters: u64,
}

/// Computes the weights hash, one tensor at a time.
///
/// Every tensor is visited in byte-wise order of its name, and for each the hash is fed:
///
/// 1. the name's UTF-8 bytes, then one `0` byte;
/// 2. the safetensors dtype string (`F32`, `BF16`, …), then one `0` byte;
/// 3. the number of dimensions as a little-endian `u64`, then each dimension as a
///    little-endian `u64`;
/// 4. the data length in bytes as a little-endian `u64`, then the data bytes exactly as
///    stored (little-endian, row-major).
///
/// File names, shard boundaries, tensor order inside files and the `__metadata__` header do
/// not enter, so re-sharding a checkpoint keeps its hash; a change of dtype (an f32
/// checkpoint saved as bf16) or of any value changes it. The caller visits the tensors in
/// name order ([`WeightsHasher::tensor`] then its bytes through [`WeightsHasher::update`]).
///
/// ```
/// use repgeom_io::WeightsHasher;
/// let mut h = WeightsHasher::new();
/// h.tensor("a.weight", "F32", &[2], 8);
/// h.update(&1f32.to_le_bytes());
/// h.update(&2f32.to_le_bytes());
/// let d = h.finish();
/// assert_eq!((d.tensors, d.parameters, d.sha256.len()), (1, 2, 64));
/// ```
#[derive(Debug, Clone, Default)]
pub struct WeightsHasher {
    h: Sha256,
    tensors: usize,
    parameters: u64,
}

impl WeightsHasher {
    /// An empty hash.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts tensor `name` of safetensors dtype `dtype` and shape `shape`, whose `len` data
    /// bytes follow through [`WeightsHasher::update`].
    pub fn tensor(&mut self, name: &str, dtype: &str, shape: &[u64], len: u64) {
        self.h.update(name.as_bytes());
        self.h.update([0]);
        self.h.update(dtype.as_bytes());
        self.h.update([0]);
        self.h.update((shape.len() as u64).to_le_bytes());
        for d in shape {
            self.h.update(d.to_le_bytes());
        }
        self.h.update(len.to_le_bytes());
        self.tensors += 1;
        self.parameters += shape.iter().product::<u64>();
    }

    /// Feeds data bytes of the current tensor.
    pub fn update(&mut self, bytes: &[u8]) {
        self.h.update(bytes);
    }

    /// The hash.
    pub fn finish(self) -> WeightsDigest {
        WeightsDigest {
            sha256: self
                .h
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
            tensors: self.tensors,
            parameters: self.parameters,
        }
    }
}
