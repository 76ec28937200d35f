//! A small declarative plot description: a [`Plot`] is a grid of panels (lines, heat maps or a
//! message) with series, reference lines, a legend or colour bar and a footnote.
//!
//! Figures are built as a `Plot` from the table; `render` then draws the same `Plot` on the SVG
//! backend and on the bitmap backend, so the two files always show the same thing. Axis ticks
//! and their labels are in `ticks`.

use plotters::style::RGBColor;

mod render;
mod ticks;

#[cfg(test)]
pub(crate) use render::diverging;
pub(crate) use render::{rgb, svg};
pub(crate) use ticks::tick_label;

/// How values map onto an axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scale {
    Linear,
    /// `sign(v) · log10(1 + |v|)`: linear-ish near 0, logarithmic in the tails.
    SymLog,
    Log10,
}

impl Scale {
    /// Data value to axis position.
    pub(crate) fn fwd(self, v: f64) -> f64 {
        match self {
            Scale::Linear => v,
            Scale::SymLog => v.signum() * v.abs().ln_1p() / std::f64::consts::LN_10,
            Scale::Log10 => v.log10(),
        }
    }

    /// Axis position to data value.
    pub(crate) fn inv(self, t: f64) -> f64 {
        match self {
            Scale::Linear => t,
            Scale::SymLog => t.signum() * (10f64.powf(t.abs()) - 1.0),
            Scale::Log10 => 10f64.powf(t),
        }
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
    /// A solid 2 px line with markers.
    pub(crate) fn solid(color: RGBColor) -> Self {
        Self {
            color,
            dashed: false,
            marker: true,
            width: 2,
        }
    }
}

/// One line of a line panel.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    pub(crate) label: String,
    pub(crate) stroke: Stroke,
    /// (x, y) in data units; non-finite y breaks the line.
    pub(crate) points: Vec<(f64, f64)>,
    /// Symmetric error bars (same length as `points`) or empty.
    pub(crate) yerr: Vec<f64>,
}

impl Series {
    /// A series without error bars.
    pub(crate) fn new(label: String, stroke: Stroke, points: Vec<(f64, f64)>) -> Self {
        Self {
            label,
            stroke,
            points,
            yerr: Vec::new(),
        }
    }
}

/// A horizontal reference line across a line panel.
#[derive(Debug, Clone)]
pub(crate) struct HLine {
    pub(crate) y: f64,
    pub(crate) stroke: Stroke,
    pub(crate) label: Option<String>,
}

/// A panel of lines against x, with reference lines and a shaded band.
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

impl LinePanel {
    /// A panel of `series` with both ranges from the data and no reference lines, band or key.
    pub(crate) fn new(
        title: &str,
        x_label: &str,
        y_label: &str,
        x_scale: Scale,
        y_scale: Scale,
        series: Vec<Series>,
    ) -> Self {
        Self {
            title: title.to_owned(),
            x_label: x_label.to_owned(),
            y_label: y_label.to_owned(),
            x_scale,
            y_scale,
            y_range: None,
            x_range: None,
            series,
            hlines: Vec::new(),
            band: None,
            inline_legend: false,
        }
    }
}

/// A heat map of cells on a grid of labelled rows and columns.
#[derive(Debug, Clone)]
pub(crate) struct HeatPanel {
    pub(crate) title: String,
    pub(crate) x_label: String,
    pub(crate) y_label: String,
    pub(crate) x_ticks: Vec<String>,
    pub(crate) y_ticks: Vec<String>,
    /// rows (y, bottom to top) × columns (x).
    pub(crate) cells: Vec<Vec<Option<f64>>>,
    /// Cells marked with a dot (same shape as `cells`; empty: none).
    pub(crate) marks: Vec<Vec<bool>>,
}

/// One cell of the plot's grid of panels.
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

/// One entry of the legend beside the panels.
#[derive(Debug, Clone)]
pub(crate) struct LegendEntry {
    pub(crate) label: String,
    pub(crate) stroke: Stroke,
    /// A filled box instead of a line (bands).
    pub(crate) patch: bool,
}

impl LegendEntry {
    /// An entry keyed by a line in `stroke`.
    pub(crate) fn line(label: String, stroke: Stroke) -> Self {
        Self {
            label,
            stroke,
            patch: false,
        }
    }
}

/// The colour bar beside heat maps: diverging colours symmetric around 0, saturating at `vmax`.
#[derive(Debug, Clone)]
pub(crate) struct ColorBar {
    pub(crate) label: String,
    pub(crate) vmax: f64,
    pub(crate) scale: Scale,
}

/// A whole figure: title, a grid of panels, the legend or colour bar beside them, a footnote.
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

impl Plot {
    /// Marks the plot as drawn from synthetic rows (or not).
    pub(crate) fn with_synthetic(mut self, synthetic: bool) -> Self {
        self.synthetic = synthetic;
        self
    }
}
