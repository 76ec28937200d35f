//! Hostile input (issue 8): each class of bad input in `docs/errors.md` gives exit code 2, a
//! message naming the file, tensor and shape, and leaves no output file (and no temporary
//! file) behind; an existing output file is left intact.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::repgeom;

const N: usize = 12;
const D: usize = 6;

/// Deterministic, well-spread points: no two rows parallel, no zero row.
fn value(i: usize, j: usize) -> f32 {
    ((i * 7 + j * 13) as f32 * 0.37).sin() * 3.0 + if j == 0 { 5.0 } else { 0.0 }
}

/// Writes an `n x d` (or `[layers, n, d]` when `layers > 0`) f32 `.npy` built from `f`.
fn npy(
    dir: &Path,
    name: &str,
    layers: usize,
    n: usize,
    d: usize,
    f: impl Fn(usize, usize) -> f32,
) -> PathBuf {
    let path = dir.join(name);
    let l = layers.max(1);
    let data: Vec<f32> = (0..l * n * d)
        .map(|x| f((x / d) % n + 31 * (x / (n * d)), x % d))
        .collect();
    let shape = if layers > 0 {
        vec![layers, n, d]
    } else {
        vec![n, d]
    };
    repgeom_io::write_npy_f32(&path, &shape, &data).unwrap();
    path
}

/// Raw `.npy` bytes with a hand-written header (for headers numpy would never write).
fn raw_npy(dir: &Path, name: &str, header: &str, data: &[u8]) -> PathBuf {
    let mut h = header.to_string();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(h.len() as u16).to_le_bytes());
    bytes.extend_from_slice(h.as_bytes());
    bytes.extend_from_slice(data);
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Files in `dir` whose name marks an unfinished atomic write.
fn temp_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp."))
        .collect()
}

/// Runs `repgeom args`, expects exit code 2 and every fragment in stderr; `out` (if given)
/// must afterwards hold exactly `previous` (None: not exist), with no temporary file beside it.
/// A command without `--out` gets one in a fresh directory, which must stay empty.
fn check(args: &[&str], fragments: &[&str], out: Option<(&Path, Option<&str>)>) {
    let scratch = tempfile::tempdir().unwrap();
    let auto_out = scratch.path().join("result.csv");
    let mut args = args.to_vec();
    let auto = !args.contains(&"--out") && ["pga", "compare", "probe"].contains(&args[0]);
    if auto {
        args.extend(["--out", s(&auto_out)]);
    }
    let args = &args[..];
    let run = repgeom(args);
    assert_eq!(
        run.code, 2,
        "exit code for {args:?}\nstderr: {}",
        run.stderr
    );
    assert!(
        run.stdout.is_empty(),
        "no partial table on stdout: {}",
        run.stdout
    );
    for f in fragments {
        assert!(
            run.stderr.contains(f),
            "stderr of {args:?} lacks {f:?}:\n{}",
            run.stderr
        );
    }
    assert!(run.stderr.starts_with("error: "), "{}", run.stderr);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    if auto {
        let left: Vec<_> = std::fs::read_dir(scratch.path()).unwrap().collect();
        assert!(left.is_empty(), "{args:?} left files behind: {left:?}");
    }
    if let Some((path, previous)) = out {
        match previous {
            None => assert!(!path.exists(), "{} was written", path.display()),
            Some(text) => assert_eq!(std::fs::read_to_string(path).unwrap(), text),
        }
        if let Some(dir) = path.parent().filter(|d| d.is_dir()) {
            assert_eq!(
                temp_files(dir),
                Vec::<String>::new(),
                "temporary files left"
            );
        }
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Fast PGA arguments: small null, explicit k.
fn pga_args<'a>(acts: &'a str, readout: &'a str, k: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "pga",
        "--acts",
        acts,
        "--readout",
        readout,
        "-k",
        k,
        "--n-null",
        "4",
    ];
    v.extend_from_slice(extra);
    v
}

#[test]
fn readout_width_differs_from_activations() {
    let t = tempfile::tempdir().unwrap();
    let acts = npy(t.path(), "acts.npy", 0, N, D, value);
    let w = npy(t.path(), "w.npy", 0, 20, D - 1, value);
    let out = t.path().join("out.csv");
    check(
        &pga_args(s(&acts), s(&w), "2", &["--out", s(&out)]),
        &["shape mismatch", "have d = 6", "w.npy", "[20, 5]"],
        Some((&out, None)),
    );
}

