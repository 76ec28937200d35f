//! A line panel: series (dashed or solid, with markers and error bars), reference lines, a
//! shaded band and an optional key inside the panel.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::{DResult, FONT, GRID, INK, TickAxis, draw_key, draw_message, e2s, text_style};
use crate::plot::{LinePanel, Scale, Series, tick_label};

fn padded(lo: f64, hi: f64, frac: f64) -> (f64, f64) {
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        return (lo - d, hi + d);
    }
    let p = (hi - lo) * frac;
    (lo - p, hi + p)
}

fn finite_minmax(vals: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    vals.filter(|v| v.is_finite())
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((a, b)) => Some((a.min(v), b.max(v))),
        })
}

/// Draws a line panel in `area`.
pub(super) fn draw_lines<DB: DrawingBackend>(
    p: &LinePanel,
    area: &DrawingArea<DB, Shift>,
) -> DResult<()> {
    let usable = |s: Scale, v: f64| v.is_finite() && (s != Scale::Log10 || v > 0.0);
    // data ranges, in data units
    let xs = p
        .series
        .iter()
        .flat_map(|s| {
            s.points
                .iter()
                .filter(|q| usable(p.y_scale, q.1))
                .map(|q| q.0)
        })
        .filter(|&x| usable(p.x_scale, x));
    let (x_lo, x_hi) = match p.x_range.or_else(|| finite_minmax(xs)) {
        Some(r) => r,
        None => return draw_message(&p.title, "no data", area),
    };
    let y_range = p.y_range.or_else(|| {
        let ys = p.series.iter().flat_map(|s| {
            s.points
                .iter()
                .enumerate()
                .filter(|(_, q)| usable(p.x_scale, q.0))
                .flat_map(move |(i, q)| {
                    let e = s.yerr.get(i).copied().unwrap_or(0.0);
                    let e = if e.is_finite() { e } else { 0.0 };
                    [q.1 - e, q.1 + e]
                })
        });
        let refs = p
            .hlines
            .iter()
            .map(|l| l.y)
            .chain(p.band.iter().flat_map(|b| [b.0, b.1]));
        finite_minmax(ys.chain(refs).filter(|&y| usable(p.y_scale, y)))
    });
    let Some((y_lo, y_hi)) = y_range else {
        return draw_message(&p.title, "no data", area);
    };
    let (tx0, tx1) = (p.x_scale.fwd(x_lo), p.x_scale.fwd(x_hi));
    // a little room at both ends so edge markers are not cut
    let (tx0, tx1) = padded(tx0, tx1, 0.02);
    let (pw, ph) = area.dim_in_pixel();
    let (nx, ny) = (
        (pw.saturating_sub(110) / 70) as usize,
        (ph.saturating_sub(90) / 22) as usize,
    );
    // a fixed y range is drawn as given; one from the data gets a little room
    let pad = if p.y_range.is_some() { 0.0 } else { 0.06 };
    let (ty0, ty1) = padded(p.y_scale.fwd(y_lo), p.y_scale.fwd(y_hi), pad);
    let xt = p.x_scale.axis_ticks(tx0, tx1, nx);
    let yt = p.y_scale.axis_ticks(ty0, ty1, ny);
    let (xs_, ys_) = (p.x_scale, p.y_scale);
    let mut builder = ChartBuilder::on(area);
    if !p.title.is_empty() {
        builder.caption(&p.title, (FONT, 19.0));
    }
    let mut chart = builder
        .margin(8)
        .margin_right(18)
        .x_label_area_size(46)
        .y_label_area_size(74)
        .build_cartesian_2d(TickAxis::new(tx0, tx1, xt), TickAxis::new(ty0, ty1, yt))
        .map_err(e2s)?;
    let xf = move |v: &f64| tick_label(xs_.inv(*v));
    let yf = move |v: &f64| tick_label(ys_.inv(*v));
    chart
        .configure_mesh()
        .x_desc(p.x_label.as_str())
        .y_desc(p.y_label.as_str())
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .label_style((FONT, 14.0))
        .axis_desc_style((FONT, 16.0))
        .bold_line_style(GRID)
        .light_line_style(WHITE)
        .draw()
        .map_err(e2s)?;
    if let Some((b0, b1)) = p.band {
        let (b0, b1) = (ys_.fwd(b0).max(ty0), ys_.fwd(b1).min(ty1));
        chart
            .draw_series([Rectangle::new(
                [(tx0, b0), (tx1, b1)],
                RGBColor(150, 150, 150).mix(0.18).filled(),
            )])
            .map_err(e2s)?;
    }
    for l in &p.hlines {
        let y = ys_.fwd(l.y);
        if !(y >= ty0 && y <= ty1) {
            continue;
        }
        let style = ShapeStyle::from(&l.stroke.color).stroke_width(l.stroke.width);
        let dash = l.stroke.dashed.then_some((8, 6));
        draw_line(&mut chart, vec![(tx0, y), (tx1, y)], style, dash)?;
        if let Some(label) = &l.label {
            chart
                .draw_series([Text::new(
                    label.clone(),
                    (tx0 + (tx1 - tx0) * 0.01, y),
                    text_style(13.0, l.stroke.color, HPos::Left, VPos::Bottom),
                )])
                .map_err(e2s)?;
        }
    }
    for s in p.series.iter().rev() {
        let style = ShapeStyle::from(&s.stroke.color).stroke_width(s.stroke.width);
        // split the line at unusable points
        let mut segs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        let mut all = Vec::new();
        for (i, &(x, y)) in s.points.iter().enumerate() {
            if usable(xs_, x) && usable(ys_, y) {
                let q = (xs_.fwd(x), ys_.fwd(y));
                if let Some(v) = segs.last_mut() {
                    v.push(q);
                }
                all.push((i, q));
            } else if segs.last().is_some_and(|v| !v.is_empty()) {
                segs.push(Vec::new());
            }
        }
        for seg in segs.into_iter().filter(|v| !v.is_empty()) {
            draw_line(&mut chart, seg, style, s.stroke.dashed.then_some((9, 5)))?;
        }
        if !s.yerr.is_empty() {
            let bars: Vec<_> = all
                .iter()
                .filter_map(|&(i, (x, _))| {
                    let (y, e) = (s.points[i].1, s.yerr[i]);
                    (e.is_finite() && e > 0.0).then(|| (x, ys_.fwd(y - e), ys_.fwd(y + e)))
                })
                .collect();
            // error bars in pixels: a vertical line with 8 px caps
            let pa = chart.plotting_area();
            for (x, lo, hi) in bars {
                let (px, plo) = pa.map_coordinate(&(x, lo));
                let (_, phi) = pa.map_coordinate(&(x, hi));
                let base = pa.get_base_pixel();
                for seg in [
                    [(px, plo), (px, phi)],
                    [(px - 4, plo), (px + 4, plo)],
                    [(px - 4, phi), (px + 4, phi)],
                ] {
                    let seg = seg.map(|(a, b)| (a - base.0, b - base.1));
                    pa.strip_coord_spec()
                        .draw(&PathElement::new(seg.to_vec(), style))
                        .map_err(e2s)?;
                }
            }
        }
        if s.stroke.marker {
            chart
                .draw_series(
                    all.iter()
                        .map(|&(_, q)| Circle::new(q, 3, s.stroke.color.filled())),
                )
                .map_err(e2s)?;
        }
    }
    if p.inline_legend {
        // a small key in the top-right corner of this panel, on a white box
        let font = (FONT, 13.0).into_font();
        let labels: Vec<&Series> = p.series.iter().collect();
        let tw = labels
            .iter()
            .map(|s| {
                area.estimate_text_size(&s.label, &TextStyle::from(font.clone()))
                    .map(|z| z.0)
                    .unwrap_or(60)
            })
            .max()
            .unwrap_or(0) as i32;
        let plot_area = chart.plotting_area();
        let (px, py) = plot_area.get_base_pixel();
        let (pw, _) = plot_area.dim_in_pixel();
        let x1 = px + pw as i32 - 6;
        let x0 = x1 - tw - 44;
        let y0 = py + 6;
        let hgt = 8 + 18 * labels.len() as i32;
        let base = area.get_base_pixel();
        let to_local = |(x, y): (i32, i32)| (x - base.0, y - base.1);
        area.draw(&Rectangle::new(
            [to_local((x0, y0)), to_local((x1, y0 + hgt))],
            WHITE.mix(0.85).filled(),
        ))
        .map_err(e2s)?;
        for (i, s) in labels.iter().enumerate() {
            let yy = y0 + 13 + 18 * i as i32;
            draw_key(area, to_local((x0 + 6, yy)), 26, &s.stroke, false)?;
            area.draw_text(
                &s.label,
                &text_style(13.0, INK, HPos::Left, VPos::Center),
                to_local((x0 + 38, yy)),
            )
            .map_err(e2s)?;
        }
    }
    Ok(())
}

/// Draws `pts` (axis coordinates) as one line in `style`: dashed with `dash` (dash and gap in
/// pixels) or, without it, solid.
fn draw_line<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<TickAxis, TickAxis>>,
    pts: Vec<(f64, f64)>,
    style: ShapeStyle,
    dash: Option<(i32, i32)>,
) -> DResult<()> {
    match dash {
        Some((size, gap)) => chart.draw_series(DashedLineSeries::new(pts, size, gap, style)),
        None => chart.draw_series(LineSeries::new(pts, style)),
    }
    .map(|_| ())
    .map_err(e2s)
}
