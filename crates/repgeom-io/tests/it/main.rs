//! Integration tests for repgeom-io: fixtures written from Rust into a temp dir, plus the tiny
//! committed files under `fixtures/io/` (made by `fixtures/io/make_io_fixtures.py`).

mod activations;
mod final_norm;
mod hostile;
mod labels;
mod readout;
mod robustness;
mod write;

use std::path::{Path, PathBuf};

/// Largest absolute error allowed for values that are exact in every dtype used (multiples of 1/8).
pub(crate) const EXACT: f64 = 0.0;
/// Tolerance for f32 round trips of arbitrary values.
pub(crate) const F32_TOL: f64 = 1e-6;

pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/io")
        .join(name)
}

/// Replaces temp and fixture directories in a message so snapshots do not depend on the machine.
pub(crate) fn redact(msg: &str, tmp: Option<&Path>) -> String {
    let mut s = msg.to_string();
    if let Some(t) = tmp {
        s = s.replace(&t.display().to_string(), "<tmp>");
    }
    let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/io");
    s.replace(&fx.display().to_string(), "<fixtures>")
}

/// The workspace's one tolerance rule ([`repgeom_testkit::assert_all_close`]) on a tensor's
/// values.
#[track_caller]
pub(crate) fn assert_close(found: &[f32], expected: &[f64], tol: f64) {
    repgeom_testkit::assert_all_close(
        found.iter().copied(),
        expected.iter().copied(),
        tol,
        "tensor",
    );
}

/// Builds an `.npy` image by hand (any descr, C or Fortran order).
pub(crate) fn npy_image(descr: &str, fortran: bool, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let shape_s = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let f = if fortran { "True" } else { "False" };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': {f}, 'shape': {shape_s}, }}");
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend_from_slice(data);
    out
}

/// Builds a `.safetensors` image by hand: (name, dtype, shape, bytes) in file order.
pub(crate) fn st_image(tensors: &[(&str, &str, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let mut parts = Vec::new();
    let mut off = 0;
    for (name, dt, shape, raw) in tensors {
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        parts.push(format!(
            "\"{name}\":{{\"dtype\":\"{dt}\",\"shape\":[{}],\"data_offsets\":[{off},{}]}}",
            dims.join(","),
            off + raw.len()
        ));
        off += raw.len();
    }
    let mut h = format!("{{{}}}", parts.join(","));
    while h.len() % 8 != 0 {
        h.push(' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(h.as_bytes());
    for (_, _, _, raw) in tensors {
        out.extend_from_slice(raw);
    }
    out
}

pub(crate) fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(crate) fn bf16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| ((x.to_bits() >> 16) as u16).to_le_bytes())
        .collect()
}

/// The activation formula used by the committed fixtures: layer + (i - j) / 8.
pub(crate) fn acts_formula(layer: usize, n: usize, d: usize) -> Vec<f64> {
    let mut v = Vec::new();
    for i in 0..n {
        for j in 0..d {
            v.push(layer as f64 + (i as f64 - j as f64) / 8.0);
        }
    }
    v
}
