//! Reading per-layer hidden states from `.npy`, `.npz` and `.safetensors` files.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::st::{StFile, list_names};
use crate::tensor::RawTensor;
use crate::{Error, Matrix, Result, mmap, npy, npz};

/// Hidden states of several layers, all for the same N token positions.
#[derive(Debug, Clone)]
pub struct Activations {
    /// The file they were read from.
    pub source: PathBuf,
    /// One entry per layer, in the order requested (ascending layer order when all are read).
    pub layers: Vec<LayerActs>,
}

/// The hidden states of one layer.
#[derive(Debug, Clone)]
pub struct LayerActs {
    /// Layer index (HuggingFace `hidden_states` convention: 0 is the embedding output).
    pub layer: usize,
    /// Where in the file it came from, e.g. `hidden_states[3]`, `layer_3`, `blocks.2.hook_resid_post`.
    pub tensor: String,
    /// N points x d, row-major f32.
    pub acts: Matrix,
}

/// Where one layer lives inside an opened tensor.
struct Source {
    /// Index into the opened tensors.
    tensor: usize,
    /// `Some(l)`: slice `l` of a 3-D [L, N, d] tensor; `None`: the whole 2-D tensor.
    slice: Option<usize>,
}

/// Reads activations, keeping only `layers` when given (in that order).
///
/// Layouts (see `docs/file-formats.md`): `.npy` [L, N, d] or [N, d] (layer 0); `.npz` with one
/// [N, d] array per layer, numbered by the integer in its name (or a single [L, N, d] array);
/// `.safetensors` with `hidden_states` [L, N, d] (or the only 3-D tensor), or one [N, d] tensor
/// per layer named `layer.{i}`, `layer_{i}`, `hidden_states.{i}`, or TransformerLens
/// `blocks.{i}.hook_resid_post` (read as layer i + 1). Float dtypes f16, bf16, f32, f64 load as f32,
/// one layer per task on the current rayon pool (each layer's values are the same either way).
pub fn read_activations(path: &Path, layers: Option<&[usize]>) -> Result<Activations> {
    let ext = extension(path);
    match ext.as_str() {
        "npy" => {
            let map = mmap::map_file(path)?;
            let t = npy::parse(Cow::Borrowed(map.bytes()), path, "array")?.into_c_order();
            build(path, vec![t], layers, |ts| stacked_or_single(path, ts))
        }
        "npz" => {
            let ts: Vec<RawTensor<'static>> = npz::read_all(path)?
                .into_iter()
                .map(RawTensor::into_c_order)
                .collect();
            build(path, ts, layers, |ts| npz_layout(path, ts))
        }
        "safetensors" => {
            let f = StFile::open(path)?;
            let names = f.names();
            // A stacked tensor: `hidden_states`, else the only 3-D tensor.
            let three_d: Vec<&String> = names
                .iter()
                .filter(|n| f.shape(n).is_some_and(|s| s.len() == 3))
                .collect();
            let stacked = if f.has("hidden_states") {
                Some("hidden_states".to_string())
            } else if three_d.len() == 1 {
                Some(three_d[0].clone())
            } else {
                None
            };
            if let Some(name) = stacked {
                let t = f.tensor(&name)?;
                return build(path, vec![t], layers, |ts| stacked_or_single(path, ts));
            }
            let mut found: Vec<(usize, String)> = Vec::new();
            for n in &names {
                if let Some(l) = safetensors_layer(n) {
                    found.push((l, n.clone()));
                }
            }
            if found.is_empty() {
                return Err(Error::BadLayout {
                    file: path.to_path_buf(),
                    reason: format!(
                        "no activation tensors found: expected `hidden_states` [L, N, d] or per-layer tensors \
                         `layer.{{i}}`, `hidden_states.{{i}}`, `blocks.{{i}}.hook_resid_post`; tensors present: {}",
                        list_names(&names)
                    ),
                });
            }
            // Open only the tensors of the requested layers.
            let wanted: Option<Vec<usize>> = layers.map(<[usize]>::to_vec);
            let mut ts = Vec::new();
            let mut map = BTreeMap::new();
            for (l, n) in &found {
                if map.contains_key(l) {
                    return Err(Error::BadLayout {
                        file: path.to_path_buf(),
                        reason: format!(
                            "layer {l} is stored twice (`{}` and `{n}`)",
                            ts_name(&ts, &map, *l)
                        ),
                    });
                }
                if wanted.as_ref().is_none_or(|w| w.contains(l)) {
                    map.insert(*l, Some(ts.len()));
                    ts.push(f.tensor(n)?);
                } else {
                    map.insert(*l, None);
                }
            }
            build(path, ts, layers, move |_ts| {
                Ok(map
                    .into_iter()
                    .map(|(l, idx)| {
                        (
                            l,
                            idx.map(|tensor| Source {
                                tensor,
                                slice: None,
                            }),
                        )
                    })
                    .collect())
            })
        }
        _ => Err(Error::UnknownFormat {
            file: path.to_path_buf(),
            expected: ".npy, .npz or .safetensors",
        }),
    }
}

