//! `.npy`: every reader that accepts it (activations, labels, f64 arrays, readout).
#![no_main]

use libfuzzer_sys::fuzz_target;
use repgeom_fuzz::{check_activations, check_matrix, scratch_file};

fuzz_target!(|data: &[u8]| {
    let p = scratch_file("input.npy", data);
    if let Ok(a) = repgeom_io::read_activations(&p, None) {
        check_activations(&a, None);
    }
    if let Ok(a) = repgeom_io::read_activations(&p, Some(&[1, 0])) {
        check_activations(&a, Some(&[1, 0]));
    }
    if let Ok(l) = repgeom_io::read_labels(&p, None) {
        assert!(l.values.iter().all(|&v| v < l.class_names.len()));
    }
    if let Ok(arr) = repgeom_io::read_array_f64(&p) {
        let n = arr.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        assert_eq!(
            n,
            Some(arr.data.len()),
            "f64 array length disagrees with its shape"
        );
    }
    if let Ok(r) = repgeom_io::read_readout(&p, &repgeom_io::ReadoutOptions::default()) {
        check_matrix(&r.matrix);
    }
});
