//! One build of the libraries serves `cargo xtask` and `cargo test --workspace`.
//!
//! `cargo xtask validate` (CI's first step) builds xtask, and with it most of the workspace's
//! libraries and their dependencies, then runs `cargo test --workspace`. Cargo resolves
//! features per build: a crate that gets other features in the tests' build (a dev-dependency
//! switching one on, repgeom-py's pyo3 macros switching on syn's `visit-mut`) is compiled
//! twice, and with it everything that depends on it. One such difference in syn, the
//! dependency of every derive macro, recompiled 129 crates (polars, faer, candle, tokenizers)
//! and cost CI about nine minutes, unseen. xtask/Cargo.toml aligns the two; this test keeps
//! them aligned after a dependency changes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// `name version` → the features cargo enables for it, over every crate `cargo tree` lists
/// with `args` (offline, from the lock file).
fn features(args: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root)
        .args(["tree", "--offline", "--locked", "--prefix", "none"])
        .args(["--format", "{p}|{f}"])
        .args(args)
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut map = BTreeMap::<String, BTreeSet<String>>::new();
    for line in String::from_utf8(out.stdout).expect("utf-8").lines() {
        let line = line.trim_end_matches(" (*)");
        let Some((package, list)) = line.split_once('|') else {
            continue;
        };
        let key = package.split(' ').take(2).collect::<Vec<_>>().join(" ");
        let entry = map.entry(key).or_default();
        entry.extend(list.split(',').filter(|f| !f.is_empty()).map(String::from));
    }
    map
}

/// The crates whose features differ between the two builds: `name version: only in the
/// tests' build [..], only in xtask's [..]`.
fn differences(
    xtask: &BTreeMap<String, BTreeSet<String>>,
    tests: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    xtask
        .iter()
        .filter_map(|(package, mine)| {
            let theirs = tests.get(package)?;
            (mine != theirs).then(|| {
                format!(
                    "{package}: only in the tests' build {:?}, only in xtask's {:?}",
                    theirs.difference(mine).collect::<Vec<_>>(),
                    mine.difference(theirs).collect::<Vec<_>>()
                )
            })
        })
        .collect()
}

#[test]
fn xtask_builds_its_dependencies_with_the_tests_features() {
    let xtask = features(&["--package", "xtask", "--edges", "normal,build"]);
    let tests = features(&["--workspace", "--edges", "normal,build,dev"]);
    // A listing that parsed to nothing would pass below without checking anything.
    assert!(
        xtask.len() > 100 && xtask.keys().any(|k| k.starts_with("syn v")),
        "cargo tree's listing of xtask parsed to {} crates",
        xtask.len()
    );
    let found = differences(&xtask, &tests);
    assert!(
        found.is_empty(),
        "these crates would be compiled twice in CI (once for xtask, once for the tests); \
         enable the same features in xtask/Cargo.toml:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_feature_switched_on_only_for_the_tests_is_found() {
    let set = |fs: &[&str]| fs.iter().map(|f| f.to_string()).collect::<BTreeSet<_>>();
    let xtask = BTreeMap::from([
        ("syn v3.0.10".to_string(), set(&["full"])),
        ("serde v1.0.0".to_string(), set(&["std"])),
    ]);
    let tests = BTreeMap::from([
        ("syn v3.0.10".to_string(), set(&["full", "visit-mut"])),
        ("serde v1.0.0".to_string(), set(&["std"])),
        ("insta v1.0.0".to_string(), set(&[])),
    ]);
    assert_eq!(
        differences(&xtask, &tests),
        ["syn v3.0.10: only in the tests' build [\"visit-mut\"], only in xtask's []"]
    );
}
