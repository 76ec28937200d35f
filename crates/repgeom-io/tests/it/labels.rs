//! read_labels: AG News, CSV with a header, npy integer and float arrays.

use std::path::Path;

use repgeom_io::{read_labels, write_npy_f64};

use crate::{fixture, npy_image, redact};

/// Formats labels (or the error) as one line.
fn check(path: &Path, column: Option<&str>, tmp: Option<&Path>) -> String {
    match read_labels(path, column) {
        Ok(l) => format!("values={:?} classes={:?}", l.values, l.class_names),
        Err(e) => format!("error: {}", redact(&e.to_string(), tmp)),
    }
}

#[test]
fn ag_news_csv_without_header() {
    insta::assert_snapshot!(check(&fixture("ag_news.csv"), None, None), @r#"values=[2, 3, 0, 1] classes=["World", "Sports", "Business", "Sci/Tech"]"#);
}

#[test]
fn csv_with_header_named_column() {
    insta::assert_snapshot!(check(&fixture("labels_header.csv"), Some("topic"), None), @r#"values=[1, 0, 1] classes=["politics", "sports"]"#);
}

#[test]
fn npy_integer_and_integral_float() {
    insta::assert_snapshot!(check(&fixture("labels_i8.npy"), None, None), @r#"values=[0, 2, 1, 2] classes=["0", "1", "2"]"#);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f.npy");
    write_npy_f64(&p, &[3], &[1.0, 0.0, 3.0]).unwrap();
    insta::assert_snapshot!(check(&p, None, None), @r#"values=[1, 0, 3] classes=["0", "1", "2", "3"]"#);
    let p = dir.path().join("u1.npy");
    std::fs::write(&p, npy_image("|u1", false, &[3], &[2, 0, 1])).unwrap();
    insta::assert_snapshot!(check(&p, None, None), @r#"values=[2, 0, 1] classes=["0", "1", "2"]"#);
}

#[test]
fn label_errors() {
    let dir = tempfile::tempdir().unwrap();
    let frac = dir.path().join("frac.npy");
    write_npy_f64(&frac, &[2], &[1.0, 0.5]).unwrap();
    let neg = dir.path().join("neg.npy");
    std::fs::write(
        &neg,
        npy_image(
            "<i8",
            false,
            &[2],
            &[
                1, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255,
            ],
        ),
    )
    .unwrap();
    let bad_ag = dir.path().join("bad_ag.csv");
    std::fs::write(&bad_ag, "\"1\",\"a\",\"b\"\n\"5\",\"c\",\"d\"\n").unwrap();
    let msgs = [
        check(&frac, None, Some(dir.path())),
        check(&neg, None, Some(dir.path())),
        check(&bad_ag, None, Some(dir.path())),
        check(&fixture("labels_header.csv"), Some("label"), None),
        check(&fixture("labels_header.csv"), None, None),
    ];
    insta::assert_snapshot!(msgs.join("\n"));
}
