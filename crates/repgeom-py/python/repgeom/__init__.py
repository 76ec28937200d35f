"""repgeom: how a language model's representation geometry is organised for prediction.

The Rust engine of the ``repgeom`` command line, for NumPy arrays and PyTorch tensors:

- :func:`pga` — Subspace PGA (z-score of the readout subspace of ``W_U`` against random
  subspaces) per layer, equal to ``repgeom pga`` bit for bit;
- :func:`metric`, :func:`metrics`, :func:`list_metrics` — the metric registry
  (``repgeom metrics``);
- :func:`compare` — cross-model pair metrics (``repgeom compare``);
- :func:`probe` — linear-probe accuracy per layer (``repgeom probe``);
- :func:`extract`, :func:`read_activations`, :func:`null_bases` — inputs.

Arrays are read without copying when they hold float32 (any strides, NumPy or DLPack); float16,
bfloat16 and float64 are converted once. Tensors must be on the CPU. The GIL is released while
computing, and Ctrl-C interrupts a long call. Errors derive from :class:`repgeom.Error`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Optional, Union

import numpy as np

from . import _native
from ._errors import Error, FileNotFoundError, InternalError, InvalidInputError, IOError

__version__ = _native.__version__

# The libraries' defaults (k, n_null, and the extraction's n_points, seq_len,
# points_per_sequence): the signatures below read them, so they are the command line's.
_DEFAULTS: Mapping[str, int] = _native.DEFAULTS

__all__ = [
    "Error",
    "FileNotFoundError",
    "IOError",
    "InternalError",
    "InvalidInputError",
    "PgaResult",
    "PgaResults",
    "Rows",
    "compare",
    "extract",
    "list_metrics",
    "metric",
    "metrics",
    "null_bases",
    "pga",
    "probe",
    "read_activations",
]

PathLike = Union[str, "os.PathLike[str]"]


class PgaResult:
    """Subspace PGA of one layer at one CCR level.

    Every field of a ``repgeom pga`` output row is an attribute (``layer``, ``n_points``, ``d``,
    ``k``, ``ccr``, ``rho_readout``, ``null_mean``, ``null_std``, ``z``, ``p_value``,
    ``n_pairs``, ``rho_se``), plus ``null_rhos`` (every null correlation, in draw order). The
    fields come from the Rust result type, so fields added there appear here too.
    """

    __slots__ = ("_fields",)

    def __init__(self, fields: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_fields", dict(fields))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(f"PgaResult has no field {name!r}; fields: {', '.join(self._fields)}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("PgaResult is read-only")

    def __dir__(self) -> list[str]:
        return sorted(set(self._fields) | {"to_dict", "fields"})

    @property
    def fields(self) -> list[str]:
        """The field names, in the Rust result's order (``layer`` first)."""
        return list(self._fields)

    def to_dict(self) -> dict[str, Any]:
        """Every field as a plain dict (``null_rhos`` as a list)."""
        return dict(self._fields)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PgaResult) and self._fields == other._fields

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        f = self._fields
        return (
            f"PgaResult(layer={f.get('layer')}, ccr={f.get('ccr')}, k={f.get('k')}, "
            f"rho_readout={f.get('rho_readout'):.6f}, z={f.get('z'):.3f}, p_value={f.get('p_value'):.4f})"
        )


class Rows(Sequence[dict]):
    """A list of result rows (dicts) with DataFrame exports."""

    def __init__(self, rows: list[dict]) -> None:
        self._rows = rows

    def __getitem__(self, i):  # type: ignore[override]
        return self._rows[i]

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[dict]:
        return iter(self._rows)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} rows)"

    def to_dicts(self) -> list[dict]:
        """The rows as a list of dicts."""
        return [dict(r) for r in self._rows]

    def to_dict(self) -> dict[str, list]:
        """Column-wise: ``{column: [value per row]}`` (columns in first-seen order)."""
        columns: dict[str, None] = {}
        for r in self._rows:
            columns.update(dict.fromkeys(r))
        return {c: [r.get(c) for r in self._rows] for c in columns}

    def to_pandas(self):
        """A pandas DataFrame, one row per result (needs ``pandas``)."""
        try:
            import pandas as pd
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("to_pandas() needs pandas: pip install pandas") from e
        return pd.DataFrame(self.to_dict())

    def to_polars(self):
        """A polars DataFrame, one row per result (needs ``polars``)."""
        try:
            import polars as pl
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("to_polars() needs polars: pip install polars") from e
        return pl.DataFrame(self.to_dict())


