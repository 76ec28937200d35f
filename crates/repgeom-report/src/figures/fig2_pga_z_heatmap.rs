//! Figure 2: PGA z over checkpoints × layers, one heat map per model.

use super::{
    Figure, FigureOptions, ckpt_key, count_nonfinite, footnote, grid_plot, model_infos,
    model_label, nonfinite_note, select_or_no_data, z_scale,
};
use crate::error::Result;
use crate::plot::{ColorBar, HeatPanel, Panel, Scale};
use crate::table::{ResultsTable, Row};

/// Figure 2: PGA z over checkpoints × layers, one heat map per model, diverging colours centred
/// at 0 with a colour bar.
pub fn fig2_pga_z_heatmap(table: &ResultsTable, opts: &FigureOptions) -> Result<Figure> {
    let o = opts.check()?;
    let name = "fig2_pga_z_heatmap";
    let v = o.pga_variant.as_str();
    let rows = select_or_no_data(table, name, "pga_z", Some(v))?;
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
            marks: Vec::new(),
        }));
    }
    let title = format!("PGA z over training checkpoints × layers ({v})");
    let mut p = grid_plot(o, &title, panels);
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
