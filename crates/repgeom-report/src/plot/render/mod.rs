//! The renderer: draws a [`Plot`] on any plotters backend (page layout, legend, message
//! panels); line panels are drawn in `lines`, heat maps and their colour bar in `heat`.

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{LegendEntry, Panel, Plot, SYNTHETIC_BANNER, Scale, Stroke};

mod heat;
mod lines;

#[cfg(test)]
pub(crate) use heat::diverging;

/// Draws the plot as an SVG document.
pub(crate) fn svg(plot: &Plot) -> DResult<String> {
    register_fonts();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (plot.width, plot.height)).into_drawing_area();
        render(plot, &root)?;
    }
    Ok(svg)
}

/// Draws the plot into an 8-bit RGB buffer (`width × height × 3` bytes, row by row).
pub(crate) fn rgb(plot: &Plot) -> DResult<Vec<u8>> {
    register_fonts();
    let (w, h) = (plot.width, plot.height);
    let mut rgb = vec![255u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        render(plot, &root)?;
    }
    Ok(rgb)
}

const FONT: &str = "sans-serif";

/// Registers the embedded DejaVu fonts with plotters' ab_glyph text renderer (once).
fn register_fonts() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The embedded fonts are valid TTFs; a failure here would only mean no text in PNGs,
        // which the render step then reports as a font error.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
    });
}

/// Height of the banner strip in pixels.
const BANNER_H: u32 = 44;

type DResult<T> = std::result::Result<T, String>;

fn e2s<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn text_style(size: f64, color: RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    TextStyle {
        font: (FONT, size).into_font(),
        color: color.to_backend_color(),
        pos: Pos::new(h, v),
    }
}

