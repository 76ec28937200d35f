//! [`Manifest::check`]: the study's own rules, one function per manifest section, run in a fixed
//! order (analysis, cross, report, synthetic, models, extract, probe, pairs) so that a manifest
//! breaking several rules is always refused for the same first one, with the same message.
//!
//! The rules of the null, of the `pga` metric's options, of the synthetic zoo and of extraction
//! are the libraries' own checks (`NullParams::check`, `Pga`'s, `ZooParams::check`,
//! `ExtractParams::check`), called here and not restated.

use std::collections::BTreeSet;

use repgeom_metrics::{Metric, Pga};

use super::{
    Analysis, CheckpointSpec, DataSource, ExtractSpec, HubData, MAX_LAYERS, Manifest, ModelSpec,
    ProbeSpec, ReportSettings, SyntheticSpec,
};
use crate::{Error, Result};

/// What is wrong, when a rule of a place fixed by the caller is broken.
type Rule = std::result::Result<(), String>;

/// Makes the error of a broken rule, naming the manifest (`origin`).
#[derive(Clone, Copy)]
struct Bad<'a>(&'a str);

impl Bad<'_> {
    fn at(self, place: &str, reason: String) -> Error {
        Error::InvalidManifest {
            manifest: self.0.to_owned(),
            place: place.to_owned(),
            reason,
        }
    }
}

impl Manifest {
    /// Validates the manifest; `origin` names it in messages (its path or [`super::BUILTIN`]).
    pub fn check(&self, origin: &str) -> Result<()> {
        let bad = Bad(origin);
        analysis(self, bad)?;
        cross(&self.analysis, bad)?;
        report(&self.report, bad)?;
        if self.models.is_empty() && self.synthetic.is_none() {
            return Err(bad.at(
                "model",
                "names no model: add [[model]] tables or a [synthetic] table".into(),
            ));
        }
        let mut labels = match &self.synthetic {
            Some(s) => synthetic(s, bad)?,
            None => BTreeSet::new(),
        };
        for m in &self.models {
            let place = format!("model {:?}", m.label);
            model(m, self.extract.as_ref(), &mut labels).map_err(|r| bad.at(&place, r))?;
        }
        if let Some(e) = &self.extract {
            extract(e, bad)?;
        }
        if let Some(p) = &self.probe {
            probe(p, bad)?;
        }
        pairs(&self.pairs, &labels, bad)
    }
}

/// `[analysis]` apart from `cross`: the choice of `k`, the study's limits on the `pga` options,
/// the library's checks of the null and of `pga`, and the spectral metrics.
fn analysis(m: &Manifest, bad: Bad<'_>) -> Result<()> {
    let a = &m.analysis;
    k_choice(a, bad)?;
    let p = a.pga();
    if a.pga.given("spectrum_tol") && p.engine.null != repgeom_null::NullKind::Spectrum {
        return Err(bad.at(
            "analysis.spectrum_tol",
            "applies to the spectrum null only; set null = \"spectrum\" or drop it".into(),
        ));
    }
    if a.readout_fold_norm && m.synthetic.is_some() {
        return Err(bad.at(
            "analysis.readout_fold_norm",
            "synthetic models have no final norm to fold; use it with checkpoint directories only"
                .into(),
        ));
    }
    if let Some(f) = a
        .k_sensitivity
        .iter()
        .find(|f| !(f.is_finite() && **f > 0.0 && **f < 1.0))
    {
        return Err(bad.at(
            "analysis.k_sensitivity",
            format!("{f} must lie strictly between 0 and 1 (k = round(f · d))"),
        ));
    }
    library(a, &p, bad)?;
    spectral(&a.spectral, bad)?;
    spectral_tokens(m, bad)
}

