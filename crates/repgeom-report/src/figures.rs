//! The study's nine figures, built from a [`ResultsTable`] alone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use plotters::style::RGBColor;

use crate::error::{Error, Result};
use crate::io::atomic_write;
use crate::plot::{
    ColorBar, HLine, HeatPanel, LegendEntry, LinePanel, Panel, Plot, Scale, Series, Stroke,
};
use crate::table::{ResultsTable, Row};

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
}

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
        }
    }
}

impl FigureOptions {
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
pub const ALL_FIGURES: [(&str, FigureFn); 9] = [
    ("fig1_pga_z_by_layer", fig1_pga_z_by_layer),
    ("fig2_pga_z_heatmap", fig2_pga_z_heatmap),
    ("fig3_ccr_ablation", fig3_ccr_ablation),
    ("fig4_pc_readout_share", fig4_pc_readout_share),
    ("fig5_spectral_vs_pga", fig5_spectral_vs_pga),
    ("fig6_val_loss", fig6_val_loss),
    ("fig7_cross_model", fig7_cross_model),
    ("fig8_probe_vs_pga", fig8_probe_vs_pga),
    ("fig9_k_sensitivity", fig9_k_sensitivity),
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

// ---------------------------------------------------------------- helpers

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ModelInfo {
    d: u32,
    model: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SizeClass {
    Small,
    Medium,
    Large,
}

fn size_class(d: u32, o: &FigureOptions) -> SizeClass {
    if d <= o.small_max_d {
        SizeClass::Small
    } else if d >= o.large_min_d {
        SizeClass::Large
    } else {
        SizeClass::Medium
    }
}

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

fn model_label(m: &ModelInfo) -> String {
    format!("{} (d={})", m.model, m.d)
}

fn select<'a>(t: &'a ResultsTable, metric: &str, variant: Option<&str>) -> Vec<&'a Row> {
    t.rows()
        .iter()
        .filter(|r| r.metric == metric && variant.is_none_or(|v| r.variant == v))
        .collect()
}

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

fn z_label(s: Scale) -> String {
    match s {
        Scale::SymLog => "PGA z (σ vs random; symlog)".to_owned(),
        _ => "PGA z (σ vs random)".to_owned(),
    }
}

fn count_nonfinite(rows: &[&Row]) -> usize {
    rows.iter().filter(|r| !r.value.is_finite()).count()
}

fn footnote(parts: Vec<String>) -> Option<String> {
    let parts: Vec<String> = parts.into_iter().filter(|p| !p.is_empty()).collect();
    (!parts.is_empty()).then(|| parts.join("   ·   "))
}

fn nonfinite_note(n: usize) -> String {
    if n == 0 {
        String::new()
    } else {
        format!("{n} non-finite value(s) not drawn")
    }
}

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

fn model_legend(models: &[ModelInfo], strokes: &BTreeMap<String, Stroke>) -> Vec<LegendEntry> {
    models
        .iter()
        .map(|m| LegendEntry {
            label: model_label(m),
            stroke: strokes[&m.model],
            patch: false,
        })
        .collect()
}

fn grid_cols(n: usize) -> usize {
    match n {
        0..=1 => 1,
        2 => 2,
        3..=4 => 2,
        5..=9 => 3,
        _ => 4,
    }
}

/// Per-model series of `value` against relative depth.
fn depth_series(
    per_model: &BTreeMap<String, Vec<&Row>>,
    models: &[ModelInfo],
    strokes: &BTreeMap<String, Stroke>,
) -> Vec<Series> {
    models
        .iter()
        .filter_map(|m| {
            per_model.get(&m.model).map(|rows| Series {
                label: model_label(m),
                stroke: strokes[&m.model],
                points: rows.iter().map(|r| (r.relative_depth, r.value)).collect(),
                yerr: Vec::new(),
            })
        })
        .collect()
}

fn depth_panel(title: &str, y_label: &str, y_scale: Scale, series: Vec<Series>) -> LinePanel {
    LinePanel {
        title: title.to_owned(),
        x_label: "relative depth (layer / (L−1))".to_owned(),
        y_label: y_label.to_owned(),
        x_scale: Scale::Linear,
        y_scale,
        y_range: None,
        x_range: Some((0.0, 1.0)),
        series,
        hlines: Vec::new(),
        band: None,
        inline_legend: false,
    }
}

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

// ---------------------------------------------------------------- figures

/// Figure 1: PGA z per layer (relative depth), one line per model at its final checkpoint;
/// small models dashed blue, large solid red; z = 0 line and the ±band shaded.
pub fn fig1_pga_z_by_layer(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig1_pga_z_by_layer";
    let v = o.pga_variant.as_str();
    let rows = select(table, "pga_z", Some(v));
    if rows.is_empty() {
        return Err(no_data(name, "pga_z", Some(v)));
    }
    let per_model = final_rows(&rows);
    let used: Vec<&Row> = per_model.values().flatten().copied().collect();
    let models = model_infos(used.iter().copied());
    let strokes = model_strokes(&models, o);
    let scale = z_scale(o, used.iter().map(|r| r.value));
    let mut panel = depth_panel(
        "",
        &z_label(scale),
        scale,
        depth_series(&per_model, &models, &strokes),
    );
    (panel.hlines, panel.band) = z_refs(o);
    let title = format!("PGA z per layer (final checkpoint, {v})");
    let mut p = plot(o, &title, 1, vec![Panel::Lines(panel)]);
    p.legend_title = "model".to_owned();
    p.legend = model_legend(&models, &strokes);
    p.legend.push(band_entry(o));
    p.footnote = footnote(vec![
        size_note(&models, o),
        nonfinite_note(count_nonfinite(&used)),
    ]);
    let caption = format!(
        "Subspace PGA z (readout top-k subspace vs random subspaces, {v}) per layer at each model's final \
         checkpoint; x is relative depth layer/(L−1). {}. The shaded band marks |z| < {}; {} y scale.",
        size_note(&models, o),
        crate::plot::tick_label(o.z_band),
        if scale == Scale::SymLog {
            "symmetric-log"
        } else {
            "linear"
        }
    );
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}

/// Figure 2: PGA z over checkpoints × layers, one heat map per model, diverging colours centred
/// at 0 with a colour bar.
pub fn fig2_pga_z_heatmap(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig2_pga_z_heatmap";
    let v = o.pga_variant.as_str();
    let rows = select(table, "pga_z", Some(v));
    if rows.is_empty() {
        return Err(no_data(name, "pga_z", Some(v)));
    }
    let models = model_infos(rows.iter().copied());
    let scale = z_scale(o, rows.iter().map(|r| r.value));
    let vmax = rows
        .iter()
        .map(|r| r.value.abs())
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max)
        .max(o.z_band.max(1.0));
    let mut panels = Vec::new();
    for m in &models {
        let mrows: Vec<&Row> = rows
            .iter()
            .copied()
            .filter(|r| r.model == m.model)
            .collect();
        let mut ckpts: Vec<(u64, &str)> = mrows.iter().map(|r| ckpt_key(r)).collect();
        ckpts.sort();
        ckpts.dedup();
        let n_layers = mrows.iter().map(|r| r.n_layers).max().unwrap_or(1) as usize;
        let mut cells = vec![vec![None; n_layers]; ckpts.len()];
        for r in &mrows {
            if let Ok(i) = ckpts.binary_search(&ckpt_key(r))
                && let Some(c) = cells[i].get_mut(r.layer as usize)
            {
                *c = Some(r.value);
            }
        }
        let y_ticks = ckpts
            .iter()
            .map(|&(s, c)| match (s, c) {
                (u64::MAX, "") => "final".to_owned(),
                (u64::MAX, c) => c.to_owned(),
                (s, _) => format_step(s),
            })
            .collect();
        panels.push(Panel::Heat(HeatPanel {
            title: model_label(m),
            x_label: "layer".to_owned(),
            y_label: "training step".to_owned(),
            x_ticks: (0..n_layers).map(|l| l.to_string()).collect(),
            y_ticks,
            cells,
        }));
    }
    let title = format!("PGA z over training checkpoints × layers ({v})");
    let mut p = plot(o, &title, grid_cols(panels.len()), panels);
    p.colorbar = Some(ColorBar {
        label: "PGA z".to_owned(),
        vmax,
        scale,
    });
    p.footnote = footnote(vec![
        format!(
            "blue: readout keeps less distance structure than random (z < 0); red: more (z > 0); {} colour scale",
            if scale == Scale::SymLog {
                "symmetric-log"
            } else {
                "linear"
            }
        ),
        nonfinite_note(count_nonfinite(&rows)),
    ]);
    let caption = format!(
        "PGA z ({v}) for every stored checkpoint (rows, oldest at the bottom) and layer (columns), one panel per \
         model; colours diverge at z = 0 and saturate at |z| = {}; grey cells have no data.",
        crate::plot::tick_label(vmax)
    );
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}

