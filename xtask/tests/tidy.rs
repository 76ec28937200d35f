//! Tidy checks: the architecture's invariants that are about what source code does *not*
//! contain, enforced here instead of relying on a reviewer's grep (ARCHITECTURE.md, section
//! Invariants). Each rule names the crates it covers, the tokens it forbids and why. Test
//! modules (`tests.rs`, `*_tests.rs`, `tests/`) are not scanned: tests may write temp files.

use std::path::{Path, PathBuf};

struct Rule {
    name: &'static str,
    why: &'static str,
    crates: &'static [&'static str],
    forbidden: &'static [&'static str],
}

/// The numerical crates compute; the edges (io, cli, study, report) read, write and print.
const PURE: &[&str] = &[
    "repgeom-metrics",
    "repgeom-linalg",
    "repgeom-null",
    "repgeom-probe",
    "repgeom-synth",
];

const RULES: &[Rule] = &[
    Rule {
        name: "no file I/O in the numerical crates",
        why: "they take views and return owned results; reading and writing is repgeom-io's job, so \
              they stay reusable on data that never was a file",
        crates: PURE,
        forbidden: &["std::fs", "File::", "OpenOptions", "tempfile"],
    },
    Rule {
        name: "no printing in the numerical crates",
        why: "a library must not write to the caller's terminal; progress goes through callbacks, \
              diagnostics through typed errors",
        crates: PURE,
        forbidden: &[
            "println!",
            "eprintln!",
            "print!(",
            "eprint!(",
            "dbg!(",
            "io::stdout",
            "io::stderr",
        ],
    },
    Rule {
        name: "no OS-seeded randomness anywhere",
        why: "every result is reproducible from its seed; an entropy-seeded RNG makes a run \
              unrepeatable",
        crates: &[
            "repgeom-io",
            "repgeom-linalg",
            "repgeom-null",
            "repgeom-metrics",
            "repgeom-probe",
            "repgeom-report",
            "repgeom-extract",
            "repgeom-synth",
            "repgeom-study",
            "repgeom-cli",
            "repgeom-hub",
            "repgeom-py",
        ],
        forbidden: &[
            "thread_rng",
            "rand::rng()",
            "from_entropy",
            "from_os_rng",
            "OsRng",
            "rand::random",
        ],
    },
    Rule {
        name: "no hash-ordered collections in result paths",
        why: "iterating a HashMap or HashSet visits entries in a per-process random order, so \
              rows, files or sums could differ between runs; use BTreeMap/BTreeSet or Vec (a \
              line marked `tidy: lookup only` is allowed: it never iterates)",
        crates: &[
            "repgeom-linalg",
            "repgeom-null",
            "repgeom-metrics",
            "repgeom-probe",
            "repgeom-report",
            "repgeom-synth",
            "repgeom-study",
        ],
        forbidden: &["HashMap", "HashSet"],
    },
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.map(|e| e.expect("readable dir").path()).collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if p.is_dir() {
            if name != "tests" {
                sources(&p, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
            out.push(p);
        }
    }
}

/// `path:line: text` for every token of `forbidden` in the sources under `src`, outside
/// comments.
fn scan(src: &Path, forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    let mut files = Vec::new();
    sources(src, &mut files);
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable source");
        for (i, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") || line.contains("tidy: lookup only") {
                continue;
            }
            // Drop a trailing comment so prose can name the things it forbids.
            let code = code.split(" //").next().unwrap_or(code);
            if let Some(tok) = forbidden.iter().find(|t| code.contains(*t)) {
                let rel = file.strip_prefix(root()).unwrap_or(&file);
                found.push(format!(
                    "{}:{}: `{tok}` in: {}",
                    rel.display(),
                    i + 1,
                    line.trim()
                ));
            }
        }
    }
    found
}

fn violations(rule: &Rule) -> Vec<String> {
    rule.crates
        .iter()
        .flat_map(|krate| {
            let src = root().join("crates").join(krate).join("src");
            assert!(src.is_dir(), "rule {:?}: no crate {krate}", rule.name);
            scan(&src, rule.forbidden)
        })
        .collect()
}

fn check(rule: &Rule) {
    let v = violations(rule);
    assert!(
        v.is_empty(),
        "tidy rule broken: {}\nwhy: {}\n{}",
        rule.name,
        rule.why,
        v.join("\n")
    );
}

#[test]
fn numerical_crates_do_no_file_io() {
    check(&RULES[0]);
}

#[test]
fn numerical_crates_never_print() {
    check(&RULES[1]);
}

#[test]
fn no_os_seeded_randomness() {
    check(&RULES[2]);
}

#[test]
fn no_hash_ordered_collections_in_result_paths() {
    check(&RULES[3]);
}

/// The scanner itself finds what it is looking for (a rule that can never fire proves nothing),
/// and skips comments and test modules.
#[test]
fn the_scanner_finds_a_planted_violation() {
    let dir = tempfile_dir();
    std::fs::write(
        dir.join("lib.rs"),
        "// println! in a comment is fine\nfn f() { println!(\"x\"); } // trailing println!\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("tests.rs"),
        "fn t() { println!(\"in a test\"); }\n",
    )
    .unwrap();
    let hits = scan(&dir, &["println!"]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert!(hits[0].contains("lib.rs:2:"), "{hits:?}");
}

/// A fresh directory under target/ (the xtask crate has no tempfile dependency).
fn tempfile_dir() -> PathBuf {
    let dir = root()
        .join("target")
        .join(format!("tidy-selftest-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
