#!/usr/bin/env python3
"""repgeom.pga against the same computation in NumPy/SciPy, in one process.

Workload (as `cargo bench -p repgeom-metrics --bench pga` and fixtures/pga/time_scipy.py): one
layer, N = 2048, d = 2048, k = 100, W_U 8192 x 2048, CCR-1, 100 Haar null draws. Both sides get
the readout basis precomputed (the readout SVD is once per model, not per layer) and are timed
on the same arrays. Prints seconds and the ratio; build the wheel in release mode first
(`pip install ./crates/repgeom-py`). Usage: python3 crates/repgeom-py/bench/bench_pga.py [draws]

End to end, as a user calls it: `python3 crates/repgeom-py/bench/bench_pga.py --files DIR`
times `repgeom.pga(acts, "DIR/wu.npy", k=100, n_null=100, ccr=1)` (the activations read from
DIR/acts.npy, W_U decomposed inside the call; best of 3) on the files `cargo xtask bench pga`
writes (issue 16's workload: W_U 4000 x 2048), then runs `fixtures/pga/time_end_to_end.py DIR`
(NumPy/SciPy on the same files) in the same run, and prints both and their ratio.
"""
import json
import os
import subprocess
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


def end_to_end(out):
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        acts = np.load(os.path.join(out, "acts.npy"))
        r = repgeom.pga(acts, os.path.join(out, "wu.npy"), k=K, n_null=100, ccr=1, seed=0,
                        progress=False)
        times.append(time.perf_counter() - t0)
    script = os.path.join(os.path.dirname(__file__), "../../../fixtures/pga/time_end_to_end.py")
    line = subprocess.run([sys.executable, script, out], check=True, capture_output=True,
                          text=True).stdout.strip().splitlines()[-1]
    sp = json.loads(line)
    best = min(times)
    print(f"workload: files in {out}, k = {K}, CCR-1, 100 draws, W_U decomposed in the call")
    print(f"repgeom.pga:  {best:7.2f} s best of 3 ({', '.join(f'{t:.2f}' for t in times)}); "
          f"rho_readout {r.rho_readout:.6f}, z = {r.z:.3f}")
    print(f"NumPy/SciPy:  {sp['seconds']:7.2f} s; rho_readout {sp['rho_readout']:.6f}")
    print(f"ratio: {sp['seconds'] / best:.1f}x")


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--files":
        end_to_end(sys.argv[2])
        return
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