fn format_step(s: u64) -> String {
    if s >= 10_000 && s.is_multiple_of(1000) {
        format!("{}k", s / 1000)
    } else {
        s.to_string()
    }
}

/// Numeric suffix of variants like `ccr10` or `pc3`, for natural ordering.
fn variant_number(v: &str, prefix: &str) -> Option<u32> {
    v.strip_prefix(prefix)?.parse().ok()
}

const VARIANT_COLORS: [RGBColor; 6] = [
    RGBColor(30, 30, 30),
    RGBColor(230, 120, 0),
    RGBColor(0, 114, 178),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(150, 150, 150),
];

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
                .map(|(v, s)| Series {
                    label: v.clone(),
                    stroke: *s,
                    points: mrows
                        .iter()
                        .filter(|r| &r.variant == v)
                        .map(|r| (r.relative_depth, r.value))
                        .collect(),
                    yerr: Vec::new(),
                })
                .collect();
            depth_panel(&model_label(m), y_label, y_scale, series)
        })
        .collect();
    (models, panels)
}

/// Figure 3: CCR ablation, PGA z per layer at CCR-1/5/10, one panel per model.
pub fn fig3_ccr_ablation(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig3_ccr_ablation";
    let rows: Vec<&Row> = select(table, "pga_z", None)
        .into_iter()
        .filter(|r| variant_number(&r.variant, "ccr").is_some())
        .collect();
    if rows.is_empty() {
        return Err(no_data(name, "pga_z", Some("ccr1/ccr5/ccr10")));
    }
    let mut variants: Vec<String> = rows
        .iter()
        .map(|r| r.variant.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    variants.sort_by_key(|v| variant_number(v, "ccr"));
    let strokes = variant_strokes(&variants);
    let scale = z_scale(o, rows.iter().map(|r| r.value));
    let (models, mut panels) = variant_panels(&rows, &variants, &strokes, &z_label(scale), scale);
    for p in &mut panels {
        (p.hlines, p.band) = z_refs(o);
    }
    let mut p = plot(
        o,
        "CCR ablation: PGA z per layer after removing the top c principal directions",
        grid_cols(panels.len()),
        panels.into_iter().map(Panel::Lines).collect(),
    );
    p.legend_title = "variant".to_owned();
    p.legend = variants
        .iter()
        .zip(&strokes)
        .map(|(v, s)| LegendEntry {
            label: format!("CCR-{}", variant_number(v, "ccr").unwrap_or(0)),
            stroke: *s,
            patch: false,
        })
        .collect();
    p.legend.push(band_entry(o));
    p.footnote = footnote(vec![nonfinite_note(count_nonfinite(&rows))]);
    let caption = format!(
        "PGA z per layer at each model's final checkpoint after common-component removal of the top 1, 5 and \
         10 principal directions ({}); {} models.",
        variants.join(", "),
        models.len()
    );
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}

/// Figure 4: share of the top principal directions inside the readout subspace per layer,
/// with the random expectation k/d.
pub fn fig4_pc_readout_share(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig4_pc_readout_share";
    let rows = select(table, "pc_readout_share", None);
    if rows.is_empty() {
        return Err(no_data(name, "pc_readout_share", None));
    }
    let mut variants: Vec<String> = rows
        .iter()
        .map(|r| r.variant.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    variants.sort_by_key(|v| (variant_number(v, "pc").unwrap_or(u32::MAX), v.clone()));
    let strokes = variant_strokes(&variants);
    let (models, mut panels) = variant_panels(
        &rows,
        &variants,
        &strokes,
        "share of ‖u‖² in readout",
        Scale::Linear,
    );
    let random = Stroke {
        color: RGBColor(120, 120, 120),
        dashed: true,
        marker: false,
        width: 2,
    };
    for (p, m) in panels.iter_mut().zip(&models) {
        let k = o
            .readout_k_by_model
            .get(&m.model)
            .copied()
            .unwrap_or(o.readout_k);
        let kd = (f64::from(k) / f64::from(m.d.max(1))).min(1.0);
        p.y_range = Some((0.0, 1.0));
        p.title = format!("{}, k/d = {}", p.title, crate::plot::tick_label(kd));
        p.hlines = vec![HLine {
            y: kd,
            stroke: random,
            label: None,
        }];
    }
    let mut p = plot(
        o,
        "Top principal directions: share inside the readout subspace",
        grid_cols(panels.len()),
        panels.into_iter().map(Panel::Lines).collect(),
    );
    p.legend_title = "direction".to_owned();
    p.legend = variants
        .iter()
        .zip(&strokes)
        .map(|(v, s)| LegendEntry {
            label: v.to_uppercase(),
            stroke: *s,
            patch: false,
        })
        .collect();
    p.legend.push(LegendEntry {
        label: if o.readout_k_by_model.is_empty() {
            format!("random (k/d, k={})", o.readout_k)
        } else {
            "random (k/d)".to_owned()
        },
        stroke: random,
        patch: false,
    });
    p.footnote = footnote(vec![nonfinite_note(count_nonfinite(&rows))]);
    let caption = format!(
        "For each of the top principal directions u_j of a layer (final checkpoint), the share ‖V_kᵀu_j‖² lying \
         in the top-{} readout subspace of W_U; the dashed line is the expectation k/d for a random direction.",
        if o.readout_k_by_model.is_empty() {
            o.readout_k.to_string()
        } else {
            "k".to_owned()
        }
    );
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
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

/// One depth panel per metric with one line per model; a message panel when the metric is absent.
fn metric_panel(
    table: &ResultsTable,
    metric: &str,
    variant: Option<&str>,
    title: &str,
    y_label: &str,
    y_scale: Scale,
    strokes: &BTreeMap<String, Stroke>,
    models: &[ModelInfo],
    used: &mut Vec<Row>,
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
    used.extend(per_model.values().flatten().map(|r| (*r).clone()));
    let title = match v.as_deref() {
        Some("") | None => title.to_owned(),
        Some(v) => format!("{title} ({v})"),
    };
    Panel::Lines(depth_panel(
        &title,
        y_label,
        y_scale,
        depth_series(&per_model, models, strokes),
    ))
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

/// Figure 5: spectral metrics (RankMe, α-ReQ, isotropy, condition number) per layer beside PGA z.
pub fn fig5_spectral_vs_pga(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig5_spectral_vs_pga";
    let metrics = [
        "pga_z",
        "rankme",
        "alpha_req",
        "isotropy",
        "condition_number",
    ];
    let spectral_present = metrics[1..]
        .iter()
        .any(|m| !select(table, m, None).is_empty());
    if !spectral_present {
        return Err(no_data(
            name,
            "rankme/alpha_req/isotropy/condition_number",
            None,
        ));
    }
    let (models, strokes) = models_for(table, &metrics, o);
    let v = o.pga_variant.as_str();
    let zrows = select(table, "pga_z", Some(v));
    let scale = z_scale(o, zrows.iter().map(|r| r.value));
    let mut used = Vec::new();
    let mut panels = Vec::new();
    let mut zp = metric_panel(
        table,
        "pga_z",
        Some(v),
        "PGA z",
        &z_label(scale),
        scale,
        &strokes,
        &models,
        &mut used,
    );
    if let Panel::Lines(p) = &mut zp {
        (p.hlines, p.band) = z_refs(o);
    }
    panels.push(zp);
    for (m, title, yl, sc) in [
        ("rankme", "RankMe", "effective rank", Scale::Linear),
        ("alpha_req", "α-ReQ", "eigenspectrum decay α", Scale::Linear),
        ("isotropy", "isotropy", "isotropy (0–1)", Scale::Linear),
        (
            "condition_number",
            "condition number",
            "λmax / λmin (log)",
            Scale::Log10,
        ),
    ] {
        panels.push(metric_panel(
            table, m, None, title, yl, sc, &strokes, &models, &mut used,
        ));
    }
    let n_bad = used
        .iter()
        .filter(|r| !r.value.is_finite() || (r.metric == "condition_number" && r.value <= 0.0))
        .count();
    let mut p = plot(o, "Spectral metrics per layer beside PGA z", 3, panels);
    p.legend_title = "model".to_owned();
    p.legend = model_legend(&models, &strokes);
    p.footnote = footnote(vec![size_note(&models, o), nonfinite_note(n_bad)]);
    let caption = format!(
        "Per layer at each model's final checkpoint: PGA z ({v}) and the spectral metrics RankMe, α-ReQ, \
         isotropy and condition number (log scale), sharing relative depth on x. {}.",
        size_note(&models, o)
    );
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}

/// Figure 6: validation loss over training checkpoints, small vs large models.
pub fn fig6_val_loss(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig6_val_loss";
    let rows = select(table, "val_loss", None);
    if rows.is_empty() {
        return Err(no_data(name, "val_loss", None));
    }
    let models = model_infos(rows.iter().copied());
    let strokes = model_strokes(&models, o);
    let all_steps = rows.iter().all(|r| r.step.is_some());
    let mut series = Vec::new();
    let mut zero_steps = 0;
    for m in &models {
        // one value per checkpoint: the lowest layer's row (val_loss does not depend on layer)
        let mut per_ckpt: BTreeMap<(u64, &str), f64> = BTreeMap::new();
        for r in rows.iter().filter(|r| r.model == m.model) {
            per_ckpt.entry(ckpt_key(r)).or_insert(r.value);
        }
        let points: Vec<(f64, f64)> = per_ckpt
            .iter()
            .enumerate()
            .map(|(i, (&(s, _), &v))| (if all_steps { s as f64 } else { i as f64 }, v))
            .collect();
        zero_steps += points.iter().filter(|q| q.0 <= 0.0).count();
        series.push(Series {
            label: model_label(m),
            stroke: strokes[&m.model],
            points,
            yerr: Vec::new(),
        });
    }
    let pos: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|q| q.0))
        .filter(|&x| x > 0.0)
        .collect();
    let (lo, hi) = (
        pos.iter().copied().fold(f64::INFINITY, f64::min),
        pos.iter().copied().fold(0.0, f64::max),
    );
    let log_x = all_steps && !pos.is_empty() && hi / lo >= 100.0;
    let x_label = if !all_steps {
        "checkpoint (index, oldest first)".to_owned()
    } else if log_x {
        "training step (log)".to_owned()
    } else {
        "training step".to_owned()
    };
    let panel = LinePanel {
        title: String::new(),
        x_label,
        y_label: "validation loss (nats/token)".to_owned(),
        x_scale: if log_x { Scale::Log10 } else { Scale::Linear },
        y_scale: Scale::Linear,
        y_range: None,
        x_range: None,
        series,
        hlines: Vec::new(),
        band: None,
        inline_legend: false,
    };
    let mut p = plot(
        o,
        "Validation loss over training",
        1,
        vec![Panel::Lines(panel)],
    );
    p.legend_title = "model".to_owned();
    p.legend = model_legend(&models, &strokes);
    p.footnote = footnote(vec![
        size_note(&models, o),
        if log_x && zero_steps > 0 {
            format!("{zero_steps} point(s) at step 0 not shown on the log axis")
        } else {
            String::new()
        },
        nonfinite_note(count_nonfinite(&rows)),
    ]);
    let caption = format!(
        "Validation loss per checkpoint for every model; {}. Small and large models improve alike even where \
         PGA z collapses.",
        size_note(&models, o)
    );
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}

/// Figure 7: cross-model agreement, one row of panels per model pair. The first column is
/// distance agreement (Spearman of pairwise distances) in the full space, the readout subspace
/// and random subspaces (± null std); every other pair metric in the table (mutual kNN, CKA,
/// ...) gets a column of its own, its value per variant beside its null (mean ± 1 sd) where it
/// has one.
pub fn fig7_cross_model(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig7_cross_model";
    let rows: Vec<&Row> = table
        .rows()
        .iter()
        .filter(|r| !r.other_model.is_empty())
        .collect();
    if rows.is_empty() {
        return Err(no_data(
            name,
            "distance_spearman or another pair metric (with other_model)",
            None,
        ));
    }
    // Columns: distance agreement first, then mutual kNN, CKNNA and CKA (the field's usual
    // companions), then any other pair metric by name.
    let rank = |m: &str| match m {
        "distance_spearman" => 0,
        "mutual_knn" => 1,
        "cknna" => 2,
        "cka_linear" => 3,
        _ => 4,
    };
    let mut metrics: Vec<&str> = rows
        .iter()
        .map(|r| r.metric.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    metrics.sort_by_key(|m| (rank(m), *m));
    // Rows of panels in order of width (the first model's d, then the other's; names break
    // ties), not by name: "pythia-1b" would otherwise sort before "pythia-160m".
    let width_of: BTreeMap<&str, u32> = table
        .rows()
        .iter()
        .map(|r| (r.model.as_str(), r.d))
        .collect();
    let d_of = |m: &str| width_of.get(m).copied().unwrap_or(u32::MAX);
    let mut pairs: BTreeMap<(u32, u32, String, String), Vec<&Row>> = BTreeMap::new();
    for r in &rows {
        pairs
            .entry((
                r.d,
                d_of(&r.other_model),
                r.model.clone(),
                r.other_model.clone(),
            ))
            .or_default()
            .push(r);
    }
    let kinds = [
        ("full", "full space", RGBColor(110, 110, 110)),
        ("readout", "readout subspace", RGBColor(200, 30, 30)),
        ("random", "random subspaces (± 1 sd)", RGBColor(0, 100, 180)),
    ];
    let has_distance = metrics.contains(&"distance_spearman");
    let mut panels = Vec::new();
    for ((_, _, a, b), prs) in &pairs {
        let fin = final_rows(prs);
        let fr: Vec<&Row> = fin.values().flatten().copied().collect();
        for metric in &metrics {
            let mr: Vec<&Row> = fr.iter().filter(|r| r.metric == *metric).copied().collect();
            let mut panel = if *metric == "distance_spearman" {
                depth_panel(
                    &format!("{a} vs {b}"),
                    "distance Spearman ρ",
                    Scale::Linear,
                    distance_series(&mr, &kinds),
                )
            } else {
                // The row's first panel names the pair; the others name their metric.
                let title = if has_distance {
                    pair_metric_label(metric).to_owned()
                } else {
                    format!("{a} vs {b}: {}", pair_metric_label(metric))
                };
                let mut p = depth_panel(
                    &title,
                    pair_metric_label(metric),
                    Scale::Linear,
                    pair_metric_series(&mr),
                );
                p.inline_legend = p.series.len() > 1;
                // Similarities bounded in [0, 1] on their whole range, so a value near its null
                // looks near it.
                if matches!(*metric, "mutual_knn" | "cka_linear" | "svcca" | "pwcca") {
                    p.y_range = Some((0.0, 1.0));
                }
                p
            };
            if panel.series.iter().all(|s| s.points.len() <= 1) {
                panel.x_range = None;
            }
            panels.push(Panel::Lines(panel));
        }
    }
    let n_pairs = pairs.len();
    let cols = if metrics.len() == 1 {
        grid_cols(panels.len())
    } else {
        metrics.len()
    };
    let title = if metrics == ["distance_spearman"] {
        "Cross-model agreement of pairwise distances"
    } else {
        "Cross-model agreement"
    };
    let mut p = plot(o, title, cols, panels);
    if has_distance {
        p.legend_title = "space".to_owned();
        p.legend = kinds
            .iter()
            .map(|(_, label, color)| LegendEntry {
                label: (*label).to_owned(),
                stroke: Stroke::solid(*color),
                patch: false,
            })
            .collect();
    }
    p.footnote = footnote(vec![nonfinite_note(count_nonfinite(&rows))]);
    let others: Vec<&str> = metrics
        .iter()
        .filter(|m| **m != "distance_spearman")
        .map(|m| pair_metric_label(m))
        .collect();
    let mut caption = String::new();
    if has_distance {
        caption.push_str(
            "Spearman correlation between two models' pairwise distances on the same inputs, per \
             layer (relative depth of the first model), in the full space, in each model's readout \
             subspace, and in random subspaces (mean ± 1 sd)",
        );
    }
    if !others.is_empty() {
        caption.push_str(if has_distance {
            "; beside it, "
        } else {
            "Per layer (relative depth of the first model), "
        });
        caption.push_str(&others.join(", "));
        caption.push_str(" with each metric's null (mean ± 1 sd) where it has one");
    }
    caption.push_str(&format!("; {n_pairs} model pair(s)."));
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}

/// Distance agreement by space; without explicit `random` rows, the readout rows' null.
fn distance_series(fr: &[&Row], kinds: &[(&str, &str, RGBColor); 3]) -> Vec<Series> {
    let mut series = Vec::new();
    for &(v, label, color) in kinds {
        let mut s = Series {
            label: label.to_owned(),
            stroke: Stroke::solid(color),
            points: Vec::new(),
            yerr: Vec::new(),
        };
        let direct: Vec<&&Row> = fr.iter().filter(|r| r.variant == v).collect();
        if !direct.is_empty() {
            for r in direct {
                s.points.push((r.relative_depth, r.value));
                if v == "random" {
                    s.yerr.push(r.null_std.unwrap_or(0.0));
                }
            }
        } else if v == "random" {
            for r in fr.iter().filter(|r| r.variant == "readout") {
                if let Some(m) = r.null_mean {
                    s.points.push((r.relative_depth, m));
                    s.yerr.push(r.null_std.unwrap_or(0.0));
                }
            }
        }
        if v == "random" && s.yerr.iter().all(|e| *e == 0.0) {
            s.yerr.clear();
        }
        series.push(s);
    }
    series
}

/// A pair metric's axis label.
fn pair_metric_label(metric: &str) -> &str {
    match metric {
        "mutual_knn" => "mutual kNN alignment",
        "cknna" => "CKNNA",
        "cka_linear" => "linear CKA",
        "svcca" => "SVCCA",
        "pwcca" => "PWCCA",
        "procrustes" => "Procrustes distance",
        "rsa" => "RSA (Spearman of RDMs)",
        other => other,
    }
}

/// One series per variant of a pair metric (black, then the palette), and one of its null
/// (mean ± 1 sd, blue) where its rows carry one.
fn pair_metric_series(rows: &[&Row]) -> Vec<Series> {
    let variants: BTreeSet<&str> = rows.iter().map(|r| r.variant.as_str()).collect();
    let colors = [
        RGBColor(30, 30, 30),
        RGBColor(200, 30, 30),
        RGBColor(0, 158, 115),
        RGBColor(230, 120, 0),
    ];
    let mut series = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        let of: Vec<&&Row> = rows.iter().filter(|r| r.variant == *v).collect();
        series.push(Series {
            label: if v.is_empty() {
                "value".to_owned()
            } else {
                (*v).to_owned()
            },
            stroke: Stroke::solid(colors[i % colors.len()]),
            points: of.iter().map(|r| (r.relative_depth, r.value)).collect(),
            yerr: Vec::new(),
        });
        let null: Vec<&&&Row> = of.iter().filter(|r| r.null_mean.is_some()).collect();
        if !null.is_empty() {
            series.push(Series {
                label: if variants.len() == 1 {
                    "null (± 1 sd)".to_owned()
                } else {
                    format!("{v} null (± 1 sd)")
                },
                stroke: Stroke::solid(RGBColor(0, 100, 180)),
                points: null
                    .iter()
                    .map(|r| (r.relative_depth, r.null_mean.unwrap_or(f64::NAN)))
                    .collect(),
                yerr: null.iter().map(|r| r.null_std.unwrap_or(0.0)).collect(),
            });
        }
    }
    series
}

/// Figure 8: linear-probe accuracy per layer beside PGA z (two stacked panels, shared x).
pub fn fig8_probe_vs_pga(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig8_probe_vs_pga";
    if select(table, "probe_accuracy", None).is_empty() {
        return Err(no_data(name, "probe_accuracy", None));
    }
    let (models, strokes) = models_for(table, &["pga_z", "probe_accuracy"], o);
    let v = o.pga_variant.as_str();
    let zrows = select(table, "pga_z", Some(v));
    let scale = z_scale(o, zrows.iter().map(|r| r.value));
    let mut used = Vec::new();
    let mut zp = metric_panel(
        table,
        "pga_z",
        Some(v),
        "PGA z",
        &z_label(scale),
        scale,
        &strokes,
        &models,
        &mut used,
    );
    if let Panel::Lines(p) = &mut zp {
        (p.hlines, p.band) = z_refs(o);
    }
    let mut pp = metric_panel(
        table,
        "probe_accuracy",
        None,
        "linear-probe accuracy",
        "accuracy (fraction correct)",
        Scale::Linear,
        &strokes,
        &models,
        &mut used,
    );
    if let Panel::Lines(p) = &mut pp {
        p.y_range = None;
    }
    let n_bad = used.iter().filter(|r| !r.value.is_finite()).count();
    let mut p = plot(
        o,
        "Linear-probe accuracy per layer beside PGA z",
        2,
        vec![zp, pp],
    );
    p.legend_title = "model".to_owned();
    p.legend = model_legend(&models, &strokes);
    p.legend.push(band_entry(o));
    p.footnote = footnote(vec![size_note(&models, o), nonfinite_note(n_bad)]);
    let caption = format!(
        "Left: PGA z ({v}) per layer; right: accuracy of a multinomial logistic-regression probe on the same \
         layer's features, both at each model's final checkpoint. {}.",
        size_note(&models, o)
    );
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}

/// The readout dimension `k` of a PGA row: the `k<N>` token of its variant (`ccr1_k50`, as
/// written by runs that sweep several k), else the model's configured k
/// ([`FigureOptions::readout_k_by_model`], then [`FigureOptions::readout_k`]).
fn pga_row_k(r: &Row, o: &FigureOptions) -> u32 {
    r.variant
        .split(['_', '/', ':'])
        .find_map(|t| t.strip_prefix('k').and_then(|n| n.parse::<u32>().ok()))
        .unwrap_or_else(|| {
            o.readout_k_by_model
                .get(&r.model)
                .copied()
                .unwrap_or(o.readout_k)
        })
}

/// Whether a PGA variant is `base` itself or `base` at some k (`ccr1`, `ccr1_k50`; not
/// `ccr1_k50_spectrum`, which is another null).
fn is_variant_at_some_k(variant: &str, base: &str) -> bool {
    variant == base
        || variant
            .strip_prefix(base)
            .and_then(|rest| rest.strip_prefix("_k"))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Figure 9: sensitivity of PGA z to the readout dimension: z against k/d per model at its
/// final checkpoint, at the last layer and as the median over layers. Drawn only when some
/// model has PGA rows at two or more k; otherwise skipped with a note.
pub fn fig9_k_sensitivity(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig9_k_sensitivity";
    let v = o.pga_variant.as_str();
    let rows: Vec<&Row> = select(table, "pga_z", None)
        .into_iter()
        .filter(|r| is_variant_at_some_k(&r.variant, v))
        .collect();
    let fin = final_rows(&rows);
    // model -> k -> rows of the final checkpoint.
    let mut by_k: BTreeMap<&str, BTreeMap<u32, Vec<&Row>>> = BTreeMap::new();
    for (model, rs) in &fin {
        for r in rs {
            by_k.entry(model.as_str())
                .or_default()
                .entry(pga_row_k(r, o))
                .or_default()
                .push(r);
        }
    }
    by_k.retain(|_, ks| ks.len() >= 2);
    if by_k.is_empty() {
        return Err(Error::NoData {
            figure: name.to_owned(),
            metric: "pga_z".to_owned(),
            variant_note: format!(
                ", variant {v}, at two or more k per model (this table has one k per model)"
            ),
        });
    }
    let models = model_infos(
        rows.iter()
            .copied()
            .filter(|r| by_k.contains_key(r.model.as_str())),
    );
    let strokes = model_strokes(&models, o);
    let median = |mut xs: Vec<f64>| -> Option<f64> {
        xs.retain(|x| x.is_finite());
        if xs.is_empty() {
            return None;
        }
        xs.sort_by(f64::total_cmp);
        let m = xs.len() / 2;
        Some(if xs.len() % 2 == 1 {
            xs[m]
        } else {
            0.5 * (xs[m - 1] + xs[m])
        })
    };
    let mut last = Vec::new();
    let mut mid = Vec::new();
    let mut all_z = Vec::new();
    for m in &models {
        let ks = &by_k[m.model.as_str()];
        let mut pl = Vec::new();
        let mut pm = Vec::new();
        for (&k, rs) in ks {
            let x = f64::from(k) / f64::from(m.d);
            if let Some(r) = rs.iter().max_by_key(|r| r.layer)
                && r.value.is_finite()
            {
                pl.push((x, r.value));
            }
            if let Some(z) = median(rs.iter().map(|r| r.value).collect()) {
                pm.push((x, z));
            }
            all_z.extend(rs.iter().map(|r| r.value));
        }
        let series = |points| Series {
            label: model_label(m),
            stroke: strokes[&m.model],
            points,
            yerr: Vec::new(),
        };
        last.push(series(pl));
        mid.push(series(pm));
    }
    let scale = z_scale(o, all_z.iter().copied());
    let panel = |title: &str, series| {
        let (hlines, band) = z_refs(o);
        Panel::Lines(LinePanel {
            title: title.to_owned(),
            x_label: "k / d (readout dimension over width)".to_owned(),
            y_label: z_label(scale),
            x_scale: Scale::Linear,
            y_scale: scale,
            y_range: None,
            x_range: None,
            series,
            hlines,
            band,
            inline_legend: false,
        })
    };
    let n_bad = all_z.iter().filter(|z| !z.is_finite()).count();
    let mut p = plot(
        o,
        "Sensitivity of PGA z to the readout dimension k",
        2,
        vec![panel("last layer", last), panel("median over layers", mid)],
    );
    p.legend_title = "model".to_owned();
    p.legend = model_legend(&models, &strokes);
    p.legend.push(band_entry(o));
    p.footnote = footnote(vec![size_note(&models, o), nonfinite_note(n_bad)]);
    let caption = format!(
        "PGA z ({v}) against k/d at each model's final checkpoint, for the models measured at two or \
         more readout dimensions k: left at the last layer, right the median over layers. z is only \
         comparable across widths at equal k/d. {}.",
        size_note(&models, o)
    );
    Figure::new(name, caption, p.with_synthetic(table.any_synthetic()))
}
