use super::*;
use std::ops::Range;

/// Absolute tolerance for quantities computed in `f64` from small exact inputs.
const STRICT: f64 = 1e-12;

fn check_ranks(values: &[f32], expect: &[f64]) {
    let got = average_ranks(values);
    assert_eq!(got.len(), expect.len());
    for (g, e) in got.iter().zip(expect) {
        assert!(
            (g - e).abs() < STRICT,
            "ranks of {values:?}: got {got:?}, expected {expect:?}"
        );
    }
}

#[test]
fn average_ranks_match_rankdata() {
    check_ranks(&[3.0, 1.0, 2.0], &[3.0, 1.0, 2.0]);
    check_ranks(&[1.0, 1.0, 2.0, 0.5], &[2.5, 2.5, 4.0, 1.0]);
    check_ranks(
        &[-1.0, 0.0, -0.0, 5.0, 5.0, 5.0],
        &[1.0, 2.5, 2.5, 5.0, 5.0, 5.0],
    );
    check_ranks(&[2.0; 4], &[2.5; 4]);
}

#[test]
fn spearman_is_pearson_of_ranks() {
    let a: Vec<f32> = (0..500).map(|i| ((i * 37) % 101) as f32 / 7.0).collect();
    let b: Vec<f32> = (0..500)
        .map(|i| ((i * 53) % 97) as f32 * 0.3 + (i % 5) as f32)
        .collect();
    let direct = spearman(&a, &b, "test").unwrap();
    let ra = average_ranks(&a);
    let rb = average_ranks(&b);
    let via = pearson(&ra, &rb, "test").unwrap();
    assert!((direct - via).abs() < STRICT, "{direct} vs {via}");
    assert!((spearman(&a, &a, "test").unwrap() - 1.0).abs() < STRICT);
    let neg: Vec<f32> = a.iter().map(|v| -v).collect();
    assert!((spearman(&a, &neg, "test").unwrap() + 1.0).abs() < STRICT);
}

#[test]
fn spearman_of_constant_is_an_error() {
    let a = [1.0f32, 2.0, 3.0];
    let b = [4.0f32; 3];
    assert!(matches!(spearman(&a, &b, "t"), Err(Error::Constant { .. })));
}

#[test]
fn cosine_distances_match_definition() {
    let x = Mat::<f64>::from_fn(7, 5, |i, j| {
        ((i * 5 + j) as f64 * 0.37).sin() + 0.1 * i as f64
    });
    let d = cosine_distances(x.as_ref(), "x", Par::Seq).unwrap();
    assert_eq!(d.len(), condensed_len(7));
    for i in 0..7 {
        for j in (i + 1)..7 {
            let (mut dot, mut ni, mut nj) = (0.0, 0.0, 0.0);
            for c in 0..5 {
                dot += x[(i, c)] * x[(j, c)];
                ni += x[(i, c)] * x[(i, c)];
                nj += x[(j, c)] * x[(j, c)];
            }
            let expect = 1.0 - dot / (ni * nj).sqrt();
            let got = f64::from(d[pair_index(7, i, j)]);
            assert!(
                (got - expect).abs() < 1e-6,
                "pair ({i},{j}): {got} vs {expect}"
            );
        }
    }
}

#[test]
fn zero_norm_row_is_an_error() {
    let mut x = Mat::<f64>::from_fn(4, 3, |i, j| (i + j) as f64 + 1.0);
    x.row_mut(2).fill(0.0);
    let err = cosine_distances(x.as_ref(), "acts", Par::Seq).unwrap_err();
    assert_eq!(
        err.to_string(),
        "acts: row 2 has zero norm, so cosine distances to it are undefined"
    );
}

#[test]
fn ccr_removes_top_direction_and_centres() {
    // Points with one dominant direction e0 plus structure in e1, e2.
    let x = Mat::<f32>::from_fn(50, 4, |i, j| match j {
        0 => 100.0 * ((i as f32) * 0.7).sin() + 3.0,
        1 => ((i as f32) * 1.3).cos(),
        2 => ((i as f32) * 0.4).sin(),
        _ => 0.01 * (i as f32 % 3.0),
    });
    let c1 = ccr(x.as_ref(), 1, Par::Seq).unwrap();
    for j in 0..4 {
        let mean: f64 = c1.col(j).iter().sum::<f64>() / 50.0;
        assert!(mean.abs() < 1e-9, "column {j} mean {mean}");
    }
    let energy0: f64 = c1.col(0).iter().map(|v| v * v).sum();
    assert!(energy0 < 1e-3, "dominant direction left energy {energy0}");
}

#[test]
fn readout_subspace_is_orthonormal_and_rotation_equivariant() {
    let w = Mat::<f32>::from_fn(40, 6, |i, j| {
        ((i * 7 + j * 3) as f32 * 0.11).sin() * (6 - j) as f32
    });
    let (v, s) = top_right_singular_vectors(w.as_ref(), 3, Par::Seq).unwrap();
    assert!(orthonormal_basis_check(v.as_ref()) < 1e-10);
    assert!(s[0] >= s[1] && s[1] >= s[2]);
    // W V = U S: each column of W v_j has norm s_j.
    let wf = to_f64(w.as_ref());
    let wv = project(wf.as_ref(), v.as_ref(), Par::Seq);
    for j in 0..3 {
        let norm = wv.col(j).norm_l2();
        assert!(
            (norm - s[j]).abs() < 1e-8 * s[0],
            "column {j}: {norm} vs {}",
            s[j]
        );
    }
}

#[test]
fn results_do_not_depend_on_thread_count() {
    let w = Mat::<f32>::from_fn(300, 64, |i, j| ((i * 13 + j * 7) as f32 * 0.017).sin());
    let (a, _) = top_right_singular_vectors(w.as_ref(), 8, Par::Seq).unwrap();
    let (b, _) = top_right_singular_vectors(w.as_ref(), 8, Par::rayon(2)).unwrap();
    assert!(a == b, "readout subspace differs between 1 and 2 threads");
    let da = cosine_distances(w.as_ref(), "w", Par::Seq).unwrap();
    let db = cosine_distances(w.as_ref(), "w", Par::rayon(2)).unwrap();
    assert!(da == db, "distances differ between 1 and 2 threads");
}

