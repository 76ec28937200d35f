//! read_activations: every layout and dtype, layer selection, shapes.

use std::io::Write;
use std::path::Path;

use repgeom_io::{Activations, read_activations, write_npy_f32, write_safetensors};

use crate::{EXACT, acts_formula, assert_close, bf16_bytes, fixture, npy_image, redact, st_image};

/// Reads `path` and checks each layer's number, tensor name, shape and values
/// against `layer + (i - j) / 8` (the fixtures' formula), shifted by `value_offset(layer)`.
#[track_caller]
fn check(
    path: &Path,
    layers: Option<&[usize]>,
    expect: &[(usize, &str)],
    n: usize,
    d: usize,
    value_layer: fn(usize) -> usize,
) -> Activations {
    let a = read_activations(path, layers).unwrap_or_else(|e| panic!("{e}"));
    let got: Vec<(usize, &str)> = a
        .layers
        .iter()
        .map(|l| (l.layer, l.tensor.as_str()))
        .collect();
    assert_eq!(got, expect);
    for l in &a.layers {
        assert_eq!((l.acts.rows, l.acts.cols), (n, d), "layer {}", l.layer);
        assert_close(
            &l.acts.data,
            &acts_formula(value_layer(l.layer), n, d),
            EXACT,
        );
    }
    a
}

fn same(l: usize) -> usize {
    l
}

fn stacked(l_count: usize, n: usize, d: usize) -> Vec<f32> {
    (0..l_count)
        .flat_map(|l| acts_formula(l, n, d))
        .map(|x| x as f32)
        .collect()
}

#[test]
fn npy_3d_all_and_subset_in_requested_order() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("acts.npy");
    write_npy_f32(&p, &[4, 5, 3], &stacked(4, 5, 3)).unwrap();
    check(
        &p,
        None,
        &[
            (0, "array[0]"),
            (1, "array[1]"),
            (2, "array[2]"),
            (3, "array[3]"),
        ],
        5,
        3,
        same,
    );
    check(
        &p,
        Some(&[3, 1]),
        &[(3, "array[3]"), (1, "array[1]")],
        5,
        3,
        same,
    );
}

#[test]
fn npy_2d_is_layer_zero() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("one.npy");
    write_npy_f32(&p, &[6, 2], &stacked(1, 6, 2)).unwrap();
    check(&p, None, &[(0, "array")], 6, 2, same);
}

#[test]
fn npy_f16_fixture_from_numpy() {
    check(
        &fixture("acts_f16.npy"),
        None,
        &[(0, "array[0]"), (1, "array[1]"), (2, "array[2]")],
        4,
        3,
        same,
    );
}

#[test]
fn npy_fortran_order_3d_is_transposed_correctly() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f.npy");
    let (l, n, d) = (2, 3, 4);
    let c = stacked(l, n, d);
    // Column-major: element (a, b, c) at a + l*(b + n*c).
    let mut f = vec![0f32; c.len()];
    for a in 0..l {
        for b in 0..n {
            for k in 0..d {
                f[a + l * (b + n * k)] = c[(a * n + b) * d + k];
            }
        }
    }
    std::fs::write(
        &p,
        npy_image("<f4", true, &[l, n, d], &crate::f32_bytes(&f)),
    )
    .unwrap();
    check(&p, None, &[(0, "array[0]"), (1, "array[1]")], n, d, same);
}

#[test]
fn npz_compressed_fixture_sorted_by_layer_number() {
    // The archive lists layer_10, layer_2, layer_0: numeric, not lexical, order is expected.
    check(
        &fixture("acts_layers.npz"),
        None,
        &[(0, "layer_0"), (2, "layer_2"), (10, "layer_10")],
        4,
        3,
        same,
    );
}

#[test]
fn npz_stored_arr_names_from_rust() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.npz");
    let mut z = zip::ZipWriter::new(std::fs::File::create(&p).unwrap());
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for l in [1usize, 0] {
        z.start_file(format!("arr_{l}.npy"), opts).unwrap();
        let v: Vec<f32> = acts_formula(l, 2, 2)
            .into_iter()
            .map(|x| x as f32)
            .collect();
        z.write_all(&npy_image("<f4", false, &[2, 2], &crate::f32_bytes(&v)))
            .unwrap();
    }
    z.finish().unwrap();
    check(&p, None, &[(0, "arr_0"), (1, "arr_1")], 2, 2, same);

    // A lone [N, d] array without a layer number reads as layer 0, like an .npy file.
    let p = dir.path().join("one.npz");
    let mut z = zip::ZipWriter::new(std::fs::File::create(&p).unwrap());
    z.start_file("acts.npy", opts).unwrap();
    let v: Vec<f32> = acts_formula(0, 3, 2)
        .into_iter()
        .map(|x| x as f32)
        .collect();
    z.write_all(&npy_image("<f4", false, &[3, 2], &crate::f32_bytes(&v)))
        .unwrap();
    z.finish().unwrap();
    check(&p, None, &[(0, "acts")], 3, 2, same);
}

