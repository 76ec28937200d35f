//! Datasets by name through the test hub: the parquet files of a (config, split) in the
//! cache's `datasets--org--name` folder, reuse without requests, and the errors.

use polars::prelude::*;
use repgeom_hub::test_server::TestRepo;
use repgeom_hub::{DatasetFiles, DatasetRef, DownloadProgress, Error, Hub, HubConfig};

use crate::{Setup, tree};

/// A parquet file with a `text` column of `texts` and a `label` column.
fn parquet(texts: &[&str]) -> Vec<u8> {
    let labels: Vec<i64> = (0..texts.len() as i64).collect();
    let mut df = df!("text" => texts, "label" => labels).unwrap();
    let mut out = Vec::new();
    ParquetWriter::new(&mut out).finish(&mut df).unwrap();
    out
}

const CARD: &str = "---
license: cc-by-sa-3.0
configs:
- config_name: small
  default: true
  data_files:
  - split: test
    path: small/test-*
  - split: train
    path: small/train-*
- config_name: big
  data_files:
  - split: test
    path: big/test-*
---

# tiny-text
";

/// `test-org/tiny-text`: configs `small` (default; test, train) and `big` (test, in two
/// shards) named by its card, as wikitext's are. `test-org/news`: `data/{split}-*.parquet`
/// and no card, as ag_news.
fn datasets() -> Vec<TestRepo> {
    let mut text = TestRepo::dataset("test-org/tiny-text");
    text.branch(
        "main",
        vec![
            ("README.md".into(), CARD.as_bytes().to_vec()),
            (
                "small/test-00000-of-00001.parquet".into(),
                parquet(&["s1", "s2"]),
            ),
            (
                "small/train-00000-of-00001.parquet".into(),
                parquet(&["t1"]),
            ),
            (
                "big/test-00000-of-00002.parquet".into(),
                parquet(&["b1", "b2"]),
            ),
            ("big/test-00001-of-00002.parquet".into(), parquet(&["b3"])),
        ],
    );
    let mut news = TestRepo::dataset("test-org/news");
    news.branch(
        "main",
        vec![
            (
                "data/test-00000-of-00001.parquet".into(),
                parquet(&["n1", "n2", "n3"]),
            ),
            ("data/train-00000-of-00001.parquet".into(), parquet(&["n4"])),
        ],
    );
    vec![text, news]
}

fn get(hub: &Hub, want: &DatasetRef) -> repgeom_hub::Result<DatasetFiles> {
    hub.dataset(want, &mut |_: &DownloadProgress<'_>| {})
}

fn texts(d: &DatasetFiles) -> Vec<String> {
    repgeom_io::read_parquet_texts(&d.files, "text").unwrap()
}

#[test]
fn a_split_lands_in_the_cache_layout_and_is_reused_offline() {
    let s = Setup::new(datasets());
    let want = DatasetRef::new("test-org/tiny-text", "test").config("big");
    let d = get(&s.client(), &want).unwrap();
    assert_eq!((d.config.as_str(), d.split.as_str()), ("big", "test"));
    let dir = s.cache.path().join("datasets--test-org--tiny-text");
    assert_eq!(d.dir, dir.join("snapshots").join(&d.commit));
    assert_eq!(
        d.files,
        [
            d.dir.join("big/test-00000-of-00002.parquet"),
            d.dir.join("big/test-00001-of-00002.parquet"),
        ]
    );
    assert_eq!(texts(&d), ["b1", "b2", "b3"]);
    // huggingface_hub's layout: refs/main, blobs by ETag (SHA-256 for the LFS parquet
    // files), snapshot symlinks; only the card and the split's files are downloaded.
    let mut layout = tree(&dir);
    layout.sort(); // blob names are hashes: sorted after redaction
    assert_eq!(
        layout,
        [
            "blobs/<sha40>",
            "blobs/<sha64>",
            "blobs/<sha64>",
            "refs/main",
            "snapshots/<sha40>/README.md -> ../../blobs/<sha40>",
            "snapshots/<sha40>/big/test-00000-of-00002.parquet -> ../../../blobs/<sha64>",
            "snapshots/<sha40>/big/test-00001-of-00002.parquet -> ../../../blobs/<sha64>",
        ]
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("refs/main")).unwrap(),
        d.commit
    );
    let reqs = s.take_requests();
    assert_eq!(
        reqs[0],
        "GET /api/datasets/test-org/tiny-text/revision/main"
    );
    assert!(
        reqs.iter()
            .any(|r| r.starts_with("HEAD /datasets/test-org/tiny-text/resolve/<sha40>/big/")),
        "{reqs:?}"
    );
    // Again, with a new client and offline: from the cache, no request.
    let offline = Hub::new(HubConfig {
        offline: true,
        ..s.config()
    });
    for hub in [s.client(), offline] {
        let again = get(&hub, &want).unwrap();
        assert_eq!(again, d);
        assert_eq!(s.take_requests(), Vec::<String>::new());
    }
    // Another split of the same revision is downloaded; offline it is named as missing.
    let offline = Hub::new(HubConfig {
        offline: true,
        ..s.config()
    });
    let train = DatasetRef::new("test-org/tiny-text", "train");
    let err = get(&offline, &train).unwrap_err();
    assert!(matches!(err, Error::Offline { .. }), "{err}");
    assert!(err.to_string().contains("split `train`"), "{err}");
    assert_eq!(texts(&get(&s.client(), &train).unwrap()), ["t1"]);
}