/// The products cut into tasks of 256 × 256 entries equal faer's one whole product bit for
/// bit: faer sums each entry over `k` in an order that does not depend on the output's size.
/// Shapes with ragged last tasks, one task row or column, `k` from 1 to past faer's blocking
/// of `k`, and `dst` holding values before the product is added; then the `f64` products
/// behind the kernel metrics and projections.
#[test]
fn products_in_tasks_equal_one_whole_product() {
    for (m, k, n) in [
        (600, 1, 700),
        (257, 17, 600),
        (513, 512, 300),
        (100, 64, 900),
        (520, 2048, 300),
    ] {
        let a = Mat::<f32>::from_fn(m, k, |i, j| ((i * 31 + j * 17) % 101) as f32 / 101.0 - 0.5);
        let b = Mat::<f32>::from_fn(n, k, |i, j| ((i * 7 + j * 13) as f32 * 0.011).sin());
        let start = Mat::<f32>::from_fn(m, n, |i, j| ((i + 3 * j) % 7) as f32 * 0.25);
        check_thread_independent(&format!("a bᵀ, {m} × {k} × {n}"), |par| {
            let mut dst = Mat::<f32>::from_fn(m, n, |_, _| f32::NAN);
            matmul_abt_f32(dst.as_mut(), a.as_ref(), b.as_ref(), par);
            dst
        });
        check_thread_independent(&format!("dst + a bᵀ, {m} × {k} × {n}"), |par| {
            let mut dst = start.clone();
            matmul_abt_add_f32(dst.as_mut(), a.as_ref(), b.as_ref(), par);
            dst
        });
    }
    for (n, d, k) in [(600, 300, 20), (300, 700, 260), (513, 64, 300)] {
        let x32 = Mat::<f32>::from_fn(n, d, |i, j| ((i * 31 + j * 17) % 101) as f32 / 101.0 - 0.5);
        let x = to_f64(x32.as_ref());
        let y = Mat::<f64>::from_fn(n, k, |i, j| ((i * 7 + j * 13) as f64 * 0.011).sin());
        let basis = Mat::<f64>::from_fn(d, k, |i, j| ((i * 5 + j * 3) as f64 * 0.007).cos());
        let basis32 = to_f32(basis.as_ref(), Par::Seq);
        check_thread_independent(&format!("f64 products, {n} × {d}, k = {k}"), |par| {
            (
                gram_rows(x.as_ref(), par),
                cross_frobenius_sq(x.as_ref(), y.as_ref(), par).to_bits(),
                project(x.as_ref(), basis.as_ref(), par),
                project_f32(x32.as_ref(), basis32.as_ref(), par),
                singular_values(x.as_ref(), "x", par).unwrap(),
            )
        });
        check_thread_independent(&format!("f64 accumulations, {n} × {d}, k = {k}"), |par| {
            let mut cross = Mat::<f64>::from_fn(d, k, |i, j| (i + j) as f64);
            matmul_atb_add_f64(cross.as_mut(), x.as_ref(), y.as_ref(), par);
            let mut scatter = Mat::<f64>::from_fn(d, d, |i, j| (i.min(j) % 5) as f64);
            syrk_add_f64(scatter.as_mut(), x.as_ref(), par);
            (cross, scatter)
        });
    }
}

/// Products with one output column (CCR-1's `X u`) are the same bits at any thread count:
/// above 256² entries faer's own parallel matrix–vector kernel would sum one partial result
/// per thread. 5000 × 40 is above that threshold and longer than one block of rows.
#[test]
fn one_column_products_do_not_depend_on_thread_count() {
    let x32 = Mat::<f32>::from_fn(5000, 40, |i, j| {
        ((i * 31 + j * 17) % 101) as f32 / 101.0 - 0.5 + 0.25 * ((i * (j + 1)) as f32 * 1e-3).sin()
    });
    let x = to_f64(x32.as_ref());
    let u = Mat::<f64>::from_fn(40, 1, |i, _| ((i * 7 + 3) as f64 * 0.37).cos());
    let u32 = to_f32(u.as_ref(), Par::Seq);
    let run = |par: Par| {
        (
            project(x.as_ref(), u.as_ref(), par),
            project_f32(x32.as_ref(), u32.as_ref(), par),
            ccr(x32.as_ref(), 1, par).unwrap(),
        )
    };
    let seq = run(Par::Seq);
    for threads in [2, 3, 16] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let got = pool.install(|| run(Par::rayon(threads)));
        assert!(got.0 == seq.0, "X u differs at {threads} threads");
        assert!(got.1 == seq.1, "f32 X u differs at {threads} threads");
        assert!(got.2 == seq.2, "CCR-1 differs at {threads} threads");
    }
}

#[test]
fn ccr_and_the_partial_eigensolver_do_not_depend_on_thread_count() {
    // d = 600 ≥ 384: CCR's directions come from the partial solver (blocks of 128 rows) and its
    // certificate (tiles of 128), the centring and removal from blocks of columns.
    let x32 = Mat::<f32>::from_fn(700, 600, |i, j| {
        let scale = 1.0 / (1.0 + j as f32).sqrt();
        scale * (((i * 31 + j * 17) % 101) as f32 / 101.0 - 0.5) + 0.01 * ((i * j) as f32).sin()
    });
    check_thread_independent("CCR-1", |par| ccr(x32.as_ref(), 1, par).unwrap());
    check_thread_independent("CCR-3", |par| ccr(x32.as_ref(), 3, par).unwrap());
    let xc = center_columns(x32.as_ref(), Par::Seq);
    let mut g = Mat::<f64>::zeros(600, 600);
    faer::linalg::matmul::matmul(
        &mut g,
        faer::Accum::Replace,
        xc.transpose(),
        &xc,
        1.0,
        Par::Seq,
    );
    // The partial solver answers here (the test would pass vacuously on the full fallback).
    check_thread_independent("partial solver", |par| {
        crate::decomp::partial_eigen(g.as_ref(), 5, par).expect("the partial solver converges")
    });
    check_thread_independent("top 5 eigenpairs", |par| {
        top_eigen_desc(g.as_ref(), 5, par).unwrap()
    });
}

