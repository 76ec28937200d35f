use crate::plot::{Scale, diverging, tick_label};

/// Absolute tolerance for the scale round trips (pure f64 arithmetic on values ≤ 1e4).
const ROUND_TRIP_TOL: f64 = 1e-9;

fn check_scale(scale: Scale, values: &[f64]) {
    for &v in values {
        let back = scale.inv(scale.fwd(v));
        assert!(
            (back - v).abs() <= ROUND_TRIP_TOL * v.abs().max(1.0),
            "{scale:?}: {v} -> {back}"
        );
    }
}

#[test]
fn scales_invert() {
    check_scale(Scale::Linear, &[-3.5, 0.0, 7.25]);
    check_scale(
        Scale::SymLog,
        &[-80.0, -2.0, -0.5, 0.0, 0.5, 2.0, 20.0, 1e4],
    );
    check_scale(Scale::Log10, &[1e-3, 1.0, 123.0, 1e4]);
}

#[test]
fn symlog_is_odd_and_monotone() {
    let s = Scale::SymLog;
    let xs: Vec<f64> = (-100..=100).map(|i| f64::from(i) * 0.9).collect();
    for w in xs.windows(2) {
        assert!(s.fwd(w[0]) < s.fwd(w[1]));
    }
    for &x in &xs {
        assert!((s.fwd(x) + s.fwd(-x)).abs() <= ROUND_TRIP_TOL);
    }
}

#[test]
fn tick_labels_are_short() {
    let got: Vec<String> = [0.0, -50.0, 0.25, 2.5, 1500.0, 1e6, 0.0001]
        .map(tick_label)
        .to_vec();
    assert_eq!(got, ["0", "-50", "0.25", "2.5", "1500", "1e6", "1e-4"]);
}

#[test]
fn diverging_is_white_at_zero_and_saturates() {
    let w = diverging(0.0);
    assert_eq!((w.0, w.1, w.2), (247, 247, 247));
    let (lo, hi) = (diverging(-5.0), diverging(5.0));
    assert!(lo.2 > lo.0, "negative end is blue");
    assert!(hi.0 > hi.2, "positive end is red");
}

/// Renders `table` in every format and compares with the expected text, CSV and JSON lines.
fn check_cells(table: &crate::CellTable, text: &str, csv: &str, json: &str) {
    use crate::CellFormat;
    assert_eq!(table.render(CellFormat::Text), text, "text");
    assert_eq!(table.render(CellFormat::Csv), csv, "csv");
    assert_eq!(table.render(CellFormat::JsonLines), json, "json lines");
}

#[test]
fn cell_table_formats() {
    use crate::{Align, Cell, CellTable};
    let t = CellTable::new(
        vec!["layer".into(), "z".into(), "model".into()],
        vec![
            vec![Cell::Int(3), Cell::float(2.5, 2), Cell::Text("a,b".into())],
            vec![
                Cell::Int(12),
                Cell::float(f64::NAN, 2),
                Cell::Text("μ".into()),
            ],
        ],
    );
    check_cells(
        &t,
        "layer     z  model\n    3  2.50    a,b\n   12            μ\n",
        "layer,z,model\n3,2.5,\"a,b\"\n12,,μ\n",
        "{\"layer\":3,\"model\":\"a,b\",\"z\":2.5}\n{\"layer\":12,\"model\":\"μ\",\"z\":null}\n",
    );
    let ruled = CellTable {
        align: vec![Align::Right, Align::Right, Align::Left],
        rule: true,
        ..t
    };
    check_cells(
        &ruled,
        "layer     z  model\n-----  ----  -----\n    3  2.50  a,b\n   12        μ\n",
        "layer,z,model\n3,2.5,\"a,b\"\n12,,μ\n",
        "{\"layer\":3,\"model\":\"a,b\",\"z\":2.5}\n{\"layer\":12,\"model\":\"μ\",\"z\":null}\n",
    );
}
