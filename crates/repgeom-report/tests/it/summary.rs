//! The summary table and the index page.

use repgeom_report::{FigureOptions, all_figures, index_html, layer_ranges, summary};

use super::{as_real, fixture, fixture_with_p};

#[test]
fn summary_markdown_snapshot() {
    let s = summary(&fixture_with_p());
    insta::assert_snapshot!(s.to_markdown());
}

#[test]
fn summary_csv_snapshot() {
    insta::assert_snapshot!(summary(&fixture_with_p()).to_csv());
}

#[test]
fn collapse_zone_follows_the_rule() {
    let s = summary(&fixture_with_p());
    let row = |m: &str| s.rows.iter().find(|r| r.model == m).unwrap();
    // pythia-410m: 25 layers, dip on relative depth 0.6..0.99, final layer (24) excluded
    let small = row("pythia-410m");
    assert_eq!(layer_ranges(&small.collapse_layers), "15–23");
    assert!(!small.collapse_layers.contains(&24));
    // the large model never goes negative
    assert!(row("pythia-2.8b").collapse_layers.is_empty());
    // CCR-5 shrinks the collapse
    let ccr5 = small.ccr5.as_ref().unwrap();
    assert!(ccr5.negative_layers < small.negative_layers);
    assert!(ccr5.min_z > small.min.0);
    assert_eq!(layer_ranges(&[1, 2, 3, 7, 9, 10]), "1–3, 7, 9–10");
    assert!(
        s.collapse_rule.contains("z < 0 and BH q < 0.05"),
        "{}",
        s.collapse_rule
    );
    assert!(s.to_markdown().contains("z < 0 and q < 0.05"));
}

/// A negative z without a significant q stays out of the collapse zone; a table without
/// p-values has none, and the rule says why.
#[test]
fn collapse_zone_needs_a_significant_q() {
    let mut rows = fixture_with_p().into_rows();
    for r in rows.iter_mut() {
        if r.model == "pythia-410m"
            && r.layer == 20
            && r.metric == "pga_p_two_sided"
            && r.step == Some(143000)
        {
            r.value = 0.5;
        }
    }
    let s = summary(&repgeom_report::ResultsTable::new(rows).unwrap());
    let small = s.rows.iter().find(|r| r.model == "pythia-410m").unwrap();
    assert_eq!(layer_ranges(&small.collapse_layers), "15–19, 21–23");
    assert!(small.min.0 < 0.0);

    let bare = summary(&fixture());
    assert!(bare.rows.iter().all(|r| r.collapse_layers.is_empty()));
    assert!(
        bare.collapse_rule.contains("no pga_p_two_sided rows"),
        "{}",
        bare.collapse_rule
    );
    let csv = bare.to_csv();
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .ends_with(",collapse_layers,collapse_rule")
    );
}

#[test]
fn index_page_has_banner_figures_and_summary() {
    let t = fixture();
    let figs: Vec<_> = all_figures(&t, &FigureOptions::default())
        .into_iter()
        .filter_map(|(_, f)| f.ok())
        .collect();
    let html = index_html(&figs, &summary(&t));
    assert!(html.contains("SYNTHETIC DATA"));
    for f in &figs {
        assert!(
            html.contains(&format!("src=\"{}.png\"", f.name)),
            "{}",
            f.name
        );
    }
    assert_eq!(html.matches("<figure").count(), 8);
    assert!(html.contains("<th>collapse_<wbr>zone</th>"));
    // the collapse rule, the same on every row, is the legend's, not a column of the page
    assert!(!html.contains("collapse_<wbr>rule"));
    // a real (non-synthetic) table has no banner
    let real = as_real(&t);
    assert!(!index_html(&figs, &summary(&real)).contains("SYNTHETIC DATA"));
}

#[test]
fn write_report_writes_everything_and_notes_skips() {
    let dir = tempfile::tempdir().unwrap();
    let out =
        repgeom_report::write_report(dir.path(), &fixture(), &FigureOptions::default()).unwrap();
    let mut names: Vec<String> = out
        .files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    insta::assert_snapshot!(names.join("\n"));
    // The fixture has one k per model, no layer × layer table and no rows over every token,
    // so the k-sensitivity figure and figures 10 and 11 are skipped.
    assert_eq!(out.skipped.len(), 3, "{:?}", out.skipped);
    assert!(out.skipped[0].starts_with("fig9_k_sensitivity skipped"));
    assert!(out.skipped[1].starts_with("fig10_layer_heatmaps skipped"));
    assert!(out.skipped[2].starts_with("fig11_spectral_tokens skipped"));
    // a table without cross-model rows: fig7 is skipped and the page says so
    let t = repgeom_report::ResultsTable::new(
        fixture()
            .into_rows()
            .into_iter()
            .filter(|r| r.metric != "distance_spearman")
            .collect(),
    )
    .unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    let out2 = repgeom_report::write_report(dir2.path(), &t, &FigureOptions::default()).unwrap();
    assert_eq!(out2.skipped.len(), 4, "{:?}", out2.skipped);
    assert!(out2.skipped[0].starts_with("fig7_cross_model skipped"));
    let html = std::fs::read_to_string(dir2.path().join("index.html")).unwrap();
    assert!(html.contains("fig7_cross_model skipped"));
    assert!(!dir2.path().join("fig7_cross_model.png").exists());
}