#[test]
fn widening_in_blocks_equals_to_f64() {
    // Past one block of columns and one tile of rows, each with a remainder; row- and
    // column-major inputs.
    let data: Vec<f32> = (0..70 * 300).map(|v| (v as f32 * 0.37).sin()).collect();
    let row_major = MatRef::from_row_major_slice(&data, 70, 300);
    let col_major = MatRef::from_column_major_slice(&data, 70, 300);
    for x in [row_major, col_major] {
        check_thread_independent("to_f64_into", |par| {
            let mut dst = Mat::<f64>::zeros(70, 300);
            to_f64_into(dst.as_mut(), x, par);
            assert!(dst == Mat::from_fn(70, 300, |i, j| f64::from(x[(i, j)])));
            dst
        });
    }
}

/// Matrices written by blocks of columns on the pool (`mat_from_cols`, and the centring,
/// CCR, conversions and row normalisation built on it) equal their definitions, entry by
/// entry, at any thread count; empty shapes included, and shapes past one parallel block
/// (600 × 500) with row- and column-major inputs.
#[test]
fn first_writes_in_blocks_equal_their_definitions() {
    for (n, d) in [(0, 5), (5, 0), (1, 1), (70, 300), (600, 500)] {
        let def = |i: usize, j: usize| ((i * 31 + j * 17) as f64 * 0.37).sin() + (j % 3) as f64;
        check_thread_independent("mat_from_cols", |par| {
            let m = mat_from_cols(n, d, par, |j| (0..n).map(move |i| def(i, j)));
            assert!(m == Mat::from_fn(n, d, def), "{n} x {d}");
            m
        });
        // Past one tile (64) in both directions, with partial last tiles.
        let rows: Vec<f64> = (0..n * d)
            .map(|v| def(v / d.max(1), v % d.max(1)))
            .collect();
        check_thread_independent("mat_from_row_major", |par| {
            let m = mat_from_row_major(&rows, n, d, par);
            assert!(m == Mat::from_fn(n, d, def), "{n} x {d} from rows");
            m
        });
    }
    let short = std::panic::catch_unwind(|| mat_from_row_major(&[1.0f32; 5], 2, 3, Par::Seq));
    assert!(short.is_err(), "row-major data of another length");
    let data: Vec<f32> = (0..600 * 500).map(|v| (v as f32 * 0.37).sin()).collect();
    for x in [
        MatRef::from_row_major_slice(&data, 600, 500),
        MatRef::from_column_major_slice(&data, 600, 500),
    ] {
        let x64 = Mat::from_fn(600, 500, |i, j| f64::from(x[(i, j)]));
        check_thread_independent("centring", |par| {
            let c = center_columns(x, par);
            for j in 0..500 {
                let mean = (0..600).map(|i| x64[(i, j)]).sum::<f64>() / 600.0;
                assert!(
                    (0..600).all(|i| c[(i, j)] == x64[(i, j)] - mean),
                    "column {j}"
                );
            }
            c
        });
        check_thread_independent("to_f32", |par| {
            let y = to_f32(x64.as_ref(), par);
            assert!(y == Mat::from_fn(600, 500, |i, j| x64[(i, j)] as f32));
            y
        });
        let sq: Vec<f64> = (0..600)
            .map(|i| (0..500).fold(0.0, |s, j| s + x64[(i, j)] * x64[(i, j)]))
            .collect();
        check_thread_independent("normalize_rows", |par| {
            let y = normalize_rows(x, "x", par).unwrap();
            assert!(
                y == Mat::from_fn(600, 500, |i, j| (x64[(i, j)] * (1.0 / sq[i].sqrt())) as f32)
            );
            y
        });
        check_thread_independent("rows_with_sq_norms", |par| {
            let (rows, norms) = rows_with_sq_norms(x, "x", par).unwrap();
            assert!(rows == Mat::from_fn(600, 500, |i, j| x[(i, j)]));
            assert!(norms.iter().zip(&sq).all(|(&a, &b)| a == b as f32));
            (rows, norms)
        });
    }
    let result = std::panic::catch_unwind(|| {
        mat_from_cols(3, 2, Par::Seq, |j| (0..2 + j).map(|i| i as f64))
    });
    assert!(result.is_err(), "a column of another length is refused");
}

#[test]
fn the_full_eigendecomposition_does_not_depend_on_thread_count() {
    // n = 400 > 314: faer reduces the first columns in `EVD_PIECES` column ranges, whose
    // partial sums would round differently if their number followed the pool.
    let x = Mat::<f32>::from_fn(500, 400, |i, j| {
        let scale = 1.0 / (1.0 + j as f32).sqrt();
        scale * (((i * 37 + j * 11) % 97) as f32 / 97.0 - 0.5)
    });
    let xc = center_columns(x.as_ref(), Par::Seq);
    let g = crate::gram_rows(xc.transpose(), Par::Seq);
    check_thread_independent("full decomposition", |par| {
        symmetric_eigen_desc(g.as_ref(), par).unwrap()
    });
    check_thread_independent("readout subspace", |par| {
        top_right_singular_vectors(x.as_ref(), 20, par).unwrap()
    });
}

#[test]
fn partial_eigensolver_matches_full_decomposition() {
    // A 600×600 PSD Gram with a decaying spectrum: the partial solver path (n ≥ 384, m ≤ n/8).
    let x = Mat::<f64>::from_fn(900, 600, |i, j| {
        let scale = 1.0 / (1.0 + j as f64).sqrt();
        scale * (((i * 31 + j * 17) % 101) as f64 / 101.0 - 0.5) + 0.01 * ((i * j) as f64).sin()
    });
    let mut g = Mat::<f64>::zeros(600, 600);
    faer::linalg::matmul::matmul(
        &mut g,
        faer::Accum::Replace,
        x.transpose(),
        &x,
        1.0,
        Par::Seq,
    );
    let (full_vals, full_vecs) = symmetric_eigen_desc(g.as_ref(), Par::Seq).unwrap();
    let (vals, vecs) = top_eigen_desc(g.as_ref(), 10, Par::Seq).unwrap();
    for j in 0..10 {
        assert!(
            (vals[j] - full_vals[j]).abs() <= 1e-10 * full_vals[0],
            "eigenvalue {j}: {} vs {}",
            vals[j],
            full_vals[j]
        );
        // Same vector up to the (deterministic) sign convention: |<u, v>| = 1.
        let dot: f64 = vecs
            .col(j)
            .iter()
            .zip(full_vecs.col(j).iter())
            .map(|(a, b)| a * b)
            .sum();
        assert!(
            (dot.abs() - 1.0).abs() < 1e-8,
            "eigenvector {j}: |<u,v>| = {}",
            dot.abs()
        );
    }
}

