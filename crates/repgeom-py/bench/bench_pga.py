#!/usr/bin/env python3
"""repgeom.pga against the same computation in NumPy/SciPy, in one process.

Workload (as `cargo bench -p repgeom-metrics --bench pga` and fixtures/pga/time_scipy.py): one
layer, N = 2048, d = 2048, k = 100, W_U 8192 x 2048, CCR-1, 100 Haar null draws. Both sides get
the readout basis precomputed (the readout SVD is once per model, not per layer) and are timed
on the same arrays. Prints seconds and the ratio; build the wheel in release mode first
(`pip install ./crates/repgeom-py`). Usage: python3 crates/repgeom-py/bench/bench_pga.py [draws]
"""
import sys
import time

import numpy as np
from scipy.spatial.distance import pdist
from scipy.stats import spearmanr

import repgeom

N, D, K, V = 2048, 2048, 100, 8192


def scipy_pga(h, v_k, null):
    hc = h.astype(np.float64)
    hc -= hc.mean(axis=0)
    _, _, vt = np.linalg.svd(hc, full_matrices=False)
    u = vt[:1].T
    hc -= (hc @ u) @ u.T
    d_full = pdist(hc, "cosine")
    rho = spearmanr(d_full, pdist(hc @ v_k, "cosine")).statistic
    nulls = [spearmanr(d_full, pdist(hc @ q, "cosine")).statistic for q in null]
    return (rho - np.mean(nulls)) / np.std(nulls, ddof=1)


def main():
    draws = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    rng = np.random.default_rng(0)
    h = rng.standard_normal((N, D)).astype(np.float32)
    w_u = rng.standard_normal((V, D)).astype(np.float32)
    _, _, vt = np.linalg.svd(w_u.astype(np.float64), full_matrices=False)
    v_k = np.ascontiguousarray(vt[:K].T)
    null = repgeom.null_bases(D, K, draws, seed=0)

    t0 = time.perf_counter()
    r = repgeom.pga(h, v_k, readout_is_basis=True, null_bases=null, ccr=1, progress=False)
    t_rg = time.perf_counter() - t0

    t0 = time.perf_counter()
    z = scipy_pga(h, v_k, null)
    t_sp = time.perf_counter() - t0

    print(f"workload: N = {N}, d = {D}, k = {K}, CCR-1, {draws} draws (readout basis precomputed)")
    print(f"repgeom.pga:  {t_rg:7.2f} s  (z = {r.z:.3f})")
    print(f"NumPy/SciPy:  {t_sp:7.2f} s  (z = {z:.3f})")
    print(f"ratio: {t_sp / t_rg:.1f}x")


if __name__ == "__main__":
    main()
