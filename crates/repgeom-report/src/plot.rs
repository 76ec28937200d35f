//! A small declarative plot description and one renderer generic over the plotters backend.
//!
//! Figures are built as a [`Plot`] (panels, series, legend, colour bar) from the table; the same
//! `Plot` is then drawn on the SVG backend and on the bitmap backend, so the two files always
//! show the same thing.

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

pub(crate) const FONT: &str = "sans-serif";

/// Registers the embedded DejaVu fonts with plotters' ab_glyph text renderer (once).
pub(crate) fn register_fonts() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The embedded fonts are valid TTFs; a failure here would only mean no text in PNGs,
        // which the render step then reports as a font error.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
    });
}

/// How values map onto an axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scale {
    Linear,
    /// `sign(v) · log10(1 + |v|)`: linear-ish near 0, logarithmic in the tails.
    SymLog,
    Log10,
}

impl Scale {
    pub(crate) fn fwd(self, v: f64) -> f64 {
        match self {
            Scale::Linear => v,
            Scale::SymLog => v.signum() * v.abs().ln_1p() / std::f64::consts::LN_10,
            Scale::Log10 => v.log10(),
        }
    }

    pub(crate) fn inv(self, t: f64) -> f64 {
        match self {
            Scale::Linear => t,
            Scale::SymLog => t.signum() * (10f64.powf(t.abs()) - 1.0),
            Scale::Log10 => 10f64.powf(t),
        }
    }

    /// Tick values (in data units) covering `[lo, hi]` (data units), about `n_max` at most.
    fn ticks(self, lo: f64, hi: f64, n_max: usize) -> Vec<f64> {
        let n_max = n_max.max(3);
        match self {
            Scale::Linear => linear_ticks(lo, hi, n_max.min(6)),
            Scale::Log10 => {
                let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
                let decades = (b - a).max(1);
                let mults: &[f64] = if (decades as usize) * 3 <= n_max {
                    &[1.0, 2.0, 5.0]
                } else {
                    &[1.0]
                };
                let step = (decades as usize).div_ceil(n_max).max(1) as i32;
                let mut out = Vec::new();
                let mut e = a;
                while e <= b {
                    for m in mults {
                        let v = m * 10f64.powi(e);
                        if v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9) {
                            out.push(v);
                        }
                    }
                    e += step;
                }
                out
            }
            Scale::SymLog => {
                // Regular tick families, densest first; the first whose ticks are at least
                // span/n_max apart (in transformed units) wins, so every panel reads alike.
                let span = self.fwd(hi) - self.fwd(lo);
                let min_gap = span / n_max as f64;
                let decades = |mults: &[f64]| {
                    let mut v = vec![0.0];
                    let mut m = 1.0;
                    while m < 1e7 {
                        for f in mults {
                            v.extend([m * f, -m * f]);
                        }
                        m *= 10.0;
                    }
                    v
                };
                let narrow = hi.abs().max(lo.abs()) < 10.0;
                let mut families = Vec::new();
                if narrow {
                    families.push(decades(&[1.0, 2.0, 5.0]));
                }
                families.push(decades(&[2.0, 5.0, 10.0]));
                families.push(
                    [
                        decades(&[10.0]),
                        vec![2.0, -2.0, 50.0, -50.0, 500.0, -500.0],
                    ]
                    .concat(),
                );
                families.push([decades(&[10.0]), vec![2.0, -2.0]].concat());
                families.push(decades(&[10.0]));
                let mut chosen = Vec::new();
                for fam in families {
                    let mut ticks: Vec<f64> = fam
                        .into_iter()
                        .filter(|&v| v >= lo - 1e-9 && v <= hi + 1e-9)
                        .collect();
                    ticks.sort_by(f64::total_cmp);
                    ticks.dedup();
                    let ok = ticks
                        .windows(2)
                        .all(|w| self.fwd(w[1]) - self.fwd(w[0]) >= min_gap * 0.9);
                    chosen = ticks;
                    if ok {
                        break;
                    }
                }
                chosen
            }
        }
    }
}

fn nice_step(raw: f64) -> f64 {
    let e = raw.log10().floor();
    let base = 10f64.powf(e);
    let f = raw / base;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 2.5 {
        2.5
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * base
}

fn linear_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        return vec![lo];
    }
    let step = nice_step((hi - lo) / n as f64);
    let mut v = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while v <= hi + step * 1e-9 {
        out.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
        v += step;
    }
    out
}

/// A tick label: short, no trailing zeros.
pub(crate) fn tick_label(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        return "0".to_owned();
    }
    if !(1e-3..1e4).contains(&a) {
        return format!("{v:.0e}");
    }
    let s = if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// Stroke of one series or reference line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Stroke {
    pub(crate) color: RGBColor,
    pub(crate) dashed: bool,
    pub(crate) marker: bool,
    pub(crate) width: u32,
}

