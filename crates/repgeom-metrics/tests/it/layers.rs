//! The crate's modules stand on floors: each names (`crate::module`) only modules below it, so
//! no import circle can form. The floors are written here; a module that reaches up, or a new
//! module left off the list, fails this test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every module of `src/` by floor, lowest first; a module may use those on lower floors.
const FLOORS: &[&[&str]] = &[
    &["error", "conformance"],
    &["value", "input", "state"],
    &["permute"],
    &["registry"],
    &[
        "pga",
        "spectral",
        "pc_share",
        "streaming",
        "knn",
        "covariance",
    ],
    &["cross", "twonn", "pga_metric", "calibrate"],
    &["alignment", "pga_spectrum", "analysis", "params"],
];

/// The modules a source file names through `crate::`, in paths and in `use crate::{..}` lists.
fn named_modules(src: &str) -> BTreeSet<String> {
    let code: String = src
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let segment = |s: &str| -> String {
            s.chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect()
        };
        if let Some(list) = rest.strip_prefix('{') {
            let end = list.find("};").unwrap_or(list.len());
            for item in list[..end].split(',') {
                let name = segment(item.trim());
                if !name.is_empty() && item.trim()[name.len()..].starts_with("::") {
                    out.insert(name);
                }
            }
        } else {
            let name = segment(rest);
            if !name.is_empty() && rest[name.len()..].starts_with("::") {
                out.insert(name);
            }
        }
    }
    out
}

#[test]
fn modules_use_only_lower_floors() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let floor: BTreeMap<&str, usize> = (FLOORS.iter().enumerate())
        .flat_map(|(i, names)| names.iter().map(move |n| (*n, i)))
        .collect();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            for sub in std::fs::read_dir(&path).unwrap() {
                files.push(sub.unwrap().path());
            }
        } else {
            files.push(path);
        }
    }
    let mut problems = Vec::new();
    for path in files {
        let rel = path.strip_prefix(&src).unwrap();
        let module = rel
            .iter()
            .next()
            .unwrap()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        let name = rel.file_name().unwrap().to_string_lossy();
        if module == "lib" || name.ends_with("tests.rs") || module == "tests" {
            continue; // the root re-exports everything; tests may use anything
        }
        let Some(&own) = floor.get(module.as_str()) else {
            problems.push(format!("{}: module {module} is on no floor", rel.display()));
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap();
        // Unit tests at the end of a file may reach anywhere.
        let text = text.split("#[cfg(test)]").next().unwrap_or("");
        for used in named_modules(text) {
            match floor.get(used.as_str()) {
                Some(&f) if f < own || used == module => {}
                Some(_) => problems.push(format!(
                    "{}: {module} uses {used}, not below it",
                    rel.display()
                )),
                None => {} // a re-export at the root (crate::Pga) or a macro path
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