fn ts_name(ts: &[RawTensor<'_>], map: &BTreeMap<usize, Option<usize>>, l: usize) -> String {
    match map.get(&l) {
        Some(Some(i)) => ts[*i].name.clone(),
        _ => format!("layer {l}"),
    }
}

pub(crate) fn extension(path: &Path) -> String {
    path.extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// Layer index of a per-layer safetensors name, if it follows one of the known patterns.
fn safetensors_layer(name: &str) -> Option<usize> {
    for prefix in [
        "layer.",
        "layer_",
        "layers.",
        "hidden_states.",
        "hidden_states_",
    ] {
        if let Some(rest) = name.strip_prefix(prefix) {
            return parse_index(rest);
        }
    }
    if let Some(rest) = name.strip_prefix("blocks.") {
        let i = parse_index(rest.strip_suffix(".hook_resid_post")?)?;
        return i.checked_add(1);
    }
    None
}

fn parse_index(s: &str) -> Option<usize> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The integer in an npz member name (`layer_3`, `arr_0`, `hidden_states.3`): the last run of digits.
fn npz_index(name: &str) -> Option<usize> {
    let b = name.as_bytes();
    let end = b.iter().rposition(u8::is_ascii_digit)? + 1;
    let start = b[..end]
        .iter()
        .rposition(|c| !c.is_ascii_digit())
        .map_or(0, |p| p + 1);
    name[start..end].parse().ok()
}

type Layout = BTreeMap<usize, Option<Source>>;

/// One tensor: [L, N, d] gives layers 0..L, [N, d] gives layer 0.
fn stacked_or_single(path: &Path, ts: &[RawTensor<'_>]) -> Result<Layout> {
    let t = &ts[0];
    match t.shape.len() {
        3 => Ok((0..t.shape[0])
            .map(|l| {
                (
                    l,
                    Some(Source {
                        tensor: 0,
                        slice: Some(l),
                    }),
                )
            })
            .collect()),
        2 => Ok(BTreeMap::from([(
            0,
            Some(Source {
                tensor: 0,
                slice: None,
            }),
        )])),
        _ => Err(Error::ShapeMismatch {
            file: path.to_path_buf(),
            tensor: t.name.clone(),
            expected: "[L, N, d] or [N, d]".into(),
            found: t.shape.clone(),
        }),
    }
}

fn npz_layout(path: &Path, ts: &[RawTensor<'_>]) -> Result<Layout> {
    if ts.is_empty() {
        return Err(Error::BadLayout {
            file: path.to_path_buf(),
            reason: "archive holds no arrays".into(),
        });
    }
    // A lone array is read like an .npy file: [L, N, d], or [N, d] as layer 0 when its name
    // carries no layer number.
    if ts.len() == 1 && (ts[0].shape.len() == 3 || npz_index(&ts[0].name).is_none()) {
        return stacked_or_single(path, ts);
    }
    let mut out = BTreeMap::new();
    for (i, t) in ts.iter().enumerate() {
        let l = npz_index(&t.name).ok_or_else(|| Error::BadLayout {
            file: path.to_path_buf(),
            reason: format!(
                "array `{}` has no layer number in its name (expected e.g. `layer_3`, `arr_0`)",
                t.name
            ),
        })?;
        if let Some(Some(prev)) = out.insert(
            l,
            Some(Source {
                tensor: i,
                slice: None,
            }),
        ) {
            let prev: Source = prev;
            return Err(Error::BadLayout {
                file: path.to_path_buf(),
                reason: format!(
                    "layer {l} is stored twice (`{}` and `{}`)",
                    ts[prev.tensor].name, t.name
                ),
            });
        }
    }
    Ok(out)
}

fn build<'a>(
    path: &Path,
    ts: Vec<RawTensor<'a>>,
    layers: Option<&[usize]>,
    layout: impl FnOnce(&[RawTensor<'a>]) -> Result<Layout>,
) -> Result<Activations> {
    let layout = layout(&ts)?;
    let available: Vec<usize> = layout.keys().copied().collect();
    let order: Vec<usize> = match layers {
        None => available.clone(),
        Some(ls) => {
            if ls.is_empty() {
                return Err(Error::BadLayout {
                    file: path.to_path_buf(),
                    reason: "an empty list of layers was requested".into(),
                });
            }
            let mut seen = std::collections::BTreeSet::new();
            for &l in ls {
                if !layout.contains_key(&l) {
                    return Err(Error::MissingLayer {
                        file: path.to_path_buf(),
                        layer: l,
                        available,
                    });
                }
                if !seen.insert(l) {
                    return Err(Error::BadLayout {
                        file: path.to_path_buf(),
                        reason: format!("layer {l} requested twice"),
                    });
                }
            }
            ls.to_vec()
        }
    };
    let mut out = Vec::with_capacity(order.len());
    let mut first_shape: Option<(usize, usize, String)> = None;
    for l in order {
        let Some(Some(src)) = layout.get(&l) else {
            return Err(Error::MissingLayer {
                file: path.to_path_buf(),
                layer: l,
                available,
            });
        };
        let t = &ts[src.tensor];
        t.require_float(path)?;
        let (rows, cols, name, start) = match src.slice {
            Some(s) => (
                t.shape[1],
                t.shape[2],
                format!("{}[{s}]", t.name),
                s * t.shape[1] * t.shape[2],
            ),
            None => {
                if t.shape.len() != 2 {
                    return Err(Error::ShapeMismatch {
                        file: path.to_path_buf(),
                        tensor: t.name.clone(),
                        expected: "[N, d]".into(),
                        found: t.shape.clone(),
                    });
                }
                (t.shape[0], t.shape[1], t.name.clone(), 0)
            }
        };
        match &first_shape {
            None => first_shape = Some((rows, cols, name.clone())),
            Some((r0, c0, n0)) if (*r0, *c0) != (rows, cols) => {
                return Err(Error::ShapeMismatch {
                    file: path.to_path_buf(),
                    tensor: name,
                    expected: format!("[{r0}, {c0}] like `{n0}`"),
                    found: vec![rows, cols],
                });
            }
            Some(_) => {}
        }
        out.push((l, name, src.tensor, start, rows, cols));
    }
    // The conversions, one layer per task on the current rayon pool (a 6.9B model's 33 layers
    // of 2048 × 4096 are a second of one core's work); the first error in layer order is the
    // one reported.
    use rayon::prelude::*;
    let converted: Vec<Result<LayerActs>> = out
        .into_par_iter()
        .map(|(layer, tensor, i, start, rows, cols)| {
            let data = ts[i].f32_range(path, start, rows * cols)?;
            Ok(LayerActs {
                layer,
                tensor,
                acts: Matrix::new(rows, cols, data)?,
            })
        })
        .collect();
    Ok(Activations {
        source: path.to_path_buf(),
        layers: converted.into_iter().collect::<Result<_>>()?,
    })
}
