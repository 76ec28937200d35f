//! Writers: atomic outputs, npy and safetensors round trips, deterministic bytes.

use std::collections::BTreeMap;

use repgeom_io::{
    Error, atomic_write, first_non_finite, read_array_f64, read_safetensors_metadata,
    write_npy_f32, write_npy_f64, write_safetensors,
};

use crate::{F32_TOL, assert_close, fixture, redact};

/// Writes a basis with `write_npy_f64` and reads it back exactly.
fn check_f64_round_trip(shape: &[usize]) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("basis.npy");
    let n: usize = shape.iter().product();
    let data: Vec<f64> = (0..n)
        .map(|i| (i as f64).sin() * 1e-3 + 1.0 / 3.0)
        .collect();
    write_npy_f64(&p, shape, &data).unwrap();
    let a = read_array_f64(&p).unwrap();
    assert_eq!(a.shape, shape);
    let max_err = a
        .data
        .iter()
        .zip(&data)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    assert!(
        max_err == 0.0,
        "f64 must round-trip bit-exactly, error {max_err}"
    );
}

#[test]
fn npy_f64_round_trips() {
    check_f64_round_trip(&[4, 3]);
    check_f64_round_trip(&[2, 4, 3]);
    check_f64_round_trip(&[0, 3]);
}

#[test]
fn npy_fortran_and_big_endian_fixtures_from_numpy() {
    for name in ["fortran_f64.npy", "bigendian_f4.npy"] {
        let a = read_array_f64(&fixture(name)).unwrap();
        assert_eq!(a.shape, vec![2, 3], "{name}");
        let f: Vec<f32> = a.data.iter().map(|&x| x as f32).collect();
        assert_close(&f, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 0.0);
    }
}

#[test]
fn safetensors_round_trip_metadata_and_deterministic_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("out.safetensors");
    let a: Vec<f32> = (0..6).map(|i| i as f32 * 0.1).collect();
    let b = [1.5f32];
    let meta = BTreeMap::from([
        ("model".to_string(), "pythia \"70m\"".to_string()),
        ("k".to_string(), "100".to_string()),
    ]);
    let tensors = [
        ("b".to_string(), vec![1], &b[..]),
        ("a".to_string(), vec![2, 3], &a[..]),
    ];
    write_safetensors(&p, &tensors, &meta).unwrap();
    let first = std::fs::read(&p).unwrap();
    write_safetensors(&p, &tensors, &meta).unwrap();
    assert_eq!(
        first,
        std::fs::read(&p).unwrap(),
        "same inputs must give the same bytes"
    );
    assert_eq!(read_safetensors_metadata(&p).unwrap(), meta);
    let st = safetensors::SafeTensors::deserialize(&first).unwrap();
    let view = st.tensor("a").unwrap();
    assert_eq!(view.shape(), &[2, 3]);
    let back: Vec<f32> = view
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_close(
        &back,
        &a.iter().map(|&x| f64::from(x)).collect::<Vec<_>>(),
        F32_TOL,
    );
}

#[test]
fn failed_writes_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("out.npy");
    std::fs::write(&p, b"old").unwrap();
    let err = atomic_write(&p, |w| {
        w.write_all(b"partial")?;
        Err(std::io::Error::other("disk full"))
    })
    .unwrap_err();
    assert!(matches!(err, Error::Io { .. }));
    assert_eq!(std::fs::read(&p).unwrap(), b"old", "destination untouched");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "temporary file removed: {names:?}");

    let msgs = [
        write_npy_f32(&p, &[2, 3], &[0.0; 5])
            .unwrap_err()
            .to_string(),
        write_safetensors(&p, &[("x".into(), vec![2], &[0.0][..])], &BTreeMap::new())
            .unwrap_err()
            .to_string(),
        write_safetensors(
            &p,
            &[
                ("x".into(), vec![1], &[0.0][..]),
                ("x".into(), vec![1], &[0.0][..]),
            ],
            &BTreeMap::new(),
        )
        .unwrap_err()
        .to_string(),
    ];
    insta::assert_snapshot!(redact(&msgs.join("\n"), Some(dir.path())));
}

#[test]
fn first_non_finite_finds_nan_and_inf() {
    assert_eq!(first_non_finite(&[0.0, 1.0]), None);
    assert_eq!(first_non_finite(&[0.0, f32::INFINITY, f32::NAN]), Some(1));
    assert_eq!(first_non_finite(&[f32::NAN]), Some(0));
}