/// Euclidean distances against the definition in `f64`, across more than one Gram block
/// (N > 256), and the block-wise Spearman against ranking the materialised distances.
#[test]
fn euclidean_distances_match_definition_and_blockwise_spearman() {
    let (n, d) = (300, 6);
    let x = Mat::<f64>::from_fn(n, d, |i, j| {
        ((i * 7 + j * 3) as f64 * 0.41).sin() * (1.0 + j as f64)
    });
    let got = pairwise_distances(x.as_ref(), Distance::Euclidean, "x", Par::Seq).unwrap();
    assert_eq!(got.len(), condensed_len(n));
    for i in 0..n {
        for j in (i + 1)..n {
            let expect: f64 = (0..d)
                .map(|c| (x[(i, c)] - x[(j, c)]).powi(2))
                .sum::<f64>()
                .sqrt();
            let g = f64::from(got[pair_index(n, i, j)]);
            // f32 Gram cancellation: absolute error about sqrt(eps_f32) times the row norm.
            assert!((g - expect).abs() < 2e-3, "pair ({i},{j}): {g} vs {expect}");
        }
    }
    let cos = pairwise_distances(x.as_ref(), Distance::Cosine, "x", Par::Seq).unwrap();
    assert_eq!(cos, cosine_distances(x.as_ref(), "x", Par::Seq).unwrap());
    let reference = RankedReference::new(&cos, "cos", Par::Seq).unwrap();
    let direct = reference
        .spearman(&got, &mut RankScratch::default(), "x")
        .unwrap();
    let blockwise = spearman_of_distances(
        &reference,
        x.as_ref(),
        Distance::Euclidean,
        &mut RankScratch::default(),
        "x",
        Par::Seq,
    )
    .unwrap();
    assert_eq!(direct, blockwise);
    assert_eq!(
        "Euclidean".parse::<Distance>().unwrap(),
        Distance::Euclidean
    );
    assert!("manhattan".parse::<Distance>().is_err());
}

/// `Q diag(λ) Qᵀ` for a fixed orthonormal `Q` (eigenvectors of a pseudo-random symmetric
/// matrix), with `Q`.
fn with_spectrum(lambda: &[f64]) -> (Mat<f64>, Mat<f64>) {
    let n = lambda.len();
    let r = Mat::<f64>::from_fn(n, n, |i, j| {
        let (a, b) = (i.min(j) as f64, i.max(j) as f64);
        ((a * 12.9898 + b * 78.233).sin() * 43758.5453).fract()
    });
    let (_, q) = symmetric_eigen_desc(r.as_ref(), Par::Seq).unwrap();
    let a = Mat::<f64>::from_fn(n, n, |i, j| {
        (0..n).map(|l| q[(i, l)] * lambda[l] * q[(j, l)]).sum()
    });
    (a, q)
}

/// Runs `f` with `Par::Seq` and on pools of 2, 3 and 16 threads, and checks that every run
/// returns the sequential result exactly.
fn check_thread_independent<T: PartialEq + Send>(label: &str, f: impl Fn(Par) -> T + Sync) {
    let seq = f(Par::Seq);
    for threads in [2, 3, 16] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let got = pool.install(|| f(Par::rayon(threads)));
        assert!(got == seq, "{label}: differs at {threads} threads");
    }
}

/// One case of [`top_pairs_certified`]: the pairs at `found` (indices into `lambda`) of a
/// matrix with spectrum `lambda`, and the expected verdict, at any thread count.
fn check_certified(lambda: &[f64], found: &[usize], expect: bool) {
    let (a, q) = with_spectrum(lambda);
    let vals: Vec<f64> = found.iter().map(|&i| lambda[i]).collect();
    let vecs = Mat::<f64>::from_fn(a.nrows(), found.len(), |i, j| q[(i, found[j])]);
    let label = format!("spectrum of {} values, pairs {found:?}", lambda.len());
    check_thread_independent(&label, |par| {
        let verdict = top_pairs_certified(a.as_ref(), &vals, vecs.as_ref(), par);
        assert_eq!(verdict, expect, "{label}");
        verdict
    });
}

#[test]
fn certification_accepts_the_top_pairs_and_rejects_a_missed_eigenvalue() {
    // 40 eigenvalues, the top three 9 > 8 > 7, the rest in [1, 5]; then a near-flat spectrum.
    let mut spread: Vec<f64> = vec![9.0, 8.0, 7.0];
    spread.extend((0..37).map(|i| 5.0 - 4.0 * i as f64 / 36.0));
    let flat: Vec<f64> = (0..40).map(|i| 2.0 - 5e-4 * i as f64).collect();
    let mut wide: Vec<f64> = vec![20.0, 19.0];
    wide.extend((0..298).map(|i| 10.0 - 9.0 * i as f64 / 297.0));
    // The same, but the last eigenvalue above the second (its vector mixes every row)
    let mut wide_tail = wide.clone();
    wide_tail[299] = 19.5;
    let cases: &[(&[f64], &[usize], bool)] = &[
        (&spread, &[0, 1, 2], true),
        (&spread, &[0], true),
        (&spread, &[0, 1, 3], false), // 7 missed, 5 taken instead
        (&spread, &[1, 2], false),    // the largest missed
        (&flat, &[0, 1, 2, 3], true), // gaps of 2.5e-4 relative are resolved
        (&flat, &[0, 1, 2, 4], false),
        (&[3.0, 2.0, 2.0, 1.0], &[0, 1], false), // a tie at λ_m cannot be ruled out
        (&[3.0, 2.0, 2.0, 1.0], &[0, 1, 2], true),
        (&[1.0, 0.0, 0.0, 0.0], &[1], false), // σ ≤ 0
        (&spread, &[0, 0, 1], false),         // a vector found twice hides the third
        (&flat, &[0, 1, 1, 2], false),
        // Several tiles of the factorisation (300 = 2 × 128 + 44): the miss deep in the last.
        (&wide, &[0, 1], true),
        (&wide, &[0, 2], false),
        (&wide_tail, &[0, 1], false),
    ];
    for &(lambda, found, expect) in cases {
        check_certified(lambda, found, expect);
    }
}

