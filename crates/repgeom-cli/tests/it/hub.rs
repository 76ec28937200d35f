//! Models by name through the test hub on 127.0.0.1: `extract`/`pga` with `--model org/name
//! --revision`, `repgeom checkpoints`, and the end-to-end study from model names
//! (`repgeom sweep --manifest` with `hub`/`revision`/`[extract]`/`[probe]`, then the figures).

use std::path::Path;
use std::process::Command;

use repgeom_hub::test_server::{TestHub, TestRepo};

use crate::{Run, root};

/// `dir`'s files, with every tensor of every `*.safetensors` file scaled by `factor`
/// (f32 and bf16; the byte layout is unchanged): a later "training step" of the same model.
fn scaled(dir: &str, factor: f32) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root().join(dir)).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let mut bytes = std::fs::read(&p).unwrap();
        if name.ends_with(".safetensors") && factor != 1.0 {
            let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
            let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
            for (k, v) in header.as_object().unwrap() {
                if k == "__metadata__" {
                    continue;
                }
                let offs = v["data_offsets"].as_array().unwrap();
                let (a, b) = (
                    8 + n + offs[0].as_u64().unwrap() as usize,
                    8 + n + offs[1].as_u64().unwrap() as usize,
                );
                match v["dtype"].as_str().unwrap() {
                    "F32" => {
                        for c in bytes[a..b].chunks_exact_mut(4) {
                            let x = f32::from_le_bytes(c.try_into().unwrap()) * factor;
                            c.copy_from_slice(&x.to_le_bytes());
                        }
                    }
                    "BF16" => {
                        for c in bytes[a..b].chunks_exact_mut(2) {
                            let x = f32::from_bits(
                                (u16::from_le_bytes(c.try_into().unwrap()) as u32) << 16,
                            ) * factor;
                            c.copy_from_slice(&((x.to_bits() >> 16) as u16).to_le_bytes());
                        }
                    }
                    other => panic!("{dir}: unexpected dtype {other}"),
                }
            }
        }
        out.push((name, bytes));
    }
    out
}

/// Two tiny models with three step branches each; `test-org/tiny-neox`'s `step3000` serves
/// the same weights as its `step2000` (as some Pythia branches do).
pub(crate) fn study_hub() -> TestHub {
    let mut a = TestRepo::new("test-org/tiny-neox");
    a.branch("step1000", scaled("fixtures/extract/gptneox_parallel", 1.0));
    a.branch(
        "step2000",
        scaled("fixtures/extract/gptneox_parallel", 0.97),
    );
    a.branch(
        "step3000",
        scaled("fixtures/extract/gptneox_parallel", 0.97),
    );
    a.branch("main", scaled("fixtures/extract/gptneox_parallel", 0.97));
    let mut b = TestRepo::new("test-org/tiny-neox-bf16");
    b.branch(
        "step1000",
        scaled("fixtures/extract/gptneox_serial_bf16", 1.0),
    );
    b.branch(
        "step2000",
        scaled("fixtures/extract/gptneox_serial_bf16", 0.97),
    );
    b.branch(
        "step3000",
        scaled("fixtures/extract/gptneox_serial_bf16", 0.94),
    );
    TestHub::start(vec![a, b])
}

/// Runs `repgeom` from the workspace root against `hub`, with the hub cache in `cache`.
pub(crate) fn repgeom_hub(
    hub: &TestHub,
    cache: &Path,
    args: &[&str],
    extra_env: &[(&str, &str)],
) -> Run {
    repgeom_hub_with(hub, cache, &["--quiet"], args, extra_env)
}

