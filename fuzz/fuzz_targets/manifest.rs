//! The study manifest (TOML typed by people): load, check, plan.
#![no_main]

use libfuzzer_sys::fuzz_target;
use repgeom_fuzz::scratch_file;

fuzz_target!(|data: &[u8]| {
    let p = scratch_file("study.toml", data);
    let Ok(m) = repgeom_study::Manifest::load(&p) else {
        return;
    };
    if m.check("fuzz").is_err() {
        return;
    }
    if let Ok(study) = repgeom_study::Study::new(m, "fuzz") {
        let _ = study.plan_hash();
    }
});