/// Sorts `(key << 32 | payload)` words of `keys` with the radix sort and checks the result
/// against the standard library's sort: keys in order, and the same words (a permutation);
/// then on pools of 2 and 3 threads, where a long input is sorted by chunks: the same words.
fn check_radix_sort(keys: &[u32], label: &str) {
    let words: Vec<u64> = keys
        .iter()
        .enumerate()
        .map(|(i, &k)| (u64::from(k) << 32) | i as u64)
        .collect();
    let (mut got, mut tmp) = (words.clone(), Vec::new());
    crate::rank::radix_sort_keys(&mut got, &mut tmp, Par::Seq);
    assert!(
        got.windows(2).all(|w| w[0] >> 32 <= w[1] >> 32),
        "{label}: keys out of order"
    );
    let (mut a, mut b) = (got.clone(), words.clone());
    a.sort_unstable();
    b.sort_unstable();
    assert!(
        a == b,
        "{label}: the sorted words are not a permutation of the input"
    );
    // Reusing the buffers (as every null draw does) gives the same order of keys.
    let mut again: Vec<u64> = keys.iter().map(|&k| u64::from(k) << 32).collect();
    crate::rank::radix_sort_keys(&mut again, &mut tmp, Par::Seq);
    assert!(
        again.iter().zip(&got).all(|(x, y)| x >> 32 == y >> 32),
        "{label}: a reused scratch changed the order"
    );
    for threads in [2, 3] {
        let (mut pooled, mut tmp) = (words.clone(), Vec::new());
        pool_of(threads)
            .install(|| crate::rank::radix_sort_keys(&mut pooled, &mut tmp, Par::rayon(0)));
        assert!(pooled == got, "{label}: {threads} threads sort otherwise");
    }
}

#[test]
fn radix_sort_orders_keys_whatever_their_range() {
    // Past one chunk of the sequential sort's tests, and past the pool's threshold, with a
    // last chunk of another length.
    let (big, pooled) = (70_000, 300_007);
    // A reproducible spread of keys: a multiplicative hash of the index.
    let hash = |i: usize| (i as u32).wrapping_mul(2_654_435_761);
    for n in [0, 1, 2, 100, big, pooled] {
        check_radix_sort(&(0..n).map(hash).collect::<Vec<_>>(), "full range");
        check_radix_sort(&vec![7u32; n], "all equal");
        check_radix_sort(
            &(0..n)
                .map(|i| 0x8000_0000 + hash(i) % 5)
                .collect::<Vec<_>>(),
            "five keys",
        );
        check_radix_sort(
            &(0..n)
                .map(|i| 0xBF00_0000 + hash(i) % 3_000_000)
                .collect::<Vec<_>>(),
            "a range of 22 bits",
        );
        check_radix_sort(
            &(0..n).map(|i| (n - i) as u32 * 1000).collect::<Vec<_>>(),
            "descending",
        );
        check_radix_sort(
            &(0..n)
                .map(|i| if i % 2 == 0 { 0 } else { u32::MAX })
                .collect::<Vec<_>>(),
            "the two extremes",
        );
    }
}

#[test]
fn spearman_on_large_inputs_matches_ranks_from_a_comparison_sort() {
    // Heavy ties on one side.
    let n: usize = 131_089;
    let a: Vec<f32> = (0..n).map(|i| ((i * 7919) % 10007) as f32).collect();
    let b: Vec<f32> = (0..n)
        .map(|i| ((i * 104_729) % 1009) as f32 * 0.5 + ((i * 7919) % 10007) as f32 * 1e-3)
        .collect();
    let ranks = |v: &[f32]| -> Vec<f64> {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&i, &j| v[i].total_cmp(&v[j]));
        let mut r = vec![0.0; v.len()];
        let mut s = 0;
        while s < idx.len() {
            let mut e = s + 1;
            while e < idx.len() && v[idx[e]] == v[idx[s]] {
                e += 1;
            }
            for &i in &idx[s..e] {
                r[i] = (s + e + 1) as f64 / 2.0;
            }
            s = e;
        }
        r
    };
    let expect = pearson(&ranks(&a), &ranks(&b), "ranks").unwrap();
    let got = spearman(&a, &b, "large").unwrap();
    assert!((got - expect).abs() < STRICT, "{got} vs {expect}");
    // Ranked by chunks on a pool: the same ranks, to the bit, with tie groups across the
    // chunks' edges (`a`'s groups of about 13, and half of `c` in one group).
    let c: Vec<f32> = (0..n)
        .map(|i| if i % 2 == 0 { 1.0 } else { (i % 7) as f32 })
        .collect();
    for v in [&a, &b, &c] {
        let alone = RankedReference::new(v, "alone", Par::Seq).unwrap();
        let twice: Vec<u32> = ranks(v).iter().map(|r| (2.0 * r) as u32).collect();
        assert!(alone.rank2() == twice, "twice the average ranks");
        let rho = alone
            .spearman(&b, &mut RankScratch::default(), "x")
            .unwrap();
        // Both sides ranked, the dot product of their ranks: the same bits as the sort, either
        // side ranked first.
        let rb = RankedReference::new_in(&b, &mut RankScratch::default(), "b", Par::Seq).unwrap();
        assert_eq!(
            alone.spearman_ranked(&rb).to_bits(),
            rho.to_bits(),
            "ranked"
        );
        let back = rb.spearman(v, &mut RankScratch::default(), "x").unwrap();
        assert_eq!(
            rb.spearman_ranked(&alone).to_bits(),
            back.to_bits(),
            "ranked, swapped"
        );
        for threads in [2, 3] {
            let pooled = pool_of(threads)
                .install(|| RankedReference::new(v, "pooled", Par::rayon(0)))
                .unwrap();
            assert!(pooled.rank2() == twice, "{threads} threads rank otherwise");
            let again = pooled.spearman(&b, &mut RankScratch::default(), "x");
            assert_eq!(again.unwrap(), rho, "{threads} threads: the sum of squares");
        }
    }
    let tied = pool_of(2).install(|| RankedReference::new(&vec![3.0; n], "tied", Par::rayon(0)));
    assert!(matches!(tied, Err(Error::Constant { .. })), "{tied:?}");
}

