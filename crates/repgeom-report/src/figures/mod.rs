//! The study's eleven figures, built from a [`ResultsTable`] alone.
//!
//! This module holds what the figures share: [`FigureOptions`], [`Figure`] (SVG text plus PNG
//! rendering), the list of figures, and the helpers that pick rows and build panels, legends and
//! footnotes. Each figure is a file of its own, named as its function.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use plotters::style::RGBColor;

use crate::error::{Error, Result};
use crate::io::atomic_write;
use crate::plot::{HLine, LegendEntry, LinePanel, Panel, Plot, Scale, Series, Stroke};
use crate::table::{ResultsTable, Row};

mod fig10_layer_heatmaps;
mod fig11_spectral_tokens;
mod fig1_pga_z_by_layer;
mod fig2_pga_z_heatmap;
mod fig3_ccr_ablation;
mod fig4_pc_readout_share;
mod fig5_spectral_vs_pga;
mod fig6_val_loss;
mod fig7_cross_model;
mod fig8_probe_vs_pga;
mod fig9_k_sensitivity;

pub use fig1_pga_z_by_layer::fig1_pga_z_by_layer;
pub use fig2_pga_z_heatmap::fig2_pga_z_heatmap;
pub use fig3_ccr_ablation::fig3_ccr_ablation;
pub use fig4_pc_readout_share::fig4_pc_readout_share;
pub use fig5_spectral_vs_pga::fig5_spectral_vs_pga;
pub use fig6_val_loss::fig6_val_loss;
pub use fig7_cross_model::fig7_cross_model;
pub use fig8_probe_vs_pga::fig8_probe_vs_pga;
pub use fig9_k_sensitivity::fig9_k_sensitivity;
pub use fig10_layer_heatmaps::{SIGNIFICANT_P, fig10_layer_heatmaps};
pub use fig11_spectral_tokens::{ALL_TOKENS, all_tokens_variant, fig11_spectral_tokens};

/// How PGA z is put on an axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZScale {
    /// Symmetric log when any |z| exceeds 20, else linear.
    #[default]
    Auto,
    /// Always linear.
    Linear,
    /// Always symmetric log: `sign(z) · log10(1 + |z|)`.
    SymLog,
}

/// Options shared by all figures (unchecked; every figure function checks them).
#[derive(Debug, Clone, PartialEq)]
pub struct FigureOptions {
    /// Image width in pixels (PNG) / user units (SVG).
    pub width: u32,
    /// Image height.
    pub height: u32,
    /// The PGA variant figures 1, 2, 5 and 8 show (default `ccr1`).
    pub pga_variant: String,
    /// Models with `d <= small_max_d` are "small" (dashed lines).
    pub small_max_d: u32,
    /// Models with `d >= large_min_d` are "large" (solid lines).
    pub large_min_d: u32,
    /// Readout subspace dimension k, for the random expectation k/d in figure 4.
    pub readout_k: u32,
    /// Per-model k where models differ (e.g. k = d/8); models not named use `readout_k`.
    pub readout_k_by_model: std::collections::BTreeMap<String, u32>,
    /// y scale for PGA z.
    pub z_scale: ZScale,
    /// Half-width of the shaded "not significant" band around z = 0.
    pub z_band: f64,
    /// The per-layer metrics figure 5 draws beside PGA z, one panel each, in this order (any
    /// metric name in the table; default RankMe, α-ReQ, isotropy, condition number).
    pub spectral: Vec<String>,
}

/// Figure 5's default panels: the spectral metrics of the built-in study.
pub const DEFAULT_SPECTRAL: [&str; 4] = ["rankme", "alpha_req", "isotropy", "condition_number"];

impl Default for FigureOptions {
    fn default() -> Self {
        Self {
            width: 1200,
            height: 800,
            pga_variant: "ccr1".to_owned(),
            small_max_d: 1024,
            large_min_d: 2048,
            readout_k: 100,
            readout_k_by_model: std::collections::BTreeMap::new(),
            z_scale: ZScale::Auto,
            z_band: 2.0,
            spectral: DEFAULT_SPECTRAL.map(str::to_owned).to_vec(),
        }
    }
}