impl Stroke {
    pub(crate) fn solid(color: RGBColor) -> Self {
        Self {
            color,
            dashed: false,
            marker: true,
            width: 2,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Series {
    pub(crate) label: String,
    pub(crate) stroke: Stroke,
    /// (x, y) in data units; non-finite y breaks the line.
    pub(crate) points: Vec<(f64, f64)>,
    /// Symmetric error bars (same length as `points`) or empty.
    pub(crate) yerr: Vec<f64>,
}

#[derive(Debug, Clone)]
pub(crate) struct HLine {
    pub(crate) y: f64,
    pub(crate) stroke: Stroke,
    pub(crate) label: Option<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct LinePanel {
    pub(crate) title: String,
    pub(crate) x_label: String,
    pub(crate) y_label: String,
    pub(crate) x_scale: Scale,
    pub(crate) y_scale: Scale,
    /// Fixed y range (data units); None = from data and reference lines.
    pub(crate) y_range: Option<(f64, f64)>,
    /// Fixed x range; None = from data.
    pub(crate) x_range: Option<(f64, f64)>,
    pub(crate) series: Vec<Series>,
    pub(crate) hlines: Vec<HLine>,
    /// A shaded horizontal band (data units), e.g. the |z| < 2 band.
    pub(crate) band: Option<(f64, f64)>,
    /// Draw the series' labels in the panel's own legend (top-right inside), e.g. a per-panel key.
    pub(crate) inline_legend: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct HeatPanel {
    pub(crate) title: String,
    pub(crate) x_label: String,
    pub(crate) y_label: String,
    pub(crate) x_ticks: Vec<String>,
    pub(crate) y_ticks: Vec<String>,
    /// rows (y, bottom to top) × columns (x).
    pub(crate) cells: Vec<Vec<Option<f64>>>,
}

#[derive(Debug, Clone)]
pub(crate) enum Panel {
    Lines(LinePanel),
    Heat(HeatPanel),
    /// A panel that only says why it is empty.
    Message {
        title: String,
        message: String,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct LegendEntry {
    pub(crate) label: String,
    pub(crate) stroke: Stroke,
    /// A filled box instead of a line (bands).
    pub(crate) patch: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct ColorBar {
    pub(crate) label: String,
    pub(crate) vmax: f64,
    pub(crate) scale: Scale,
}

#[derive(Debug, Clone)]
pub(crate) struct Plot {
    pub(crate) title: String,
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) cols: usize,
    pub(crate) panels: Vec<Panel>,
    pub(crate) legend_title: String,
    pub(crate) legend: Vec<LegendEntry>,
    pub(crate) colorbar: Option<ColorBar>,
    pub(crate) footnote: Option<String>,
    /// Draw the SYNTHETIC DATA banner across the top (the rows are synthetic).
    pub(crate) synthetic: bool,
}

/// The banner text drawn on every figure built from synthetic rows.
pub(crate) const SYNTHETIC_BANNER: &str =
    "SYNTHETIC DATA: these results come from synthetic inputs, not real models";

/// Height of the banner strip in pixels.
const BANNER_H: u32 = 44;

impl Plot {
    /// Marks the plot as drawn from synthetic rows (or not).
    pub(crate) fn with_synthetic(mut self, synthetic: bool) -> Self {
        self.synthetic = synthetic;
        self
    }
}

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

pub(crate) const GRID: RGBColor = RGBColor(225, 225, 225);
pub(crate) const MISSING: RGBColor = RGBColor(200, 200, 200);
const INK: RGBColor = RGBColor(30, 30, 30);

/// Draws the whole plot on `root`.
pub(crate) fn render<DB: DrawingBackend>(
    plot: &Plot,
    root: &DrawingArea<DB, Shift>,
) -> DResult<()> {
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
            Panel::Lines(p) => draw_lines(p, area)?,
            Panel::Heat(p) => {
                let (vmax, scale) = plot
                    .colorbar
                    .as_ref()
                    .map_or((1.0, Scale::Linear), |c| (c.vmax, c.scale));
                draw_heat(p, vmax, scale, area)?
            }
            Panel::Message { title, message } => draw_message(title, message, area)?,
        }
    }
    if let Some(side) = side {
        if let Some(cb) = &plot.colorbar {
            draw_colorbar(cb, &side)?;
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

fn draw_lines<DB: DrawingBackend>(p: &LinePanel, area: &DrawingArea<DB, Shift>) -> DResult<()> {
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
    let (ty0, ty1) = if p.y_range.is_some() {
        padded(p.y_scale.fwd(y_lo), p.y_scale.fwd(y_hi), 0.0)
    } else {
        padded(p.y_scale.fwd(y_lo), p.y_scale.fwd(y_hi), 0.06)
    };
    let xt: Vec<f64> = p
        .x_scale
        .ticks(p.x_scale.inv(tx0), p.x_scale.inv(tx1), nx)
        .into_iter()
        .map(|v| p.x_scale.fwd(v))
        .collect();
    let yt: Vec<f64> = p
        .y_scale
        .ticks(p.y_scale.inv(ty0), p.y_scale.inv(ty1), ny)
        .into_iter()
        .map(|v| p.y_scale.fwd(v))
        .collect();
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
        let pts = vec![(tx0, y), (tx1, y)];
        let style = ShapeStyle::from(&l.stroke.color).stroke_width(l.stroke.width);
        if l.stroke.dashed {
            chart
                .draw_series(DashedLineSeries::new(pts, 8, 6, style))
                .map_err(e2s)?;
        } else {
            chart
                .draw_series(LineSeries::new(pts, style))
                .map_err(e2s)?;
        }
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
            if s.stroke.dashed {
                chart
                    .draw_series(DashedLineSeries::new(seg, 9, 5, style))
                    .map_err(e2s)?;
            } else {
                chart
                    .draw_series(LineSeries::new(seg, style))
                    .map_err(e2s)?;
            }
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
        let (aw, _) = area.dim_in_pixel();
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
        let _ = aw;
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

fn draw_colorbar<DB: DrawingBackend>(cb: &ColorBar, area: &DrawingArea<DB, Shift>) -> DResult<()> {
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

/// Colour of a heat-map cell given the colour bar (symmetric around 0).
pub(crate) fn heat_color(v: Option<f64>, vmax: f64, scale: Scale) -> RGBColor {
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

fn draw_heat<DB: DrawingBackend>(
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
    Ok(())
}
