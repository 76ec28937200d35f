//! The plain, self-contained `index.html`.

use std::fmt::Write as _;

use crate::figures::Figure;
use crate::summary::{HEADER, SummaryTable};

/// `s` escaped, with a break opportunity after each `_` (long column names wrap there).
fn breakable(s: &str) -> String {
    esc(s).replace('_', "_<wbr>")
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One page: banner (if synthetic), the summary table, the cross-model aggregates (one
/// transposed table per model pair, see [`crate::CROSS_COLUMNS_PER_TABLE`]), then each figure (PNG linked relatively,
/// `<name>.png`, with a link to the SVG) with its caption.
pub fn index_html(figures: &[Figure], summary: &SummaryTable) -> String {
    index_html_with_notes(figures, summary, &[])
}

/// As [`index_html`], plus notes (e.g. "fig7 skipped: no distance_spearman rows") listed at the top.
pub fn index_html_with_notes(
    figures: &[Figure],
    summary: &SummaryTable,
    notes: &[String],
) -> String {
    let mut s = String::new();
    s.push_str(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>repgeom report</title>\n<style>\n\
         body{font-family:sans-serif;max-width:1300px;margin:1em auto;padding:0 1em;color:#222}\n\
         .banner{background:#b00;color:#fff;font-weight:bold;padding:.6em 1em;font-size:1.3em;text-align:center}\n\
         table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #bbb;padding:.25em .5em}\n\
         td.num{text-align:right;white-space:nowrap}th{vertical-align:bottom}\n\
         table.cross{margin:.5em 0 1em}table.cross th.line{text-align:left;font-weight:normal}figure{margin:2em 0}img{max-width:100%;border:1px solid #ddd}\n\
         figcaption{margin-top:.4em}.notes{color:#a50}\n</style>\n</head>\n<body>\n",
    );
    if summary.synthetic {
        s.push_str("<div class=\"banner\">SYNTHETIC DATA: these results come from synthetic inputs, not real models</div>\n");
    }
    s.push_str("<h1>repgeom report</h1>\n");
    if !notes.is_empty() {
        s.push_str("<ul class=\"notes\">\n");
        for n in notes {
            let _ = writeln!(s, "<li>{}</li>", esc(n));
        }
        s.push_str("</ul>\n");
    }
    s.push_str("<h2>Summary</h2>\n");
    if summary.rows.is_empty() {
        let _ = writeln!(
            s,
            "<p>No PGA z rows at variant {}.</p>",
            esc(&summary.pga_variant)
        );
    } else {
        // The per-model table without its last column, the collapse rule: the same on every
        // row, it is the legend below. Headers may break after `_`; numbers do not break.
        let shown = HEADER.len() - 1;
        debug_assert_eq!(HEADER[shown], "collapse_rule");
        s.push_str("<table class=\"summary\">\n<tr>");
        for h in &HEADER[..shown] {
            let _ = write!(s, "<th>{}</th>", breakable(h));
        }
        s.push_str("</tr>\n");
        for r in &summary.rows {
            s.push_str("<tr>");
            for c in &r.cells(2, "")[..shown] {
                let num = c.starts_with(|ch: char| ch.is_ascii_digit() || ch == '-');
                let _ = write!(
                    s,
                    "<td{}>{}</td>",
                    if num { " class=\"num\"" } else { "" },
                    esc(c)
                );
            }
            s.push_str("</tr>\n");
        }
        s.push_str("</table>\n");
        let _ = writeln!(s, "<p>{}</p>", esc(&summary.legend()));
    }
    if !summary.cross.is_empty() || summary.cross_other_rows > 0 {
        let _ = writeln!(
            s,
            "<h2>Cross-model comparisons</h2>\n<p>{}</p>",
            esc(&summary.cross_legend())
        );
    }
    for pair in &summary.cross {
        let _ = writeln!(s, "<h3>{}</h3>", esc(&pair.title()));
        for b in pair.blocks() {
            s.push_str("<table class=\"cross\">\n<tr><th></th>");
            for (m, v) in &b.heads {
                let _ = write!(s, "<th>{}", breakable(m));
                if !v.is_empty() {
                    let _ = write!(s, "<br>{}", esc(v));
                }
                s.push_str("</th>");
            }
            s.push_str("</tr>\n");
            for (name, cells) in &b.lines {
                let _ = write!(s, "<tr><th class=\"line\">{}</th>", esc(name));
                for c in cells {
                    let _ = write!(s, "<td class=\"num\">{}</td>", esc(c));
                }
                s.push_str("</tr>\n");
            }
            s.push_str("</table>\n");
        }
    }
    if !summary.duplicates.is_empty() {
        s.push_str("<h2>Duplicate checkpoints</h2>\n<p class=\"notes\">The same weights under two names: their rows repeat the other's.</p>\n<ul class=\"notes\">\n");
        for d in &summary.duplicates {
            let _ = writeln!(s, "<li>{}</li>", esc(&d.line()));
        }
        s.push_str("</ul>\n");
    }
    s.push_str("<h2>Figures</h2>\n");
    for f in figures {
        let n = esc(&f.name);
        let _ = writeln!(
            s,
            "<figure id=\"{n}\">\n<h3>{}</h3>\n<a href=\"{n}.svg\"><img src=\"{n}.png\" alt=\"{}\"></a>\n<figcaption>{}</figcaption>\n</figure>",
            esc(&f.title),
            esc(&f.title),
            esc(&f.caption)
        );
    }
    s.push_str("</body>\n</html>\n");
    s
}