/// Both [`PairSort`]s of `x`'s distances against `reference`, cosine and Euclidean: the same
/// correlation to the bit (or the same error), from fresh buffers and from `reused` ones that
/// sorted other distances before.
fn check_pair_sorts(
    x: MatRef<'_, f32>,
    reference: &RankedReference,
    reused: &mut RankScratch,
    label: &str,
) {
    assert!(
        condensed_len(x.nrows()) >= BUCKET_MIN_WORDS,
        "{label}: too few pairs to bucket"
    );
    for distance in [Distance::Cosine, Distance::Euclidean] {
        let rho = |scratch: &mut RankScratch| {
            spearman_of_distances(reference, x, distance, scratch, label, Par::Seq)
                .map(f64::to_bits)
                .map_err(|e| e.to_string())
        };
        let radix = rho(&mut RankScratch::with_sort(PairSort::Radix));
        let buckets = rho(&mut RankScratch::with_sort(PairSort::Buckets));
        assert_eq!(buckets, radix, "{label}, {distance}: the buckets");
        assert_eq!(rho(reused), radix, "{label}, {distance}: reused buckets");
    }
}

#[test]
fn bucketed_pair_sort_gives_the_radix_sorts_bits() {
    // 604,450 pairs: past the buckets' threshold.
    let n = 1100;
    let hash = |i: usize, j: usize| ((i * 7919 + j * 104_729) % 10_007) as f32 / 10_007.0;
    let spread = Mat::<f32>::from_fn(n, 8, |i, j| hash(i, j) - 0.5);
    // Distances with many exact ties: small integer coordinates.
    let tied = Mat::<f32>::from_fn(n, 3, |i, j| ((i * 31 + j * 17) % 3) as f32 + 1.0);
    // The first 150 rows on axes of their own (10 e_i), the others in two tight groups at
    // ±8 e_159: every pair of the first eighth, which sets the buckets' range, has a row of
    // the first 150 (distances 12.8 to 14.2, cosine distances near 1), while the others'
    // pairs lie below that range (within a group) and above it (across the groups), and fall
    // into the first and the last bucket.
    let clustered = Mat::<f32>::from_fn(n, 160, |i, j| {
        let noise = 0.05 * (hash(i, j) - 0.5);
        match (i < 150, j) {
            (true, _) if j == i => 10.0 + noise,
            (false, 159) => 8.0 * if i % 2 == 0 { 1.0 } else { -1.0 } + noise,
            _ => noise,
        }
    });
    // Only one row differs: a near-constant distance vector with one spread-out row.
    let one_apart = Mat::<f32>::from_fn(n, 4, |i, j| if i == n / 2 { hash(i, j) } else { 1.0 });
    let other = Mat::<f32>::from_fn(n, 8, |i, j| hash(j + 3, i) - 0.25 * hash(i, j));
    let cos = cosine_distances(other.as_ref(), "other", Par::Seq).unwrap();
    let reference = RankedReference::new(&cos, "other", Par::Seq).unwrap();
    let mut reused = RankScratch::with_sort(PairSort::Buckets);
    for (x, label) in [
        (&spread, "spread"),
        (&tied, "tied"),
        (&clustered, "clustered"),
        (&one_apart, "one row apart"),
        (&spread, "spread again"),
    ] {
        check_pair_sorts(x.as_ref(), &reference, &mut reused, label);
    }
    // Every distance the same: the same error both ways.
    let same = Mat::<f32>::from_fn(n, 2, |_, j| j as f32 + 1.0);
    let err = |sort| {
        spearman_of_distances(
            &reference,
            same.as_ref(),
            Distance::Euclidean,
            &mut RankScratch::with_sort(sort),
            "same",
            Par::Seq,
        )
    };
    assert!(matches!(
        err(PairSort::Buckets),
        Err(Error::Constant { .. })
    ));
    assert!(matches!(err(PairSort::Radix), Err(Error::Constant { .. })));
}

/// Many pairs of ranked vectors at once, by blocks and spans on a pool: each rho the bits of
/// the pair's own sort, over two spans (the second a few values long), with ties, self-pairs
/// and a vector in several pairs.
#[test]
fn spearman_of_many_ranked_pairs_is_each_pair_sorted_alone() {
    let n: usize = 131_089;
    let values: Vec<Vec<f32>> = vec![
        (0..n).map(|i| ((i * 7919) % 10007) as f32).collect(),
        (0..n)
            .map(|i| ((i * 104_729) % 1009) as f32 * 0.5)
            .collect(),
        (0..n)
            .map(|i| if i % 2 == 0 { 1.0 } else { (i % 7) as f32 })
            .collect(),
        (0..n)
            .map(|i| ((i * 31) % 65_521) as f32 - 0.25 * i as f32)
            .collect(),
    ];
    let ranked: Vec<RankedReference> = (values.iter())
        .map(|v| RankedReference::new(v, "v", Par::Seq).unwrap())
        .collect();
    let refs: Vec<&RankedReference> = ranked.iter().collect();
    let pairs = [
        (0, 1),
        (1, 0),
        (2, 3),
        (3, 3),
        (0, 2),
        (1, 3),
        (2, 2),
        (3, 0),
        (0, 1),
    ];
    let sorted: Vec<f64> = (pairs.iter())
        .map(|&(x, y)| (ranked[x].spearman(&values[y], &mut RankScratch::default(), "x")).unwrap())
        .collect();
    let seq = RankedReference::spearman_ranked_pairs(&refs, &pairs, Par::Seq);
    let pooled =
        pool_of(3).install(|| RankedReference::spearman_ranked_pairs(&refs, &pairs, Par::rayon(0)));
    for (name, got) in [("one thread", seq), ("three threads", pooled)] {
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&sorted), "{name}");
    }
    assert!(RankedReference::spearman_ranked_pairs(&refs, &[], Par::Seq).is_empty());
}

