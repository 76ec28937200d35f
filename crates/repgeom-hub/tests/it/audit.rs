//! Weights hashes: what is hashed, and what is not.

use repgeom_hub::weights_hash;
use safetensors::tensor::{Dtype, TensorView, serialize_to_file};

use crate::root;

/// Re-sharding (all tensors of the two-shard fixture in one file, another order of files)
/// keeps the hash; the parameter count is the sum of element counts.
#[test]
fn hash_ignores_sharding_and_counts_parameters() {
    let sharded = root().join("fixtures/extract/gptneox_parallel");
    let a = weights_hash(&sharded).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut all: Vec<(String, Vec<u8>, Vec<usize>, Dtype)> = Vec::new();
    for shard in [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ] {
        let bytes = std::fs::read(sharded.join(shard)).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        for (name, t) in st.tensors() {
            all.push((name, t.data().to_vec(), t.shape().to_vec(), t.dtype()));
        }
    }
    // Reverse order, one file, no index.
    all.reverse();
    let views: Vec<(String, TensorView<'_>)> = all
        .iter()
        .map(|(n, d, s, t)| (n.clone(), TensorView::new(*t, s.clone(), d).unwrap()))
        .collect();
    serialize_to_file(views, None, &dir.path().join("model.safetensors")).unwrap();
    let b = weights_hash(dir.path()).unwrap();
    assert_eq!(a, b);
    let params: u64 = all
        .iter()
        .map(|(_, _, s, _)| s.iter().product::<usize>() as u64)
        .sum();
    assert_eq!(a.parameters, params);
    assert_eq!(a.tensors, all.len());
    // A different model hashes differently.
    let c = weights_hash(&root().join("fixtures/extract/gptneox_serial_bf16")).unwrap();
    assert_ne!(a.sha256, c.sha256);
}

/// Against the standard-library Python reference `fixtures/study/weights_hash.py`, whose
/// output for the extraction fixtures is committed as `weights_hash.expected`.
#[test]
fn hash_matches_the_python_reference() {
    let expected =
        std::fs::read_to_string(root().join("fixtures/study/weights_hash.expected")).unwrap();
    for line in expected.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let got = weights_hash(&root().join("fixtures/extract").join(f[0])).unwrap();
        assert_eq!(
            (
                got.sha256.as_str(),
                got.tensors.to_string(),
                got.parameters.to_string()
            ),
            (f[1], f[2].to_string(), f[3].to_string()),
            "{}",
            f[0]
        );
    }
}

/// `repgeom checkpoints`' core: revisions in step order, commits, hashes, duplicates.
#[test]
fn audit_finds_duplicate_revisions() {
    let mut repo = repgeom_hub::test_server::TestRepo::new("test-org/tiny-neox");
    let files = |dir: &str| -> Vec<(String, Vec<u8>)> {
        std::fs::read_dir(root().join(dir))
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                (
                    p.file_name().unwrap().to_string_lossy().to_string(),
                    std::fs::read(&p).unwrap(),
                )
            })
            .collect()
    };
    repo.branch("step10", files("fixtures/extract/gptneox_serial_bf16"));
    repo.branch("main", files("fixtures/extract/gptneox_serial_bf16"));
    repo.branch("step9", files("fixtures/extract/gptneox_parallel"));
    repo.branch("step100", files("fixtures/extract/gptneox_serial_bf16"));
    let s = crate::Setup::new(vec![repo]);
    let hub = s.client();
    let revs = repgeom_hub::all_revisions(&hub, "test-org/tiny-neox").unwrap();
    assert_eq!(revs, ["step9", "step10", "step100", "main"]);
    let audit =
        repgeom_hub::audit_revisions(&hub, "test-org/tiny-neox", &revs, &mut |_| {}).unwrap();
    let expected =
        std::fs::read_to_string(root().join("fixtures/study/weights_hash.expected")).unwrap();
    let hash_of = |name: &str| {
        expected
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .to_string()
    };
    let rows: Vec<(String, String, u64, Option<String>)> = audit
        .iter()
        .map(|a| {
            (
                a.revision.clone(),
                a.weights_sha256.clone(),
                a.parameters,
                a.duplicate_of.clone(),
            )
        })
        .collect();
    let (p, b) = (hash_of("gptneox_parallel"), hash_of("gptneox_serial_bf16"));
    assert_eq!(
        rows,
        [
            ("step9".to_string(), p, 44896, None),
            ("step10".to_string(), b.clone(), 44896, None),
            (
                "step100".to_string(),
                b.clone(),
                44896,
                Some("step10".to_string())
            ),
            ("main".to_string(), b, 44896, Some("step10".to_string())),
        ]
    );
    assert!(audit.iter().all(|a| repgeom_hub::is_commit(&a.commit)));
    // Weights only: no tokenizer was downloaded.
    assert!(!audit.iter().any(|a| {
        s.model_dir()
            .join("snapshots")
            .join(&a.commit)
            .join("tokenizer.json")
            .exists()
    }));
}
