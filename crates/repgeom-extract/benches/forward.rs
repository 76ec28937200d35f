//! Forward-pass throughput of a random Pythia-70M-shaped GPT-NeoX (d = 512, 6 layers,
//! vocabulary 50304) on one sequence of 256 tokens: hidden states only, and with logits.
//!
//! `cargo bench -p repgeom-extract --bench forward`; tokens/s = 256 / reported time.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use repgeom_extract::{Model, ModelConfig};

fn forward(c: &mut Criterion) {
    let model = Model::random(ModelConfig::pythia_70m(), 0).expect("random model");
    let seq_len = 256;
    let ids: Vec<u32> = (0..seq_len as u32).map(|i| (i * 7919) % 50304).collect();
    let mut g = c.benchmark_group("pythia70m_random_seq256");
    g.sample_size(10);
    g.throughput(Throughput::Elements(seq_len as u64));
    g.bench_function("hidden_states", |b| {
        b.iter(|| model.forward(&ids, false).expect("forward"))
    });
    g.bench_function("hidden_states_and_logits", |b| {
        b.iter(|| model.forward(&ids, true).expect("forward"))
    });
    g.finish();
}

criterion_group!(benches, forward);
criterion_main!(benches);
