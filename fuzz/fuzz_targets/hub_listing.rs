//! A page of the hub's `/tree` listing (`repgeom_hub::parse_listing`) and a checkpoint index
//! read by the weights hash (`repgeom_hub::weights_hash`): whatever the hub or the repo sends,
//! every accepted path stays below the snapshot folder and no file outside it is read.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use repgeom_fuzz::{fresh_dir, split_parts};

fuzz_target!(|data: &[u8]| {
    let parts = split_parts(data);
    if let Ok(page) = std::str::from_utf8(parts[0])
        && let Ok(files) = repgeom_hub::parse_listing(page, "fuzz")
    {
        let base = Path::new("/snapshots/commit");
        for f in files {
            assert!(f.path.under(base).starts_with(base), "{:?}", f.path);
        }
    }
    if let Some(index) = parts.get(1) {
        // A sentinel outside the folder: a hash that read it would have to name its tensor.
        let root = fresh_dir("hub_index");
        let dir = root.join("ckpt");
        std::fs::create_dir_all(&dir).expect("create ckpt");
        std::fs::write(dir.join("model.safetensors.index.json"), index).expect("write index");
        std::fs::write(root.join("outside.safetensors"), b"not read").expect("write sentinel");
        let _ = repgeom_hub::weights_hash(&dir);
    }
});
