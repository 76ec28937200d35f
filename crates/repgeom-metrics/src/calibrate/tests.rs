//! The permutation driver: draws, aggregates, duplicates.

use repgeom_linalg::{Mat, Par};

use super::aggregate::best_matching;
use super::duplicates::duplicate_points;
use super::*;
use crate::PairMetric;
use serde_json::json;

/// Three layers over the same 48 points: a base, a noisy linear map of it, and an
/// unrelated one (a fixed pseudo-random generator, no RNG state).
fn layers() -> Vec<Mat<f32>> {
    let h = |t: usize| ((t as u64 * 2654435761 + 12345) % 10007) as f32 / 10007.0 - 0.5;
    let n = 48;
    let base = Mat::<f32>::from_fn(n, 7, |i, j| {
        h(i * 7 + j) + if j == 0 { (i % 4) as f32 } else { 0.0 }
    });
    let mapped = Mat::<f32>::from_fn(n, 5, |i, j| {
        (0..7)
            .map(|l| base[(i, l)] * h(1000 + l * 5 + j))
            .sum::<f32>()
            + 0.05 * h(5000 + i * 5 + j)
    });
    let other = Mat::<f32>::from_fn(n, 6, |i, j| h(9000 + i * 6 + j));
    vec![base, mapped, other]
}

fn metric(config: serde_json::Value) -> Box<dyn PairMetric> {
    serde_json::from_value(config).unwrap()
}

/// Every metric with a prepared null: the prepared value of each cell under a draw equals
/// the metric recomputed on the relabelled rows (identity included: the observed value).
#[test]
fn prepared_nulls_equal_recomputation() {
    let mats = layers();
    let inputs: Vec<LayerInput<'_>> = mats
        .iter()
        .enumerate()
        .map(|(i, m)| LayerInput::new(m.as_ref(), format!("layer {i}"), Par::Seq).unwrap())
        .collect();
    let refs: Vec<&LayerInput<'_>> = inputs.iter().collect();
    let pairs = layer_pairs(3, 3, false);
    for config in [
        json!({"metric": "cka_linear"}),
        json!({"metric": "cka_linear", "debiased": true}),
        json!({"metric": "rsa"}),
        json!({"metric": "rsa", "rdm": "correlation"}),
        json!({"metric": "distance_spearman", "readout": false, "random": false, "ccr": 0}),
        json!({"metric": "distance_spearman", "readout": false, "random": false, "ccr": 1}),
        json!({"metric": "mutual_knn", "k": 5}),
        json!({"metric": "cknna", "k": 5}),
    ] {
        let m = metric(config.clone());
        let prep: Vec<Option<Prepared>> = refs.iter().map(|x| m.prepare(x).unwrap()).collect();
        assert!(prep.iter().all(Option::is_some), "{config}");
        let variants = prep[0].as_ref().unwrap().variants();
        let identity: Vec<u32> = (0..48).collect();
        let draws = std::iter::once((identity.clone(), identity))
            .chain((0..4).map(|i| permutation(48, 7, i)));
        let draws: Vec<(Vec<u32>, Vec<u32>)> = draws.collect();
        let fasts = fast_draws(&prep, &prep, &pairs, &variants, &draws).unwrap();
        for ((perm, _), fast) in draws.iter().zip(fasts) {
            let slow = generic_draw(m.as_ref(), &refs, &refs, &pairs, &variants, perm).unwrap();
            for (c, (f, s)) in fast.iter().zip(&slow).enumerate() {
                assert!(
                    (f - s).abs() < 1e-5,
                    "{config} cell {c}: prepared {f} vs recomputed {s}"
                );
            }
        }
    }
}