impl FigureOptions {
    /// The readout dimension k of `model`: its entry in `readout_k_by_model`, else `readout_k`.
    fn readout_k_of(&self, model: &str) -> u32 {
        self.readout_k_by_model
            .get(model)
            .copied()
            .unwrap_or(self.readout_k)
    }

    /// Checks the ranges (size 400..=8000 px, small_max_d < large_min_d, k > 0, band ≥ 0).
    pub fn check(&self) -> Result<&Self> {
        let bad = |problem: String| Err(Error::InvalidOptions { problem });
        if !(400..=8000).contains(&self.width) || !(300..=8000).contains(&self.height) {
            return bad(format!(
                "size {}x{} outside 400..=8000 x 300..=8000",
                self.width, self.height
            ));
        }
        if self.small_max_d >= self.large_min_d {
            return bad(format!(
                "small_max_d {} must be below large_min_d {}",
                self.small_max_d, self.large_min_d
            ));
        }
        if self.readout_k == 0 {
            return bad("readout_k is 0".to_owned());
        }
        if !(self.z_band.is_finite() && self.z_band >= 0.0) {
            return bad(format!("z_band {} must be finite and >= 0", self.z_band));
        }
        if self.spectral.is_empty() {
            return bad("spectral lists no metric for figure 5".to_owned());
        }
        for (i, m) in self.spectral.iter().enumerate() {
            if m.is_empty() {
                return bad("spectral has an empty metric name".to_owned());
            }
            if m == "pga_z" {
                return bad("spectral lists pga_z, which figure 5 always draws first".to_owned());
            }
            if self.spectral[..i].contains(m) {
                return bad(format!("spectral lists {m:?} twice (repeated)"));
            }
        }
        Ok(self)
    }
}

/// One rendered figure: SVG text plus what is needed to draw the same figure as PNG.
#[derive(Debug, Clone)]
pub struct Figure {
    /// File stem, e.g. `fig1_pga_z_by_layer`.
    pub name: String,
    /// Title drawn at the top.
    pub title: String,
    /// One-paragraph caption for the index page.
    pub caption: String,
    /// The SVG document.
    pub svg: String,
    plot: Plot,
}

impl Figure {
    fn new(name: &str, caption: String, plot: Plot) -> Result<Self> {
        let svg = crate::plot::svg(&plot).map_err(|message| Error::Draw {
            figure: name.to_owned(),
            backend: "svg",
            message,
        })?;
        Ok(Self {
            name: name.to_owned(),
            title: plot.title.clone(),
            caption,
            svg,
            plot,
        })
    }

    /// Width and height in pixels.
    pub fn size(&self) -> (u32, u32) {
        (self.plot.width, self.plot.height)
    }

    /// Renders the figure as an 8-bit RGB PNG.
    pub fn png(&self) -> Result<Vec<u8>> {
        let (w, h) = self.size();
        let rgb = crate::plot::rgb(&self.plot).map_err(|message| Error::Draw {
            figure: self.name.clone(),
            backend: "png",
            message,
        })?;
        let png_err = |e: png::EncodingError| Error::Png {
            figure: self.name.clone(),
            message: e.to_string(),
        };
        let mut out = Vec::new();
        {
            let mut enc = png::Encoder::new(&mut out, w, h);
            enc.set_color(png::ColorType::Rgb);
            enc.set_depth(png::BitDepth::Eight);
            let mut writer = enc.write_header().map_err(png_err)?;
            writer.write_image_data(&rgb).map_err(png_err)?;
            writer.finish().map_err(png_err)?;
        }
        Ok(out)
    }

