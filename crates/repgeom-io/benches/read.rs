//! Speed of the hot paths: converting a bf16 checkpoint tensor to f32 and reading selected layers.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use repgeom_io::{open_checkpoint, read_activations};

fn st_bf16(name: &str, shape: &[usize]) -> Vec<u8> {
    let n: usize = shape.iter().product();
    let raw: Vec<u8> = (0..n)
        .flat_map(|i| (((i % 977) as f32 / 977.0).to_bits() >> 16).to_le_bytes()[..2].to_vec())
        .collect();
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let mut h = format!(
        "{{\"{name}\":{{\"dtype\":\"BF16\",\"shape\":[{}],\"data_offsets\":[0,{}]}}}}",
        dims.join(","),
        raw.len()
    );
    while h.len() % 8 != 0 {
        h.push(' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(&raw);
    out
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    // A Pythia-160M-sized readout: 50304 x 768 bf16 (77 MB).
    let ck = dir.path().join("ck");
    std::fs::create_dir(&ck).unwrap();
    std::fs::write(
        ck.join("config.json"),
        r#"{"architectures":["GPTNeoXForCausalLM"],"tie_word_embeddings":false}"#,
    )
    .unwrap();
    std::fs::write(
        ck.join("model.safetensors"),
        st_bf16("embed_out.weight", &[50304, 768]),
    )
    .unwrap();
    let ckpt = open_checkpoint(&ck).unwrap();
    c.bench_function("read_tensor_f32 bf16 50304x768", |b| {
        b.iter(|| black_box(ckpt.read_tensor_f32("embed_out.weight").unwrap()))
    });

    // 25 layers x 2048 points x 768 bf16 activations; read 3 layers.
    let acts = dir.path().join("acts.safetensors");
    std::fs::write(&acts, st_bf16("hidden_states", &[25, 2048, 768])).unwrap();
    c.bench_function("read_activations 3 of 25 layers 2048x768 bf16", |b| {
        b.iter(|| black_box(read_activations(&acts, Some(&[4, 12, 20])).unwrap()))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
