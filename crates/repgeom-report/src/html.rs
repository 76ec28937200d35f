//! The plain, self-contained `index.html`.

use std::fmt::Write as _;

use crate::figures::Figure;
use crate::summary::SummaryTable;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One page: banner (if synthetic), the summary table, then each figure (PNG linked relatively,
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
         td.num{text-align:right}figure{margin:2em 0}img{max-width:100%;border:1px solid #ddd}\n\
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
        let md = summary.to_markdown();
        let mut lines = md.lines().filter(|l| l.starts_with('|'));
        s.push_str("<table>\n");
        if let Some(h) = lines.next() {
            s.push_str("<tr>");
            for c in split_md(h) {
                let _ = write!(s, "<th>{}</th>", esc(&c));
            }
            s.push_str("</tr>\n");
        }
        for l in lines.skip(1) {
            s.push_str("<tr>");
            for c in split_md(l) {
                let num = c.starts_with(|ch: char| ch.is_ascii_digit() || ch == '-');
                let _ = write!(
                    s,
                    "<td{}>{}</td>",
                    if num { " class=\"num\"" } else { "" },
                    esc(&c)
                );
            }
            s.push_str("</tr>\n");
        }
        s.push_str("</table>\n");
        if let Some(legend) = md
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .skip_while(|l| l.starts_with('|'))
            .find(|l| !l.is_empty())
        {
            let _ = writeln!(s, "<p>{}</p>", esc(legend));
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

fn split_md(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = Vec::new();
    let mut cur = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' && chars.peek() == Some(&'|') {
            cur.push('|');
            chars.next();
        } else if c == '|' {
            cells.push(cur.trim().to_owned());
            cur.clear();
        } else {
            cur.push(c);
        }
    }
    cells.push(cur.trim().to_owned());
    cells
}
