//! HuggingFace checkpoint folders: `config.json`, `model.safetensors.index.json`,
//! `tokenizer.json` and shards, given as one input split on `repgeom_fuzz::SPLIT`:
//! part 0 config, part 1 index (empty: absent), part 2 tokenizer (empty: absent), parts 3..
//! shards named `model-0000{i}-of-0000{n}.safetensors` (a single shard with no index is
//! `model.safetensors`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use repgeom_fuzz::{check_matrix, fresh_dir, split_parts};

fuzz_target!(|data: &[u8]| {
    let parts = split_parts(data);
    let dir = fresh_dir("ckpt");
    let w = |name: &str, b: &[u8]| std::fs::write(dir.join(name), b).expect("write part");
    w("config.json", parts[0]);
    if let Some(ix) = parts.get(1).filter(|b| !b.is_empty()) {
        w("model.safetensors.index.json", ix);
    }
    if let Some(tok) = parts.get(2).filter(|b| !b.is_empty()) {
        w("tokenizer.json", tok);
    }
    let shards = parts.get(3..).unwrap_or(&[]);
    let n = shards.len().min(4);
    for (i, s) in shards.iter().take(n).enumerate() {
        if n == 1 && parts.get(1).is_none_or(|b| b.is_empty()) {
            w("model.safetensors", s);
        } else {
            w(&format!("model-{:05}-of-{n:05}.safetensors", i + 1), s);
        }
    }
    if let Ok(ck) = repgeom_io::open_checkpoint(&dir) {
        for name in ck.tensor_names() {
            let shape = ck.tensor_shape(&name);
            if let Ok((s, v)) = ck.read_tensor_f32(&name) {
                assert_eq!(Some(&s), shape.as_ref());
                let n = s.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
                assert_eq!(n, Some(v.len()), "tensor length disagrees with its shape");
            }
        }
    }
    if let Ok(r) = repgeom_io::read_readout(&dir, &repgeom_io::ReadoutOptions::default()) {
        check_matrix(&r.matrix);
    }
});
