//! Hostile input: every malformed file gives a clear error, never a panic or a huge allocation.

use std::path::Path;

use repgeom_io::{
    read_activations, read_array_f64, read_labels, read_readout, read_safetensors_metadata,
};

use crate::{fixture, npy_image, redact, st_image};

/// Runs every reader on `path`; returns the first error message (or "ok"). Must not panic.
fn check(path: &Path) -> String {
    let results = [
        read_activations(path, None).map(|_| ()),
        read_array_f64(path).map(|_| ()),
        read_labels(path, None).map(|_| ()),
        read_readout(path, &Default::default()).map(|_| ()),
    ];
    match results.into_iter().find_map(Result::err) {
        Some(e) => e.to_string(),
        None => "ok".into(),
    }
}

#[test]
fn malformed_npy_and_safetensors_messages() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ok = npy_image("<f4", false, &[2, 3], &[0u8; 24]);
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty.npy", vec![]),
        ("magic.npy", b"PK\x03\x04 not numpy".to_vec()),
        ("truncated.npy", ok[..ok.len() - 5].to_vec()),
        ("trailing.npy", [ok.clone(), vec![0; 4]].concat()),
        ("object.npy", npy_image("|O", false, &[2], &[0; 16])),
        ("unicode.npy", npy_image("<U3", false, &[2], &[0; 24])),
        (
            "absurd.npy",
            npy_image("<f4", false, &[1 << 30, 1 << 30, 4], &[0; 8]),
        ),
        (
            "overflow.npy",
            npy_image("<f4", false, &[usize::MAX, 3], &[]),
        ),
        ("version9.npy", {
            let mut v = ok.clone();
            v[6] = 9;
            v
        }),
    ];
    // Header length field pointing past the end of the file.
    let mut long = ok.clone();
    long[8] = 0xff;
    long[9] = 0xff;
    cases.push(("header_len.npy", long));
    cases.push(("structured.npy", {
        let dict = "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }\n";
        let mut v = b"\x93NUMPY\x01\x00".to_vec();
        v.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        v.extend_from_slice(dict.as_bytes());
        v.extend_from_slice(&[0; 4]);
        v
    }));
    cases.push((
        "garbage.safetensors",
        b"\xff\xff\xff\xff\xff\xff\xff\xff{}".to_vec(),
    ));
    cases.push(("short.safetensors", {
        let mut v = st_image(&[("hidden_states", "F32", vec![2, 2, 2], vec![0; 32])]);
        v.truncate(v.len() - 4);
        v
    }));
    cases.push((
        "complex.safetensors",
        st_image(&[("hidden_states", "C64", vec![1, 1, 1], vec![0; 8])]),
    ));
    cases.push(("notzip.npz", b"not a zip archive at all".to_vec()));
    let mut msgs = Vec::new();
    for (name, bytes) in cases {
        let p = d.join(name);
        std::fs::write(&p, bytes).unwrap();
        msgs.push(redact(&check(&p), Some(d)));
    }
    msgs.push(redact(&check(&d.join("does_not_exist.npy")), Some(d)));
    insta::assert_snapshot!(msgs.join("\n"));
}

/// A tiny deterministic generator (no OS randomness): SplitMix64.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[test]
fn truncations_and_byte_flips_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = SplitMix(8);
    for name in [
        "acts_f16.npy",
        "acts_layers.npz",
        "acts_bf16.safetensors",
        "fortran_f64.npy",
        "labels_i8.npy",
    ] {
        let bytes = std::fs::read(fixture(name)).unwrap();
        let p = dir.path().join(name);
        let mut variants: Vec<Vec<u8>> = (0..bytes.len())
            .step_by(7)
            .map(|n| bytes[..n].to_vec())
            .collect();
        for _ in 0..150 {
            let mut v = bytes.clone();
            for _ in 0..1 + rng.next() % 4 {
                let i = (rng.next() % v.len() as u64) as usize;
                v[i] = rng.next() as u8;
            }
            variants.push(v);
        }
        for v in variants {
            std::fs::write(&p, &v).unwrap();
            // Any Ok or Err is acceptable; a panic fails the test.
            let _ = check(&p);
            let _ = read_safetensors_metadata(&p);
        }
    }
}
