//! Integration tests of repgeom-extract against HuggingFace transformers reference numbers
//! (fixtures made by `fixtures/extract/make_tiny.py`; no Python at test time).

mod errors;
mod extraction;
mod hashing;
mod parity;
mod sampling;
mod words;

use std::path::{Path, PathBuf};

use repgeom_extract::{ExtractParams, Extraction, Extractor, Pool};

/// Relative tolerance per layer: max |rust - hf| / max |hf|.
pub(crate) const PARITY_REL_TOL: f64 = 1e-4;

pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/extract")
        .join(name)
}

/// A text long enough for a few sequences of the tiny tokenizer.
pub(crate) fn corpus(lines: usize) -> String {
    let base = [
        "The quick brown fox jumps over the lazy dog.",
        "A language model predicts the next token.",
        "Stocks rallied on Monday as markets digested the news.",
        "Scientists discovered a new species of frog in the rainforest.",
        "The team won the championship game.",
    ];
    (0..lines)
        .map(|i| base[i % base.len()])
        .collect::<Vec<_>>()
        .join("\n")
}

/// Copies a fixture checkpoint into a temporary directory (to break it).
pub(crate) fn copy_fixture(name: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture(name)).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, tmp.path().join(p.file_name().unwrap())).unwrap();
    }
    tmp
}

/// Rewrites the safetensors file `file` in place, each tensor's little-endian bytes passed to
/// `edit` with its name and dtype (to break a copied fixture).
pub(crate) fn edit_safetensors(
    file: &Path,
    mut edit: impl FnMut(&str, safetensors::Dtype, &mut [u8]),
) {
    let bytes = std::fs::read(file).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut data: Vec<(String, Vec<u8>, safetensors::Dtype, Vec<usize>)> = st
        .tensors()
        .into_iter()
        .map(|(name, v)| (name, v.data().to_vec(), v.dtype(), v.shape().to_vec()))
        .collect();
    for (name, bytes, dtype, _) in &mut data {
        edit(name, *dtype, bytes);
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = data
        .iter()
        .map(|(name, bytes, dtype, shape)| {
            let view = safetensors::tensor::TensorView::new(*dtype, shape.clone(), bytes).unwrap();
            (name.clone(), view)
        })
        .collect();
    std::fs::write(file, safetensors::serialize(views, None).unwrap()).unwrap();
}

/// The one entry point the tests use to run an extraction.
pub(crate) fn check_extract(
    dir: &Path,
    text: &str,
    pool: Pool,
    n_points: Option<usize>,
    seq_len: usize,
    seed: u64,
) -> repgeom_extract::Result<(Extractor, Extraction)> {
    let params = ExtractParams {
        seq_len,
        n_points,
        seed,
        pool,
        loss: true,
        ..Default::default()
    }
    .check()?;
    let ex = Extractor::load(dir)?;
    let mut calls = 0;
    let out = ex.extract(text, &params, &mut |_| calls += 1)?;
    assert!(calls > 0, "progress was never reported");
    Ok((ex, out))
}

pub(crate) fn max_rel_err(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, &x| m.max(f64::from(x).abs()));
    let err = got.iter().zip(want).fold(0f64, |m, (&a, &b)| {
        m.max((f64::from(a) - f64::from(b)).abs())
    });
    err / scale.max(f64::MIN_POSITIVE)
}