#[test]
fn default_configs_and_layouts() {
    let s = Setup::new(datasets());
    let hub = s.client();
    let check = |want: DatasetRef, config: &str, files: &[&str], rows: &[&str]| {
        let d = get(&hub, &want).unwrap();
        assert_eq!(d.config, config, "{want:?}");
        let rel: Vec<String> = d
            .files
            .iter()
            .map(|f| {
                f.strip_prefix(&d.dir)
                    .unwrap()
                    .to_string_lossy()
                    .to_string()
            })
            .collect();
        assert_eq!(rel, files, "{want:?}");
        assert_eq!(texts(&d), rows, "{want:?}");
    };
    // The card's `default: true`.
    check(
        DatasetRef::new("test-org/tiny-text", "test"),
        "small",
        &["small/test-00000-of-00001.parquet"],
        &["s1", "s2"],
    );
    // data/{split}-*.parquet without a card: the `default` config.
    check(
        DatasetRef::new("test-org/news", "test"),
        "default",
        &["data/test-00000-of-00001.parquet"],
        &["n1", "n2", "n3"],
    );
    // By commit hash: the same files.
    let commit = hub.resolve_repo(repgeom_hub::RepoType::Dataset, "test-org/news", "main");
    check(
        DatasetRef::new("test-org/news", "train").revision(&commit.unwrap()),
        "default",
        &["data/train-00000-of-00001.parquet"],
        &["n4"],
    );
}

/// One line per bad input: the error message the user sees.
#[test]
fn bad_names_list_what_exists() {
    let s = Setup::new(datasets());
    let hub = s.client();
    let offline = Hub::new(HubConfig {
        offline: true,
        ..s.config()
    });
    let show = |hub: &Hub, want: DatasetRef| {
        get(hub, &want)
            .map(|_| "ok".to_string())
            .unwrap_or_else(|e| e.to_string())
            .replace(s.hub.endpoint(), "<endpoint>")
            .replace(&*s.cache.path().to_string_lossy(), "<cache>")
    };
    let t = "test-org/tiny-text";
    assert_eq!(
        [
            show(&hub, DatasetRef::new("test-org/nope", "test")),
            show(&hub, DatasetRef::new(t, "test").config("huge")),
            show(&hub, DatasetRef::new(t, "validation")),
            show(&hub, DatasetRef::new(t, "train").config("big")),
            show(&hub, DatasetRef::new(t, "test").revision("v9")),
            show(&offline, DatasetRef::new("test-org/news", "test")),
            show(&hub, DatasetRef::new("not an id", "test")),
        ],
        [
            "test-org/nope: no such dataset on <endpoint> (if it is gated or private, set HF_TOKEN)",
            "test-org/tiny-text@main: no config `huge`; its configs are [\"small\", \"big\"]",
            "test-org/tiny-text: config `small` has no split `validation`; its splits are \
             [\"test\", \"train\"]",
            "test-org/tiny-text: config `big` has no split `train`; its splits are [\"test\"]",
            "test-org/tiny-text: no revision `v9` on <endpoint>",
            "test-org/news@main: HF_HUB_OFFLINE=1 and the cache \
             <cache>/datasets--test-org--news lacks [\"refs/main (this revision was never \
             downloaded)\"]; download them first (unset HF_HUB_OFFLINE)",
            "`not an id` is not a hub model id (expected `org/name`, or a local directory)",
        ]
    );
    // A model is not a dataset (the two namespaces are apart); a dataset without parquet
    // files points to the hub's conversion.
    let mut model = TestRepo::new("test-org/a-model");
    model.branch("main", vec![("config.json".into(), b"{}".to_vec())]);
    s.hub.put_repo(model);
    let mut csv = TestRepo::dataset("test-org/csv");
    csv.branch(
        "main",
        vec![("data/test.csv".into(), b"text\na\n".to_vec())],
    );
    s.hub.put_repo(csv);
    assert_eq!(
        [
            show(&hub, DatasetRef::new("test-org/a-model", "test")),
            show(&hub, DatasetRef::new("test-org/csv", "test")),
        ],
        [
            "test-org/a-model: no such dataset on <endpoint> (if it is gated or private, set \
             HF_TOKEN)",
            "test-org/csv@main: no *.parquet data files (files: [\"data/test.csv\"]); the hub \
             keeps a parquet conversion of most datasets at revision `refs/convert/parquet`",
        ]
    );
    // Nothing but the card was downloaded for the failures.
    let blobs = s.cache.path().join("datasets--test-org--tiny-text/blobs");
    assert_eq!(tree(&blobs), ["<sha40>"]);
}