#[test]
fn safetensors_bf16_per_layer_fixture_ignores_other_tensors() {
    check(
        &fixture("acts_bf16.safetensors"),
        Some(&[2]),
        &[(2, "hidden_states.2")],
        4,
        3,
        same,
    );
    check(
        &fixture("acts_bf16.safetensors"),
        None,
        &[
            (0, "hidden_states.0"),
            (1, "hidden_states.1"),
            (2, "hidden_states.2"),
        ],
        4,
        3,
        same,
    );
}

#[test]
fn safetensors_stacked_hidden_states_f32() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.safetensors");
    let data = stacked(3, 2, 4);
    let ids = [0f32, 1.0];
    write_safetensors(
        &p,
        &[
            ("hidden_states".into(), vec![3, 2, 4], &data),
            ("ids".into(), vec![2], &ids),
        ],
        &Default::default(),
    )
    .unwrap();
    check(&p, Some(&[1]), &[(1, "hidden_states[1]")], 2, 4, same);
}

#[test]
fn safetensors_layer_dot_names_and_transformer_lens() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("layer.safetensors");
    let t = |l: usize| {
        bf16_bytes(
            &acts_formula(l, 2, 3)
                .into_iter()
                .map(|x| x as f32)
                .collect::<Vec<_>>(),
        )
    };
    std::fs::write(
        &p,
        st_image(&[
            ("layer.0", "BF16", vec![2, 3], t(0)),
            ("layer.12", "BF16", vec![2, 3], t(12)),
        ]),
    )
    .unwrap();
    check(&p, None, &[(0, "layer.0"), (12, "layer.12")], 2, 3, same);

    // TransformerLens: blocks.{i}.hook_resid_post is the output of block i = HF hidden_states[i + 1].
    let p = dir.path().join("tl.safetensors");
    std::fs::write(
        &p,
        st_image(&[
            ("blocks.0.hook_resid_post", "BF16", vec![2, 3], t(0)),
            ("blocks.1.hook_resid_post", "BF16", vec![2, 3], t(1)),
            ("blocks.1.hook_resid_pre", "BF16", vec![2, 3], t(7)),
        ]),
    )
    .unwrap();
    check(
        &p,
        None,
        &[
            (1, "blocks.0.hook_resid_post"),
            (2, "blocks.1.hook_resid_post"),
        ],
        2,
        3,
        |l| l - 1,
    );
}

#[test]
fn layout_errors_name_file_tensor_and_layers() {
    let dir = tempfile::tempdir().unwrap();
    let p3 = dir.path().join("acts.npy");
    write_npy_f32(&p3, &[2, 2, 2], &[0.0; 8]).unwrap();
    let p1 = dir.path().join("flat.npy");
    write_npy_f32(&p1, &[8], &[0.0; 8]).unwrap();
    let pi = dir.path().join("ints.npy");
    std::fs::write(&pi, npy_image("<i8", false, &[2, 2], &[0u8; 32])).unwrap();
    let pm = dir.path().join("mixed.safetensors");
    std::fs::write(
        &pm,
        st_image(&[
            ("layer.0", "F32", vec![2, 2], vec![0; 16]),
            ("layer.1", "F32", vec![3, 2], vec![0; 24]),
        ]),
    )
    .unwrap();
    let pn = dir.path().join("none.safetensors");
    std::fs::write(
        &pn,
        st_image(&[("weights", "F32", vec![2, 2], vec![0; 16])]),
    )
    .unwrap();
    let npz = fixture("acts_layers.npz");
    let cases: Vec<(&Path, Option<&[usize]>)> = vec![
        (&p3, Some(&[0, 5])),
        (&p3, Some(&[1, 1])),
        (&p1, None),
        (&pi, None),
        (&pm, None),
        (&pn, None),
        (&npz, Some(&[1])),
        (Path::new("acts.txt"), None),
    ];
    let msgs: Vec<String> = cases
        .into_iter()
        .map(|(p, l)| match read_activations(p, l) {
            Ok(a) => format!("unexpected success: {} layers", a.layers.len()),
            Err(e) => redact(&e.to_string(), Some(dir.path())),
        })
        .collect();
    insta::assert_snapshot!(msgs.join("\n"));
}
