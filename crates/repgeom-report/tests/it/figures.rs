//! Figures: SVG structure snapshots, PNG sanity, missing data.

use repgeom_report::{ALL_FIGURES, Error, Figure, FigureOptions, ResultsTable, Row, ZScale};

use super::{as_real, fixture};

/// Text of every `<text>` element, in document order.
fn svg_texts(svg: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find("<text") {
        rest = &rest[i..];
        let Some(gt) = rest.find('>') else { break };
        let Some(end) = rest.find("</text>") else {
            break;
        };
        out.push(
            rest[gt + 1..end]
                .trim()
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&"),
        );
        rest = &rest[end..];
    }
    out
}

/// The structure of one figure: title, caption, every text and the count of drawn lines.
fn structure(f: &Figure) -> String {
    let texts = svg_texts(&f.svg);
    format!(
        "name: {}\ntitle: {}\ncaption: {}\nsize: {:?}\npolylines: {}\ntexts:\n{}\n",
        f.name,
        f.title,
        f.caption,
        f.size(),
        f.svg.matches("<polyline").count(),
        texts
            .iter()
            .map(|t| format!("  {t}"))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

fn check(name: &str, table: &ResultsTable, opts: &FigureOptions) -> Figure {
    let (_, f) = ALL_FIGURES
        .iter()
        .find(|(n, _)| *n == name)
        .expect("known figure");
    let fig = f(table, opts).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(fig.name, name);
    assert!(fig.svg.starts_with("<svg"), "{name}: not an SVG");
    insta::assert_snapshot!(name, structure(&fig));
    fig
}

#[test]
fn every_figure_structure() {
    let t = fixture();
    let t9 = with_k_sweep(&t);
    let t10 = with_layer_table(&t);
    let t11 = with_token_rows(&t);
    let o = FigureOptions::default();
    for (name, _) in ALL_FIGURES {
        // The fixture has one k per model; the k-sensitivity figure needs a k sweep.
        let table = match name {
            "fig9_k_sensitivity" => &t9,
            "fig10_layer_heatmaps" => &t10,
            "fig11_spectral_tokens" => &t11,
            _ => &t,
        };
        let fig = check(name, table, &o);
        let texts = svg_texts(&fig.svg);
        assert!(texts.contains(&fig.title), "{name}: title missing");
        // for looking at the figures by eye: REPGEOM_REPORT_DUMP=/some/dir cargo test -p repgeom-report
        if let Some(dir) = std::env::var_os("REPGEOM_REPORT_DUMP") {
            fig.save(std::path::Path::new(&dir)).unwrap();
        }
    }
}

#[test]
fn fig1_has_one_legend_entry_per_model_and_marks_size() {
    let t = fixture();
    let f = repgeom_report::fig1_pga_z_by_layer(&t, &FigureOptions::default()).unwrap();
    let texts = svg_texts(&f.svg);
    for m in [
        "pythia-70m (d=512)",
        "pythia-410m (d=1024)",
        "pythia-2.8b (d=2560)",
    ] {
        assert_eq!(texts.iter().filter(|t| *t == m).count(), 1, "{m}");
    }
    assert!(texts.iter().any(|t| t.contains("dashed blue: small")));
    assert!(
        texts.iter().any(|t| t.contains("symlog")),
        "z spans -70..20: symlog expected"
    );
    let lin = repgeom_report::fig1_pga_z_by_layer(
        &t,
        &FigureOptions {
            z_scale: ZScale::Linear,
            ..FigureOptions::default()
        },
    )
    .unwrap();
    assert!(!svg_texts(&lin.svg).iter().any(|t| t.contains("symlog")));
}

#[test]
fn png_is_deterministic_and_sized() {
    let t = fixture();
    let f = repgeom_report::fig3_ccr_ablation(&t, &FigureOptions::default()).unwrap();
    let a = f.png().unwrap();
    assert_eq!(&a[..8], b"\x89PNG\r\n\x1a\n");
    // IHDR: width and height, big-endian, at bytes 16..24
    let w = u32::from_be_bytes(a[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(a[20..24].try_into().unwrap());
    assert_eq!((w, h), (1200, 800));
    assert_eq!(a, f.png().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let (svg, png) = f.save(dir.path()).unwrap();
    assert_eq!(std::fs::read(png).unwrap(), a);
    assert_eq!(std::fs::read_to_string(svg).unwrap(), f.svg);
}

#[test]
fn missing_metrics_are_reported() {
    let only_loss = ResultsTable::new(vec![
        Row::new("m", "f", 64, 0, 3, "val_loss", "", 3.0).with_checkpoint("step1", Some(1)),
    ])
    .unwrap();
    let o = FigureOptions::default();
    let mut out = String::new();
    for (name, f) in ALL_FIGURES {
        let line = match f(&only_loss, &o) {
            Ok(_) => "ok".to_owned(),
            Err(e @ Error::NoData { .. }) => e.to_string(),
            Err(e) => format!("unexpected error: {e}"),
        };
        out.push_str(&format!("{name}: {line}\n"));
    }
    // a partially missing figure still draws, saying which panel has no data
    let partial = ResultsTable::new(vec![
        Row::new("m", "f", 64, 0, 3, "rankme", "", 3.0),
        Row::new("m", "f", 64, 1, 3, "rankme", "", 4.0),
    ])
    .unwrap();
    let f5 = repgeom_report::fig5_spectral_vs_pga(&partial, &o).unwrap();
    let texts = svg_texts(&f5.svg);
    out.push_str(&format!(
        "fig5 partial: {:?}\n",
        texts
            .iter()
            .filter(|t| t.starts_with("no data"))
            .collect::<Vec<_>>()
    ));
    let bad = FigureOptions {
        small_max_d: 4096,
        ..FigureOptions::default()
    };
    out.push_str(&format!(
        "bad options: {}\n",
        repgeom_report::fig1_pga_z_by_layer(&fixture(), &bad)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    ));
    insta::assert_snapshot!(out);
}

#[test]
fn non_finite_values_are_skipped_and_counted() {
    let mut rows = fixture().into_rows();
    let i = rows
        .iter()
        .position(|r| {
            r.metric == "pga_z"
                && r.variant == "ccr1"
                && r.model == "pythia-2.8b"
                && r.step == Some(143000)
                && r.layer == 5
        })
        .unwrap();
    rows[i].value = f64::NAN;
    let t = ResultsTable::new(rows).unwrap();
    let f = repgeom_report::fig1_pga_z_by_layer(&t, &FigureOptions::default()).unwrap();
    let texts = svg_texts(&f.svg);
    assert!(
        texts
            .iter()
            .any(|t| t.contains("1 non-finite value(s) not drawn")),
        "{texts:?}"
    );
    // the summary ignores the NaN layer instead of reporting NaN
    let s = repgeom_report::summary(&t);
    let row = s.rows.iter().find(|r| r.model == "pythia-2.8b").unwrap();
    assert!(row.peak.0.is_finite() && row.min.0.is_finite());
    assert_ne!(row.peak.1, 5);
}

/// The fixture plus PGA rows at k = 25, 50 and 200 (variants `ccr1_k<k>`) for two models at
/// their final checkpoint: z grows with k/d, faster for the larger model.
fn with_k_sweep(t: &ResultsTable) -> ResultsTable {
    let mut rows = t.rows().to_vec();
    let extra: Vec<Row> = t
        .rows()
        .iter()
        .filter(|r| {
            r.metric == "pga_z"
                && r.variant == "ccr1"
                && r.step == Some(143000)
                && r.model != "pythia-410m"
        })
        .flat_map(|r| {
            [25u32, 50, 200].map(|k| {
                let mut x = r.clone();
                x.variant = format!("ccr1_k{k}");
                x.value = r.value * (f64::from(k) / 100.0).sqrt() + f64::from(r.d) / 1000.0;
                x
            })
        })
        .collect();
    rows.extend(extra);
    ResultsTable::new(rows).unwrap()
}

/// The fixture with RankMe and isotropy over every token (`*_all_tokens`, as a study with
/// `spectral_tokens` writes them) at each model's final checkpoint: the value at 2^10 … 2^14
/// tokens and over all 20,000, settling to the final value.
fn with_token_rows(t: &ResultsTable) -> ResultsTable {
    let mut rows = t.rows().to_vec();
    let extra: Vec<Row> = t
        .rows()
        .iter()
        .filter(|r| (r.metric == "rankme" || r.metric == "isotropy") && r.step == Some(143000))
        .flat_map(|r| {
            let tokens = [1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 20000.0];
            tokens.into_iter().enumerate().map(move |(i, n)| {
                let last = i == tokens.len() - 1;
                let mut x = r.clone();
                x.metric = format!("{}{}", r.metric, repgeom_report::ALL_TOKENS);
                x.variant =
                    repgeom_report::all_tokens_variant(&r.variant, (!last).then_some(n as u64));
                x.value = r.value * (1.0 - 0.3 / f64::from(1u32 << i));
                x.extra.insert("n_tokens".into(), n);
                if last {
                    x.extra.insert("tolerance".into(), 0.01);
                    x.extra.insert("stable_from".into(), 16384.0);
                }
                x
            })
        })
        .collect();
    rows.extend(extra);
    ResultsTable::new(rows).unwrap()
}

/// The fixture with two layer × layer tables (pythia-70m against pythia-410m, layers 0-3 by
/// 0-4): CKA (its cells near the diagonal significant) and procrustes (no null), as
/// `repgeom compare` writes them.
fn with_layer_table(t: &ResultsTable) -> ResultsTable {
    let mut rows = t.rows().to_vec();
    for i in 0..4u32 {
        for j in 0..5u32 {
            let near = (f64::from(i) / 3.0 - f64::from(j) / 4.0).abs();
            let p = if near < 0.3 { 0.001 } else { 0.4 };
            rows.push(
                Row::new(
                    "pythia-70m",
                    "pythia",
                    512,
                    i,
                    7,
                    "cka_linear",
                    "biased",
                    0.9 - near,
                )
                .with_null(0.1, 0.02, p)
                .with_other_model("pythia-410m")
                .with_extra("other_layer", f64::from(j)),
            );
            rows.push(
                Row::new(
                    "pythia-70m",
                    "pythia",
                    512,
                    i,
                    7,
                    "procrustes",
                    "",
                    0.2 + near,
                )
                .with_other_model("pythia-410m")
                .with_extra("other_layer", f64::from(j)),
            );
        }
    }
    ResultsTable::new(rows).unwrap()
}

/// Figure 10: one panel per metric, layers with their relative depth on both axes, a dot per
/// significant cell (and none for a metric without a null); figure 7 leaves the cells out.
#[test]
fn fig10_marks_significant_cells_and_fig7_ignores_them() {
    let t = with_layer_table(&fixture());
    let f = repgeom_report::fig10_layer_heatmaps(&t, &FigureOptions::default()).unwrap();
    let texts = svg_texts(&f.svg);
    assert!(texts.iter().any(|t| t == "cka_linear biased"));
    assert!(texts.iter().any(|t| t == "pythia-410m layer (depth)"));
    // pythia-410m has 25 hidden states in the fixture: layer 4 is at depth 4/24.
    assert!(texts.iter().any(|t| t == "4 (0.17)"), "{texts:?}");
    assert!(texts.iter().any(|t| t == "3 (0.50)"), "{texts:?}");
    let significant = t
        .rows()
        .iter()
        .filter(|r| r.extra.contains_key("other_layer") && r.p_value.is_some_and(|p| p <= 0.05))
        .count();
    assert!(significant > 0);
    assert_eq!(
        f.svg.matches("<circle").count(),
        significant,
        "one dot per significant cell"
    );
    let fig7 = |t: &ResultsTable| {
        repgeom_report::fig7_cross_model(t, &FigureOptions::default())
            .unwrap()
            .svg
    };
    assert!(fig7(&t) == fig7(&fixture()), "figure 7 drew the cells");
    let e =
        repgeom_report::fig10_layer_heatmaps(&fixture(), &FigureOptions::default()).unwrap_err();
    assert!(matches!(e, Error::NoData { .. }), "{e}");
}

/// The RGB pixel at `(x, y)` of a PNG written by `Figure::png`.
fn pixel(png: &[u8], x: usize, y: usize) -> [u8; 3] {
    let mut reader = png::Decoder::new(std::io::Cursor::new(png))
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let i = (y * info.width as usize + x) * 3;
    [buf[i], buf[i + 1], buf[i + 2]]
}

#[test]
fn every_figure_file_of_synthetic_rows_carries_the_banner() {
    let t = with_token_rows(&with_layer_table(&with_k_sweep(&fixture())));
    assert!(t.any_synthetic());
    let real = as_real(&t);
    let banner = "SYNTHETIC DATA: these results come from synthetic inputs, not real models";
    let o = FigureOptions::default();
    for (name, f) in ALL_FIGURES {
        let fig = f(&t, &o).unwrap();
        assert!(
            svg_texts(&fig.svg).iter().any(|s| s == banner),
            "{name}: SVG"
        );
        // The PNG's top strip is the red banner; without synthetic rows it is white.
        let png = fig.png().unwrap();
        assert_eq!(pixel(&png, 5, 5), [187, 0, 0], "{name}: PNG banner");
        let plain = f(&real, &o).unwrap();
        assert!(
            !plain.svg.contains("SYNTHETIC"),
            "{name}: real rows, no banner"
        );
        assert_eq!(
            pixel(&plain.png().unwrap(), 5, 5),
            [255, 255, 255],
            "{name}"
        );
    }
}

#[test]
fn fig7_panels_sort_by_width_not_name() {
    // Names sort "a-wide" < "m-mid" < "z-narrow"; widths the other way round.
    let models = [("a-wide", 2048u32), ("m-mid", 1024), ("z-narrow", 512)];
    let mut rows = Vec::new();
    for (m, d) in models {
        rows.push(Row::new(m, "f", d, 0, 2, "rankme", "", 1.0));
    }
    for (a, da) in models {
        for (b, _) in models.iter().filter(|(b, _)| *b != a) {
            for layer in 0..2 {
                rows.push(
                    Row::new(a, "f", da, layer, 2, "distance_spearman", "readout", 0.5)
                        .with_other_model(*b),
                );
            }
        }
    }
    let t = ResultsTable::new(rows).unwrap();
    let f = repgeom_report::fig7_cross_model(&t, &FigureOptions::default()).unwrap();
    let titles: Vec<String> = svg_texts(&f.svg)
        .into_iter()
        .filter(|s| s.contains(" vs "))
        .collect();
    assert_eq!(
        titles,
        [
            "z-narrow vs m-mid",
            "z-narrow vs a-wide",
            "m-mid vs z-narrow",
            "m-mid vs a-wide",
            "a-wide vs z-narrow",
            "a-wide vs m-mid",
        ]
    );
}

#[test]
fn fig9_is_drawn_only_with_several_k_per_model() {
    let o = FigureOptions::default();
    let e = repgeom_report::fig9_k_sensitivity(&fixture(), &o).unwrap_err();
    assert!(matches!(e, Error::NoData { .. }), "{e}");
    assert!(e.to_string().contains("two or more k per model"), "{e}");
    let f = repgeom_report::fig9_k_sensitivity(&with_k_sweep(&fixture()), &o).unwrap();
    let texts = svg_texts(&f.svg);
    // Only the two swept models are drawn; pythia-410m has one k.
    assert!(texts.iter().any(|t| t == "pythia-70m (d=512)"));
    assert!(texts.iter().any(|t| t == "pythia-2.8b (d=2560)"));
    assert!(!texts.iter().any(|t| t.contains("pythia-410m")));
    // One line per model in each of the two panels.
    assert!(f.svg.matches("<polyline").count() >= 4, "{}", structure(&f));
}

/// With mutual kNN and CKA rows beside distance agreement, each pair gets a row of panels:
/// distance first, then mutual kNN with its permutation null keyed inside, then CKA.
#[test]
fn fig7_draws_a_column_per_pair_metric() {
    let mut rows = Vec::new();
    for (a, da, b) in [("small", 512u32, "large"), ("large", 1024, "small")] {
        for layer in 0..3 {
            let x = f64::from(layer);
            rows.push(
                Row::new(
                    a,
                    "f",
                    da,
                    layer,
                    3,
                    "distance_spearman",
                    "full",
                    0.5 + 0.1 * x,
                )
                .with_other_model(b),
            );
            rows.push(
                Row::new(a, "f", da, layer, 3, "mutual_knn", "", 0.3 + 0.05 * x)
                    .with_null(0.03, 0.004, 0.01)
                    .with_other_model(b),
            );
            rows.push(
                Row::new(a, "f", da, layer, 3, "cka_linear", "biased", 0.8).with_other_model(b),
            );
        }
    }
    let t = ResultsTable::new(rows).unwrap();
    let f = repgeom_report::fig7_cross_model(&t, &FigureOptions::default()).unwrap();
    let texts = svg_texts(&f.svg);
    let titles: Vec<&String> = texts
        .iter()
        .filter(|s| {
            s.contains(" vs ") || ["mutual kNN alignment", "linear CKA"].contains(&s.as_str())
        })
        .collect();
    // (each metric's name appears twice per row: panel title and y-axis label)
    assert_eq!(
        titles,
        [
            "small vs large",
            "mutual kNN alignment",
            "mutual kNN alignment",
            "linear CKA",
            "linear CKA",
            "large vs small",
            "mutual kNN alignment",
            "mutual kNN alignment",
            "linear CKA",
            "linear CKA",
        ]
    );
    assert!(texts.iter().any(|s| s == "null (± 1 sd)"), "{texts:?}");
    assert!(
        texts.iter().any(|s| s == "Cross-model agreement"),
        "{texts:?}"
    );
    assert!(
        f.caption.contains("mutual kNN alignment, linear CKA"),
        "{}",
        f.caption
    );
}

#[test]
fn fig5_draws_the_spectral_metrics_it_is_given() {
    let mut rows = Vec::new();
    for layer in 0..3u32 {
        let x = f64::from(layer);
        rows.push(Row::new("m", "f", 64, layer, 3, "pga_z", "ccr1", 2.0 - x));
        rows.push(Row::new("m", "f", 64, layer, 3, "rankme", "", 10.0 + x));
        rows.push(Row::new(
            "m",
            "f",
            64,
            layer,
            3,
            "intrinsic_dim_twonn",
            "",
            5.0 + x,
        ));
    }
    let t = ResultsTable::new(rows).unwrap();
    let o = FigureOptions {
        spectral: vec!["intrinsic_dim_twonn".into(), "rankme".into()],
        ..FigureOptions::default()
    };
    let f = repgeom_report::fig5_spectral_vs_pga(&t, &o).unwrap();
    let texts = svg_texts(&f.svg);
    // one panel per listed metric, in order, after PGA z: no isotropy or condition number
    let titled = |p: &str| texts.iter().position(|t| t.starts_with(p));
    let (twonn, rankme) = (titled("intrinsic_dim_twonn"), titled("RankMe"));
    assert!(
        twonn.is_some() && rankme.is_some() && twonn < rankme,
        "{texts:?}"
    );
    assert!(titled("isotropy").is_none() && titled("condition number").is_none());
    assert!(
        f.caption
            .contains("the per-layer metrics intrinsic_dim_twonn and RankMe"),
        "{}",
        f.caption
    );
    for (spectral, problem) in [
        (vec![], "no metric"),
        (vec!["pga_z".to_owned()], "pga_z"),
        (vec!["rankme".to_owned(), "rankme".to_owned()], "repeated"),
    ] {
        let bad = FigureOptions {
            spectral,
            ..FigureOptions::default()
        };
        let err = repgeom_report::fig5_spectral_vs_pga(&t, &bad).unwrap_err();
        assert!(err.to_string().contains(problem), "{err}");
    }
}
