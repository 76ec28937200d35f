"""Type stubs of the compiled module ``repgeom._native`` (use the functions in ``repgeom``)."""

from typing import Any, Optional, Sequence

import numpy as np

__version__: str

def pga(
    layers: Sequence[tuple[int, Any]],
    readout: Any,
    *,
    options: str,
    ks: Sequence[int],
    k_frac: Optional[float],
    n_null: int,
    seed: int,
    readout_is_basis: bool,
    null_bases: Any,
    progress: Optional[bool],
    vocab_rows: Optional[int],
    readout_tensor: Optional[str],
    revision: Optional[str] = None,
    readout_fold_norm: bool = False,
    readout_center: bool = False,
    device: str = "cpu",
) -> list[str]: ...
def open_device(device: str) -> None: ...
def metrics(
    layers: Sequence[tuple[int, Any]],
    configs: Sequence[str],
    readout: Any,
    *,
    k: int,
    n_null: int,
    seed: int,
    readout_is_basis: bool,
    progress: Optional[bool],
    revision: Optional[str] = None,
    readout_fold_norm: bool = False,
    readout_center: bool = False,
    device: str = "cpu",
) -> list[str]: ...
def compare(
    a: Sequence[tuple[int, Any]],
    b: Sequence[tuple[int, Any]],
    configs: Optional[Sequence[str]],
    readout_a: Any,
    readout_b: Any,
    *,
    k: int,
    n_null: int,
    seed: int,
    diagonal: bool,
    progress: Optional[bool],
    readout_fold_norm: bool = False,
    readout_center: bool = False,
    n_perm: Optional[int] = None,
    aggregates: Sequence[str] = (),
    alpha: Optional[float] = None,
) -> list[str]: ...
def list_metrics() -> list[str]: ...
def read_activations(path: str, layers: Optional[Sequence[int]] = None) -> list[tuple[int, str, np.ndarray]]: ...
def null_bases(d: int, k: int, n: int, seed: int) -> np.ndarray: ...
def probe(layers: Sequence[tuple[int, Any]], labels: Sequence[int], class_names: Sequence[str], options: str) -> list[str]: ...
def extract(
    model: str,
    text: str,
    *,
    n_points: Optional[int],
    seq_len: int,
    seed: int,
    pool: str,
    progress: Optional[bool],
    revision: Optional[str] = None,
    points_per_sequence: Optional[int] = None,
    points: Optional[str] = None,
    word_pool: Optional[str] = None,
) -> tuple[list[np.ndarray], list[tuple[int, int]], list[tuple[str, str]]]: ...
def input_info(obj: Any) -> tuple[int, bool, str]: ...
def _panic_for_tests() -> None: ...
def build_features() -> list[str]: ...
