//! Integration tests for repgeom-report: tables, figures, summary and index page, all driven by
//! one synthetic results table built here.

mod figures;
mod summary;
mod table;

use repgeom_report::{ResultsTable, Row};

/// Rounds to 4 decimals so files and snapshots stay short.
fn r4(v: f64) -> f64 {
    (v * 1e4).round() / 1e4
}

/// (model, family, d, n_layers)
const MODELS: [(&str, &str, u32, u32); 3] = [
    ("pythia-70m", "pythia", 512, 7),
    ("pythia-410m", "pythia", 1024, 25),
    ("pythia-2.8b", "pythia", 2560, 33),
];

/// A PGA z profile shaped like the study: small models collapse late (not in the final layer),
/// large ones stay positive. `ccr` softens the collapse; `progress` in [0, 1] is training progress.
fn z_profile(d: u32, rd: f64, last: bool, ccr: u32, progress: f64) -> f64 {
    let base = 3.0 + 12.0 * (std::f64::consts::PI * rd).sin();
    if d >= 2048 {
        return base * (0.5 + 0.5 * progress) + 4.0;
    }
    let dip = if (0.6..0.99).contains(&rd) && !last {
        let depth = if d >= 1024 { 70.0 } else { 30.0 };
        -depth * progress * (1.0 - (rd - 0.8).abs() * 4.0).max(0.2)
    } else {
        0.0
    };
    let dip = match ccr {
        1 => dip,
        5 => dip * 0.15,
        _ => dip * 0.05,
    };
    base + dip
}

/// The synthetic results table every test uses.
fn fixture() -> ResultsTable {
    let mut rows = Vec::new();
    let ckpts: [(u64, f64); 3] = [(1000, 0.1), (16000, 0.5), (143000, 1.0)];
    for (mi, &(model, family, d, nl)) in MODELS.iter().enumerate() {
        let row = |layer: u32, metric: &str, variant: &str, value: f64| {
            Row::new(model, family, d, layer, nl, metric, variant, r4(value))
                .with_checkpoint("step143000", Some(143000))
                .with_synthetic(true)
        };
        for layer in 0..nl {
            let rd = repgeom_report::relative_depth(layer, nl);
            let last = layer + 1 == nl;
            for &(step, progress) in &ckpts {
                let z = z_profile(d, rd, last, 1, progress);
                rows.push(
                    row(layer, "pga_z", "ccr1", z)
                        .with_checkpoint(format!("step{step}"), Some(step))
                        .with_null(
                            r4(0.2 + 0.01 * rd),
                            0.01,
                            if z > 2.0 { 0.0099 } else { 0.5 },
                        ),
                );
            }
            for c in [5, 10] {
                rows.push(row(
                    layer,
                    "pga_z",
                    &format!("ccr{c}"),
                    z_profile(d, rd, last, c, 1.0),
                ));
            }
            let collapse = d < 2048 && (0.6..0.99).contains(&rd) && !last;
            for (k, pc) in ["pc1", "pc2", "pc3"].iter().enumerate() {
                let share = if collapse && k == 0 {
                    0.02
                } else {
                    0.35 / (k as f64 + 1.0) + 0.1 * rd
                };
                rows.push(row(layer, "pc_readout_share", pc, share));
            }
            rows.push(row(
                layer,
                "rankme",
                "",
                40.0 + 10.0 * rd + mi as f64 * 30.0,
            ));
            rows.push(row(layer, "alpha_req", "", 0.9 + 0.1 * rd));
            rows.push(row(layer, "isotropy", "", 0.3 - 0.1 * rd));
            rows.push(row(
                layer,
                "condition_number",
                "",
                10f64.powf(2.0 + 2.0 * rd + mi as f64),
            ));
            rows.push(row(
                layer,
                "probe_accuracy",
                "",
                0.6 + 0.25 * (std::f64::consts::PI * rd).sin(),
            ));
        }
        for (i, step) in [0u64, 1000, 4000, 16000, 64000, 143000]
            .into_iter()
            .enumerate()
        {
            let loss = 10.5 - 1.2 * i as f64 - (d as f64).log2() * 0.1 * i as f64 / 5.0;
            rows.push(
                row(0, "val_loss", "", loss).with_checkpoint(format!("step{step}"), Some(step)),
            );
        }
    }
    // cross-model: pythia-410m vs pythia-2.8b, per layer of the first model
    let (m, f, d, nl) = MODELS[1];
    for layer in 0..nl {
        let rd = repgeom_report::relative_depth(layer, nl);
        for (v, value, std) in [
            ("full", 0.45 + 0.1 * rd, None),
            ("readout", 0.6 + 0.1 * rd, None),
            ("random", 0.4, Some(0.03)),
        ] {
            let mut r = Row::new(m, f, d, layer, nl, "distance_spearman", v, r4(value))
                .with_checkpoint("step143000", Some(143000))
                .with_other_model("pythia-2.8b")
                .with_synthetic(true);
            if let Some(s) = std {
                r = r.with_null(0.4, s, 0.5);
            }
            rows.push(r);
        }
    }
    ResultsTable::new(rows).expect("fixture is valid")
}

/// A small table for the CSV snapshot.
fn small_fixture() -> ResultsTable {
    let rows = vec![
        Row::new("m-small", "toy", 64, 2, 3, "pga_z", "ccr1", -3.25).with_null(0.125, 0.05, 0.99),
        Row::new("m-small", "toy", 64, 0, 3, "pga_z", "ccr1", 4.5).with_null(0.1, 0.02, 0.0099),
        Row::new("m-small", "toy", 64, 1, 3, "rankme", "", 12.75),
        Row::new(
            "m-small",
            "toy",
            64,
            1,
            3,
            "condition_number",
            "",
            f64::INFINITY,
        ),
        Row::new("m-small", "toy", 64, 0, 3, "val_loss", "", 3.5)
            .with_checkpoint("step10", Some(10)),
        Row::new(
            "m-small",
            "toy",
            64,
            1,
            3,
            "distance_spearman",
            "readout",
            0.5,
        )
        .with_other_model("m-big, v2"),
    ];
    ResultsTable::new(rows).expect("small fixture is valid")
}

/// [`fixture`] plus, beside every `pga_z` row of variant `ccr1`, the `pga_p_two_sided` row the
/// PGA metric emits (the floor 2/101 when |z| > 2, else 0.5), which the summary's
/// collapse-zone rule needs.
fn fixture_with_p() -> ResultsTable {
    let mut rows = fixture().into_rows();
    let p: Vec<Row> = rows
        .iter()
        .filter(|r| r.metric == "pga_z" && r.variant == "ccr1")
        .map(|r| {
            let mut q = r.clone();
            q.metric = "pga_p_two_sided".into();
            q.value = if r.value.abs() > 2.0 {
                2.0 / 101.0
            } else {
                0.5
            };
            q.null_mean = None;
            q.null_std = None;
            q.p_value = None;
            q
        })
        .collect();
    rows.extend(p);
    ResultsTable::new(rows).expect("fixture is valid")
}

/// `t` with every row marked as real (not synthetic).
fn as_real(t: &ResultsTable) -> ResultsTable {
    ResultsTable::new(
        t.rows()
            .iter()
            .cloned()
            .map(|r| r.with_synthetic(false))
            .collect(),
    )
    .expect("same rows, same keys")
}