/// A rayon pool of `threads` threads.
fn pool_of(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

/// The top-`m` decomposition is the whole one, bit for bit, in its first `m` columns; and the
/// whole one is faer's `self_adjoint_evd` (taken step by step) reordered and sign-fixed. Sizes
/// on both sides of faer's divide-and-conquer threshold.
#[test]
fn top_eigenvectors_equal_the_whole_decomposition_bit_for_bit() {
    use faer::dyn_stack::{MemBuffer, MemStack};
    use faer::linalg::evd::{ComputeEigenvectors, self_adjoint_evd, self_adjoint_evd_scratch};
    for (n, m) in [(1, 1), (7, 3), (40, 40), (300, 25)] {
        let x = Mat::<f64>::from_fn(n + 5, n, |i, j| {
            let h = ((i * 7919 + j * 104_729 + 13) % 1009) as f64;
            h / 1009.0 - 0.5
        });
        let mut a = Mat::<f64>::zeros(n, n);
        faer::linalg::matmul::matmul(
            &mut a,
            faer::Accum::Replace,
            x.transpose(),
            &x,
            1.0,
            Par::Seq,
        );
        let (values, whole) = symmetric_eigen_desc(a.as_ref(), Par::Seq).unwrap();
        let (top_values, top) = decomp::eigen_desc(a.as_ref(), m, Par::Seq).unwrap();
        assert_eq!(values, top_values, "n = {n}");
        assert!(top == whole.subcols(0, m), "n = {n}, m = {m}");

        let mut s = faer::diag::Diag::<f64>::zeros(n);
        let mut u = Mat::<f64>::zeros(n, n);
        let req = self_adjoint_evd_scratch::<f64>(
            n,
            ComputeEigenvectors::Yes,
            Par::Seq,
            Default::default(),
        );
        self_adjoint_evd(
            a.as_ref(),
            s.as_mut(),
            Some(u.as_mut()),
            Par::Seq,
            MemStack::new(&mut MemBuffer::new(req)),
            Default::default(),
        )
        .unwrap();
        for j in 0..n {
            let src = n - 1 - j;
            assert_eq!(
                values[j].to_bits(),
                s[src].to_bits(),
                "eigenvalue {j} of {n}"
            );
            let flip = whole[(0, j)].to_bits() != u[(0, src)].to_bits();
            for i in 0..n {
                let expect = if flip { -u[(i, src)] } else { u[(i, src)] };
                assert_eq!(
                    whole[(i, j)].to_bits(),
                    expect.to_bits(),
                    "vector {j} of {n}, row {i}"
                );
            }
        }
    }
}

/// The lower triangle of the half-cost Gram is the whole product's, bit for bit, also where it
/// is cut into tasks (more than 256 columns, the last ones ragged).
#[test]
fn gram_lower_triangle_equals_the_whole_product() {
    for (rows, cols) in [(3, 5), (64, 48), (700, 300), (400, 600)] {
        let x = Mat::<f64>::from_fn(rows, cols, |i, j| {
            ((i * 31 + j * 17) % 23) as f64 - 11.0 + 0.01 * i as f64
        });
        let mut whole = Mat::<f64>::zeros(cols, cols);
        faer::linalg::matmul::matmul(
            &mut whole,
            faer::Accum::Replace,
            x.transpose(),
            &x,
            1.0,
            Par::rayon(2),
        );
        let mut lower = Mat::<f64>::zeros(cols, cols);
        decomp::gram_lower(
            lower.as_mut(),
            x.as_ref(),
            faer::Accum::Replace,
            Par::rayon(2),
        );
        for j in 0..cols {
            for i in j..cols {
                assert_eq!(
                    lower[(i, j)].to_bits(),
                    whole[(i, j)].to_bits(),
                    "({i}, {j}) of {rows}x{cols}"
                );
            }
        }
    }
}

/// The branch-free cosine key is `float_key` of the clamped distance for every finite or
/// infinite similarity (rows are checked finite before any distance), including ±0, ±1 and
/// values beyond [−1, 1].
#[test]
fn cosine_key_is_the_float_key_of_the_clamped_distance() {
    let mut sims = vec![
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        1.0 + 1e-7,
        -1.0 - 1e-7,
        3.0,
        -3.0,
    ];
    sims.extend([
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
    ]);
    sims.extend((0..20_000).map(|i| (i as f32 / 10_000.0) - 1.0));
    sims.extend((0..2_000).map(|i| 1.0 - i as f32 * f32::EPSILON / 4.0));
    for g in sims {
        assert_eq!(
            distance::cosine_key(g),
            float_key((1.0 - g).clamp(0.0, 2.0)),
            "similarity {g:e}"
        );
    }
}

/// The radix sort's chunked pass against the standard library's stable sort by digit, on
/// lengths about the chunks' edges and with 1 to 2048 buckets, at 1, 2 and 3 threads; and a
/// digit that is not a function of the word panics instead of writing past a chunk's runs.
#[test]
fn stable_scatter_is_a_stable_sort_by_digit() {
    use crate::alloc::{SCATTER_CHUNK, stable_scatter};
    let c = SCATTER_CHUNK;
    let word = |i: usize| ((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) << 20) | i as u64;
    for len in [0, 1, 5, c - 1, c, c + 1, 3 * c + 5] {
        let src: Vec<u64> = (0..len).map(word).collect();
        for buckets in [1usize, 2, 256, 2048] {
            let digit = |w: u64| ((w >> 40) as usize) % buckets;
            let mut expect = src.clone();
            expect.sort_by_key(|&w| digit(w)); // stable
            for threads in [1, 2, 3] {
                let mut got = vec![0; len];
                pool_of(threads).install(|| stable_scatter(&src, &mut got, buckets, digit));
                assert!(
                    got == expect,
                    "len {len}, {buckets} buckets, {threads} threads"
                );
            }
        }
    }
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let src: Vec<u64> = (0..c + 1).map(word).collect();
    let fickle =
        |_: u64| usize::from(calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < src.len());
    let mut out = vec![0; src.len()];
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool_of(2).install(|| stable_scatter(&src, &mut out, 2, fickle));
    }));
    assert!(panicked.is_err(), "a fickle digit is caught");
}