#[test]
fn index_page_escapes_text_and_lists_notes() {
    let s = summary(&fixture_with_p());
    let html =
        repgeom_report::index_html_with_notes(&[], &s, &["fig9 <skipped> & \"noted\"".to_owned()]);
    assert!(html.contains("<li>fig9 &lt;skipped&gt; &amp; &quot;noted&quot;</li>"));
    // every summary row becomes one table row, plus the header (no cross-model aggregates)
    assert_eq!(html.matches("<tr>").count(), s.rows.len() + 1);
    assert!(s.cross.is_empty() && s.cross_other_rows > 0);
    assert!(html.contains(">15–23</td>"), "collapse zone of pythia-410m");
}

/// [`fixture_with_p`] plus a pair's calibrated aggregates (rows with `other_model` and `tau`)
/// over six metrics, one without `calibrated` and one with a metric's own extra, and a cell of
/// the layer × layer table (extra `other_layer`, not an aggregate).
fn with_aggregates() -> repgeom_report::ResultsTable {
    let mut rows = fixture_with_p().into_rows();
    let base = (rows.iter())
        .find(|r| r.model == "pythia-410m" && r.checkpoint == "step143000")
        .unwrap()
        .clone();
    for (i, metric) in [
        "cka_linear",
        "cknna",
        "distance_spearman",
        "mutual_knn",
        "rsa",
        "svcca",
    ]
    .iter()
    .enumerate()
    {
        let mut r = repgeom_report::Row::new(
            &base.model,
            &base.family,
            base.d,
            0,
            base.n_layers,
            format!("{metric}_max"),
            if *metric == "distance_spearman" {
                "full"
            } else {
                ""
            },
            0.5 + 0.0625 * i as f64,
        )
        .with_checkpoint(&base.checkpoint, base.step)
        .with_other_model("pythia-2.8b")
        .with_null(0.25, 0.125, 0.0099)
        .with_synthetic(true);
        for (name, v) in [
            ("z", 2.0 + i as f64),
            ("z_se", 0.25),
            ("p_upper", 0.0099),
            ("p_lower", 1.0),
            ("p_two_sided", 0.0198),
            ("n_perm", 100.0),
            ("tau", 0.375),
            ("alpha", 0.05),
            ("n_cells", 576.0),
            ("duplicates_dropped", 0.0),
        ] {
            r = r.with_extra(name, v);
        }
        if *metric != "distance_spearman" {
            r = r.with_extra("calibrated", 0.2);
        }
        if *metric == "mutual_knn" {
            r = r.with_extra("k", 10.0);
        }
        rows.push(r);
    }
    let mut cell = rows.last().unwrap().clone();
    cell.metric = "cka_linear".into();
    cell.extra.clear();
    rows.push(cell.with_extra("other_layer", 3.0).with_extra("tau", 0.1));
    repgeom_report::ResultsTable::new(rows).unwrap()
}

/// The summary's cross-model section: one transposed table per pair, at most
/// `CROSS_COLUMNS_PER_TABLE` aggregates side by side, one line per column `repgeom compare`
/// prints (the tidy columns, then every extra by name), `–` where an aggregate has none.
#[test]
fn cross_aggregates_in_summary_and_page() {
    let t = with_aggregates();
    let s = summary(&t);
    assert_eq!(s.cross.len(), 1);
    let pair = &s.cross[0];
    assert_eq!(pair.title(), "pythia-410m (step143000) vs pythia-2.8b");
    assert_eq!(
        pair.rows.len(),
        6,
        "the cell with other_layer is no aggregate"
    );
    let md = s.to_markdown();
    insta::assert_snapshot!(md.split("## Cross-model").nth(1).unwrap());
    let html = index_html(&[], &s);
    let cross = html.matches("<table class=\"cross\">").count();
    assert_eq!(
        cross,
        6usize.div_ceil(repgeom_report::CROSS_COLUMNS_PER_TABLE)
    );
    for line in [
        "value",
        "null_mean",
        "null_std",
        "p_value",
        "alpha",
        "calibrated",
        "duplicates_dropped",
        "k",
        "n_cells",
        "n_perm",
        "p_lower",
        "p_two_sided",
        "p_upper",
        "tau",
        "z",
        "z_se",
    ] {
        assert_eq!(
            html.matches(&format!("<th class=\"line\">{line}</th>"))
                .count(),
            cross,
            "{line}"
        );
    }
    assert!(html.contains("<h2>Cross-model comparisons</h2>"));
    assert!(html.contains("distance_<wbr>spearman_<wbr>max<br>full"));
}
