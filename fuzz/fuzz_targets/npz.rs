//! `.npz`: zip archives of `.npy` members, read as activations.
#![no_main]

use libfuzzer_sys::fuzz_target;
use repgeom_fuzz::{check_activations, scratch_file};

fuzz_target!(|data: &[u8]| {
    let p = scratch_file("input.npz", data);
    if let Ok(a) = repgeom_io::read_activations(&p, None) {
        check_activations(&a, None);
    }
    if let Ok(a) = repgeom_io::read_activations(&p, Some(&[2])) {
        check_activations(&a, Some(&[2]));
    }
});