#[test]
fn non_finite_activations_and_readout() {
    let t = tempfile::tempdir().unwrap();
    let acts = npy(t.path(), "acts.npy", 0, N, D, |i, j| {
        if (i, j) == (3, 2) {
            f32::NAN
        } else {
            value(i, j)
        }
    });
    let w = npy(t.path(), "w.npy", 0, 20, D, value);
    check(
        &pga_args(s(&acts), s(&w), "2", &[]),
        &["acts.npy", "non-finite", "row 3, column 2"],
        None,
    );
    let acts = npy(t.path(), "ok.npy", 0, N, D, value);
    let w = npy(t.path(), "winf.npy", 0, 20, D, |i, j| {
        if (i, j) == (7, 1) {
            f32::INFINITY
        } else {
            value(i, j)
        }
    });
    check(
        &pga_args(s(&acts), s(&w), "2", &[]),
        &["winf.npy", "non-finite", "row 7, column 1"],
        None,
    );
}

#[test]
fn zero_norm_row() {
    let t = tempfile::tempdir().unwrap();
    let acts = npy(t.path(), "acts.npy", 0, N, D, |i, j| {
        if i == 5 { 0.0 } else { value(i, j) }
    });
    let w = npy(t.path(), "w.npy", 0, 20, D, value);
    check(
        &pga_args(s(&acts), s(&w), "2", &[]),
        &["acts.npy", "row 5", "zero norm"],
        None,
    );
}

#[test]
fn duplicate_points_all_distances_tied() {
    let t = tempfile::tempdir().unwrap();
    let acts = npy(t.path(), "acts.npy", 0, N, D, |_, j| value(0, j));
    let w = npy(t.path(), "w.npy", 0, 20, D, value);
    // Identical points equal their mean, so after centring every row is zero.
    check(
        &pga_args(s(&acts), s(&w), "2", &[]),
        &["acts.npy", "[12, 6]", "after CCR-1", "zero norm"],
        None,
    );
}

#[test]
fn k_not_below_d() {
    let t = tempfile::tempdir().unwrap();
    let acts = npy(t.path(), "acts.npy", 0, N, D, value);
    let w = npy(t.path(), "w.npy", 0, 20, D, value);
    check(
        &pga_args(s(&acts), s(&w), "6", &[]),
        &["k = 6", "0 < k < d = 6", "w.npy"],
        None,
    );
}

#[test]
fn fewer_than_four_points() {
    let t = tempfile::tempdir().unwrap();
    let acts = npy(t.path(), "acts.npy", 0, 3, D, value);
    let w = npy(t.path(), "w.npy", 0, 20, D, value);
    check(
        &pga_args(s(&acts), s(&w), "2", &[]),
        &["acts.npy", "needs at least 4 points, got 3"],
        None,
    );
}

#[test]
fn layer_missing_from_a_file() {
    let t = tempfile::tempdir().unwrap();
    let acts = npy(t.path(), "acts.npy", 2, N, D, value);
    let w = npy(t.path(), "w.npy", 0, 20, D, value);
    check(
        &pga_args(s(&acts), s(&w), "2", &["--layers", "0,3"]),
        &["acts.npy", "layer 3 not found", "[0, 1]"],
        None,
    );
    // compare: the layer exists in one checkpoint and not in the other.
    let b = npy(t.path(), "b.npy", 3, N, D, value);
    check(
        &[
            "compare",
            "--a",
            s(&b),
            "--b",
            s(&acts),
            "--layers-a",
            "2",
            "--layers-b",
            "2",
            "--metric",
            "cka_linear",
        ],
        &["acts.npy", "layer 2 not found"],
        None,
    );
}

/// `repgeom compare --a A --b B --metric cka_linear EXTRA… --out OUT`.
fn compare_cka<'a>(a: &'a Path, b: &'a Path, out: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "compare",
        "--a",
        s(a),
        "--b",
        s(b),
        "--metric",
        "cka_linear",
    ];
    args.extend(extra);
    args.extend(["--out", s(out)]);
    args
}