    /// Writes `<dir>/<name>.svg` and `<dir>/<name>.png` atomically; returns both paths.
    pub fn save(&self, dir: &Path) -> Result<(PathBuf, PathBuf)> {
        let svg = dir.join(format!("{}.svg", self.name));
        let png = dir.join(format!("{}.png", self.name));
        atomic_write(&svg, self.svg.as_bytes())?;
        atomic_write(&png, &self.png()?)?;
        Ok((svg, png))
    }
}

/// A figure-building function.
pub type FigureFn = fn(&ResultsTable, &FigureOptions) -> Result<Figure>;

/// All figures in order: (name, function).
pub const ALL_FIGURES: [(&str, FigureFn); 11] = [
    ("fig1_pga_z_by_layer", fig1_pga_z_by_layer),
    ("fig2_pga_z_heatmap", fig2_pga_z_heatmap),
    ("fig3_ccr_ablation", fig3_ccr_ablation),
    ("fig4_pc_readout_share", fig4_pc_readout_share),
    ("fig5_spectral_vs_pga", fig5_spectral_vs_pga),
    ("fig6_val_loss", fig6_val_loss),
    ("fig7_cross_model", fig7_cross_model),
    ("fig8_probe_vs_pga", fig8_probe_vs_pga),
    ("fig9_k_sensitivity", fig9_k_sensitivity),
    ("fig10_layer_heatmaps", fig10_layer_heatmaps),
    ("fig11_spectral_tokens", fig11_spectral_tokens),
];

/// Builds every figure; each entry is the figure or the reason it could not be drawn.
pub fn all_figures(
    table: &ResultsTable,
    opts: &FigureOptions,
) -> Vec<(&'static str, Result<Figure>)> {
    ALL_FIGURES
        .iter()
        .map(|(n, f)| (*n, f(table, opts)))
        .collect()
}

// ------------------------------------------------ models: which are drawn, and in which stroke

/// A model as the figures key it: width first, so models sort by size.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ModelInfo {
    d: u32,
    model: String,
}

/// Small, medium or large by width (see [`FigureOptions::small_max_d`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SizeClass {
    Small,
    Medium,
    Large,
}

/// The size class of width `d`.
fn size_class(d: u32, o: &FigureOptions) -> SizeClass {
    if d <= o.small_max_d {
        SizeClass::Small
    } else if d >= o.large_min_d {
        SizeClass::Large
    } else {
        SizeClass::Medium
    }
}

/// The distinct models of `rows`, by width then name.
fn model_infos<'a>(rows: impl IntoIterator<Item = &'a Row>) -> Vec<ModelInfo> {
    let set: BTreeSet<ModelInfo> = rows
        .into_iter()
        .map(|r| ModelInfo {
            d: r.d,
            model: r.model.clone(),
        })
        .collect();
    set.into_iter().collect()
}

/// Models present in any of the metrics, with their strokes.
fn models_for(
    table: &ResultsTable,
    metrics: &[&str],
    o: &FigureOptions,
) -> (Vec<ModelInfo>, BTreeMap<String, Stroke>) {
    let models = model_infos(
        table
            .rows()
            .iter()
            .filter(|r| metrics.contains(&r.metric.as_str())),
    );
    let strokes = model_strokes(&models, o);
    (models, strokes)
}

/// The colour `t` of the way from `a` to `b`.
fn lerp(a: (u8, u8, u8), b: (u8, u8, u8), t: f64) -> RGBColor {
    let m = |x: u8, y: u8| (f64::from(x) + (f64::from(y) - f64::from(x)) * t).round() as u8;
    RGBColor(m(a.0, b.0), m(a.1, b.1), m(a.2, b.2))
}