/// `analysis.spectral_tokens`: a corpus to stream (`[extract]`), and spectral metrics that are
/// functions of the covariance ([`repgeom_metrics::covariance_form`]).
fn spectral_tokens(m: &Manifest, bad: Bad<'_>) -> Result<()> {
    let a = &m.analysis;
    if a.spectral_tokens.is_none() {
        return Ok(());
    }
    let place = "analysis.spectral_tokens";
    if m.extract.is_none() {
        return Err(bad.at(
            place,
            "streams the corpus of [extract] through hub checkpoints; add an [extract] table (models read from activation files have no corpus)".into(),
        ));
    }
    if a.spectral.is_empty() {
        return Err(bad.at(place, "needs spectral metrics (analysis.spectral)".into()));
    }
    for s in &a.spectral {
        repgeom_metrics::covariance_form(s).map_err(|e| bad.at(place, e.to_string()))?;
    }
    Ok(())
}

/// `analysis.k` and `analysis.k_frac`: a positive `k`, or a fraction of the width instead.
fn k_choice(a: &Analysis, bad: Bad<'_>) -> Result<()> {
    if a.k == 0 {
        return Err(bad.at("analysis.k", "must be at least 1".into()));
    }
    if let Some(f) = a.k_frac {
        if let Err(e) = repgeom_metrics::check_k_frac(f) {
            return Err(bad.at("analysis.k_frac", format!("{e} (k = round(k_frac · d))")));
        }
        if a.k != Analysis::default().k {
            return Err(bad.at(
                "analysis.k_frac",
                format!("set either k ({}) or k_frac ({f}), not both", a.k),
            ));
        }
    }
    Ok(())
}

/// The null's and the PGA options' own rules (n_null, max_pairs, bootstrap, spectrum_tol, CCR
/// levels) are the library's checks, the ones every front end runs, with the same messages;
/// the manifest adds only the study's own rules.
fn library(a: &Analysis, p: &Pga, bad: Bad<'_>) -> Result<()> {
    repgeom_null::NullParams {
        n_null: a.n_null,
        seed: a.seed,
    }
    .check()
    .map_err(|e| bad.at("analysis.n_null", e.to_string()))?;
    p.check().map_err(|e| {
        let place = match &e {
            repgeom_metrics::Error::InvalidOption { name, .. } => {
                format!("analysis.{}", name.split(' ').next().unwrap_or_default())
            }
            _ => "analysis".into(),
        };
        bad.at(&place, e.to_string())
    })?;
    Ok(())
}

/// `analysis.spectral`: registry names of per-layer metrics other than `pga` and
/// `pc_readout_share` (which have their own keys).
fn spectral(spectral: &[String], bad: Bad<'_>) -> Result<()> {
    let known = repgeom_metrics::metric_names();
    for s in spectral {
        if !known.contains(&s.as_str()) {
            return Err(bad.at(
                "analysis.spectral",
                format!("unknown metric {s:?} (known: {})", known.join(", ")),
            ));
        }
        if ["pga", "pc_readout_share"].contains(&s.as_str()) {
            return Err(bad.at(
                "analysis.spectral",
                format!("{s:?} is not a spectral metric (set analysis.ccr / analysis.pc_share)"),
            ));
        }
    }
    Ok(())
}

/// `analysis.cross` and `analysis.cross_aggregate`: metrics the registry configures, each once,
/// and a permutation null for every metric when the layer table is aggregated.
fn cross(a: &Analysis, bad: Bad<'_>) -> Result<()> {
    let configured = a
        .cross_metrics()
        .map_err(|e| bad.at("analysis.cross", e.to_string()))?;
    if !a.cross_aggregate.is_empty()
        && let Some(m) = configured.iter().find(|m| m.permutations().n_perm == 0)
    {
        return Err(bad.at(
            "analysis.cross_aggregate",
            format!(
                "an aggregate over layer pairs needs a permutation null, and {:?} has \
                     n_perm = 0: set analysis.cross_n_perm (e.g. 1000)",
                m.info().name
            ),
        ));
    }
    let mut names = BTreeSet::new();
    for m in &configured {
        if !names.insert(m.info().name) {
            return Err(bad.at(
                "analysis.cross",
                format!(
                    "{:?} is listed twice (its rows would collide)",
                    m.info().name
                ),
            ));
        }
    }
    Ok(())
}

