//! Label CSVs: AG News (headerless, class 1-4 first) and headed label columns.
#![no_main]

use libfuzzer_sys::fuzz_target;
use repgeom_fuzz::scratch_file;

fuzz_target!(|data: &[u8]| {
    let p = scratch_file("input.csv", data);
    for col in [None, Some("label"), Some("class")] {
        if let Ok(l) = repgeom_io::read_labels(&p, col) {
            assert!(
                l.values.iter().all(|&v| v < l.class_names.len()),
                "label index outside the class list"
            );
        }
    }
});