/// Line style per model: small = dashed blues, large = solid reds, in between = solid greens;
/// within a class the shade darkens with d (ties broken by name).
fn model_strokes(models: &[ModelInfo], o: &FigureOptions) -> BTreeMap<String, Stroke> {
    let mut out = BTreeMap::new();
    for class in [SizeClass::Small, SizeClass::Medium, SizeClass::Large] {
        let mut ms: Vec<&ModelInfo> = models
            .iter()
            .filter(|m| size_class(m.d, o) == class)
            .collect();
        ms.sort();
        let (a, b) = match class {
            SizeClass::Small => ((120, 170, 220), (8, 48, 107)),
            SizeClass::Medium => ((116, 196, 118), (0, 90, 50)),
            SizeClass::Large => ((253, 141, 60), (120, 0, 10)),
        };
        for (i, m) in ms.iter().enumerate() {
            let t = if ms.len() == 1 {
                0.7
            } else {
                i as f64 / (ms.len() - 1) as f64
            };
            out.insert(
                m.model.clone(),
                Stroke {
                    color: lerp(a, b, t),
                    dashed: class == SizeClass::Small,
                    marker: true,
                    width: 2,
                },
            );
        }
    }
    out
}

/// A model's name in legends: `pythia-70m (d=512)`.
fn model_label(m: &ModelInfo) -> String {
    format!("{} (d={})", m.model, m.d)
}

/// A model's line: labelled with its name and width, in the model's stroke.
fn model_series(
    m: &ModelInfo,
    strokes: &BTreeMap<String, Stroke>,
    points: Vec<(f64, f64)>,
) -> Series {
    Series::new(model_label(m), strokes[&m.model], points)
}

// ------------------------------------------------------------------- rows: what a figure reads

/// The rows of `metric` (at `variant`, if given).
fn select<'a>(t: &'a ResultsTable, metric: &str, variant: Option<&str>) -> Vec<&'a Row> {
    t.rows()
        .iter()
        .filter(|r| r.metric == metric && variant.is_none_or(|v| r.variant == v))
        .collect()
}

/// The rows [`select`] picks, or the figure's [`no_data`] error when there are none.
fn select_or_no_data<'a>(
    t: &'a ResultsTable,
    figure: &str,
    metric: &str,
    variant: Option<&str>,
) -> Result<Vec<&'a Row>> {
    let rows = select(t, metric, variant);
    if rows.is_empty() {
        return Err(no_data(figure, metric, variant));
    }
    Ok(rows)
}

/// The error of a figure the table has no rows for.
fn no_data(figure: &str, metric: &str, variant: Option<&str>) -> Error {
    Error::NoData {
        figure: figure.to_owned(),
        metric: metric.to_owned(),
        variant_note: variant
            .map(|v| format!(", variant {v}"))
            .unwrap_or_default(),
    }
}

/// Checkpoint ordering key: unknown step (the released model, usually `""`) sorts last.
fn ckpt_key(r: &Row) -> (u64, &str) {
    (r.step.unwrap_or(u64::MAX), r.checkpoint.as_str())
}

/// Per model, the rows at that model's final checkpoint, sorted by layer.
fn final_rows<'a>(rows: &[&'a Row]) -> BTreeMap<String, Vec<&'a Row>> {
    let mut fin: BTreeMap<&str, (u64, &str)> = BTreeMap::new();
    for r in rows {
        let k = ckpt_key(r);
        let e = fin.entry(&r.model).or_insert(k);
        if k > *e {
            *e = k;
        }
    }
    let mut out: BTreeMap<String, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        if fin.get(r.model.as_str()) == Some(&ckpt_key(r)) {
            out.entry(r.model.clone()).or_default().push(r);
        }
    }
    for v in out.values_mut() {
        v.sort_by(|a, b| {
            a.layer
                .cmp(&b.layer)
                .then(a.other_model.cmp(&b.other_model))
        });
    }
    out
}

// -------------------------------------------------------------------- the PGA-z axis and panel