/// A point repeated in every layer of both sides is dropped (and counted on every row):
/// the values are those of the comparison without the copies. A point repeated on one side
/// only is kept.
#[test]
fn duplicated_points_are_dropped_and_counted() {
    let mats = layers();
    let n = mats[0].nrows();
    // Points 0..n, then copies of points 3, 10 and 3 again.
    let order: Vec<usize> = (0..n).chain([3, 10, 3]).collect();
    let twice: Vec<Mat<f32>> = (mats.iter())
        .map(|m| Mat::from_fn(order.len(), m.ncols(), |i, j| m[(order[i], j)]))
        .collect();
    fn inputs(ms: &[Mat<f32>]) -> Vec<LayerInput<'_>> {
        (ms.iter().enumerate())
            .map(|(i, m)| LayerInput::new(m.as_ref(), format!("layer {i}"), Par::Seq).unwrap())
            .collect()
    }
    let (with, without) = (inputs(&twice), inputs(&mats));
    let rw: Vec<&LayerInput<'_>> = with.iter().collect();
    let ro: Vec<&LayerInput<'_>> = without.iter().collect();
    assert_eq!(duplicate_points(&rw, &rw), [n, n + 1, n + 2]);
    let pairs = layer_pairs(3, 3, false);
    let m = metric(json!({"metric": "mutual_knn", "k": 5, "n_perm": 20}));
    let settings = CompareSettings {
        aggregates: vec![Aggregate::Max],
        ..CompareSettings::default()
    };
    let a = compare(m.as_ref(), &rw, &rw, &pairs, &settings).unwrap();
    let b = compare(m.as_ref(), &ro, &ro, &pairs, &settings).unwrap();
    for (x, y) in a.pairs.iter().zip(&b.pairs) {
        assert_eq!(x.value.value, y.value.value);
        assert_eq!(x.value.p_value, y.value.p_value);
        assert_eq!(x.value.extra["duplicates_dropped"], 3.0);
        assert_eq!(y.value.extra["duplicates_dropped"], 0.0);
    }
    assert_eq!(a.aggregates[0].value.extra["duplicates_dropped"], 3.0);
    // Repeated in A's layers only: not the same input, kept.
    let one_side = [rw[0]];
    let other: Vec<Mat<f32>> = vec![Mat::from_fn(order.len(), 4, |i, j| (i * 4 + j) as f32)];
    let oi = inputs(&other);
    assert!(duplicate_points(&one_side, &[&oi[0]]).is_empty());
}

#[test]
fn aggregates_and_nulls_are_calibrated_and_seeded() {
    let mats = layers();
    let run = |par: Par, seed: u64, aggregates: Vec<Aggregate>| {
        let inputs: Vec<LayerInput<'_>> = mats
            .iter()
            .map(|m| LayerInput::new(m.as_ref(), "x", par).unwrap())
            .collect();
        let refs: Vec<&LayerInput<'_>> = inputs.iter().collect();
        let m = metric(json!({"metric": "cka_linear", "n_perm": 99, "seed": seed}));
        let settings = CompareSettings {
            aggregates,
            alpha: 0.05,
        };
        compare(
            m.as_ref(),
            &refs,
            &refs,
            &layer_pairs(3, 3, false),
            &settings,
        )
    };
    let out = run(Par::Seq, 0, Aggregate::ALL.to_vec()).unwrap();
    assert_eq!(out.pairs.len(), 9);
    // A layer against itself: at the p floor; the unrelated layer against the base: not.
    let cell = |a: usize, b: usize| {
        &out.pairs
            .iter()
            .find(|r| (r.a, r.b) == (a, b))
            .unwrap()
            .value
    };
    assert_eq!(cell(0, 0).p_value, Some(0.01));
    assert!(cell(0, 2).p_value.unwrap() > 0.01, "{:?}", cell(0, 2));
    for key in ["z", "z_se", "p_upper", "p_lower", "p_two_sided", "n_perm"] {
        assert!(cell(0, 1).extra.contains_key(key), "{key}");
    }
    // Each aggregate of the observed table, with its null at the floor (the diagonal is 1).
    let names: Vec<&str> = out.aggregates.iter().map(|r| r.aggregate.name()).collect();
    assert_eq!(names, ["max", "row_max_mean", "hungarian", "diagonal"]);
    for r in &out.aggregates {
        assert_eq!(r.value.p_value, Some(0.01), "{}", r.aggregate);
        assert!(r.value.extra["tau"] < r.value.value, "{}", r.aggregate);
        assert!(r.value.extra["calibrated"] > 0.0, "{}", r.aggregate);
    }
    assert!((out.aggregates[0].value.value - 1.0).abs() < 1e-12);
    // Identical at any thread count; the null moves with the seed, the value does not.
    assert_eq!(out, run(Par::rayon(2), 0, Aggregate::ALL.to_vec()).unwrap());
    let other = run(Par::Seq, 1, Vec::new()).unwrap();
    assert_eq!(other.pairs[1].value.value, out.pairs[1].value.value);
    assert_ne!(other.pairs[1].value.null_mean, out.pairs[1].value.null_mean);
}

