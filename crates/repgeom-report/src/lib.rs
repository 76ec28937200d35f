//! repgeom-report turns the tidy long results table into what a researcher reads: CSV, Parquet
//! and JSON tables, the study's eleven figures (SVG + PNG), a per-model summary (markdown + CSV)
//! and a plain `index.html`.
//!
//! The main type is [`ResultsTable`], a validated, canonically sorted list of [`Row`]s (one metric
//! value per model, checkpoint, layer, variant). Every figure is a function of the table alone
//! (`fig1_pga_z_by_layer(&table, &opts) -> Result<Figure>`), so users can draw them from their own
//! results.
//!
//! Key design decision: a figure is first built as a small declarative plot description (panels,
//! series, reference lines, legend) and then drawn by one renderer generic over the plotters
//! backend. SVG and PNG therefore cannot disagree, the legend lives outside the data area, the
//! symmetric-log axis for PGA z (which spans about −80..+20) is handled in one place, and tests
//! can check the SVG's text without looking at pixels. Text is drawn with the embedded DejaVu font
//! through ab_glyph, so no system fonts are needed.
//!
//! Modules: `table` is the row schema, with the file formats in `table/formats.rs` and
//! `table/json.rs` and the workspace's one table formatter, [`CellTable`] (aligned text, JSON
//! lines, CSV; the CLI prints through it too), in `table/cells.rs`; `plot` is the plot
//! description, drawn by `plot/render`; `figures` has one file per figure over the helpers in
//! `figures/mod.rs`; then `summary`, `html` and `report`. Files are written through
//! `repgeom_io::atomic_write`, the workspace's one atomic writer.
//!
//! This crate computes no metrics and knows nothing of activations; it is the only crate that
//! knows about polars and plotters. It never prints.
#![deny(missing_docs)]

mod error;
mod figures;
mod html;
mod io;
mod plot;
mod report;
mod summary;
mod table;

pub use error::{Error, Result};
pub use figures::{
    ALL_FIGURES, ALL_TOKENS, DEFAULT_SPECTRAL, Figure, FigureFn, FigureOptions, SIGNIFICANT_P,
    ZScale, all_figures, all_tokens_variant, fig1_pga_z_by_layer, fig2_pga_z_heatmap,
    fig3_ccr_ablation, fig4_pc_readout_share, fig5_spectral_vs_pga, fig6_val_loss,
    fig7_cross_model, fig8_probe_vs_pga, fig9_k_sensitivity, fig10_layer_heatmaps,
    fig11_spectral_tokens,
};
pub use html::{index_html, index_html_with_notes};
pub use report::{ReportFiles, write_report};
pub use summary::{
    AGGREGATE_EXTRA, CROSS_COLUMNS_PER_TABLE, CcrEffect, CrossSummary, DuplicateCheckpoint,
    SummaryOptions, SummaryRow, SummaryTable, layer_ranges, summary, summary_with,
};
pub use table::{
    Align, Cell, CellFormat, CellTable, Column, ResultsTable, Row, TableFormat, format_number,
    format_table, relative_depth, tidy_cells,
};

/// Re-export of the polars `DataFrame` used by [`ResultsTable::to_dataframe`].
pub use polars::prelude::DataFrame;

#[cfg(test)]
mod tests;