/// The PGA-z axis scale for `values` under [`FigureOptions::z_scale`].
fn z_scale(o: &FigureOptions, values: impl Iterator<Item = f64>) -> Scale {
    match o.z_scale {
        ZScale::Linear => Scale::Linear,
        ZScale::SymLog => Scale::SymLog,
        ZScale::Auto => {
            if values.filter(|v| v.is_finite()).any(|v| v.abs() > 20.0) {
                Scale::SymLog
            } else {
                Scale::Linear
            }
        }
    }
}

/// The PGA-z axis label on scale `s`.
fn z_label(s: Scale) -> String {
    match s {
        Scale::SymLog => "PGA z (σ vs random; symlog)".to_owned(),
        _ => "PGA z (σ vs random)".to_owned(),
    }
}

/// The reference lines of every PGA-z axis: the z = 0 line and the shaded ±band (none when the
/// band is 0).
fn z_refs(o: &FigureOptions) -> (Vec<HLine>, Option<(f64, f64)>) {
    let zero = HLine {
        y: 0.0,
        stroke: Stroke {
            color: RGBColor(40, 40, 40),
            dashed: false,
            marker: false,
            width: 1,
        },
        label: None,
    };
    let band = (o.z_band > 0.0).then_some((-o.z_band, o.z_band));
    (vec![zero], band)
}

/// The legend entry of the shaded |z| band.
fn band_entry(o: &FigureOptions) -> LegendEntry {
    LegendEntry {
        label: format!(
            "|z| < {} (not significant)",
            crate::plot::tick_label(o.z_band)
        ),
        stroke: Stroke::solid(RGBColor(150, 150, 150)),
        patch: true,
    }
}

/// The PGA-z panel (figures 1, 5 and 8): z against relative depth, one line per model at its
/// final checkpoint, on the z axis `scale`, with the z = 0 line and the shaded ±band.
fn pga_z_panel(
    title: &str,
    scale: Scale,
    per_model: &BTreeMap<String, Vec<&Row>>,
    models: &[ModelInfo],
    strokes: &BTreeMap<String, Stroke>,
    o: &FigureOptions,
) -> LinePanel {
    let mut p = depth_panel(
        title,
        &z_label(scale),
        scale,
        depth_series(per_model, models, strokes),
    );
    (p.hlines, p.band) = z_refs(o);
    p
}

/// The PGA-z panel beside other metrics (figures 5 and 8): the figure's variant on a z axis
/// scaled for all its rows; a message panel when the table has none.
fn pga_z_beside<'a>(
    table: &'a ResultsTable,
    o: &FigureOptions,
    models: &[ModelInfo],
    strokes: &BTreeMap<String, Stroke>,
    used: &mut Vec<&'a Row>,
) -> Panel {
    let v = o.pga_variant.as_str();
    let scale = z_scale(o, select(table, "pga_z", Some(v)).iter().map(|r| r.value));
    metric_panel_with(
        table,
        "pga_z",
        Some(v),
        "PGA z",
        used,
        |title, per_model| pga_z_panel(title, scale, per_model, models, strokes, o),
    )
}

// ---------------------------------------------------------------------------- panels and plots

/// Per-model series of `value` against relative depth.
fn depth_series(
    per_model: &BTreeMap<String, Vec<&Row>>,
    models: &[ModelInfo],
    strokes: &BTreeMap<String, Stroke>,
) -> Vec<Series> {
    models
        .iter()
        .filter_map(|m| {
            per_model.get(&m.model).map(|rows| {
                model_series(
                    m,
                    strokes,
                    rows.iter().map(|r| (r.relative_depth, r.value)).collect(),
                )
            })
        })
        .collect()
}

/// A panel against relative depth, x fixed to [0, 1].
fn depth_panel(title: &str, y_label: &str, y_scale: Scale, series: Vec<Series>) -> LinePanel {
    let mut p = LinePanel::new(
        title,
        "relative depth (layer / (L−1))",
        y_label,
        Scale::Linear,
        y_scale,
        series,
    );
    p.x_range = Some((0.0, 1.0));
    p
}

