//! The whole study from model names on *trained* models: tiny GPT-NeoX models trained from
//! scratch on a public-domain novel (`fixtures/trained/`, made by its script), served by the
//! test hub as `test-org/neox-dW@stepN`. Extraction, the computed validation loss against
//! transformers' own (stored by the script), probes on a labelled text task, PGA under both
//! nulls, cross-model metrics between widths, every figure, and `repgeom report`. The corpus
//! and the labelled task come as files and, served as `test-org/persuasion`, by dataset name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use repgeom_hub::test_server::{TestHub, TestRepo};

use crate::hub::{failed_sweep, ok, read, repgeom_hub};
use crate::root;

/// Our loss against transformers' on the same tokens: f32 forward passes, f64 sums.
const LOSS_TOL: f64 = 1e-5;
const WIDTHS: [usize; 2] = [16, 64];
const STEPS: [u64; 5] = [0, 40, 120, 300, 600];

fn trained(p: &str) -> PathBuf {
    root().join("fixtures/trained").join(p)
}

fn trained_hub() -> TestHub {
    let repos = WIDTHS
        .iter()
        .map(|w| {
            let mut r = TestRepo::new(&format!("test-org/neox-d{w}"));
            for s in STEPS {
                r.branch_from_dir(&format!("step{s}"), &trained(&format!("neox-d{w}/step{s}")))
                    .unwrap();
            }
            r
        })
        .collect::<Vec<_>>();
    // The corpus and the labelled task as a parquet dataset with two configs (made by
    // fixtures/trained/make_dataset.py with pyarrow, as the hub serves wikitext).
    let mut data = TestRepo::dataset("test-org/persuasion");
    let root = trained("dataset");
    let mut files = Vec::new();
    for sub in ["", "corpus", "speech"] {
        for e in std::fs::read_dir(root.join(sub)).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                let name = p.strip_prefix(&root).unwrap().to_str().unwrap().to_string();
                files.push((name, std::fs::read(&p).unwrap()));
            }
        }
    }
    data.branch("main", files);
    TestHub::start(repos.into_iter().chain([data]).collect())
}

/// Where the texts come from: the files, or the dataset served by the test hub.
#[derive(Clone, Copy)]
enum Data<'a> {
    Files,
    Hub { corpus: &'a str, speech: &'a str },
}

const BY_NAME: Data<'static> = Data::Hub {
    corpus: r#"{ hub = "test-org/persuasion", split = "test" }"#,
    speech: r#"{ hub = "test-org/persuasion", config = "speech", split = "test" }"#,
};

fn manifest(null: &str, data: Data<'_>) -> String {
    let (corpus, labelled) = match data {
        Data::Files => (
            format!("{:?}", trained("corpus.txt").display().to_string()),
            format!(
                "{:?}\nlabel_column = \"label\"\ntext_column = \"text\"",
                trained("labelled.csv").display().to_string()
            ),
        ),
        Data::Hub { corpus, speech } => (corpus.to_string(), speech.to_string()),
    };
    let models: String = WIDTHS
        .iter()
        .map(|w| model_toml(&format!("neox-d{w}"), "neox", *w, &STEPS))
        .collect();
    format!(
        r#"
title = "trained fixtures from model names (test hub)"
pairs = [["neox-d16", "neox-d64"]]

[analysis]
k_frac = 0.25
n_null = 20
ccr = [1, 2]
null = "{null}"
spectral = ["rankme", "alpha_req"]
pc_share = 2
k_sensitivity = [0.125]
cross = ["distance_spearman", "cka_linear"]

[extract]
text = {corpus}
n_points = 384
seq_len = 128
loss = true

[probe]
labels = {labelled}

[report]
small_max_d = 16
large_min_d = 64
{models}"#
    )
}

/// `repgeom sweep --manifest M --out WORK`, then `repgeom report --work WORK --out OUT`, both
/// against the test hub and cache; each must succeed.
fn sweep_and_report(hub: &TestHub, cache: &Path, manifest: &Path, work: &Path, out: &Path) {
    let ws = work.to_str().unwrap();
    ok(&repgeom_hub(
        hub,
        cache,
        &[
            "sweep",
            "--manifest",
            manifest.to_str().unwrap(),
            "--out",
            ws,
        ],
        &[],
    ));
    ok(&repgeom_hub(
        hub,
        cache,
        &["report", "--work", ws, "--out", out.to_str().unwrap()],
        &[],
    ));
}

