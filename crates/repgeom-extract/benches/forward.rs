//! Forward-pass throughput of a random Pythia-70M-shaped GPT-NeoX (d = 512, 6 layers,
//! vocabulary 50304) on 8 sequences of 256 tokens, at batch 1 and at the default batch, with
//! the hidden states only and with the loss: the configurations `fixtures/extract/time_torch.py`
//! times in transformers. And 2 sequences of 2,048 tokens (hidden states, one batch), where
//! attention's two `T × T` products per head (`4 T d` flops per token and layer, half that
//! over the keys a causal query sees) weigh two thirds of the linear layers' `24 d²`.
//!
//! And the tokenisation of the trained fixtures' corpus (463 KB) by the `gptneox_parallel`
//! fixture's byte-level BPE, on pools of 1 thread (one whole-text call) and 2 (pieces cut at
//! line starts, side by side).
//!
//! `cargo bench -p repgeom-extract --bench forward` (or `cargo xtask bench extract`, which also
//! runs the transformers side); tokens/s is criterion's throughput.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use repgeom_extract::{DEFAULT_BATCH_SIZE, Extractor, Model, ModelConfig};

// as in the `repgeom` binary: the allocator is part of what is measured
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SEQUENCES: usize = 8;
const SEQ_LEN: usize = 256;
// 8 × 256 = 2 × 2048 ids: the long sequences reuse them

fn forward(c: &mut Criterion) {
    let model = Model::random(ModelConfig::pythia_70m(), 0).expect("random model");
    let ids: Vec<u32> = (0..(SEQUENCES * SEQ_LEN) as u32)
        .map(|i| (i * 7919) % 50304)
        .collect();
    let seqs: Vec<&[u32]> = ids.chunks(SEQ_LEN).collect();
    let mut g = c.benchmark_group("pythia70m_random_8x256");
    g.sample_size(10);
    g.throughput(Throughput::Elements((SEQUENCES * SEQ_LEN) as u64));
    for loss in [false, true] {
        for batch in [1, DEFAULT_BATCH_SIZE] {
            let name = format!(
                "batch{batch}_{}",
                if loss { "with_loss" } else { "hidden_states" }
            );
            g.bench_function(name, |b| {
                b.iter(|| {
                    for chunk in seqs.chunks(batch) {
                        let mut rows = 0usize;
                        model
                            .forward_batch(chunk, loss, &mut |_, h| {
                                rows += h.len();
                                Ok(())
                            })
                            .expect("forward");
                        std::hint::black_box(rows);
                    }
                })
            });
        }
    }
    g.finish();
    let long = 2048;
    let seqs: Vec<&[u32]> = ids.chunks(long).collect();
    let mut g = c.benchmark_group("pythia70m_random_2x2048");
    g.sample_size(10);
    g.throughput(Throughput::Elements((2 * long) as u64));
    g.bench_function("batch2_hidden_states", |b| {
        b.iter(|| {
            let mut rows = 0usize;
            model
                .forward_batch(&seqs, false, &mut |_, h| {
                    rows += h.len();
                    Ok(())
                })
                .expect("forward");
            std::hint::black_box(rows);
        })
    });
    g.finish();
}

fn encode(c: &mut Criterion) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    let ex = Extractor::load(&root.join("extract/gptneox_parallel")).expect("fixture");
    let text = std::fs::read_to_string(root.join("trained/corpus.txt")).expect("corpus");
    let mut g = c.benchmark_group("encode_corpus");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(text.len() as u64));
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("pool");
        g.bench_function(format!("threads{threads}"), |b| {
            b.iter(|| pool.install(|| std::hint::black_box(ex.encode(&text).expect("encode"))))
        });
    }
    g.finish();
}

criterion_group!(benches, forward, encode);
criterion_main!(benches);
