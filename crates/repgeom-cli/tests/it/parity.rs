//! One Subspace PGA, however it is reached: `repgeom pga`, `repgeom metrics` and the study
//! (`repgeom sweep`) give bit-identical numbers for one input and one set of options (the Python
//! package's pytest adds `repgeom.pga` to the same comparison).

use std::collections::BTreeMap;

use crate::{repgeom, root};

/// One set of options, spelled as each front end spells it.
struct Case {
    /// `repgeom pga` flags (besides the input, `-k 8 --n-null 12 --seed 7 --ccr 0,2`).
    pga: &'static [&'static str],
    /// The `pga` metric's options for `repgeom metrics --metric 'pga:{...}'` (besides `ccr`).
    metric: &'static str,
    /// `repgeom metrics` flags for the readout.
    metrics: &'static [&'static str],
    /// `[analysis]` lines of the study manifest.
    analysis: &'static str,
    /// The variant suffix of the null (`""` or `"_spectrum"`).
    suffix: &'static str,
}

/// The numbers of one PGA row: (layer, ccr) → name → value.
type Numbers = BTreeMap<(u64, u64), BTreeMap<String, f64>>;

const NAMES: [&str; 5] = ["z", "rho_readout", "null_mean", "null_std", "p_value"];

fn json_lines(run: &crate::Run) -> Vec<serde_json::Value> {
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn check(case: &Case) {
    let common = ["-k", "8", "--n-null", "12", "--seed", "7"];
    // repgeom pga
    let mut args = vec![
        "pga",
        "--acts",
        "fixtures/pga/acts.npy",
        "--readout",
        "fixtures/pga/readout.npy",
        "--ccr",
        "0,2",
        "--format",
        "json",
    ];
    args.extend(common);
    args.extend(case.pga);
    let mut pga = Numbers::new();
    for row in json_lines(&repgeom(&args)) {
        let key = (row["layer"].as_u64().unwrap(), row["ccr"].as_u64().unwrap());
        let mut values: BTreeMap<String, f64> = NAMES
            .iter()
            .map(|n| (n.to_string(), row[n].as_f64().unwrap()))
            .collect();
        if let Some(lo) = row.get("z_lo") {
            values.insert("z_lo".into(), lo.as_f64().unwrap());
        }
        pga.insert(key, values);
    }
    assert_eq!(pga.len(), 3 * 2, "three layers at two CCR levels");

    // repgeom metrics, the registry metric
    let spec = format!("pga:{{\"ccr\":[0,2],\"pair_seed\":7{}}}", case.metric);
    let mut args = vec![
        "metrics",
        "--acts",
        "fixtures/pga/acts.npy",
        "--readout",
        "fixtures/pga/readout.npy",
        "--metric",
        &spec,
        "--format",
        "json",
    ];
    args.extend(common);
    args.extend(case.metrics);
    let metrics = tidy(json_lines(&repgeom(&args)), case.suffix, |row, name| {
        row[name].as_f64()
    });

    // the study, from a manifest naming the same files
    let dir = tempfile::tempdir().unwrap();
    let root = root();
    let manifest = format!(
        "[analysis]\nk = 8\nn_null = 12\nseed = 7\nccr = [0, 2]\nspectral = []\npc_share = 0\n\
         probe = false\n{}\n\n[[model]]\nlabel = \"fixture\"\nfamily = \"fixture\"\nd = 64\n\
         n_layers = 3\nreadout = \"{}\"\n\n[[model.checkpoint]]\nname = \"final\"\n\
         activations = \"{}\"\n",
        case.analysis,
        root.join("fixtures/pga/readout.npy").display(),
        root.join("fixtures/pga/acts.npy").display(),
    );
    let path = dir.path().join("study.toml");
    std::fs::write(&path, manifest).unwrap();
    let out = dir.path().join("out");
    let run = repgeom(&[
        "sweep",
        "--manifest",
        path.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let rows: Vec<serde_json::Value> = lines
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            let object: serde_json::Map<String, serde_json::Value> = header
                .iter()
                .zip(cells)
                .map(|(h, c)| {
                    let v = c
                        .parse::<f64>()
                        .map(serde_json::Value::from)
                        .unwrap_or_else(|_| serde_json::Value::from(c.trim_matches('"')));
                    (h.to_string(), v)
                })
                .collect();
            serde_json::Value::Object(object)
        })
        .collect();
    let study = tidy(rows, case.suffix, |row, name| row[name].as_f64());

    for (front, numbers) in [("repgeom metrics", &metrics), ("the study", &study)] {
        assert_eq!(numbers.len(), pga.len(), "{front}: rows");
        for (key, values) in numbers {
            for (name, v) in values {
                let want = pga[key][name];
                assert_eq!(
                    v.to_bits(),
                    want.to_bits(),
                    "{front}, layer {} ccr {}: {name} {v} != repgeom pga's {want}",
                    key.0,
                    key.1
                );
            }
        }
    }
}

/// The `pga_z` rows of a tidy table (and `pga_z_lo` with a bootstrap) as [`Numbers`].
fn tidy(
    rows: Vec<serde_json::Value>,
    suffix: &str,
    get: impl Fn(&serde_json::Value, &str) -> Option<f64>,
) -> Numbers {
    let mut out = Numbers::new();
    for row in &rows {
        let (Some(metric), Some(variant)) = (row["metric"].as_str(), row["variant"].as_str())
        else {
            continue;
        };
        let Some(ccr) = variant
            .strip_suffix(suffix)
            .and_then(|v| v.strip_prefix("ccr"))
            .and_then(|c| c.parse::<u64>().ok())
        else {
            continue;
        };
        let layer = get(row, "layer").unwrap() as u64;
        let entry = out.entry((layer, ccr)).or_default();
        match metric {
            "pga_z" => {
                entry.insert("z".into(), get(row, "value").unwrap());
                for n in ["null_mean", "null_std", "p_value"] {
                    entry.insert(n.into(), get(row, n).unwrap());
                }
            }
            "rho_readout" => {
                entry.insert("rho_readout".into(), get(row, "value").unwrap());
            }
            "pga_z_lo" => {
                entry.insert("z_lo".into(), get(row, "value").unwrap());
            }
            _ => {}
        }
    }
    out
}

#[test]
fn one_pga_through_every_front_end() {
    check(&Case {
        pga: &[],
        metric: "",
        metrics: &[],
        analysis: "",
        suffix: "",
    });
    check(&Case {
        pga: &[
            "--distance",
            "euclidean",
            "--max-pairs",
            "3000",
            "--readout-center",
            "--bootstrap",
            "4",
            "--bootstrap-seed",
            "7",
        ],
        metric: ",\"distance\":\"euclidean\",\"max_pairs\":3000,\
                 \"bootstrap\":{\"replicates\":4,\"seed\":7}",
        metrics: &["--readout-center"],
        analysis: "distance = \"euclidean\"\nmax_pairs = 3000\nreadout_center = true\nbootstrap = 4",
        suffix: "",
    });
    check(&Case {
        pga: &["--null", "spectrum", "--max-memory", "64MiB"],
        metric: ",\"null\":\"spectrum\",\"max_memory\":67108864",
        metrics: &[],
        analysis: "null = \"spectrum\"\nmax_memory = 67108864",
        suffix: "_spectrum",
    });
}

/// One cross-model comparison, however it is reached: the study's `cross` and `cross_table`
/// rows are `repgeom compare`'s for the same pair and options, every column `repgeom compare`
/// reports (value, the null's mean, std and p, and every extra: z, its standard error, both
/// tails, the permutation count, tau, the tie fractions, the duplicates dropped, ...) and no
/// other, bit for bit (both models'
/// contexts from one pair constructor, model B's random subspaces from `seed + 1`; every cell
/// computed in the whole table; the duplicated points judged on every layer of both).
#[test]
fn one_comparison_through_every_front_end() {
    let (acts, readout) = ("fixtures/pga/acts.npy", "fixtures/pga/readout.npy");
    let compare = json_lines(&repgeom(&[
        "compare",
        "--a",
        acts,
        "--readout-a",
        readout,
        "--b",
        acts,
        "--readout-b",
        readout,
        "-k",
        "8",
        "--n-null",
        "10",
        "--seed",
        "7",
        "--n-perm",
        "20",
        "--aggregate",
        "max",
        "--metric",
        "distance_spearman:{\"ccr\":1,\"seed\":7}",
        "--metric",
        "cka_linear:{\"seed\":7}",
        "--format",
        "json",
    ]));
    // Every number of a row but those that place it (layers): name → bits.
    let placing = [
        "layer",
        "other_layer",
        "d",
        "step",
        "n_layers",
        "relative_depth",
    ];
    let numbers = |row: &serde_json::Value| -> BTreeMap<String, u64> {
        (row.as_object().unwrap().iter())
            .filter(|(k, _)| !placing.contains(&k.as_str()))
            .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?.to_bits())))
            .collect()
    };
    let text = |row: &serde_json::Value, name: &str| row[name].as_str().unwrap_or("").to_owned();
    // (layer, other layer or aggregate, metric, variant) → the numbers' bits
    let mut cli = BTreeMap::new();
    for row in &compare {
        let key = match (row["layer"].as_f64(), row["other_layer"].as_f64()) {
            (Some(l), Some(o)) => (l as u64, o.to_string(), text(row, "metric")),
            _ => {
                let metric = format!("{}_{}", text(row, "metric"), text(row, "aggregate"));
                (0, String::new(), metric)
            }
        };
        cli.insert((key, text(row, "variant")), numbers(row));
    }

    let dir = tempfile::tempdir().unwrap();
    let root = root();
    let model = |label: &str| {
        format!(
            "\n[[model]]\nlabel = \"{label}\"\nfamily = \"fixture\"\nd = 64\nn_layers = 3\n\
             readout = \"{}\"\n\n[[model.checkpoint]]\nname = \"final\"\nactivations = \"{}\"\n",
            root.join(readout).display(),
            root.join(acts).display(),
        )
    };
    let manifest = format!(
        "pairs = [[\"a\", \"b\"]]\n\n[analysis]\nk = 8\nn_null = 10\nseed = 7\nccr = [1]\n\
         spectral = []\npc_share = 0\nprobe = false\ncross = [\"distance_spearman\", \
         \"cka_linear\"]\ncross_n_perm = 20\ncross_aggregate = [\"max\"]\n{}{}",
        model("a"),
        model("b"),
    );
    let path = dir.path().join("study.toml");
    std::fs::write(&path, manifest).unwrap();
    let out = dir.path().join("out");
    let run = repgeom(&[
        "sweep",
        "--manifest",
        path.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let (mut cells, mut units, mut aggregates) = (0, 0, 0);
    for line in lines {
        let row: BTreeMap<&str, &str> = header.iter().copied().zip(line.split(',')).collect();
        if row["other_model"].trim_matches('"') != "b" {
            continue;
        }
        let metric = row["metric"].to_owned();
        let layer: u64 = row["layer"].parse().unwrap();
        // A `cross` row is at the layer of `b` nearest in relative depth: the same layer here.
        let key = match row["other_layer"].parse::<f64>() {
            _ if metric.ends_with("_max") => (0, String::new(), metric),
            Ok(o) => (layer, o.to_string(), metric),
            Err(_) => (layer, (layer as f64).to_string(), metric),
        };
        let what = format!("{key:?}");
        let variant = row["variant"].trim_matches('"').to_owned();
        let bits: BTreeMap<String, u64> = (row.iter())
            .filter(|(k, _)| !placing.contains(k))
            .filter_map(|(k, v)| Some((k.to_string(), v.parse::<f64>().ok()?.to_bits())))
            .collect();
        let want = cli
            .get(&(key, variant))
            .unwrap_or_else(|| panic!("{what}: no such row from repgeom compare"));
        assert_eq!(&bits, want, "{what}: the study vs repgeom compare");
        // The comparison's own columns are there, not only the null's mean, std and p.
        if bits.contains_key("null_mean") {
            assert!(bits.contains_key("z"), "{what}: no z");
        }
        if bits.contains_key("n_perm") {
            for column in ["z_se", "p_upper", "p_lower", "p_two_sided"] {
                assert!(bits.contains_key(column), "{what}: no {column}");
            }
        }
        if what.contains("_max") {
            assert!(bits.contains_key("tau"), "{what}: no tau");
        }
        assert!(bits.contains_key("duplicates_dropped"), "{what}");
        match (what.contains("_max"), row["other_layer"].is_empty()) {
            (true, _) => aggregates += 1,
            (false, true) => units += 1,
            (false, false) => cells += 1,
        }
    }
    assert!(
        cells > 0 && units > 0 && aggregates > 0,
        "{cells} {units} {aggregates}"
    );
}
