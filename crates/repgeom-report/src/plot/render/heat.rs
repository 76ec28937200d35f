//! A heat-map panel and its colour bar: diverging blue-white-red colours centred at 0.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{DResult, FONT, INK, TickAxis, draw_message, e2s, text_style};
use crate::plot::{ColorBar, HeatPanel, Scale, tick_label};

const MISSING: RGBColor = RGBColor(200, 200, 200);

/// Diverging blue–white–red colour for `u` in [-1, 1] (clamped).
pub(crate) fn diverging(u: f64) -> RGBColor {
    let u = u.clamp(-1.0, 1.0);
    let white = (247.0, 247.0, 247.0);
    let end = if u < 0.0 {
        (33.0, 102.0, 172.0)
    } else {
        (178.0, 24.0, 43.0)
    };
    let a = u.abs();
    let mix = |w: f64, e: f64| (w + (e - w) * a).round() as u8;
    RGBColor(
        mix(white.0, end.0),
        mix(white.1, end.1),
        mix(white.2, end.2),
    )
}

/// Colour of a heat-map cell given the colour bar (symmetric around 0).
fn heat_color(v: Option<f64>, vmax: f64, scale: Scale) -> RGBColor {
    match v {
        Some(v) if v.is_finite() => diverging(scale.fwd(v) / scale.fwd(vmax)),
        _ => MISSING,
    }
}

/// Thin tick index sets so labels do not collide: at most `max` evenly spaced labels.
fn tick_indices(n: usize, max: usize) -> Vec<usize> {
    if n <= max {
        return (0..n).collect();
    }
    let step = n.div_ceil(max);
    (0..n).step_by(step).collect()
}

pub(super) fn draw_heat<DB: DrawingBackend>(
    p: &HeatPanel,
    vmax: f64,
    scale: Scale,
    area: &DrawingArea<DB, Shift>,
) -> DResult<()> {
    let (nr, nc) = (p.cells.len(), p.cells.first().map_or(0, |r| r.len()));
    if nr == 0 || nc == 0 {
        return draw_message(&p.title, "no data", area);
    }
    let (aw, ah) = area.dim_in_pixel();
    let xk: Vec<f64> = tick_indices(nc, (aw.saturating_sub(120) / 36).max(2) as usize)
        .into_iter()
        .map(|i| i as f64 + 0.5)
        .collect();
    let yk: Vec<f64> = tick_indices(nr, (ah.saturating_sub(90) / 20).max(2) as usize)
        .into_iter()
        .map(|i| i as f64 + 0.5)
        .collect();
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, (FONT, 19.0))
        .margin(8)
        .margin_right(14)
        .x_label_area_size(46)
        .y_label_area_size(96)
        .build_cartesian_2d(
            TickAxis::new(0.0, nc as f64, xk),
            TickAxis::new(0.0, nr as f64, yk),
        )
        .map_err(e2s)?;
    let xl = p.x_ticks.clone();
    let yl = p.y_ticks.clone();
    let xf = move |v: &f64| {
        xl.get(v.floor().max(0.0) as usize)
            .cloned()
            .unwrap_or_default()
    };
    let yf = move |v: &f64| {
        yl.get(v.floor().max(0.0) as usize)
            .cloned()
            .unwrap_or_default()
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(p.x_label.as_str())
        .y_desc(p.y_label.as_str())
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .label_style((FONT, 13.0))
        .axis_desc_style((FONT, 16.0))
        .draw()
        .map_err(e2s)?;
    let mut rects = Vec::with_capacity(nr * nc);
    for (i, row) in p.cells.iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            rects.push(Rectangle::new(
                [(j as f64, i as f64), (j as f64 + 1.0, i as f64 + 1.0)],
                heat_color(*v, vmax, scale).filled(),
            ));
        }
    }
    chart.draw_series(rects).map_err(e2s)?;
    let dots = (p.marks.iter().enumerate()).flat_map(|(i, row)| {
        (row.iter().enumerate())
            .filter(|&(_, &m)| m)
            .map(move |(j, _)| Circle::new((j as f64 + 0.5, i as f64 + 0.5), 3, INK.filled()))
    });
    chart.draw_series(dots).map_err(e2s)?;
    Ok(())
}

/// The colour bar beside the heat maps: the diverging scale with ticks, and the "no data" colour.
pub(super) fn draw_colorbar<DB: DrawingBackend>(
    cb: &ColorBar,
    area: &DrawingArea<DB, Shift>,
) -> DResult<()> {
    let (_, h) = area.dim_in_pixel();
    let (x0, x1) = (22, 52);
    let (top, bottom) = (90, h as i32 - 70);
    area.draw_text(
        &cb.label,
        &TextStyle::from((FONT, 16.0, FontStyle::Bold).into_font())
            .color(&INK)
            .pos(Pos::new(HPos::Left, VPos::Center)),
        (10, 62),
    )
    .map_err(e2s)?;
    let tmax = cb.scale.fwd(cb.vmax);
    let n = (bottom - top).max(1);
    for i in 0..n {
        // pixel row i from the top: u from +1 down to -1
        let u = 1.0 - 2.0 * (i as f64 + 0.5) / n as f64;
        area.draw(&Rectangle::new(
            [(x0, top + i), (x1, top + i + 1)],
            diverging(u).filled(),
        ))
        .map_err(e2s)?;
    }
    area.draw(&Rectangle::new(
        [(x0, top), (x1, bottom)],
        ShapeStyle::from(&INK).stroke_width(1),
    ))
    .map_err(e2s)?;
    for v in cb.scale.ticks(-cb.vmax, cb.vmax, (n as usize) / 40) {
        let u = cb.scale.fwd(v) / tmax;
        let y = top + ((1.0 - u) / 2.0 * n as f64).round() as i32;
        area.draw(&PathElement::new(
            vec![(x1, y), (x1 + 5, y)],
            ShapeStyle::from(&INK),
        ))
        .map_err(e2s)?;
        area.draw_text(
            &tick_label(v),
            &text_style(14.0, INK, HPos::Left, VPos::Center),
            (x1 + 8, y),
        )
        .map_err(e2s)?;
    }
    area.draw(&Rectangle::new(
        [(x0, bottom + 18), (x1, bottom + 34)],
        MISSING.filled(),
    ))
    .map_err(e2s)?;
    area.draw_text(
        "no data",
        &text_style(14.0, INK, HPos::Left, VPos::Center),
        (x1 + 8, bottom + 26),
    )
    .map_err(e2s)?;
    Ok(())
}