/// [`repgeom_hub`] with `flags` (e.g. `--quiet`) before the command.
pub(crate) fn repgeom_hub_with(
    hub: &TestHub,
    cache: &Path,
    flags: &[&str],
    args: &[&str],
    extra_env: &[(&str, &str)],
) -> Run {
    let mut c = Command::new(env!("CARGO_BIN_EXE_repgeom"));
    c.args(flags)
        .args(["--threads", "2"])
        .args(args)
        .current_dir(root())
        .env("HF_ENDPOINT", hub.endpoint())
        .env("HF_HUB_CACHE", cache)
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE");
    for (k, v) in extra_env {
        c.env(k, v);
    }
    let out = c.output().expect("run repgeom");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub(crate) fn ok(r: &Run) -> &Run {
    assert_eq!(r.code, 0, "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    r
}

#[test]
fn checkpoints_lists_commits_hashes_and_duplicates() {
    let hub = study_hub();
    let cache = tempfile::tempdir().unwrap();
    for fmt in ["table", "csv", "json"] {
        let r = repgeom_hub(
            &hub,
            cache.path(),
            &[
                "checkpoints",
                "--model",
                "test-org/tiny-neox",
                "--all",
                "--format",
                fmt,
            ],
            &[],
        );
        insta::assert_snapshot!(format!("checkpoints_{fmt}"), ok(&r).stdout);
    }
    let r = repgeom_hub(
        &hub,
        cache.path(),
        &[
            "checkpoints",
            "--model",
            "test-org/tiny-neox-bf16",
            "--revisions",
            "step3000,step1000",
        ],
        &[],
    );
    insta::assert_snapshot!("checkpoints_revisions", ok(&r).stdout);
}

#[test]
fn extract_and_pga_take_a_hub_id_and_revision() {
    let hub = study_hub();
    let cache = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let by_id = out.path().join("hub.safetensors");
    let by_dir = out.path().join("dir.safetensors");
    let common = [
        "--text",
        "fixtures/study/corpus.txt",
        "--n-points",
        "40",
        "--seq-len",
        "16",
    ];
    let mut args = vec![
        "extract",
        "--model",
        "test-org/tiny-neox",
        "--revision",
        "step1000",
    ];
    args.extend(common);
    args.extend(["--out", by_id.to_str().unwrap()]);
    ok(&repgeom_hub(&hub, cache.path(), &args, &[]));
    let mut args = vec!["extract", "--model", "fixtures/extract/gptneox_parallel"];
    args.extend(common);
    args.extend(["--out", by_dir.to_str().unwrap()]);
    ok(&repgeom_hub(&hub, cache.path(), &args, &[]));
    let a = repgeom_io::read_activations(&by_id, None).unwrap();
    let b = repgeom_io::read_activations(&by_dir, None).unwrap();
    assert_eq!(a.layers.len(), 4);
    for (x, y) in a.layers.iter().zip(&b.layers) {
        assert_eq!(x.acts.data, y.acts.data, "layer {}", x.layer);
    }

    // pga with the readout from the hub: the same table as from the local directory; in a
    // fresh cache only the shard holding the readout is downloaded.
    let cache2 = tempfile::tempdir().unwrap();
    let pga = |readout: &[&str], cache: &Path| {
        let mut args = vec![
            "pga",
            "--acts",
            by_dir.to_str().unwrap(),
            "-k",
            "4",
            "--n-null",
            "10",
        ];
        args.extend(readout);
        ok(&repgeom_hub(&hub, cache, &args, &[])).stdout.clone()
    };
    let from_hub = pga(
        &["--model", "test-org/tiny-neox", "--revision", "step1000"],
        cache2.path(),
    );
    let from_dir = pga(
        &["--readout", "fixtures/extract/gptneox_parallel"],
        cache2.path(),
    );
    assert_eq!(from_hub, from_dir);
    // metrics: --readout takes the hub id and --revision the same way.
    let metrics = |readout: &[&str]| {
        let mut args = vec![
            "metrics",
            "--acts",
            by_dir.to_str().unwrap(),
            "--metric",
            "pc_readout_share",
            "-k",
            "4",
        ];
        args.extend(readout);
        ok(&repgeom_hub(&hub, cache2.path(), &args, &[]))
            .stdout
            .clone()
    };
    assert_eq!(
        metrics(&["--readout", "test-org/tiny-neox", "--revision", "step1000"]),
        metrics(&["--readout", "fixtures/extract/gptneox_parallel"])
    );
    let snaps = cache2.path().join("models--test-org--tiny-neox/snapshots");
    let commit = std::fs::read_dir(&snaps)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut files: Vec<String> = std::fs::read_dir(&commit)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    files.sort();
    insta::assert_snapshot!("pga_readout_files", files.join("\n"));

    // Offline with nothing cached: a clear error naming the model and revision.
    let empty = tempfile::tempdir().unwrap();
    let r = repgeom_hub(
        &hub,
        empty.path(),
        &[
            "extract",
            "--model",
            "test-org/tiny-neox",
            "--revision",
            "step2000",
            "--text",
            "fixtures/study/corpus.txt",
            "--out",
            out.path().join("x.safetensors").to_str().unwrap(),
        ],
        &[("HF_HUB_OFFLINE", "1")],
    );
    assert_eq!(r.code, 2);
    insta::assert_snapshot!(
        "offline_error",
        r.stderr
            .replace(&*empty.path().to_string_lossy(), "<cache>")
    );
    assert!(!out.path().join("x.safetensors").exists());
}

/// The manifest of the end-to-end test (paths relative to the workspace root's fixtures).
fn manifest(root: &Path) -> String {
    let f = |p: &str| root.join(p).display().to_string();
    format!(
        r#"
title = "end-to-end from model names (test hub)"

[analysis]
k = 4
n_null = 10
ccr = [1]
spectral = ["rankme"]
pc_share = 0
full_at = "final"

[extract]
text = "{corpus}"
n_points = 48
seq_len = 16
seed = 0
batch_size = 2
loss = true

[probe]
labels = "{labelled}"

[report]
small_max_d = 16
large_min_d = 64

[[model]]
label = "tiny-neox"
family = "tiny"
hub = "test-org/tiny-neox"
d = 32
n_layers = 4

[[model.checkpoint]]
name = "step1000"
step = 1000
revision = "step1000"

[[model.checkpoint]]
name = "step2000"
step = 2000
revision = "step2000"

[[model.checkpoint]]
name = "step3000"
step = 3000
revision = "step3000"

[[model]]
label = "tiny-neox-bf16"
family = "tiny"
hub = "test-org/tiny-neox-bf16"
d = 32
n_layers = 4

[[model.checkpoint]]
name = "step1000"
step = 1000
revision = "step1000"

[[model.checkpoint]]
name = "step2000"
step = 2000
revision = "step2000"

[[model.checkpoint]]
name = "step3000"
step = 3000
revision = "step3000"
"#,
        corpus = f("fixtures/study/corpus.txt"),
        labelled = f("fixtures/study/labelled.csv"),
    )
}

/// A text file the test expects to exist.
pub(crate) fn read(p: impl AsRef<Path>) -> String {
    let p = p.as_ref();
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn study_from_model_names_end_to_end() {
    let hub = study_hub();
    let cache = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("study.toml");
    std::fs::write(&m, manifest(&root())).unwrap();
    let work = tmp.path().join("work");
    let (ms, ws) = (m.to_str().unwrap(), work.to_str().unwrap());

    // Two shards, then the merge: as a SLURM array would.
    for shard in ["0/2", "1/2"] {
        let r = repgeom_hub(
            &hub,
            cache.path(),
            &["sweep", "--manifest", ms, "--out", ws, "--shard", shard],
            &[],
        );
        ok(&r);
        // The duplicate is warned about by name before any unit runs.
        assert!(
            r.stderr.contains("model tiny-neox checkpoint step3000 (revision step3000) has the same weights as checkpoint step2000"),
            "{}",
            r.stderr
        );
    }
    // Each checkpoint was extracted once across both shards: one activation file each.
    let acts: Vec<String> = std::fs::read_dir(work.join("activations"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".safetensors") && !n.ends_with(".probe.safetensors"))
        .collect();
    // tiny-neox step2000 and step3000 share weights, so they share one extraction: 5 not 6.
    assert_eq!(acts.len(), 5, "{acts:?}");
    ok(&repgeom_hub(
        &hub,
        cache.path(),
        &["sweep", "merge", ws],
        &[],
    ));
    insta::assert_snapshot!("e2e_checkpoints_csv", read(work.join("checkpoints.csv")));

    let csv = read(work.join("results.csv"));
    let losses: Vec<&str> = csv.lines().filter(|l| l.contains(",val_loss,")).collect();
    assert_eq!(losses.len(), 6, "{losses:?}");
    // Each hub checkpoint's weights hash is in the rows (variant: the hash; value: parameters).
    let hashes: Vec<&str> = csv
        .lines()
        .filter(|l| l.contains(",weights_sha256,"))
        .collect();
    assert_eq!(hashes.len(), 6, "{hashes:?}");
    // tiny-neox step2000 and step3000: the same weights, the same hash.
    let dup_hash = "29f7b18176d20888c7b5f50f16dce68b213f652ee3a723b2db5d738c97334833";
    assert_eq!(
        hashes.iter().filter(|l| l.contains(dup_hash)).count(),
        2,
        "{hashes:?}"
    );
    let probes = csv
        .lines()
        .filter(|l| l.contains(",probe_accuracy,"))
        .count();
    assert_eq!(
        probes,
        2 * 4,
        "probe rows at each model's final checkpoint, every layer"
    );

    // Rerun in the same directory: every unit is done and nothing is extracted again.
    let cached = |dir: &Path| -> Vec<(String, std::time::SystemTime)> {
        let mut v: Vec<_> = std::fs::read_dir(dir.join("activations"))
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().to_string(),
                    e.metadata().unwrap().modified().unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = cached(&work);
    ok(&repgeom_hub(
        &hub,
        cache.path(),
        &["sweep", "--manifest", ms, "--out", ws],
        &[],
    ));
    assert_eq!(cached(&work), before);

    // A single-process run gives the same table, byte for byte, reusing the hub cache: no
    // file is downloaded again.
    hub.clear_requests();
    let work1 = tmp.path().join("work1");
    let single = repgeom_hub_with(
        &hub,
        cache.path(),
        &[],
        &["sweep", "--manifest", ms, "--out", work1.to_str().unwrap()],
        &[],
    );
    ok(&single);
    assert_eq!(csv, read(work1.join("results.csv")));
    // Where the time went, step by step: each of the six checkpoints hashed, loaded, its
    // points and loss computed once, probe features at each model's final checkpoint, and
    // each model's readout contexts once.
    let mut steps = std::collections::BTreeMap::<String, usize>::new();
    for line in single.stderr.lines().filter(|l| l.starts_with("step ")) {
        let (_, rest) = line
            .split_once(": ")
            .expect("step MODEL [CHECKPOINT]: STEP S s");
        let (step, secs) = rest
            .rsplit_once(' ')
            .and_then(|(s, _)| s.rsplit_once(' '))
            .unwrap();
        assert!(secs.parse::<f64>().is_ok(), "{line}");
        *steps.entry(step.to_owned()).or_default() += 1;
    }
    let expected: std::collections::BTreeMap<String, usize> = [
        ("load", 6),
        ("loss", 6),
        ("points", 6),
        ("probe features", 2),
        ("readout contexts", 2),
        ("weights hash", 6),
    ]
    .into_iter()
    .map(|(s, n)| (s.to_owned(), n))
    .collect();
    assert_eq!(steps, expected, "{}", single.stderr);
    let downloads: Vec<String> = hub
        .requests()
        .into_iter()
        .filter(|r| r.contains("/resolve/"))
        .collect();
    assert!(downloads.is_empty(), "{downloads:?}");

    // The figures and report from the merged table, as `cargo xtask paper --manifest` makes them.
    let study = repgeom_study::Study::new(repgeom_study::Manifest::load(&m).unwrap(), ms).unwrap();
    let (table, report) = repgeom_study::merge(&work).unwrap();
    assert!(report.complete());
    let out = tmp.path().join("out");
    let files =
        repgeom_report::write_report(&out, &table, &repgeom_study::figure_options(&study)).unwrap();
    let dup = "model tiny-neox checkpoint step3000 has the same weights as checkpoint step2000";
    assert!(read(out.join("summary.md")).contains(dup));
    assert!(read(out.join("index.html")).contains(dup));
    assert!(
        files
            .files
            .iter()
            .any(|f| f.to_string_lossy().ends_with(".svg"))
    );
}

/// `repgeom sweep --manifest manifest --out work` (a fresh `work`), which must fail with
/// status 2 and leave no activation file behind; its stderr.
pub(crate) fn failed_sweep(hub: &TestHub, cache: &Path, manifest: &Path, work: &Path) -> String {
    let _ = std::fs::remove_dir_all(work);
    let r = repgeom_hub(
        hub,
        cache,
        &[
            "sweep",
            "--manifest",
            manifest.to_str().unwrap(),
            "--out",
            work.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    let acts = std::fs::read_dir(work.join("activations"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.ends_with(".safetensors") || n.ends_with(".json"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(acts, 0, "no activation file after a failed extraction");
    r.stderr
}

/// Bad input in a study from model names: each error names the model, the revision and the
/// file, and leaves no activation file behind.
#[test]
fn study_from_model_names_bad_input() {
    let hub = study_hub();
    let cache = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let run = |edit: &dyn Fn(String) -> String| {
        let m = tmp.path().join("study.toml");
        std::fs::write(&m, edit(manifest(&root()))).unwrap();
        failed_sweep(&hub, cache.path(), &m, &tmp.path().join("work"))
            .replace(&*root().to_string_lossy(), "<root>")
            .replace(&*cache.path().to_string_lossy(), "<cache>")
            .replace(hub.endpoint(), "<hub>")
    };
    let too_short = run(&|m| m.replace("n_points = 48", "n_points = 100000"));
    let no_revision = run(&|m| m.replacen("revision = \"step1000\"", "revision = \"step9999\"", 1));
    insta::assert_snapshot!("bad_input", format!("{too_short}{no_revision}"));
}

/// The attacks of issue 43 through the binary: a repo whose index names a shard four folders
/// above the snapshot, and a revision that climbs out of `refs/`. Each is refused with a
/// message naming the name and where it came from; nothing appears outside the cache (the
/// cache is four folders below the folder that is walked) and no output is written.
#[test]
fn a_hostile_repo_or_revision_writes_nothing_outside_the_cache() {
    let mut evil = TestRepo::new("evil/model");
    let mut files = scaled("fixtures/extract/gptneox_parallel", 1.0);
    for (p, b) in &mut files {
        if p == "model.safetensors.index.json" {
            let mut js: serde_json::Value = serde_json::from_slice(b).unwrap();
            js["weight_map"]["embed_out.weight"] = "../../../../escaped-00001.safetensors".into();
            *b = js.to_string().into_bytes();
        }
    }
    let shard = files
        .iter()
        .find(|(p, _)| p == "model-00002-of-00002.safetensors")
        .unwrap()
        .1
        .clone();
    files.push(("../../../../escaped-00001.safetensors".into(), shard));
    evil.branch("step1000", files.clone());
    files.retain(|(p, _)| !p.starts_with(".."));
    evil.branch("clean-listing", files);
    let hub = TestHub::start(vec![evil]);
    let world = tempfile::tempdir().unwrap();
    let cache = world.path().join("a/b/c/d");
    std::fs::create_dir_all(&cache).unwrap();
    // Everything around the cache (what the cache holds is the client's business).
    let walk = |dir: &Path| -> Vec<std::path::PathBuf> {
        let inside = cache.strip_prefix(dir).unwrap();
        (repgeom_testkit::everything(dir).into_iter())
            .filter(|p| !p.starts_with(inside))
            .collect()
    };
    let before = walk(world.path());
    let out = world.path().join("acts.safetensors");
    let mut messages = Vec::new();
    for rev in ["step1000", "clean-listing", "../../../../escaped_ref"] {
        let r = repgeom_hub(
            &hub,
            &cache,
            &[
                "extract",
                "--model",
                "evil/model",
                "--revision",
                rev,
                "--text",
                "fixtures/study/corpus.txt",
                "--out",
                out.to_str().unwrap(),
            ],
            &[],
        );
        assert_ne!(r.code, 0, "{rev}: {}", r.stderr);
        messages.push(crate::hub::redact_commits(&r.stderr));
    }
    assert_eq!(walk(world.path()), before);
    assert!(!out.exists());
    insta::assert_snapshot!(messages.join(""), @r"
    error: refused `../../../../escaped-00001.safetensors` has a `..` component, from the file list of model evil/model@<commit>: names from a hub, a repo or a manifest must stay inside the cache
    error: refused `../../../../escaped-00001.safetensors` has a `..` component, from model evil/model@clean-listing: model.safetensors.index.json: names from a hub, a repo or a manifest must stay inside the cache
    error: refused `../../../../escaped_ref` has a `..` component, from the revision given for evil/model: names from a hub, a repo or a manifest must stay inside the cache
    ");
}

/// `s` with 40-hex-digit commit hashes replaced by `<commit>`.
pub(crate) fn redact_commits(s: &str) -> String {
    let mut out = String::new();
    let mut run = String::new();
    for c in s.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_hexdigit() && !c.is_ascii_uppercase() {
            run.push(c);
            continue;
        }
        if run.len() == 40 {
            out.push_str("<commit>");
        } else {
            out.push_str(&run);
        }
        run.clear();
        out.push(c);
    }
    out.pop();
    out
}

/// `analysis.spectral_tokens = "all"`: a hub checkpoint's spectral units add each metric's
/// covariance form over every token of the corpus (rows `{metric}_all_tokens`, one per
/// convergence checkpoint, the last with `stable_from`), equal to `repgeom extract --spectra`
/// over the same text and settings; the report draws figure 11 from them; switching it off
/// changes only the spectral units' hashes.
#[test]
fn spectral_tokens_in_a_study_equal_extract_spectra() {
    let hub = study_hub();
    let cache = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let corpus = root().join("fixtures/study/corpus.txt");
    let text = |extra: &str| {
        format!(
            "[analysis]\nk = 4\nn_null = 4\nccr = [1]\nspectral = [\"rankme\", \"isotropy\"]\npc_share = 0\nprobe = false\n{extra}\n\n[extract]\ntext = {corpus:?}\nn_points = 48\nseq_len = 16\nbatch_size = 2\n\n[[model]]\nlabel = \"tiny-neox\"\nfamily = \"tiny\"\nhub = \"test-org/tiny-neox\"\nd = 32\nn_layers = 4\n\n[[model.checkpoint]]\nname = \"step1000\"\nstep = 1000\nrevision = \"step1000\"\n"
        )
    };
    let m = tmp.path().join("study.toml");
    std::fs::write(&m, text("spectral_tokens = \"all\"")).unwrap();
    let work = tmp.path().join("work");
    let (ms, ws) = (m.to_str().unwrap(), work.to_str().unwrap());
    ok(&repgeom_hub(
        &hub,
        cache.path(),
        &["sweep", "--manifest", ms, "--out", ws],
        &[],
    ));
    let csv = read(work.join("results.csv"));
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("{name} not in {header:?}"))
    };
    let (metric, variant, layer, value, tokens, stable) = (
        col("metric"),
        col("variant"),
        col("layer"),
        col("value"),
        col("n_tokens"),
        col("stable_from"),
    );
    // (metric, layer, n_tokens) -> value, over every token, from the study.
    let mut study = std::collections::BTreeMap::new();
    let mut finals = 0;
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        if let Some(base) = f[metric].strip_suffix("_all_tokens") {
            let n: f64 = f[tokens].parse().unwrap();
            study.insert(
                (base.to_owned(), f[layer].to_owned(), n as u64),
                f[value].parse::<f64>().unwrap(),
            );
            if !f[stable].is_empty() || !f[variant].contains("_n") && !f[variant].starts_with('n') {
                finals += 1;
            }
        }
    }
    // Two metrics x 4 hidden states, each with its row over every token.
    assert_eq!(finals, 8, "{csv}");
    let table = tmp.path().join("spectra.csv");
    ok(&repgeom_hub(
        &hub,
        cache.path(),
        &[
            "extract",
            "--model",
            "test-org/tiny-neox",
            "--revision",
            "step1000",
            "--text",
            corpus.to_str().unwrap(),
            "--seq-len",
            "16",
            "--batch-size",
            "2",
            "--spectra",
            "all",
            "--out",
            table.to_str().unwrap(),
        ],
        &[],
    ));
    let t = read(&table);
    let mut lines = t.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let mut compared = 0;
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        let key = (
            f[col("metric")].to_owned(),
            f[col("layer")].to_owned(),
            f[col("n_tokens")].parse::<f64>().unwrap() as u64,
        );
        if key.0 != "rankme" && key.0 != "isotropy" {
            continue;
        }
        let want: f64 = f[col("value")].parse().unwrap();
        let got = study[&key];
        assert!(
            (got - want).abs() <= 1e-12 * want.abs().max(1.0),
            "{key:?}: study {got}, extract {want}"
        );
        compared += 1;
    }
    assert_eq!(
        compared,
        study.len(),
        "every row of the study has its extract row"
    );
    // Figure 11 from the merged table.
    let out = tmp.path().join("paper");
    ok(&repgeom_hub(
        &hub,
        cache.path(),
        &["report", "--work", ws, "--out", out.to_str().unwrap()],
        &[],
    ));
    assert!(out.join("fig11_spectral_tokens.svg").is_file());
    // Off: the spectral units (only) get other hashes.
    let plan = |p: &Path| -> std::collections::BTreeMap<String, String> {
        let manifest = repgeom_study::Manifest::load(p).unwrap();
        let study = repgeom_study::Study::new(manifest, p.to_str().unwrap()).unwrap();
        (study.units.iter())
            .map(|u| (u.id.clone(), u.config_hash.clone()))
            .collect()
    };
    let m2 = tmp.path().join("off.toml");
    std::fs::write(&m2, text("")).unwrap();
    let (on, off) = (plan(&m), plan(&m2));
    assert_eq!(
        on.keys().collect::<Vec<_>>(),
        off.keys().collect::<Vec<_>>()
    );
    for (id, h) in &on {
        assert_eq!(
            id.contains("rankme") || id.contains("isotropy"),
            h != &off[id],
            "{id}"
        );
    }
}