/// A linear axis over transformed values whose ticks are exactly the given points.
#[derive(Debug, Clone)]
struct TickAxis {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl TickAxis {
    fn new(lo: f64, hi: f64, ticks: Vec<f64>) -> Self {
        Self { lo, hi, ticks }
    }
}

impl Ranged for TickAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let t = (v - self.lo) / (self.hi - self.lo);
        limit.0 + (t * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

const GRID: RGBColor = RGBColor(225, 225, 225);
const INK: RGBColor = RGBColor(30, 30, 30);

/// Draws the whole plot on `root`.
fn render<DB: DrawingBackend>(plot: &Plot, root: &DrawingArea<DB, Shift>) -> DResult<()> {
    root.fill(&WHITE).map_err(e2s)?;
    let (w, h) = root.dim_in_pixel();
    // The banner takes a strip above the title, so a synthetic figure keeps its layout.
    let (banner, root) = if plot.synthetic {
        let (a, b) = root.split_vertically(BANNER_H);
        (Some(a), b)
    } else {
        (None, root.clone())
    };
    let h = if plot.synthetic {
        h.saturating_sub(BANNER_H)
    } else {
        h
    };
    if let Some(banner) = &banner {
        banner.fill(&RGBColor(187, 0, 0)).map_err(e2s)?;
        banner
            .draw_text(
                SYNTHETIC_BANNER,
                &TextStyle::from((FONT, 24.0, FontStyle::Bold).into_font())
                    .color(&WHITE)
                    .pos(Pos::new(HPos::Center, VPos::Center)),
                (w as i32 / 2, BANNER_H as i32 / 2),
            )
            .map_err(e2s)?;
    }
    let (top, rest) = root.split_vertically(54);
    top.draw_text(
        &plot.title,
        &TextStyle::from((FONT, 26.0, FontStyle::Bold).into_font())
            .color(&INK)
            .pos(Pos::new(HPos::Center, VPos::Center)),
        (w as i32 / 2, 28),
    )
    .map_err(e2s)?;
    let rest_h = h.saturating_sub(54);
    let (rest, foot) = match &plot.footnote {
        Some(_) => {
            let (a, b) = rest.split_vertically(rest_h.saturating_sub(30));
            (a, Some(b))
        }
        None => (rest, None),
    };
    if let (Some(foot), Some(note)) = (&foot, &plot.footnote) {
        foot.draw_text(
            note,
            &text_style(15.0, RGBColor(90, 90, 90), HPos::Left, VPos::Center),
            (14, 14),
        )
        .map_err(e2s)?;
    }
    let side_w = side_width(plot, &root);
    let (main, side) = if side_w > 0 {
        let (a, b) = rest.split_horizontally(w.saturating_sub(side_w));
        (a, Some(b))
    } else {
        (rest, None)
    };
    let n = plot.panels.len().max(1);
    let cols = plot.cols.clamp(1, n);
    let rows = n.div_ceil(cols);
    let areas = main.split_evenly((rows, cols));
    for (panel, area) in plot.panels.iter().zip(areas.iter()) {
        match panel {
            Panel::Lines(p) => lines::draw_lines(p, area)?,
            Panel::Heat(p) => {
                let (vmax, scale) = plot
                    .colorbar
                    .as_ref()
                    .map_or((1.0, Scale::Linear), |c| (c.vmax, c.scale));
                heat::draw_heat(p, vmax, scale, area)?
            }
            Panel::Message { title, message } => draw_message(title, message, area)?,
        }
    }
    if let Some(side) = side {
        if let Some(cb) = &plot.colorbar {
            heat::draw_colorbar(cb, &side)?;
        } else {
            draw_legend(&plot.legend_title, &plot.legend, &side)?;
        }
    }
    root.present().map_err(e2s)
}

fn side_width<DB: DrawingBackend>(plot: &Plot, root: &DrawingArea<DB, Shift>) -> u32 {
    if plot.colorbar.is_some() {
        return 170;
    }
    if plot.legend.is_empty() {
        return 0;
    }
    let font = (FONT, 16.0).into_font();
    let widest = plot
        .legend
        .iter()
        .map(|e| e.label.as_str())
        .chain([plot.legend_title.as_str()])
        .map(|t| {
            root.estimate_text_size(t, &TextStyle::from(font.clone()))
                .map(|s| s.0)
                .unwrap_or(8 * t.len() as u32)
        })
        .max()
        .unwrap_or(0);
    (widest + 80).clamp(160, 420)
}

fn draw_message<DB: DrawingBackend>(
    title: &str,
    message: &str,
    area: &DrawingArea<DB, Shift>,
) -> DResult<()> {
    let (w, h) = area.dim_in_pixel();
    area.draw_text(
        title,
        &text_style(19.0, INK, HPos::Center, VPos::Top),
        (w as i32 / 2, 10),
    )
    .map_err(e2s)?;
    area.draw(&Rectangle::new(
        [(20, 40), (w as i32 - 20, h as i32 - 20)],
        ShapeStyle::from(&GRID).stroke_width(1),
    ))
    .map_err(e2s)?;
    area.draw_text(
        message,
        &text_style(18.0, RGBColor(120, 120, 120), HPos::Center, VPos::Center),
        (w as i32 / 2, h as i32 / 2),
    )
    .map_err(e2s)
}

/// A legend key: a line (dashed or solid, with a marker) or a filled patch, `len` pixels long.
fn draw_key<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    (x, y): (i32, i32),
    len: i32,
    s: &Stroke,
    patch: bool,
) -> DResult<()> {
    let style = ShapeStyle::from(&s.color).stroke_width(s.width.max(2));
    if patch {
        return area
            .draw(&Rectangle::new(
                [(x, y - 7), (x + len, y + 7)],
                s.color.mix(0.3).filled(),
            ))
            .map_err(e2s);
    }
    if s.dashed {
        let dash = (len / 4).max(4);
        let mut a = x;
        while a < x + len {
            let b = (a + dash).min(x + len);
            area.draw(&PathElement::new(vec![(a, y), (b, y)], style))
                .map_err(e2s)?;
            a += dash * 2 - dash / 2;
        }
    } else {
        area.draw(&PathElement::new(vec![(x, y), (x + len, y)], style))
            .map_err(e2s)?;
    }
    if s.marker {
        area.draw(&Circle::new((x + len / 2, y), 3, s.color.filled()))
            .map_err(e2s)?;
    }
    Ok(())
}

fn draw_legend<DB: DrawingBackend>(
    title: &str,
    entries: &[LegendEntry],
    area: &DrawingArea<DB, Shift>,
) -> DResult<()> {
    let mut y = 58;
    if !title.is_empty() {
        area.draw_text(
            title,
            &TextStyle::from((FONT, 16.0, FontStyle::Bold).into_font())
                .color(&INK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
            (12, y),
        )
        .map_err(e2s)?;
        y += 28;
    }
    for e in entries {
        draw_key(area, (12, y), 40, &e.stroke, e.patch)?;
        area.draw_text(
            &e.label,
            &text_style(16.0, INK, HPos::Left, VPos::Center),
            (60, y),
        )
        .map_err(e2s)?;
        y += 26;
    }
    Ok(())
}