#[test]
fn an_aggregate_needs_a_null_and_the_whole_table() {
    let mats = layers();
    let inputs: Vec<LayerInput<'_>> = mats
        .iter()
        .map(|m| LayerInput::new(m.as_ref(), "x", Par::Seq).unwrap())
        .collect();
    let refs: Vec<&LayerInput<'_>> = inputs.iter().collect();
    let max = CompareSettings {
        aggregates: vec![Aggregate::Max],
        alpha: 0.05,
    };
    let e = compare(
        metric(json!({"metric": "cka_linear"})).as_ref(),
        &refs,
        &refs,
        &layer_pairs(3, 3, false),
        &max,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("n_perm") && e.contains("needs a permutation null"),
        "{e}"
    );
    let m = metric(json!({"metric": "cka_linear", "n_perm": 10}));
    let e = compare(m.as_ref(), &refs, &refs, &layer_pairs(3, 3, true), &max)
        .unwrap_err()
        .to_string();
    assert!(e.contains("every layer pair"), "{e}");
    let diagonal = CompareSettings {
        aggregates: vec![Aggregate::Diagonal],
        alpha: 0.05,
    };
    assert!(
        compare(
            m.as_ref(),
            &refs,
            &refs,
            &layer_pairs(3, 3, true),
            &diagonal
        )
        .is_ok()
    );
    // A distance: p in the lower tail, "best" the smallest.
    let p = metric(json!({"metric": "procrustes", "n_perm": 9}));
    let out = compare(p.as_ref(), &refs, &refs, &layer_pairs(3, 3, false), &max).unwrap();
    let angular = out
        .aggregates
        .iter()
        .find(|r| r.value.variant == "angular")
        .unwrap();
    assert!(angular.value.value.abs() < 1e-6, "{:?}", angular.value);
    assert_eq!(angular.value.p_value, Some(0.1));
}

#[test]
fn best_matching_is_the_brute_force_optimum() {
    // every 3 × 4 and 4 × 3 weight table from a small generator against all matchings
    for seed in 0..20u64 {
        for (la, lb) in [(3usize, 4usize), (4, 3), (3, 3)] {
            let w: Vec<f64> = (0..la * lb)
                .map(|t| (((t as u64 + 1) * (seed * 2654435761 + 97)) % 1009) as f64 / 1009.0)
                .collect();
            let got = best_matching(&w, la, lb);
            let total =
                |cells: &[(usize, usize)]| cells.iter().map(|&(i, j)| w[i * lb + j]).sum::<f64>();
            let (small, large) = (la.min(lb), la.max(lb));
            let mut best = f64::NEG_INFINITY;
            // all injective maps from the smaller side into the larger
            let mut idx = vec![0usize; small];
            loop {
                let mut seen = vec![false; large];
                if idx.iter().all(|&x| !std::mem::replace(&mut seen[x], true)) {
                    let cells: Vec<(usize, usize)> = idx
                        .iter()
                        .enumerate()
                        .map(|(s, &l)| if la <= lb { (s, l) } else { (l, s) })
                        .collect();
                    best = best.max(total(&cells));
                }
                let mut p = 0;
                while p < small {
                    idx[p] += 1;
                    if idx[p] < large {
                        break;
                    }
                    idx[p] = 0;
                    p += 1;
                }
                if p == small {
                    break;
                }
            }
            assert_eq!(got.len(), small);
            assert!((total(&got) - best).abs() < 1e-12, "{seed} {la}×{lb}");
        }
    }
}

/// Each layer's readout basis for the table tests: its first two coordinates.
fn readout_bases(mats: &[Mat<f32>]) -> Vec<Mat<f64>> {
    (mats.iter())
        .map(|m| Mat::from_fn(m.ncols(), 2, |i, j| f64::from(u8::from(i == j))))
        .collect()
}