/// The variant to show for a metric: `""`, then `full`, then the alphabetically first.
fn pick_variant(rows: &[&Row]) -> Option<String> {
    let vs: BTreeSet<&str> = rows.iter().map(|r| r.variant.as_str()).collect();
    ["", "full"]
        .into_iter()
        .find(|v| vs.contains(v))
        .or_else(|| vs.iter().next().copied())
        .map(str::to_owned)
}

/// A panel of one metric per layer with one line per model: `metric` at `variant` (else the
/// variant [`pick_variant`] picks) at each model's final checkpoint, titled with the variant; a
/// message panel when the table has no such rows. The rows drawn are added to `used`.
fn metric_panel<'a>(
    table: &'a ResultsTable,
    metric: &str,
    variant: Option<&str>,
    title: &str,
    y_label: &str,
    y_scale: Scale,
    strokes: &BTreeMap<String, Stroke>,
    models: &[ModelInfo],
    used: &mut Vec<&'a Row>,
) -> Panel {
    metric_panel_with(table, metric, variant, title, used, |title, per_model| {
        depth_panel(
            title,
            y_label,
            y_scale,
            depth_series(per_model, models, strokes),
        )
    })
}

/// [`metric_panel`] with the line panel drawn by `lines` from its title and rows per model.
fn metric_panel_with<'a>(
    table: &'a ResultsTable,
    metric: &str,
    variant: Option<&str>,
    title: &str,
    used: &mut Vec<&'a Row>,
    lines: impl FnOnce(&str, &BTreeMap<String, Vec<&'a Row>>) -> LinePanel,
) -> Panel {
    let rows = select(table, metric, variant);
    let v = match variant {
        Some(v) => Some(v.to_owned()),
        None => pick_variant(&rows),
    };
    let rows: Vec<&Row> = rows
        .into_iter()
        .filter(|r| Some(&r.variant) == v.as_ref())
        .collect();
    if rows.is_empty() {
        return Panel::Message {
            title: title.to_owned(),
            message: format!("no data (metric {metric})"),
        };
    }
    let per_model = final_rows(&rows);
    used.extend(per_model.values().flatten().copied());
    let title = match v.as_deref() {
        Some("") | None => title.to_owned(),
        Some(v) => format!("{title} ({v})"),
    };
    Panel::Lines(lines(&title, &per_model))
}

/// Columns of a grid of `n` panels.
fn grid_cols(n: usize) -> usize {
    match n {
        0..=1 => 1,
        2 => 2,
        3..=4 => 2,
        5..=9 => 3,
        _ => 4,
    }
}

/// A plot of `panels` in `cols` columns at the options' size, without legend or footnote.
fn plot(o: &FigureOptions, title: &str, cols: usize, panels: Vec<Panel>) -> Plot {
    Plot {
        title: title.to_owned(),
        width: o.width,
        height: o.height,
        cols,
        panels,
        legend_title: String::new(),
        legend: Vec::new(),
        colorbar: None,
        footnote: None,
        synthetic: false,
    }
}

/// A plot of `panels` in a grid (see [`grid_cols`]).
fn grid_plot(o: &FigureOptions, title: &str, panels: Vec<Panel>) -> Plot {
    plot(o, title, grid_cols(panels.len()), panels)
}

// -------------------------------------------------------- variants as series (figures 3 and 4)

/// Numeric suffix of variants like `ccr10` or `pc3`, for natural ordering.
fn variant_number(v: &str, prefix: &str) -> Option<u32> {
    v.strip_prefix(prefix)?.parse().ok()
}

