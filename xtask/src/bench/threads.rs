//! `cargo xtask bench threads`: how the release CLI's two heavy commands scale with threads on
//! this machine, their outputs compared byte for byte.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context as _, bail};

use super::{build_release_cli, target_dir};
use crate::root;

/// Hidden states in the PGA input: enough for two pairs of layers.
const LAYERS: usize = 4;

/// Workers of the crowded run on a machine with fewer cores.
const OVERSUBSCRIBED: usize = 16;

/// `cargo xtask bench threads`: `repgeom pga` on 4 layers (N = 2048, d = 4096, k = 100, CCR-1,
/// 100 Haar draws, the readout basis and null bases given, as a sweep reuses them) and
/// `repgeom extract` of the study's default work on a random Pythia-70M-shaped checkpoint
/// (2,048 points from 128 sequences of 256 tokens, the loss over 32,768 more; the checkpoint of
/// `bench streaming 70m`), each at 2 threads and at every core (1 and 2 on a 2-core machine), best of 2 wall
/// times. On fewer than 16 cores, also 16 workers on these cores, against the every-core time:
/// work whose threads wait on each other (a barrier inside a product) slows down there, as on
/// a shared or oversubscribed node. Prints the times, the speed-up, the efficiency and the
/// cores each best run kept busy on average (its CPU time over its wall time: below the
/// threads asked for, part of the run waits on one thread; near them, a poor speed-up comes
/// from cores that run slower side by side, as on shared memory bandwidth), and fails if an
/// output differs between thread counts. The GPU issue's target is 5.6x from 2 to
/// 16 threads.
pub(crate) fn bench_threads() -> anyhow::Result<()> {
    let exe = build_release_cli()?;
    let dir = target_dir().join("bench-threads");
    std::fs::create_dir_all(&dir)?;
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let mut counts: Vec<usize> = if cores <= 2 {
        (1..=cores).collect()
    } else {
        vec![2, cores]
    };
    let (lo, hi) = (counts[0], counts[counts.len() - 1]);
    // Below 16 cores, also 16 workers on these cores: products whose threads wait on each
    // other (barriers) show there, as on a shared or oversubscribed node.
    let crowded = (cores < OVERSUBSCRIBED).then(|| {
        counts.push(OVERSUBSCRIBED);
        OVERSUBSCRIBED
    });
    let (acts, wu) = (dir.join("acts.npy"), dir.join("wu.npy"));
    if !(acts.exists() && wu.exists()) {
        write_layers(&acts, &wu, 2048, 4096)?;
    }
    let (basis, null) = (dir.join("readout_basis.npy"), dir.join("null_bases.npy"));
    let path = |p: &Path| p.to_string_lossy().into_owned();
    if !(basis.exists() && null.exists()) {
        run(
            &exe,
            &[
                "pga",
                "--quiet",
                "--acts",
                &path(&acts),
                "--layers",
                "0",
                "--readout",
                &path(&wu),
                "-k",
                "100",
                "--n-null",
                "100",
                "--save-readout-basis",
                &path(&basis),
                "--save-null-bases",
                &path(&null),
            ],
        )?;
    }
    let mut table = Vec::new();
    let pga = |threads: usize| -> anyhow::Result<Timed> {
        let t = threads.to_string();
        best_of_2(
            &exe,
            |out| {
                vec![
                    "pga".into(),
                    "--quiet".into(),
                    "--acts".into(),
                    path(&acts),
                    "--readout-basis".into(),
                    path(&basis),
                    "--null-bases".into(),
                    path(&null),
                    "--ccr".into(),
                    "1".into(),
                    "--threads".into(),
                    t.clone(),
                    "--out".into(),
                    path(out),
                ]
            },
            &dir.join(format!("pga-{threads}.csv")),
        )
    };
    table.push((
        format!("pga: {LAYERS} layers, N 2048, d 4096, k 100, CCR-1, 100 draws"),
        measure(&counts, pga)?,
    ));
    let model = dir.join("pythia-70m");
    if !model.join("model.safetensors").exists() {
        super::streaming::write_checkpoint(&model, 6, Some(50_304))?;
    }
    let text = path(&root().join("fixtures/trained/corpus.txt"));
    let extract = |threads: usize| -> anyhow::Result<Timed> {
        let t = threads.to_string();
        best_of_2(
            &exe,
            |out| {
                [
                    "extract",
                    "--quiet",
                    "--model",
                    &path(&model),
                    "--text",
                    &text,
                    "--seq-len",
                    "256",
                    "--n-points",
                    "2048",
                    "--loss",
                    "--loss-tokens",
                    "32768",
                    "--threads",
                    &t,
                    "--out",
                    &path(out),
                ]
                .map(str::to_owned)
                .to_vec()
            },
            &dir.join(format!("extract-{threads}.safetensors")),
        )
    };
    table.push((
        "extract: random Pythia-70M shape, 2048 points + loss over 32768 tokens".into(),
        measure(&counts, extract)?,
    ));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "threads bench: {cores} cores, best of 2 wall times, files in {} (load average {})",
        dir.display(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let crowded_head = crowded.map_or(String::new(), |n| {
        format!(" {n} workers on {cores} cores | against {hi} threads |")
    });
    let crowded_rule = if crowded.is_some() { "---|---|" } else { "" };
    println!(
        "| work | {lo} threads | {hi} threads | speed-up | efficiency | cores busy at {lo} / {hi} |{crowded_head} outputs |"
    );
    println!("|---|---|---|---|---|---|{crowded_rule}---|");
    let mut differ = false;
    for (what, (secs, busy, same)) in &table {
        let slot = |n: usize| counts.iter().position(|&c| c == n).expect("measured");
        let at = |n: usize| secs[slot(n)];
        let busy_at = |n: usize| busy[slot(n)].map_or("?".into(), |b| format!("{b:.2}"));
        let (a, b) = (at(lo), at(hi));
        let speedup = a / b;
        let crowded_cells = crowded.map_or(String::new(), |n| {
            format!(" {:.2} s | {:.2}x |", at(n), at(n) / b)
        });
        println!(
            "| {what} | {a:.2} s | {b:.2} s | {speedup:.2}x | {:.0} % | {} / {} |{crowded_cells} {} |",
            100.0 * speedup * lo as f64 / hi as f64,
            busy_at(lo),
            busy_at(hi),
            if *same { "identical" } else { "DIFFER" }
        );
        differ |= !same;
    }
    if differ {
        bail!("an output differs between thread counts");
    }
    Ok(())
}

/// One thread count's best wall time, the cores that run kept busy, and the output's bytes.
type Timed = (f64, Option<f64>, Vec<u8>);

/// The command's best of two wall times at each thread count, the cores each of those runs kept
/// busy, and whether its output file was the same at every count.
fn measure(
    counts: &[usize],
    f: impl Fn(usize) -> anyhow::Result<Timed>,
) -> anyhow::Result<(Vec<f64>, Vec<Option<f64>>, bool)> {
    let (mut secs, mut busy) = (Vec::new(), Vec::new());
    let mut first: Option<Vec<u8>> = None;
    let mut same = true;
    for &threads in counts {
        let (s, b, bytes) = f(threads)?;
        secs.push(s);
        busy.push(b);
        match &first {
            None => first = Some(bytes),
            Some(b) => same &= *b == bytes,
        }
    }
    Ok((secs, busy, same))
}

/// Runs `exe` with the arguments `args(out)` twice; the best wall time, the cores that run kept
/// busy on average (`None` where the children's CPU time cannot be read), and `out`'s bytes.
fn best_of_2(exe: &Path, args: impl Fn(&Path) -> Vec<String>, out: &Path) -> anyhow::Result<Timed> {
    let (mut best, mut busy) = (f64::INFINITY, None);
    for _ in 0..2 {
        let a = args(out);
        let (t, cpu) = (Instant::now(), children_cpu_secs());
        run(exe, &a.iter().map(String::as_str).collect::<Vec<_>>())?;
        let wall = t.elapsed().as_secs_f64();
        if wall < best {
            best = wall;
            busy = cpu.zip(children_cpu_secs()).map(|(a, b)| (b - a) / wall);
        }
    }
    let bytes = std::fs::read(out).with_context(|| format!("read {}", out.display()))?;
    Ok((best, busy, bytes))
}

/// The user and system CPU seconds of this process's children that have ended and been
/// waited for: `cutime` and `cstime` of `/proc/self/stat`, in Linux's fixed 100 ticks a
/// second (`USER_HZ`); `None` where that file cannot be read (not Linux).
fn children_cpu_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces: the
    // state is field 3, so `cutime` and `cstime` (fields 16 and 17) are the 14th and 15th.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some((ticks(13)? + ticks(14)?) as f64 / 100.0)
}