/// `[report]`: the small and large width classes do not overlap.
fn report(r: &ReportSettings, bad: Bad<'_>) -> Result<()> {
    if r.small_max_d >= r.large_min_d {
        return Err(bad.at("report", "small_max_d must be below large_min_d".into()));
    }
    Ok(())
}

/// `[synthetic]`: the zoo's own check and the layer limit; returns the labels of its models.
fn synthetic(s: &SyntheticSpec, bad: Bad<'_>) -> Result<BTreeSet<String>> {
    s.zoo_params()
        .check()
        .map_err(|e| bad.at("synthetic", e.to_string()))?;
    if s.n_layers > MAX_LAYERS {
        return Err(bad.at(
            "synthetic",
            format!("n_layers = {} is above {MAX_LAYERS}", s.n_layers),
        ));
    }
    Ok(s.widths.iter().map(|&w| SyntheticSpec::label(w)).collect())
}

/// One `[[model]]` table (its label added to `labels`): label, width, `k`, where its readout
/// comes from, its checkpoints and its layers.
fn model(m: &ModelSpec, extract: Option<&ExtractSpec>, labels: &mut BTreeSet<String>) -> Rule {
    if m.label.trim().is_empty() || m.label.contains(['/', '\\']) || m.label.starts_with('.') {
        return Err("label must be non-empty, without '/' or '\\', not starting with '.'".into());
    }
    if !labels.insert(m.label.clone()) {
        return Err("label used twice".into());
    }
    if m.d == 0 {
        return Err("d must be positive".into());
    }
    if m.k == Some(0) {
        return Err("k must be positive".into());
    }
    readout_source(m)?;
    if m.checkpoints.is_empty() {
        return Err("needs at least one [[model.checkpoint]]".into());
    }
    let mut names = BTreeSet::new();
    for c in &m.checkpoints {
        if !names.insert(c.name.as_str()) {
            return Err(format!("checkpoint name {:?} used twice", c.name));
        }
        checkpoint(c, m, extract)?;
    }
    layers(m)
}

/// A model's readout: from its hub id, or from a file, never both.
fn readout_source(m: &ModelSpec) -> Rule {
    match (&m.hub, &m.readout) {
        (Some(_), Some(_)) => {
            Err("gives both `hub` and `readout`: the readout comes from the hub model".into())
        }
        (None, None) => Err("needs `hub = \"org/name\"` or `readout = \"path\"`".into()),
        (Some(id), None) if !id.contains('/') || repgeom_hub::check_id(id).is_err() => {
            Err(format!("hub = {id:?} is not a hub model id (org/name)"))
        }
        _ => Ok(()),
    }
}

/// One `[[model.checkpoint]]` of model `m`: a hub revision (with the model's `hub` and an
/// `[extract]` table) or an activation file, and a typed-in loss only where none is computed.
fn checkpoint(c: &CheckpointSpec, m: &ModelSpec, extract: Option<&ExtractSpec>) -> Rule {
    let cp = format!("checkpoint {:?}", c.name);
    match (&c.revision, &c.activations) {
        (Some(_), Some(_)) => {
            return Err(format!("{cp} gives both `revision` and `activations`"));
        }
        (None, None) => {
            return Err(format!(
                "{cp} needs `revision` (with the model's `hub`) or `activations`"
            ));
        }
        (Some(_), None) if m.hub.is_none() => {
            return Err(format!(
                "{cp} gives a `revision` but the model has no `hub` id"
            ));
        }
        (Some(_), None) if extract.is_none() => {
            return Err(format!(
                "{cp} gives a `revision`: add an [extract] table (text, n_points, seq_len)"
            ));
        }
        _ => {}
    }
    if let Some(r) = &c.revision
        && let Err(e) = repgeom_hub::check_revision(r)
    {
        return Err(format!("{cp}: revision: {e}"));
    }
    if c.revision.is_some() && c.val_loss.is_some() && extract.is_some_and(|e| e.params.loss) {
        return Err(format!(
            "{cp}: val_loss is computed ([extract] loss = true); remove the typed-in value"
        ));
    }
    if c.val_loss.is_some_and(|v| !v.is_finite()) {
        return Err(format!("checkpoint {:?}: val_loss must be finite", c.name));
    }
    Ok(())
}