/// A `[[model]]` table of the test hub's `test-org/{label}`: 4 layers (5 hidden states), width
/// `d`, one checkpoint per step, each by its `step<N>` revision.
fn model_toml(label: &str, family: &str, d: usize, steps: &[u64]) -> String {
    let ckpts: String = steps
        .iter()
        .map(|s| {
            format!(
                "\n[[model.checkpoint]]\nname = \"step{s}\"\nstep = {s}\nrevision = \"step{s}\"\n"
            )
        })
        .collect();
    format!(
        "\n[[model]]\nlabel = \"{label}\"\nfamily = \"{family}\"\nhub = \"test-org/{label}\"\nd = {d}\nn_layers = 5\n{ckpts}"
    )
}

/// (model, checkpoint, metric, variant, layer) → value, from `results.csv`.
fn values(csv_text: &str) -> BTreeMap<(String, String, String, String, String), f64> {
    let mut rdr = csv::Reader::from_reader(csv_text.as_bytes());
    let h = rdr.headers().unwrap().clone();
    let col = |n: &str| h.iter().position(|c| c == n).unwrap();
    let (m, c, me, v, l, x) = (
        col("model"),
        col("checkpoint"),
        col("metric"),
        col("variant"),
        col("layer"),
        col("value"),
    );
    rdr.records()
        .map(|r| {
            let r = r.unwrap();
            (
                (
                    r[m].to_string(),
                    r[c].to_string(),
                    r[me].to_string(),
                    r[v].to_string(),
                    r[l].to_string(),
                ),
                r[x].parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn study_of_trained_models_from_names_end_to_end() {
    let hub = trained_hub();
    let cache = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    let out = tmp.path().join("paper");
    let ws = work.to_str().unwrap();
    let run = |null: &str, data: Data<'_>| {
        let m = tmp.path().join(format!("study-{null}.toml"));
        std::fs::write(&m, manifest(null, data)).unwrap();
        sweep_and_report(&hub, cache.path(), &m, &work, &out);
        values(&read(out.join("results.csv")))
    };
    let acts = |w: &Path| std::fs::read_dir(w.join("activations")).unwrap().count();

    let v = run("haar", Data::Files);
    let reference: serde_json::Value =
        serde_json::from_str(&read(trained("reference.json"))).unwrap();
    let get = |model: &str, ckpt: &str, metric: &str, variant: &str, layer: &str| {
        v.get(&(
            model.into(),
            ckpt.into(),
            metric.into(),
            variant.into(),
            layer.into(),
        ))
        .copied()
    };
    for w in WIDTHS {
        let model = format!("neox-d{w}");
        let mut losses = Vec::new();
        for (i, s) in STEPS.iter().enumerate() {
            let ckpt = format!("step{s}");
            let want = reference["models"][&model]["checkpoints"][i]["val_loss"]
                .as_f64()
                .unwrap();
            // The loss rows are a checkpoint's, filed under layer 0.
            let got = get(&model, &ckpt, "val_loss", "", "0").expect("val_loss row");
            assert!(
                (got - want).abs() <= LOSS_TOL,
                "{model} {ckpt}: val_loss {got} vs transformers {want}"
            );
            let se = get(&model, &ckpt, "val_loss_se", "", "0").expect("val_loss_se row");
            assert!(se > 0.0 && se < 0.05, "{model} {ckpt}: se {se}");
            losses.push(got);
        }
        // A real trajectory: the loss falls at every checkpoint, from ln(512) to well below.
        assert!(
            losses.windows(2).all(|p| p[1] < p[0]),
            "{model}: {losses:?}"
        );
        assert!(
            losses[0] > 6.2 && *losses.last().unwrap() < 4.0,
            "{model}: {losses:?}"
        );
        // PGA at every layer of every checkpoint; the probe learns the speech/narration task
        // at the final checkpoint above chance (0.5) at some layer.
        for s in STEPS {
            for l in 0..5 {
                let z = get(&model, &format!("step{s}"), "pga_z", "ccr1", &l.to_string());
                assert!(z.is_some_and(f64::is_finite), "{model} step{s} layer {l}");
            }
        }
        let best = v
            .iter()
            .filter(|(k, _)| k.0 == model && k.1 == "step600" && k.2 == "probe_accuracy")
            .map(|(_, x)| *x)
            .fold(0f64, f64::max);
        assert!(best > 0.65, "{model}: best probe accuracy {best}");
    }
    let cross = v
        .keys()
        .filter(|k| k.0 == "neox-d16" && (k.2 == "distance_spearman" || k.2 == "cka_linear"))
        .count();
    assert!(cross >= 2 * 5, "cross-model rows at every layer: {cross}");
    for f in 1..=9 {
        let svg = std::fs::read_dir(&out)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .any(|n| n.starts_with(&format!("fig{f}_")) && n.ends_with(".svg"));
        assert!(svg, "figure {f} drawn");
    }
    // `report --check`: up to date, then a changed summary is named.
    let check = |code: i32| {
        let r = repgeom_hub(
            &hub,
            cache.path(),
            &[
                "report",
                "--work",
                ws,
                "--out",
                out.to_str().unwrap(),
                "--check",
            ],
            &[],
        );
        assert_eq!(r.code, code, "{}\n{}", r.stdout, r.stderr);
        r.stdout
    };
    check(0);
    std::fs::write(out.join("summary.md"), "edited\n").unwrap();
    assert!(check(1).contains("summary.md"));

    // The spectrum null in the same directory, the texts now named by hub dataset: new PGA
    // units, no new extraction. The dataset's rows are the files' texts, so the activations
    // and probe features have the same cache keys.
    let before = acts(&work);
    let v = run("spectrum", BY_NAME);
    assert_eq!(acts(&work), before, "activations are reused");
    let dataset_cache = cache.path().join("datasets--test-org--persuasion");
    assert!(
        dataset_cache.join("refs/main").is_file(),
        "hub cache layout"
    );
    assert!(
        v.keys().any(|k| k.2 == "pga_z" && k.3 == "ccr1_spectrum"),
        "spectrum-null PGA rows"
    );
}

/// A dataset, split or column that does not exist, or a column that is not text: an error that
/// lists what exists (or names the type), and no activations written.
#[test]
fn data_by_name_that_does_not_exist_is_named() {
    let hub = trained_hub();
    let cache = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let check = |corpus: &str, want: &str| {
        let m = tmp.path().join("study.toml");
        let data = Data::Hub {
            corpus,
            speech: r#"{ hub = "test-org/persuasion", config = "speech", split = "test" }"#,
        };
        std::fs::write(&m, manifest("haar", data)).unwrap();
        let stderr = failed_sweep(&hub, cache.path(), &m, &tmp.path().join("work"));
        assert!(stderr.contains(want), "{corpus}: {stderr}");
    };
    check(
        r#"{ hub = "test-org/persuasion", split = "validation" }"#,
        r#"no split `validation`; its splits are ["test"]"#,
    );
    check(
        r#"{ hub = "test-org/persuasion", config = "novel", split = "test" }"#,
        r#"no config `novel`; its configs are ["corpus", "speech"]"#,
    );
    check(
        r#"{ hub = "test-org/persuasion", config = "speech", split = "test", column = "label" }"#,
        "column `label` has dtype i64, not text",
    );
    check(
        r#"{ hub = "test-org/no-such-data", split = "test" }"#,
        "test-org/no-such-data: no such dataset",
    );
}

/// A pair of models with different tokenizers: neox-d32 (byte-level BPE) and neox-sp-d32 (a
/// SentencePiece-style tokenizer, same shape, recipe and training text; made by
/// `fixtures/trained/make_second_tokenizer.py`). On word points (`[extract] points =
/// "words"`) the study pairs them, with a calibrated CKA row in the results and the report;
/// on token points the pair is refused, naming the remedy, before it is compared.
#[test]
fn a_cross_tokenizer_pair_on_word_points() {
    let repos = [("neox-d32", &[600u64][..]), ("neox-sp-d32", &[0, 600][..])]
        .iter()
        .map(|(name, steps)| {
            let mut r = TestRepo::new(&format!("test-org/{name}"));
            for s in *steps {
                r.branch_from_dir(&format!("step{s}"), &trained(&format!("{name}/step{s}")))
                    .unwrap();
            }
            r
        })
        .collect();
    let hub = TestHub::start(repos);
    let cache = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let manifest = |points: &str| {
        format!(
            r#"
title = "a cross-tokenizer pair (test hub)"
pairs = [["neox-d32", "neox-sp-d32"]]

[analysis]
k_frac = 0.25
n_null = 20
ccr = [1]
spectral = ["rankme"]
pc_share = 0
probe = false
cross = ["cka_linear"]
cross_n_perm = 20
cross_aggregate = ["max"]

[extract]
text = {:?}
points = "{points}"
n_points = 256
seq_len = 128
loss = true

[report]
small_max_d = 16
large_min_d = 64
{}{}"#,
            trained("corpus.txt").display().to_string(),
            model_toml("neox-d32", "neox", 32, &[600]),
            model_toml("neox-sp-d32", "neox-sp", 32, &[0, 600]),
        )
    };

    // Word points: the pair is compared, calibrated, and in the report.
    let m = tmp.path().join("words.toml");
    std::fs::write(&m, manifest("words")).unwrap();
    let work = tmp.path().join("work");
    let out = tmp.path().join("paper");
    sweep_and_report(&hub, cache.path(), &m, &work, &out);
    let csv_text = read(out.join("results.csv"));
    let mut rdr = csv::Reader::from_reader(csv_text.as_bytes());
    let h = rdr.headers().unwrap().clone();
    let col = |n: &str| h.iter().position(|c| c == n).unwrap();
    let (model, metric, other, z, p) = (
        col("model"),
        col("metric"),
        col("other_model"),
        col("z"),
        col("p_value"),
    );
    let rows: Vec<csv::StringRecord> = rdr
        .records()
        .map(Result::unwrap)
        .filter(|r| r[metric].starts_with("cka_linear"))
        .collect();
    assert!(!rows.is_empty(), "CKA rows of the pair");
    for r in &rows {
        assert_eq!((&r[model], &r[other]), ("neox-d32", "neox-sp-d32"), "{r:?}");
        let z: f64 = r[z].parse().unwrap();
        let p: f64 = r[p].parse().unwrap();
        assert!(z.is_finite() && p > 0.0 && p <= 1.0, "calibrated: {r:?}");
    }
    assert!(
        rows.iter().any(|r| r[metric].starts_with("cka_linear_max")),
        "the calibrated aggregate"
    );
    let summary = read(out.join("summary.md"));
    assert!(
        summary.contains("neox-sp-d32") && summary.contains("cka_linear_max"),
        "{summary}"
    );
    // The second tokenizer is read as transformers reads it: the loss of both checkpoints.
    let reference: serde_json::Value =
        serde_json::from_str(&read(trained("reference-sp.json"))).unwrap();
    let v = values(&csv_text);
    for (i, s) in [0, 600].iter().enumerate() {
        let want = reference["models"]["neox-sp-d32"]["checkpoints"][i]["val_loss"]
            .as_f64()
            .unwrap();
        let key = (
            "neox-sp-d32".to_string(),
            format!("step{s}"),
            "val_loss".to_string(),
            String::new(),
            "0".to_string(),
        );
        let got = v[&key];
        assert!(
            (got - want).abs() <= LOSS_TOL,
            "step{s}: {got} vs transformers {want}"
        );
    }

    // Token points: two tokenizers do not hold the same token positions; refused.
    let m = tmp.path().join("tokens.toml");
    std::fs::write(&m, manifest("tokens")).unwrap();
    let work = tmp.path().join("work-tokens");
    let r = repgeom_hub(
        &hub,
        cache.path(),
        &[
            "sweep",
            "--manifest",
            m.to_str().unwrap(),
            "--out",
            work.to_str().unwrap(),
        ],
        &[],
    );
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stderr.contains("pairs [\"neox-d32\", \"neox-sp-d32\"]")
            && r.stderr.contains("use points = words"),
        "{}",
        r.stderr
    );
    let cross_parts = std::fs::read_dir(work.join("parts"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.contains("cross"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(cross_parts, 0, "no cross-model part written");
}