fn run(exe: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new(exe)
        .args(args)
        .output()
        .context("run repgeom")?;
    if !out.status.success() {
        bail!(
            "repgeom {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// `LAYERS` hidden states `[LAYERS, n, d]` (a rank-8 structure shared by the layers, scaled up
/// layer by layer, plus Gaussian noise) and a Gaussian `W_U` `[4000, d]`, seeded.
fn write_layers(acts: &Path, wu: &Path, n: usize, d: usize) -> anyhow::Result<()> {
    use rand::SeedableRng;
    use rand_distr::{Distribution, StandardNormal};
    let (r, v) = (8, 4000);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let mut normal =
        |len: usize| -> Vec<f32> { (0..len).map(|_| StandardNormal.sample(&mut rng)).collect() };
    let (z, g) = (normal(n * r), normal(r * d));
    let mut h = normal(LAYERS * n * d);
    for (l, layer) in h.chunks_mut(n * d).enumerate() {
        let scale = 0.5 * (l + 1) as f32;
        for (i, row) in layer.chunks_mut(d).enumerate() {
            for (t, &zt) in z[i * r..(i + 1) * r].iter().enumerate() {
                for (x, &gv) in row.iter_mut().zip(&g[t * d..(t + 1) * d]) {
                    *x += scale * zt * gv;
                }
            }
        }
    }
    repgeom_io::write_npy_f32(acts, &[LAYERS, n, d], &h)?;
    repgeom_io::write_npy_f32(wu, &[v, d], &normal(v * d))?;
    Ok(())
}