/// The distinct variants of `rows` in natural order: by the number after `prefix` (`ccr5`
/// before `ccr10`), then by name; variants without such a number last.
fn variants_by_number(rows: &[&Row], prefix: &str) -> Vec<String> {
    let mut variants: Vec<String> = rows
        .iter()
        .map(|r| r.variant.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    variants.sort_by_key(|v| (variant_number(v, prefix).unwrap_or(u32::MAX), v.clone()));
    variants
}

/// Colours of the per-variant series, in variant order.
const VARIANT_COLORS: [RGBColor; 6] = [
    RGBColor(30, 30, 30),
    RGBColor(230, 120, 0),
    RGBColor(0, 114, 178),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(150, 150, 150),
];

/// One solid stroke per variant, from [`VARIANT_COLORS`].
fn variant_strokes(variants: &[String]) -> Vec<Stroke> {
    (0..variants.len())
        .map(|i| Stroke::solid(VARIANT_COLORS[i % VARIANT_COLORS.len()]))
        .collect()
}

/// Small multiples: one panel per model, one series per variant (at the final checkpoint).
fn variant_panels(
    rows: &[&Row],
    variants: &[String],
    strokes: &[Stroke],
    y_label: &str,
    y_scale: Scale,
) -> (Vec<ModelInfo>, Vec<LinePanel>) {
    let per_model = final_rows(rows);
    let used: Vec<&Row> = per_model.values().flatten().copied().collect();
    let models = model_infos(used.iter().copied());
    let panels = models
        .iter()
        .map(|m| {
            let mrows = &per_model[&m.model];
            let series = variants
                .iter()
                .zip(strokes)
                .map(|(v, s)| {
                    let points = mrows
                        .iter()
                        .filter(|r| &r.variant == v)
                        .map(|r| (r.relative_depth, r.value))
                        .collect();
                    Series::new(v.clone(), *s, points)
                })
                .collect();
            depth_panel(&model_label(m), y_label, y_scale, series)
        })
        .collect();
    (models, panels)
}

/// One legend entry per variant in its stroke, named by `label`.
fn variant_legend(
    variants: &[String],
    strokes: &[Stroke],
    label: impl Fn(&str) -> String,
) -> Vec<LegendEntry> {
    variants
        .iter()
        .zip(strokes)
        .map(|(v, s)| LegendEntry::line(label(v), *s))
        .collect()
}

// ----------------------------------------------------------------------- legends and footnotes

/// The legend title and entries of a figure with a line per model: one entry per model in its
/// stroke, then `extra` (the |z| band's where the panels shade it).
fn model_key(
    models: &[ModelInfo],
    strokes: &BTreeMap<String, Stroke>,
    extra: impl IntoIterator<Item = LegendEntry>,
) -> (String, Vec<LegendEntry>) {
    let entries = models
        .iter()
        .map(|m| LegendEntry::line(model_label(m), strokes[&m.model]))
        .chain(extra)
        .collect();
    ("model".to_owned(), entries)
}

/// The non-empty `parts` joined into one footnote line; none when all are empty.
fn footnote(parts: Vec<String>) -> Option<String> {
    let parts: Vec<String> = parts.into_iter().filter(|p| !p.is_empty()).collect();
    (!parts.is_empty()).then(|| parts.join("   ·   "))
}

/// The footnote part that explains the line styles of the size classes present.
fn size_note(models: &[ModelInfo], o: &FigureOptions) -> String {
    let has = |c| models.iter().any(|m| size_class(m.d, o) == c);
    let mut p = Vec::new();
    if has(SizeClass::Small) {
        p.push(format!("dashed blue: small (d ≤ {})", o.small_max_d));
    }
    if has(SizeClass::Medium) {
        p.push("solid green: medium".to_owned());
    }
    if has(SizeClass::Large) {
        p.push(format!("solid red: large (d ≥ {})", o.large_min_d));
    }
    p.join(", ")
}

/// How many of `rows` have a non-finite value.
fn count_nonfinite(rows: &[&Row]) -> usize {
    rows.iter().filter(|r| !r.value.is_finite()).count()
}

/// The footnote part for `n` undrawn non-finite values (empty when 0).
fn nonfinite_note(n: usize) -> String {
    if n == 0 {
        String::new()
    } else {
        format!("{n} non-finite value(s) not drawn")
    }
}
