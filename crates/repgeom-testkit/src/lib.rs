//! `repgeom-testkit` holds what the workspace's tests share, so that a rule of testing is
//! written once: the tolerance rule ([`within`], and [`assert_close`] / [`assert_all_close`]
//! on top of it, which name the quantity, both values and the tolerance on failure), the
//! hostile names of `fixtures/hub/hostile-names.json` ([`hostile_names`]) that the checkpoint
//! reader, the hub client and the command line are all tested against, and a listing of a
//! folder tree ([`everything`]) to show that a refused name wrote nothing.
//!
//! Key design decision: one absolute tolerance per comparison, chosen and named by the test
//! (a test's tolerance constants say why they are what they are); a relative comparison is
//! written as `tol * scale`, visibly. NaN is close only to NaN, so a metric that starts
//! returning NaN fails every comparison with a number.
//!
//! It is not a test framework and not a place for fixtures' data: the fixtures live in
//! `fixtures/` with the scripts that made them. Only the conformance suite of
//! `repgeom-metrics`, itself a test every metric must pass, uses it outside the tests.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Whether `found` lies within `tol` of `expected`: `|found − expected| ≤ tol`, or both NaN,
/// or both the same infinity.
///
/// ```
/// use repgeom_testkit::within;
/// assert!(within(1.0 + 1e-13, 1.0, 1e-12));
/// assert!(!within(1.1, 1.0, 1e-12));
/// assert!(within(f64::NAN, f64::NAN, 0.0) && !within(f64::NAN, 1.0, 1.0));
/// ```
pub fn within(found: f64, expected: f64, tol: f64) -> bool {
    if found.is_nan() || expected.is_nan() {
        return found.is_nan() && expected.is_nan();
    }
    found == expected || (found - expected).abs() <= tol
}

/// Asserts [`within`], naming `what`, both values and the tolerance on failure.
///
/// ```
/// repgeom_testkit::assert_close(0.5 + 1e-15, 0.5, 1e-12, "a half");
/// ```
#[track_caller]
pub fn assert_close(found: f64, expected: f64, tol: f64, what: &str) {
    assert!(
        within(found, expected, tol),
        "{what}: found {found}, expected {expected} (tol {tol})"
    );
}

/// Asserts [`within`] elementwise (and equal lengths), naming the first element that is not.
///
/// ```
/// repgeom_testkit::assert_all_close([1.0f32, 2.0], [1.0, 2.0 + 1e-9], 1e-6, "row 0");
/// ```
#[track_caller]
pub fn assert_all_close<F, E>(
    found: impl IntoIterator<Item = F>,
    expected: impl IntoIterator<Item = E>,
    tol: f64,
    what: &str,
) where
    F: Into<f64>,
    E: Into<f64>,
{
    let found: Vec<f64> = found.into_iter().map(Into::into).collect();
    let expected: Vec<f64> = expected.into_iter().map(Into::into).collect();
    assert_eq!(found.len(), expected.len(), "{what}: length");
    for (i, (&f, &e)) in found.iter().zip(&expected).enumerate() {
        assert!(
            within(f, e, tol),
            "{what}, element {i}: found {f}, expected {e} (tol {tol})"
        );
    }
}

/// The workspace's root folder (where `fixtures/` lives).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The hostile names of `fixtures/hub/hostile-names.json` (`..`, absolute paths, drive
/// prefixes, backslashes, NUL and other control characters, over-long components, ...): one
/// table for the checkpoint reader, the hub client and the command line.
///
/// ```
/// let names = repgeom_testkit::hostile_names();
/// assert!(names.iter().any(|n| n == ".."));
/// ```
pub fn hostile_names() -> Vec<String> {
    let path = workspace_root().join("fixtures/hub/hostile-names.json");
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let js: serde_json::Value =
        serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    js["names"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: no `names` list", path.display()))
        .iter()
        .map(|e| {
            e["name"]
                .as_str()
                .expect("each name is a string")
                .to_owned()
        })
        .collect()
}

/// Every path under `dir` (files, folders and links, links not followed), relative to it:
/// compare two listings to show that nothing was written.
pub fn everything(dir: &Path) -> BTreeSet<PathBuf> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeSet<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if let Ok(rel) = p.strip_prefix(base) {
                out.insert(rel.to_path_buf());
            }
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
                walk(base, &p, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(dir, dir, &mut out);
    out
}