class PgaResults(Rows):
    """Subspace PGA per layer (and CCR level): a sequence of :class:`PgaResult`."""

    def __init__(self, results: list[PgaResult]) -> None:
        super().__init__([r.to_dict() for r in results])
        self._results = results

    def __getitem__(self, i):  # type: ignore[override]
        return self._results[i]

    def __iter__(self) -> Iterator[PgaResult]:  # type: ignore[override]
        return iter(self._results)

    def layer(self, layer: int, ccr: Optional[int] = None) -> PgaResult:
        """The result of one layer (and CCR level, when several were run)."""
        for r in self._results:
            if r.layer == layer and (ccr is None or r.ccr == ccr):
                return r
        raise KeyError(f"no result for layer {layer}" + ("" if ccr is None else f", ccr {ccr}"))

    def __repr__(self) -> str:
        body = ",\n  ".join(repr(r) for r in self._results)
        return f"PgaResults([\n  {body}\n])"


def _is_path(x: Any) -> bool:
    return isinstance(x, (str, os.PathLike))


def _ndim(x: Any) -> int:
    nd = getattr(x, "ndim", None)
    if nd is None:
        shape = getattr(x, "shape", None)
        if shape is None:
            x = np.asarray(x)
            return x.ndim
        return len(shape)
    return int(nd)


def _layers(acts: Any, name: str = "acts") -> list[tuple[int, Any]]:
    """``[(layer index, [N, d] array)]`` from ``[N, d]``, ``[L, N, d]``, a mapping or a path."""
    if _is_path(acts):
        return list(read_activations(acts).items())
    if isinstance(acts, Mapping):
        return [(int(k), v) for k, v in acts.items()]
    if not hasattr(acts, "__dlpack__") and not isinstance(acts, np.ndarray):
        acts = np.asarray(acts)
    nd = _ndim(acts)
    if nd == 2:
        return [(0, acts)]
    if nd == 3:
        return [(i, acts[i]) for i in range(acts.shape[0])]
    raise InvalidInputError(f"{name}: expected [N, d] or [L, N, d], got shape {tuple(acts.shape)}")


def _readout(readout: Any) -> Any:
    return os.fspath(readout) if isinstance(readout, os.PathLike) else readout


def _rows(json_rows: list[str]) -> list[dict]:
    out = []
    for text in json_rows:
        row = json.loads(text)
        extra = row.pop("extra", None)
        if isinstance(extra, dict):
            row.update(extra)
        out.append(row)
    return out