#[test]
fn compare_with_different_point_counts() {
    let t = tempfile::tempdir().unwrap();
    let a = npy(t.path(), "a.npy", 0, N, D, value);
    let b = npy(t.path(), "b.npy", 0, N - 2, D + 1, value);
    let out = t.path().join("cmp.csv");
    check(
        &compare_cka(&a, &b, &out, &[]),
        &["a.npy", "12 points", "b.npy", "10"],
        Some((&out, None)),
    );
}

/// Two `.safetensors` files of the same size whose `positions` metadata disagree: the points
/// are not the same, and the error names both files and the first point that differs.
#[test]
fn compare_with_different_point_order() {
    let t = tempfile::tempdir().unwrap();
    let data: Vec<f32> = (0..N * D).map(|x| value(x / D, x % D)).collect();
    let write = |name: &str, swap: bool| {
        let mut pos: Vec<[usize; 2]> = (0..N).map(|i| [i / 4, i % 4]).collect();
        if swap {
            pos.swap(5, 6);
        }
        let meta = std::collections::BTreeMap::from([(
            "positions".to_string(),
            serde_json::to_string(&pos).unwrap(),
        )]);
        let path = t.path().join(name);
        repgeom_io::write_safetensors(&path, &[("layer.0".into(), vec![N, D], &data)], &meta)
            .unwrap();
        path
    };
    let (a, b) = (write("a.safetensors", false), write("b.safetensors", true));
    let out = t.path().join("cmp.csv");
    check(
        &compare_cka(&a, &b, &out, &[]),
        &[
            "a.safetensors",
            "b.safetensors",
            "point 5",
            "[1, 1]",
            "[1, 2]",
        ],
        Some((&out, None)),
    );
}

/// An aggregate over layer pairs without a permutation null is refused, as is a non-finite
/// value in the second file (named with its layer and row).
#[test]
fn compare_aggregate_without_null_and_non_finite_b() {
    let t = tempfile::tempdir().unwrap();
    let a = npy(t.path(), "a.npy", 2, N, D, value);
    let out = t.path().join("cmp.csv");
    check(
        &compare_cka(&a, &a, &out, &["--n-perm", "0", "--aggregate", "max"]),
        &["max", "n_perm", "cka_linear"],
        Some((&out, None)),
    );
    let b = npy(t.path(), "b.npy", 2, N, D, |i, j| {
        if (i, j) == (31 + 4, 1) {
            f32::INFINITY
        } else {
            value(i, j)
        }
    });
    check(
        &compare_cka(&a, &b, &out, &[]),
        &["b.npy", "non-finite", "row 4, column 1"],
        Some((&out, None)),
    );
}

#[test]
fn labels_do_not_match_features() {
    let t = tempfile::tempdir().unwrap();
    let f = npy(t.path(), "feats.npy", 0, N, D, value);
    let labels = t.path().join("labels.csv");
    let mut text = String::from("label\n");
    for i in 0..N - 3 {
        text.push_str(&format!("{}\n", i % 2));
    }
    std::fs::write(&labels, text).unwrap();
    check(
        &["probe", "--features", s(&f), "--labels", s(&labels)],
        &[
            "feats.npy",
            "features [12, 6] have 12 rows but there are 9 labels",
        ],
        None,
    );
}

#[test]
fn unwritable_output_paths() {
    let t = tempfile::tempdir().unwrap();
    let acts = npy(t.path(), "acts.npy", 0, N, D, value);
    let w = npy(t.path(), "w.npy", 0, 20, D, value);
    // Running as root, permissions do not stop writes: use a parent that is not a directory.
    check(
        &pga_args(s(&acts), s(&w), "2", &["--out", "/dev/null/out.csv"]),
        &["/dev/null/out.csv"],
        None,
    );
    let file_as_dir = t.path().join("w.npy").join("out.csv");
    check(
        &pga_args(s(&acts), s(&w), "2", &["--out", s(&file_as_dir)]),
        &["out.csv"],
        None,
    );
    let missing_dir = t.path().join("no/such/dir/out.csv");
    check(
        &pga_args(s(&acts), s(&w), "2", &["--out", s(&missing_dir)]),
        &["out.csv"],
        None,
    );
}