/// A table's cells equal each pair computed alone on fresh layers: the per-layer work that
/// `PairMetric::warm` shares between pairs, and the pairs run side by side, change no bit. One
/// side's layers also serve as the other's, so a layer keeps both sides' work at once.
#[test]
fn a_table_equals_each_pair_alone() {
    let mats = layers();
    let bases = readout_bases(&mats);
    let params = repgeom_null::NullParams { n_null: 6, seed: 3 }
        .check()
        .unwrap();
    let nulls: Vec<repgeom_null::NullBases> = (mats.iter())
        .map(|m| repgeom_null::NullBases::draw(m.ncols(), 2, &params).unwrap())
        .collect();
    let fresh = |i: usize, par: Par| {
        (LayerInput::new(mats[i].as_ref(), format!("layer {i}"), par).unwrap())
            .with_readout(bases[i].as_ref())
            .unwrap()
            .with_null(&nulls[i])
            .unwrap()
    };
    // A layer against itself has a constant random-subspace null: the other six cells.
    let pairs: Vec<(usize, usize)> = (layer_pairs(3, 3, false).into_iter())
        .filter(|(i, j)| i != j)
        .collect();
    let configs = [
        json!({"metric": "distance_spearman", "ccr": 1}),
        json!({"metric": "distance_spearman", "random": false, "ccr": 1}),
        json!({"metric": "distance_spearman", "readout": false, "random": false, "ccr": 0}),
        json!({"metric": "rsa"}),
        json!({"metric": "rsa", "rdm": "correlation"}),
        json!({"metric": "svcca"}),
        json!({"metric": "pwcca"}),
        json!({"metric": "procrustes"}),
        json!({"metric": "cka_linear"}),
        json!({"metric": "mutual_knn", "k": 5, "n_perm": 0}),
        json!({"metric": "cknna", "k": 5, "n_perm": 0}),
    ];
    // At 16 threads `distance_spearman`'s table ranks all six draws of its layers in one
    // group; at 1 and 3 one draw at a time.
    for threads in [1, 3, 16] {
        // One set of layers for every metric: no two metrics' per-layer work may collide.
        let inputs: Vec<LayerInput<'_>> = (0..3).map(|i| fresh(i, Par::rayon(threads))).collect();
        let refs: Vec<&LayerInput<'_>> = inputs.iter().collect();
        for config in &configs {
            let m = metric(config.clone());
            let table = compare(
                m.as_ref(),
                &refs,
                &refs,
                &pairs,
                &CompareSettings::default(),
            )
            .unwrap();
            let mut cells = 0;
            for &(i, j) in &pairs {
                let (a, b) = (fresh(i, Par::Seq), fresh(j, Par::Seq));
                let alone = m.compute(&PairInput::new(&a, &b).unwrap()).unwrap();
                let rows: Vec<MetricValue> = (table.pairs.iter())
                    .filter(|r| (r.a, r.b) == (i, j))
                    .map(|r| {
                        let mut v = r.value.clone();
                        assert_eq!(v.extra.remove("duplicates_dropped"), Some(0.0));
                        v
                    })
                    .collect();
                assert_eq!(
                    rows, alone,
                    "{config} at {threads} threads, cell ({i}, {j})"
                );
                cells += rows.len();
            }
            assert_eq!(cells, table.pairs.len(), "{config}");
        }
    }
}

/// A table whose random-subspace draws cannot all be made fails as its first failing cell
/// fails alone, with that cell's message: a layer without null bases (its cells are computed
/// alone), and layers with unequal numbers of draws (the whole table is).
#[test]
fn a_table_fails_as_its_first_failing_cell_alone() {
    let mats = layers();
    let bases = readout_bases(&mats);
    let draws = |n_null: usize, m: &Mat<f32>| {
        let params = repgeom_null::NullParams { n_null, seed: 3 }
            .check()
            .unwrap();
        repgeom_null::NullBases::draw(m.ncols(), 2, &params).unwrap()
    };
    let m = metric(json!({"metric": "distance_spearman", "ccr": 1}));
    let pairs: Vec<(usize, usize)> = (layer_pairs(3, 3, false).into_iter())
        .filter(|(i, j)| i != j)
        .collect();
    // Layer 2's null bases: none, or more draws than the others'.
    for last in [None, Some(draws(7, &mats[2]))] {
        let nulls: Vec<Option<repgeom_null::NullBases>> = vec![
            Some(draws(6, &mats[0])),
            Some(draws(6, &mats[1])),
            last.clone(),
        ];
        let fresh = |i: usize, par: Par| {
            let x = (LayerInput::new(mats[i].as_ref(), format!("layer {i}"), par).unwrap())
                .with_readout(bases[i].as_ref())
                .unwrap();
            match &nulls[i] {
                Some(q) => x.with_null(q).unwrap(),
                None => x,
            }
        };
        let inputs: Vec<LayerInput<'_>> = (0..3).map(|i| fresh(i, Par::rayon(3))).collect();
        let refs: Vec<&LayerInput<'_>> = inputs.iter().collect();
        let table = compare(
            m.as_ref(),
            &refs,
            &refs,
            &pairs,
            &CompareSettings::default(),
        );
        let (a, b) = (fresh(0, Par::Seq), fresh(2, Par::Seq));
        let alone = m.compute(&PairInput::new(&a, &b).unwrap()).unwrap_err();
        assert_eq!(
            table.unwrap_err().to_string(),
            alone.to_string(),
            "layer 2's null bases: {}",
            last.as_ref().map_or(0, repgeom_null::NullBases::len)
        );
    }
}