def pga(
    acts: Any,
    readout: Any,
    *,
    k: Union[int, Sequence[int]] = _DEFAULTS["k"],
    k_frac: Optional[float] = None,
    n_null: int = _DEFAULTS["n_null"],
    ccr: Union[int, Sequence[int]] = 1,
    seed: int = 0,
    readout_is_basis: bool = False,
    null_bases: Any = None,
    max_pairs: Optional[int] = None,
    max_memory: Optional[Union[int, str]] = None,
    progress: Optional[bool] = None,
    vocab_rows: Optional[int] = None,
    readout_tensor: Optional[str] = None,
    revision: Optional[str] = None,
    null: str = "haar",
    spectrum_tol: float = 0.01,
    distance: str = "cosine",
    bootstrap: Optional[int] = None,
    bootstrap_seed: int = 0,
    readout_fold_norm: bool = False,
    readout_center: bool = False,
    device: str = "cpu",
) -> Union[PgaResult, PgaResults]:
    """Subspace PGA: is each layer's distance structure preserved better by the readout
    subspace than by random subspaces? (``repgeom pga``)

    Args:
        acts: ``[N, d]`` or ``[L, N, d]`` activations (NumPy array, PyTorch CPU tensor or anything
            with ``__dlpack__``; float16/bfloat16/float32/float64), a ``{layer: [N, d]}`` mapping,
            or a path to an activation file (``.npy``, ``.npz``, ``.safetensors``).
        readout: ``W_U`` as a ``[V, d]`` array, a ``d × k`` orthonormal basis (with
            ``readout_is_basis=True``), a path to a ``.npy``/``.safetensors`` matrix or a local
            HuggingFace checkpoint directory, or a hub model id ``"org/name"`` (resolved in the
            HuggingFace cache, downloading only the readout's shard when missing).
        k: readout subspace dimension (top-``k`` right singular vectors of ``W_U``); a list
            runs one result per ``k`` (``repgeom pga -k 25,50``).
        k_frac: ``k = round(k_frac · d)`` instead of ``k`` (comparable across widths).
        n_null: number of random subspaces in the null.
        ccr: principal directions removed first (CCR-c); a list runs a sweep sharing one
            eigendecomposition.
        seed: seed of the null draws (and of the pair sample).
        readout_is_basis: ``readout`` is already the ``d × k`` basis.
        null_bases: ``[n_null, d, k]`` bases (array or ``.npy`` path) instead of drawing them.
        max_pairs: estimate every Spearman correlation on this many sampled pairs.
        max_memory: memory budget of the exact engine, in bytes or as a size ("4GiB", as
            ``--max-memory``).
        progress: ``False`` hides the progress bar (shown on terminals only by default).
        vocab_rows: keep only the first rows of ``W_U`` (padding rows past the vocabulary).
        readout_tensor: name of the readout tensor in a checkpoint, overriding the default.
        revision: with a hub model id, the branch, tag or commit (e.g. ``"step3000"``;
            default ``"main"``).
        null: ``"haar"`` (uniformly random subspaces, the default) or ``"spectrum"`` (the Haar
            draws tilted until each captures the readout's share of the layer's variance;
            ``repgeom pga --null spectrum``, see docs/pga.md).
        spectrum_tol: relative tolerance of the spectrum null on captured variance.
        distance: pairwise distance compared, ``"cosine"`` or ``"euclidean"``.
        bootstrap: percentile bootstrap (95%) over points with this many replicates, null
            bases held fixed (``z_lo``, ``z_hi``, ``rho_lo``, ``rho_hi`` in ``bootstrap``).
        bootstrap_seed: seed of the bootstrap resampling.
        readout_fold_norm: multiply ``W_U`` by the final norm's effective gain (read from the
            checkpoint by its architecture) before the SVD.
        readout_center: centre ``W_U``'s rows before the SVD.
        device: where the null draws run: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``
            (``--device``; docs/gpu.md). A missing driver, library or device raises before
            any input is read.

    Returns:
        A :class:`PgaResult` for a single ``[N, d]`` layer and one CCR level, else
        :class:`PgaResults` (one result per layer and CCR level, with ``to_pandas()``).
    """
    _native.open_device(str(device))  # before any input is read, as on the command line
    layers = _layers(acts)
    ccrs = [int(ccr)] if isinstance(ccr, (int, np.integer)) else [int(c) for c in ccr]
    nb = _readout(null_bases)
    ks = [int(k)] if isinstance(k, (int, np.integer)) else [int(x) for x in k]
    # The library's one PGA option struct (repgeom_metrics::Pga), by its own field names.
    options = {
        "ccr": ccrs,
        "distance": str(distance),
        "max_pairs": max_pairs,
        "pair_seed": int(seed),
        "max_memory": max_memory,
        "bootstrap": None if bootstrap is None else {"replicates": int(bootstrap), "seed": int(bootstrap_seed), "level": 0.95},
        "null": str(null),
        "spectrum_tol": float(spectrum_tol),
    }
    rows = _native.pga(
        layers,
        _readout(readout),
        options=json.dumps(options),
        ks=ks,
        k_frac=None if k_frac is None else float(k_frac),
        n_null=int(n_null),
        seed=int(seed),
        readout_is_basis=bool(readout_is_basis),
        null_bases=nb,
        progress=progress,
        vocab_rows=vocab_rows,
        readout_tensor=readout_tensor,
        revision=revision,
        readout_fold_norm=bool(readout_fold_norm),
        readout_center=bool(readout_center),
        device=str(device),
    )
    results = [PgaResult(json.loads(r)) for r in rows]
    single = not _is_path(acts) and not isinstance(acts, Mapping) and _ndim(acts) == 2 and len(ccrs) == 1 and len(ks) == 1
    return results[0] if single else PgaResults(results)