#[test]
fn failed_run_leaves_previous_output_intact() {
    let t = tempfile::tempdir().unwrap();
    let acts = npy(t.path(), "acts.npy", 0, N, D, |i, j| {
        if i == 2 { f32::NAN } else { value(i, j) }
    });
    let w = npy(t.path(), "w.npy", 0, 20, D, value);
    let out = t.path().join("out.csv");
    std::fs::write(&out, "previous results\n").unwrap();
    check(
        &pga_args(s(&acts), s(&w), "2", &["--out", s(&out)]),
        &["non-finite"],
        Some((&out, Some("previous results\n"))),
    );
}

/// A writer that accepts `room` bytes, then fails as a full disk does (ENOSPC).
struct FullDisk<'a> {
    inner: &'a mut dyn Write,
    room: usize,
}

impl Write for FullDisk<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.room == 0 {
            return Err(std::io::Error::from_raw_os_error(28)); // ENOSPC
        }
        let n = buf.len().min(self.room);
        self.room -= n;
        self.inner.write(&buf[..n])
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[test]
fn disk_full_part_way_keeps_previous_file() {
    // Simulated: the temp file's writer fails with ENOSPC after 100 bytes (a real full disk
    // cannot be made without mounting a small filesystem).
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("results.csv");
    std::fs::write(&out, "old\n").unwrap();
    let err = repgeom_io::atomic_write(&out, |w| {
        let mut full = FullDisk {
            inner: w,
            room: 100,
        };
        for _ in 0..1000 {
            full.write_all(b"0.123456,0.654321\n")?;
        }
        Ok(())
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("results.csv"), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "old\n");
    assert_eq!(temp_files(t.path()), Vec::<String>::new());
    // /dev/full as the destination's directory entry cannot hold a temp file either.
    let err = repgeom_io::atomic_write(Path::new("/dev/full/x.csv"), |w| w.write_all(b"x"));
    assert!(err.unwrap_err().to_string().contains("/dev/full/x.csv"));
}

#[test]
fn declared_tensor_larger_than_memory_is_refused_before_allocating() {
    let t = tempfile::tempdir().unwrap();
    let w = npy(t.path(), "w.npy", 0, 20, D, value);
    // 2^60 elements: more than any machine; refused from the header alone.
    let huge = raw_npy(
        t.path(),
        "huge.npy",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1073741824, 1073741824), }",
        &[],
    );
    check(
        &pga_args(s(&huge), s(&w), "2", &[]),
        &["huge.npy", "[1073741824, 1073741824]", "too large"],
        None,
    );
    // 64 GiB declared, 16 bytes present: refused as truncated, before reading any data.
    let trunc = raw_npy(
        t.path(),
        "trunc.npy",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (131072, 131072), }",
        &[0u8; 16],
    );
    check(
        &pga_args(s(&trunc), s(&w), "2", &[]),
        &["trunc.npy", "[131072, 131072]", "68719476736", "16"],
        None,
    );
    // The same for a safetensors header.
    let header =
        br#"{"hidden_states":{"dtype":"F32","shape":[4096,65536,65536],"data_offsets":[0,16]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    bytes.extend_from_slice(&[0u8; 16]);
    let st = t.path().join("huge.safetensors");
    std::fs::write(&st, bytes).unwrap();
    check(
        &pga_args(s(&st), s(&w), "2", &[]),
        &[
            "huge.safetensors",
            "tensor `hidden_states` declares F32 shape [4096, 65536, 65536] (70368744177664 bytes)",
            "data_offsets [0, 16] span 16 bytes",
        ],
        None,
    );
}

#[test]
fn malformed_files_name_the_file_and_problem() {
    let t = tempfile::tempdir().unwrap();
    let w = npy(t.path(), "w.npy", 0, 20, D, value);
    let cases: Vec<(PathBuf, &str)> = vec![
        (
            raw_npy(
                t.path(),
                "obj.npy",
                "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }",
                &[0u8; 16],
            ),
            "object arrays are not supported",
        ),
        (
            raw_npy(
                t.path(),
                "dtype.npy",
                "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }",
                &[0u8; 16],
            ),
            "'<c8'",
        ),
        (
            {
                let p = t.path().join("magic.npy");
                std::fs::write(&p, b"PK\x03\x04 not numpy at all").unwrap();
                p
            },
            "magic",
        ),
        (
            {
                let p = t.path().join("empty.safetensors");
                std::fs::write(&p, b"").unwrap();
                p
            },
            "invalid safetensors file",
        ),
    ];
    for (path, fragment) in &cases {
        check(
            &pga_args(s(path), s(&w), "2", &[]),
            &[s(path), fragment],
            None,
        );
    }
}

