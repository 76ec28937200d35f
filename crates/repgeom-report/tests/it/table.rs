//! Tables: file formats, canonical order, round trips, validation and the text formatter.

use repgeom_report::{Column, Error, ResultsTable, Row, format_table};

use super::{fixture, small_fixture};

/// Writes `table` to `name` in a fresh temp dir and returns the bytes.
fn write_bytes(table: &ResultsTable, name: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(name);
    table.write(&path).expect("write");
    std::fs::read(&path).expect("read back")
}

/// Asserts byte equality, showing a little context around the first difference.
fn same_bytes(a: &[u8], b: &[u8], what: &str) {
    if a == b {
        return;
    }
    let i = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let ctx = |v: &[u8]| {
        String::from_utf8_lossy(&v[i.saturating_sub(80)..(i + 80).min(v.len())]).into_owned()
    };
    panic!(
        "{what}: lengths {} vs {}, first difference at byte {i}:\n{}\n---\n{}",
        a.len(),
        b.len(),
        ctx(a),
        ctx(b)
    );
}

/// Write, read back, write again: the second file must be byte-identical to the first.
fn check_round_trip(table: &ResultsTable, name: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(name);
    table.write(&path).expect("write");
    let back = ResultsTable::read(&path).expect("read");
    assert_eq!(back.len(), table.len(), "{name}: row count");
    let again = dir.path().join(format!("again_{name}"));
    back.write(&again).expect("write again");
    same_bytes(
        &std::fs::read(&path).unwrap(),
        &std::fs::read(&again).unwrap(),
        &format!("{name}: round trip changed the file"),
    );
}

#[test]
fn csv_snapshot() {
    let csv = String::from_utf8(write_bytes(&small_fixture(), "t.csv")).unwrap();
    insta::assert_snapshot!(csv);
}

#[test]
fn byte_identical_writes_whatever_the_input_order() {
    let t = fixture();
    let mut reversed = t.clone().into_rows();
    reversed.reverse();
    let r = ResultsTable::new(reversed).unwrap();
    for name in ["t.csv", "t.parquet", "t.json"] {
        let a = write_bytes(&t, name);
        same_bytes(
            &a,
            &write_bytes(&t, name),
            &format!("{name}: two writes differ"),
        );
        same_bytes(
            &a,
            &write_bytes(&r, name),
            &format!("{name}: input order leaks into the file"),
        );
    }
}

#[test]
fn round_trips_keep_every_bit() {
    for t in [fixture(), small_fixture()] {
        for name in ["t.csv", "t.parquet", "t.json"] {
            check_round_trip(&t, name);
        }
    }
}

#[test]
fn dataframe_round_trip() {
    let t = small_fixture();
    let df = t.to_dataframe().unwrap();
    assert_eq!(df.width(), Column::ALL.len());
    let back = ResultsTable::from_dataframe(&df).unwrap();
    assert_eq!(
        format_table(back.rows(), &Column::ALL),
        format_table(t.rows(), &Column::ALL)
    );
    assert!(back.rows()[0].value.to_bits() == t.rows()[0].value.to_bits());
}

#[test]
fn format_table_snapshot() {
    let cols = [
        "model",
        "layer",
        "metric",
        "variant",
        "value",
        "p_value",
        "other_model",
    ]
    .map(|c| Column::from_name(c).unwrap());
    insta::assert_snapshot!(format_table(small_fixture().rows(), &cols));
}

#[test]
fn bad_input_is_a_clear_error() {
    let ok = || Row::new("m", "f", 8, 1, 3, "pga_z", "ccr1", 1.0);
    let mut shifted = ok();
    shifted.relative_depth = 0.9;
    let cases: Vec<(&str, Vec<Row>)> = vec![
        ("duplicate", vec![ok(), ok()]),
        (
            "layer out of range",
            vec![Row::new("m", "f", 8, 3, 3, "pga_z", "", 1.0)],
        ),
        ("relative depth", vec![shifted]),
        (
            "empty model",
            vec![Row::new("", "f", 8, 0, 3, "pga_z", "", 1.0)],
        ),
    ];
    let mut out = String::new();
    for (what, rows) in cases {
        let msg = match ResultsTable::new(rows) {
            Ok(_) => "accepted".to_owned(),
            Err(e) => e.to_string(),
        };
        out.push_str(&format!("{what}: {msg}\n"));
    }
    let unknown = ResultsTable::read(std::path::Path::new("results.xlsx"));
    out.push_str(&format!(
        "unknown format: {}\n",
        unknown.err().map(|e| e.to_string()).unwrap_or_default()
    ));
    let no_col = ResultsTable::from_dataframe(&repgeom_report::DataFrame::empty());
    assert!(matches!(no_col, Err(Error::BadColumn { .. })));
    insta::assert_snapshot!(out);
}

/// Rows with extra numbers: two `pga_z` rows with different extras and a row without any.
fn with_extras() -> ResultsTable {
    ResultsTable::new(vec![
        Row::new("m", "f", 64, 0, 3, "pga_z", "ccr1", 4.5)
            .with_null(0.2, 0.05, 0.01)
            .with_extra("k", 8.0)
            .with_extra("rho_readout", 0.91),
        Row::new("m", "f", 64, 1, 3, "pga_z", "ccr1", -1.25).with_extra("k", 8.0),
        Row::new("m", "f", 64, 1, 3, "rankme", "", 12.5),
    ])
    .unwrap()
}

#[test]
fn extras_are_columns_after_the_schema_and_round_trip() {
    let t = with_extras();
    assert_eq!(
        t.extra_columns().into_iter().collect::<Vec<_>>(),
        ["k", "rho_readout"]
    );
    let csv = String::from_utf8(write_bytes(&t, "t.csv")).unwrap();
    let header = csv.lines().next().unwrap();
    assert!(header.ends_with(",synthetic,k,rho_readout"), "{header}");
    for name in ["t.csv", "t.parquet", "t.json"] {
        check_round_trip(&t, name);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        t.write(&path).unwrap();
        assert_eq!(ResultsTable::read(&path).unwrap(), t, "{name}");
    }
    // a table without extras keeps exactly the 16 schema columns
    let plain = String::from_utf8(write_bytes(&small_fixture(), "p.csv")).unwrap();
    assert!(
        plain
            .lines()
            .next()
            .unwrap()
            .ends_with(",other_model,synthetic")
    );
    // an extra may not shadow a schema column
    let bad = ResultsTable::new(vec![
        Row::new("m", "f", 64, 0, 3, "pga_z", "", 1.0).with_extra("value", 2.0),
    ]);
    assert!(matches!(bad, Err(Error::InvalidRow { .. })), "{bad:?}");
}

#[test]
fn tidy_cells_snapshot() {
    use repgeom_report::{CellFormat, tidy_cells};
    let t = with_extras();
    let rows: Vec<Row> = t
        .rows()
        .iter()
        .cloned()
        .map(|r| r.with_other_model("b").with_extra("other_layer", 2.0))
        .collect();
    let cells = tidy_cells(&rows, &["model", "layer", "other_model", "other_layer"]);
    insta::assert_snapshot!(format!(
        "{}\n{}\n{}",
        cells.render(CellFormat::Text),
        cells.render(CellFormat::Csv),
        cells.render(CellFormat::JsonLines)
    ));
}