def _configs(names: Any) -> list[str]:
    out = []
    for item in names:
        if isinstance(item, str):
            out.append(json.dumps({"metric": item}))
        elif isinstance(item, Mapping):
            out.append(json.dumps(dict(item)))
        else:
            name, options = item
            out.append(json.dumps({"metric": name, **dict(options)}))
    return out


def list_metrics() -> list[dict]:
    """The metric registry: every registered per-layer (``kind="layer"``) and pair metric
    (``kind="pair"``) with its summary, source, options (name, default, help), required inputs
    and claimed invariances — including metrics registered by other Rust crates linked in.
    (``repgeom metrics --list``)"""
    return [json.loads(r) for r in _native.list_metrics()]


def metrics(
    acts: Any,
    readout: Any = None,
    names: Optional[Sequence[Any]] = None,
    *,
    k: int = _DEFAULTS["k"],
    n_null: int = _DEFAULTS["n_null"],
    seed: int = 0,
    readout_is_basis: bool = False,
    progress: Optional[bool] = None,
    revision: Optional[str] = None,
    readout_fold_norm: bool = False,
    readout_center: bool = False,
    device: str = "cpu",
) -> Rows:
    """Registered per-layer metrics as tidy rows (``repgeom metrics``).

    ``readout`` is as in :func:`pga` (array, path, or hub model id at ``revision``);
    ``device`` too (where PGA's null draws run, ``--device``).

    ``names`` items are a metric name, ``(name, {options})`` or ``{"metric": name, ...options}``;
    ``None`` runs every registered metric (those needing the readout only when one is given).
    Each row has ``layer``, ``metric``, ``variant``, ``value``, ``null_mean``, ``null_std``,
    ``p_value`` and the metric's extra columns.
    """
    _native.open_device(str(device))  # before any input is read, as on the command line
    if names is None:
        names = [
            m["name"]
            for m in list_metrics()
            if m["kind"] == "layer" and (readout is not None or not m["needs_readout"])
        ]
    return Rows(
        _rows(
            _native.metrics(
                _layers(acts),
                _configs(names),
                _readout(readout),
                k=int(k),
                n_null=int(n_null),
                seed=int(seed),
                readout_is_basis=bool(readout_is_basis),
                progress=progress,
                revision=revision,
                readout_fold_norm=bool(readout_fold_norm),
                readout_center=bool(readout_center),
                device=str(device),
            )
        )
    )


def metric(name: str, acts: Any, readout: Any = None, *, k: int = _DEFAULTS["k"], n_null: int = _DEFAULTS["n_null"], seed: int = 0,
           readout_is_basis: bool = False, progress: Optional[bool] = None,
           revision: Optional[str] = None, device: str = "cpu", **options: Any) -> Rows:
    """One registered metric with its options as keyword arguments, e.g.
    ``repgeom.metric("rankme", acts)`` or ``repgeom.metric("pga", acts, W_U, ccr=[1, 5])``."""
    return metrics(acts, readout, [(name, options)], k=k, n_null=n_null, seed=seed,
                   readout_is_basis=readout_is_basis, progress=progress, revision=revision,
                   device=device)