/// `dst += a bᵀ` of half-precision inputs (`matmul_abt_add_half`) on one kernel (`amx`)
/// against the exact sum of the rounded inputs' products in `f64`: within the `f32`
/// accumulation bound `k · ε · Σ|products|` of every entry, the same at one and two threads,
/// and equal to `start` plus the products (the add).
fn check_half(
    ty: HalfType,
    amx: bool,
    m: usize,
    n: usize,
    k: usize,
    rows: Range<usize>,
    cols: Range<usize>,
) -> Vec<f32> {
    let x: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7919 % 1013) as f32 / 97.0 - 5.0) * 1.001)
        .collect();
    let w: Vec<u16> = (0..n * k)
        .map(|i| ty.round((i * 104_729 % 997) as f32 / 331.0 - 1.5))
        .collect();
    let a = HalfMatrix::left_for(&x, m, k, ty, amx, Par::Seq);
    let b = HalfMatrix::right_for(&w, n, k, ty, amx, Par::rayon(2));
    assert_eq!((a.amx(), b.amx()), (amx, amx));
    let (p, q) = (rows.len(), cols.len());
    let start: Vec<f32> = (0..p * q).map(|i| (i % 13) as f32 - 6.0).collect();
    let mut y = start.clone();
    matmul_abt_add_half(&mut y, &a, rows.clone(), &b, cols.clone(), Par::rayon(2));
    let mut seq = start.clone();
    matmul_abt_add_half(&mut seq, &a, rows.clone(), &b, cols.clone(), Par::Seq);
    assert_eq!(y, seq, "{ty:?} amx {amx}: not the same at 1 and 2 threads");
    for (i, r) in rows.clone().enumerate() {
        for (j, c) in cols.clone().enumerate() {
            let terms = (0..k).map(|t| {
                f64::from(ty.widen(ty.round(x[r * k + t]))) * f64::from(ty.widen(w[c * k + t]))
            });
            let exact = f64::from(start[i * q + j]) + terms.clone().sum::<f64>();
            let bound =
                (k + 1) as f64 * f64::from(f32::EPSILON) * (terms.map(f64::abs).sum::<f64>() + 6.0);
            let got = f64::from(y[i * q + j]);
            assert!(
                (got - exact).abs() <= bound,
                "{ty:?} amx {amx} {m}x{n}x{k} at ({r}, {c}): {got} vs {exact} (bound {bound:.1e})"
            );
        }
    }
    y
}

#[test]
fn half_products_are_the_rounded_inputs_products_summed_in_f32() {
    // (m, n, k, rows of a, rows of b)
    type Case = (usize, usize, usize, Range<usize>, Range<usize>);
    let cases: &[Case] = &[
        (1, 1, 1, 0..1, 0..1),
        (2, 3, 2, 0..2, 0..3),
        (31, 33, 17, 0..31, 0..33),
        (32, 32, 32, 0..32, 0..32),
        (33, 65, 64, 0..33, 0..65),
        (100, 70, 300, 32..100, 64..70),
        (260, 1060, 48, 0..260, 0..1060),
        (260, 1060, 40, 256..260, 1024..1060),
        (5, 4, 0, 0..5, 0..4),
    ];
    for (m, n, k, rows, cols) in cases.iter().cloned() {
        check_half(HalfType::F16, false, m, n, k, rows.clone(), cols.clone());
        let widened = check_half(HalfType::Bf16, false, m, n, k, rows.clone(), cols.clone());
        if amx_bf16() {
            let tiles = check_half(HalfType::Bf16, true, m, n, k, rows, cols);
            // the two kernels differ only in the order of the f32 additions
            let far = tiles
                .iter()
                .zip(&widened)
                .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
                .fold(0f32, f32::max);
            assert!(far < 1e-4, "{m}x{n}x{k}: AMX and widened differ by {far}");
        }
    }
    // the public constructors pick AMX exactly for bf16 on a machine that has it
    let a = HalfMatrix::left(&[1.0; 6], 2, 3, HalfType::Bf16, Par::Seq);
    assert_eq!(a.amx(), amx_bf16());
    assert!(!HalfMatrix::left(&[1.0; 6], 2, 3, HalfType::F16, Par::Seq).amx());
}

#[test]
fn half_rounding_is_the_types_round_to_nearest_even() {
    // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie, to even (1); 1 + 3·2^-8 rounds up
    // (every expected value is PyTorch's `.bfloat16()` / `.half()` of the input)
    let cases: &[(HalfType, f32, f32)] = &[
        (HalfType::Bf16, 1.0 + 1.0 / 256.0, 1.0),
        (HalfType::Bf16, 1.0 + 3.0 / 256.0, 1.0 + 4.0 / 256.0),
        (HalfType::Bf16, -3.0e38, -3.004_055_3e38),
        (HalfType::Bf16, 3.4e38, f32::INFINITY),
        (HalfType::F16, 1.0 + 1.0 / 2048.0, 1.0),
        (HalfType::F16, 65504.0, 65504.0),
        (HalfType::F16, 70000.0, f32::INFINITY),
        (HalfType::F16, 1e-8, 0.0),
        (HalfType::F16, 65520.0, f32::INFINITY),
    ];
    for &(ty, x, want) in cases {
        let got = ty.widen(ty.round(x));
        assert_eq!(got, want, "{ty:?} of {x}");
    }
    assert!(
        HalfType::Bf16
            .widen(HalfType::Bf16.round(f32::NAN))
            .is_nan()
    );
    let mut v = vec![1.0 + 1.0 / 256.0, 2.5];
    HalfType::Bf16.round_in_place(&mut v, Par::rayon(2));
    assert_eq!(v, [1.0, 2.5]);
    // the slice rounding (vectorised) is the one-value rounding, on a spread of bit patterns:
    // every exponent (subnormals, infinities and NaNs included), ties and near-ties
    let x: Vec<f32> = (0..1u32 << 20)
        .map(|i| f32::from_bits(i.wrapping_mul(4093) ^ (i << 12) ^ (0x8000 * (i & 3))))
        .collect();
    for ty in [HalfType::Bf16, HalfType::F16] {
        let mut out = vec![0u16; x.len()];
        ty.round_into(&x, &mut out);
        for (v, o) in x.iter().zip(&out) {
            assert_eq!(*o, ty.round(*v), "{ty:?} of {v:e} ({:#x})", v.to_bits());
        }
        // and the in-place rounding widens those bits back, on the pool or not
        for par in [Par::Seq, Par::rayon(2)] {
            let mut back = x.clone();
            ty.round_in_place(&mut back, par);
            for (b, o) in back.iter().zip(&out) {
                assert_eq!(b.to_bits(), ty.widen(*o).to_bits(), "{ty:?} in place");
            }
        }
    }
}