/// A model's `n_layers` (at most [`MAX_LAYERS`]) and its `layers`: distinct, below `n_layers`.
fn layers(m: &ModelSpec) -> Rule {
    if m.n_layers == 0 || m.n_layers as usize > MAX_LAYERS {
        return Err(format!(
            "n_layers = {} must be in 1..={MAX_LAYERS}",
            m.n_layers
        ));
    }
    if let Some(l) = &m.layers {
        if l.is_empty() {
            return Err("layers = [] selects nothing (omit it for all layers)".into());
        }
        if let Some(&bad_l) = l.iter().find(|&&x| x as u64 >= m.n_layers as u64) {
            return Err(format!(
                "layer {bad_l} is not below n_layers = {}",
                m.n_layers
            ));
        }
        let distinct: BTreeSet<_> = l.iter().collect();
        if distinct.len() != l.len() {
            return Err(format!("layers {l:?} repeats a layer"));
        }
    }
    Ok(())
}

/// `[extract]`: the extraction library's check, a hub dataset's id, and a held-out share when
/// the loss is computed.
fn extract(e: &ExtractSpec, bad: Bad<'_>) -> Result<()> {
    e.params()
        .check()
        .map_err(|err| bad.at("extract", err.to_string()))?;
    if let DataSource::Hub(h) = &e.text {
        h.check().map_err(|r| bad.at("extract.text", r))?;
    }
    if !(e.val_fraction > 0.0 && e.val_fraction < 1.0) && e.params.loss {
        return Err(bad.at(
            "extract",
            format!(
                "val_fraction = {} must be in (0, 1) with loss = true",
                e.val_fraction
            ),
        ));
    }
    Ok(())
}

/// `[probe]`: a hub dataset named with the probe's own column keys, or a CSV with both columns
/// named or neither, and positive sizes.
fn probe(p: &ProbeSpec, bad: Bad<'_>) -> Result<()> {
    if let DataSource::Hub(h) = &p.labels {
        h.check().map_err(|r| bad.at("probe.labels", r))?;
        if h.column.is_some() {
            return Err(bad.at(
                "probe.labels",
                "`column` names the text of [extract]; name the probe's columns with \
                 label_column and text_column (defaults `label` and `text`)"
                    .into(),
            ));
        }
    } else if p.label_column.is_some() != p.text_column.is_some() {
        return Err(bad.at(
            "probe",
            "give both label_column and text_column (a CSV with a header), or neither (AG News layout)".into(),
        ));
    }
    if p.seq_len == 0 || p.n_examples == Some(0) {
        return Err(bad.at("probe", "seq_len and n_examples must be positive".into()));
    }
    Ok(())
}

/// `pairs`: two different models, each labelled in the manifest (`labels`).
fn pairs(pairs: &[[String; 2]], labels: &BTreeSet<String>, bad: Bad<'_>) -> Result<()> {
    for [a, b] in pairs {
        let place = format!("pairs [{a:?}, {b:?}]");
        for x in [a, b] {
            if !labels.contains(x) {
                return Err(bad.at(&place, format!("no model labelled {x:?}")));
            }
        }
        if a == b {
            return Err(bad.at(&place, "a model paired with itself".into()));
        }
    }
    Ok(())
}

impl HubData {
    /// A hub dataset's id, split, column and revision are well-formed (the reason when not).
    fn check(&self) -> Rule {
        if !self.hub.contains('/') || repgeom_hub::check_id(&self.hub).is_err() {
            return Err(format!(
                "hub = {:?} is not a hub dataset id (org/name)",
                self.hub
            ));
        }
        if self.split.is_empty() || self.column.as_deref() == Some("") {
            return Err("split and column must not be empty".into());
        }
        if let Some(r) = &self.revision {
            repgeom_hub::check_revision(r).map_err(|e| format!("revision: {e}"))?;
        }
        Ok(())
    }
}