def compare(
    a: Any,
    b: Any,
    readout_a: Any = None,
    readout_b: Any = None,
    metrics: Optional[Sequence[Any]] = None,
    *,
    k: int = _DEFAULTS["k"],
    n_null: int = _DEFAULTS["n_null"],
    seed: int = 0,
    diagonal: bool = False,
    progress: Optional[bool] = None,
    readout_fold_norm: bool = False,
    readout_center: bool = False,
    n_perm: Optional[int] = None,
    aggregates: Sequence[str] = (),
    alpha: Optional[float] = None,
    device: str = "cpu",
) -> Rows:
    """Pair metrics (distance agreement, linear CKA, …) between the layers of two
    representations of the same inputs (``repgeom compare``): every layer pair, or with
    ``diagonal=True`` each layer of ``a`` with the layer of ``b`` at the nearest relative depth.
    Rows carry ``layer`` (of ``a``), ``other_layer`` (of ``b``) and the metric columns.

    ``n_perm`` sets every metric's permutation null (the same draws of ``b``'s points for
    every layer pair; ``null_mean``, ``null_std``, add-one ``p_value`` in the metric's
    direction, ``p_upper``, ``p_lower``, ``p_two_sided``, ``z``, ``z_se``). ``aggregates``
    (``"max"``, ``"row_max_mean"``, ``"hungarian"``, ``"diagonal"``) adds one row per
    aggregate over the layer table, keyed by ``aggregate``, whose null recomputes the whole
    table under each draw (``tau`` is its ``1 - alpha`` critical value, ``calibrated`` the
    value minus the null mean); they need ``n_perm``. ``device`` (``repgeom compare
    --device``): where kernel metrics' permutation nulls run, ``"cpu"``, ``"cuda"`` or
    ``"cuda:N"``, opened before any input is read."""
    _native.open_device(str(device))  # before any input is read, as on the command line
    return Rows(
        _rows(
            _native.compare(
                _layers(a, "a"),
                _layers(b, "b"),
                None if metrics is None else _configs(metrics),
                _readout(readout_a),
                _readout(readout_b),
                k=int(k),
                n_null=int(n_null),
                seed=int(seed),
                diagonal=bool(diagonal),
                progress=progress,
                readout_fold_norm=bool(readout_fold_norm),
                readout_center=bool(readout_center),
                n_perm=None if n_perm is None else int(n_perm),
                aggregates=[str(x) for x in aggregates],
                alpha=None if alpha is None else float(alpha),
                device=str(device),
            )
        )
    )


def probe(features: Any, labels: Any, *, class_names: Optional[Sequence[str]] = None, **options: Any) -> Rows:
    """Multinomial logistic probes per layer (``repgeom probe``), stratified split.

    ``labels`` are class indices or class names (one per point). Options are the probe's
    parameters: ``train_frac`` (0.8), ``folds`` (3), ``grid`` (L2 strengths), ``seed`` (0),
    ``max_iter`` (100), ``tol``, ``parallel``, ``control`` (True), ``solver`` (``"lbfgs"``, or
    ``"linfa"``: linfa-logistic, same accuracy, much slower). One row per layer: ``accuracy``,
    ``majority_baseline``, ``chosen_l2``, ``n_train``, ``n_test`` and the rest of the report.
    """
    labels = np.asarray(labels)
    if labels.dtype.kind in "iu":
        values = [int(v) for v in labels]
        if class_names is None:
            class_names = [str(i) for i in range(max(values) + 1 if values else 0)]
    else:
        names_sorted = sorted({str(v) for v in labels}) if class_names is None else list(class_names)
        index = {n: i for i, n in enumerate(names_sorted)}
        try:
            values = [index[str(v)] for v in labels]
        except KeyError as e:
            raise InvalidInputError(f"label {e.args[0]!r} is not in class_names") from None
        class_names = names_sorted
    return Rows(_rows(_native.probe(_layers(features, "features"), values, list(class_names), json.dumps(options))))