#[test]
fn manifest_with_huge_layer_count_is_refused_before_planning() {
    // Regression (issue 8 review of the manifest fuzz target): `n_layers = 4000000000` used to
    // allocate a 32 GB layer list while planning; a synthetic `n_layers` likewise.
    let t = tempfile::tempdir().unwrap();
    let m = t.path().join("study.toml");
    std::fs::write(
        &m,
        "[[model]]\nlabel = \"m\"\nfamily = \"f\"\nd = 16\nn_layers = 4000000000\nreadout = \"w.npy\"\n\
         [[model.checkpoint]]\nname = \"a\"\nactivations = \"a.npy\"\n",
    )
    .unwrap();
    let out = t.path().join("out");
    check(
        &["sweep", "--manifest", s(&m), "--out", s(&out)],
        &["study.toml", "n_layers = 4000000000 must be in 1..=4096"],
        None,
    );
    std::fs::write(&m, "[synthetic]\nn_layers = 100000000\n").unwrap();
    check(
        &["sweep", "--manifest", s(&m), "--out", s(&out)],
        &[
            "study.toml",
            "synthetic",
            "n_layers = 100000000 is above 4096",
        ],
        None,
    );
    assert!(!out.join("plan.json").exists());
}

/// `--device`: an unknown name is refused by the flag's parser; a CUDA device this machine
/// does not have (no driver or libraries, or fewer devices: index 99) fails before the inputs
/// are read (the activations named do not exist), naming the device, and writes nothing.
#[test]
fn device_that_is_unknown_or_absent() {
    let t = tempfile::tempdir().unwrap();
    let missing = t.path().join("not-read.npy");
    let out = t.path().join("out.csv");
    check(
        &pga_args(
            s(&missing),
            s(&missing),
            "2",
            &["--device", "gpu", "--out", s(&out)],
        ),
        &["unknown device `gpu`", "cpu, cuda", "cuda:N"],
        Some((&out, None)),
    );
    check(
        &pga_args(
            s(&missing),
            s(&missing),
            "2",
            &["--device", "cuda:99", "--out", s(&out)],
        ),
        &["device cuda:99: "],
        Some((&out, None)),
    );
    let run = repgeom(&[
        "metrics",
        "--acts",
        s(&missing),
        "--all",
        "--device",
        "cuda:99",
    ]);
    let stderr = &run.stderr;
    assert_eq!(run.code, 2, "{stderr}");
    assert!(stderr.contains("device cuda:99: "), "{stderr}");
    assert!(
        !stderr.contains("not-read.npy"),
        "the inputs were read first: {stderr}"
    );
    let run = repgeom(&[
        "compare",
        "--a",
        s(&missing),
        "--b",
        s(&missing),
        "--device",
        "cuda:99",
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("device cuda:99: "), "{}", run.stderr);
    assert!(!run.stderr.contains("not-read.npy"), "{}", run.stderr);
    // extract: the device is opened and --dtype read before the text or the model is read.
    let extract = |extra: &[&str]| {
        let mut a = vec![
            "extract",
            "--model",
            s(&missing),
            "--text",
            s(&missing),
            "--out",
            s(&out),
        ];
        a.extend_from_slice(extra);
        repgeom(&a)
    };
    for (extra, want) in [
        (&["--device", "cuda:99"][..], "device cuda:99: "),
        (
            &["--dtype", "bf16"][..],
            "unknown dtype `bf16`: expected f32, stored",
        ),
    ] {
        let run = extract(extra);
        assert_eq!(run.code, 2, "{extra:?}: {}", run.stderr);
        assert!(run.stderr.contains(want), "{extra:?}: {}", run.stderr);
        assert!(!run.stderr.contains("not-read.npy"), "{}", run.stderr);
        assert!(!out.exists());
    }
}
