//! `.safetensors`: header and data, through every reader that accepts a single file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use repgeom_fuzz::{check_activations, check_matrix, scratch_file};

fuzz_target!(|data: &[u8]| {
    let p = scratch_file("input.safetensors", data);
    let _ = repgeom_io::read_safetensors_metadata(&p);
    if let Ok(a) = repgeom_io::read_activations(&p, None) {
        check_activations(&a, None);
    }
    if let Ok(a) = repgeom_io::read_activations(&p, Some(&[0, 3])) {
        check_activations(&a, Some(&[0, 3]));
    }
    if let Ok(r) = repgeom_io::read_readout(&p, &repgeom_io::ReadoutOptions::default()) {
        check_matrix(&r.matrix);
    }
    let opts = repgeom_io::ReadoutOptions {
        vocab_rows: Some(3),
        tensor: Some("lm_head.weight".into()),
    };
    if let Ok(r) = repgeom_io::read_readout(&p, &opts) {
        check_matrix(&r.matrix);
        assert!(r.matrix.rows <= 3);
    }
    if let Ok(arr) = repgeom_io::read_array_f64(&p) {
        let n = arr.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        assert_eq!(
            n,
            Some(arr.data.len()),
            "f64 array length disagrees with its shape"
        );
    }
});