def read_activations(path: PathLike, layers: Optional[Sequence[int]] = None) -> dict[int, np.ndarray]:
    """Reads an activation file (``.npy`` ``[L, N, d]`` or ``[N, d]``, ``.npz``,
    ``.safetensors``) as ``{layer: float32 [N, d] array}``, with the layer numbers the command
    line uses."""
    out = _native.read_activations(os.fspath(path), None if layers is None else [int(x) for x in layers])
    return {layer: arr for layer, _tensor, arr in out}


def null_bases(d: int, k: int, n: int, seed: int = 0) -> np.ndarray:
    """``n`` Haar-random ``d × k`` orthonormal bases from ``seed`` as an ``[n, d, k]`` float64
    array: the bases ``pga`` draws for the same ``(d, k, n_null, seed)``."""
    return _native.null_bases(int(d), int(k), int(n), int(seed))


def extract(
    model: PathLike,
    texts: Union[str, Sequence[str]],
    *,
    revision: Optional[str] = None,
    n_points: Optional[int] = _DEFAULTS.get("n_points"),
    seq_len: int = _DEFAULTS.get("seq_len", 0),
    seed: int = 0,
    pool: str = "tokens",
    points_per_sequence: Optional[int] = None,
    points: str = "tokens",
    word_pool: Optional[str] = None,
    progress: Optional[bool] = None,
    device: str = "cpu",
    dtype: str = "f32",
) -> dict[str, np.ndarray]:
    """Hidden states of every layer of a HuggingFace checkpoint (``repgeom extract``): a local
    directory or a hub model id ``"org/name"`` at ``revision`` (e.g. ``"step3000"``; default
    ``"main"``), resolved in the HuggingFace cache and downloaded when missing. Families: those of
    ``repgeom extract`` (GPT-NeoX/Pythia, GPT-2, Llama, Mistral, Qwen2, OLMo, OLMo-2, Phi, Gemma,
    Gemma-2). Returns ``{"hidden_states.{i}": float32 [N, d]}`` and ``"positions"`` (``[N, 2]``:
    sequence, token) on ``texts``. ``pool="mean"`` gives one mean per line.
    ``points_per_sequence`` (``repgeom extract --points-per-sequence``): positions taken from
    each sampled sequence, 1 drawing every point uniformly from all positions; default
    ``_DEFAULTS["points_per_sequence"]`` (16), or
    every position of shorter sequences. ``points="words"`` (``repgeom extract --points
    words``): points are words of the text (Unicode word boundaries), sampled from the text
    alone and read in the same character windows by every model, so models with different
    tokenizers hold the same points; ``positions`` are then each word's characters ``[start,
    end)`` in the text, ``n_points`` counts words and ``points_per_sequence`` words per window;
    ``word_pool`` (``"last"``, the default, or ``"mean"``) reads a word at its last token or as
    the mean over its tokens. ``device`` (``repgeom extract --device``): ``"cpu"``, ``"cuda"``
    or ``"cuda:N"``, opened before anything is read; ``dtype`` (``--dtype``), on either
    device: ``"f32"`` (the default; on a GPU the CPU's numbers to the rounding of the
    products) or ``"stored"`` (bf16/f16 weights as stored, each linear layer's input rounded
    to the weight's type and the products accumulated in f32, as transformers in that dtype;
    on a CPU with AMX about twice as fast as f32)."""
    text = texts if isinstance(texts, str) else "\n".join(texts)
    arrays, positions, _metadata = _native.extract(
        os.fspath(model), text, n_points=n_points, seq_len=int(seq_len), seed=int(seed), pool=pool,
        progress=progress, revision=revision, points_per_sequence=points_per_sequence,
        points=points, word_pool=word_pool, device=str(device), dtype=str(dtype),
    )
    out = {f"hidden_states.{i}": a for i, a in enumerate(arrays)}
    out["positions"] = np.asarray(positions, dtype=np.int64).reshape(-1, 2)
    return out
