//! read_readout and open_checkpoint: architecture rules, tied fallback, vocab rows, shards.

use std::path::Path;

use repgeom_io::{ReadoutOptions, open_checkpoint, read_readout, write_npy_f32};

use crate::{EXACT, assert_close, fixture, redact};

/// Reads a readout and returns a one-line summary; checks values with `value(v, j)`.
#[track_caller]
fn check(path: &Path, opts: &ReadoutOptions, value: fn(usize, usize) -> f64) -> String {
    let r = read_readout(path, opts).unwrap_or_else(|e| panic!("{e}"));
    let expected: Vec<f64> = (0..r.matrix.rows)
        .flat_map(|v| (0..r.matrix.cols).map(move |j| value(v, j)))
        .collect();
    assert_close(&r.matrix.data, &expected, EXACT);
    format!(
        "tensor={} shape=[{}, {}] rows_in_file={} note={}",
        r.tensor,
        r.matrix.rows,
        r.matrix.cols,
        r.rows_in_file,
        r.note.as_deref().unwrap_or("-")
    )
}

fn head(v: usize, j: usize) -> f64 {
    (v as f64 - 2.0 * j as f64) / 8.0
}

fn embed(v: usize, j: usize) -> f64 {
    (v as f64 + j as f64) / 8.0
}

#[test]
fn neox_sharded_bf16_uses_embed_out_and_tokenizer_vocab() {
    let s = check(&fixture("tiny_neox"), &ReadoutOptions::default(), head);
    insta::assert_snapshot!(s, @"tensor=embed_out.weight shape=[12, 4] rows_in_file=16 note=using 12 rows from tokenizer.json (file has 16)");
}

#[test]
fn explicit_vocab_rows_and_tensor_override() {
    let opts = ReadoutOptions {
        vocab_rows: Some(14),
        tensor: None,
    };
    let s = check(&fixture("tiny_neox"), &opts, head);
    insta::assert_snapshot!(s, @"tensor=embed_out.weight shape=[14, 4] rows_in_file=16 note=using 14 rows as requested (file has 16)");
    let opts = ReadoutOptions {
        vocab_rows: Some(16),
        tensor: Some("gpt_neox.embed_in.weight".into()),
    };
    let s = check(&fixture("tiny_neox"), &opts, embed);
    insta::assert_snapshot!(s, @"tensor=gpt_neox.embed_in.weight shape=[16, 4] rows_in_file=16 note=-");
}

#[test]
fn tied_f16_checkpoint_falls_back_to_input_embedding() {
    let s = check(&fixture("tiny_tied"), &ReadoutOptions::default(), embed);
    insta::assert_snapshot!(s, @"tensor=model.embed_tokens.weight shape=[8, 4] rows_in_file=8 note=tied embeddings: using the input embedding `model.embed_tokens.weight` as W_U");
}

#[test]
fn npy_and_safetensors_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("wu.npy");
    let data: Vec<f32> = (0..5)
        .flat_map(|v| (0..3).map(move |j| head(v, j) as f32))
        .collect();
    write_npy_f32(&p, &[5, 3], &data).unwrap();
    let s = check(
        &p,
        &ReadoutOptions {
            vocab_rows: Some(4),
            tensor: None,
        },
        head,
    );
    insta::assert_snapshot!(s, @"tensor=array shape=[4, 3] rows_in_file=5 note=using 4 rows as requested (file has 5)");
    let p = dir.path().join("wu.safetensors");
    let bias = [0f32; 5];
    repgeom_io::write_safetensors(
        &p,
        &[
            ("lm_head.bias".into(), vec![5], &bias),
            ("lm_head.weight".into(), vec![5, 3], &data),
        ],
        &Default::default(),
    )
    .unwrap();
    let s = check(&p, &ReadoutOptions::default(), head);
    insta::assert_snapshot!(s, @"tensor=lm_head.weight shape=[5, 3] rows_in_file=5 note=-");
}

#[test]
fn checkpoint_tensor_access() {
    let ck = open_checkpoint(&fixture("tiny_neox")).unwrap();
    assert_eq!(ck.architecture, "GPTNeoXForCausalLM");
    assert!(!ck.tie_word_embeddings);
    assert_eq!(
        ck.tensor_names(),
        vec![
            "embed_out.weight",
            "gpt_neox.embed_in.weight",
            "gpt_neox.final_layer_norm.weight"
        ]
    );
    assert!(ck.has_tensor("gpt_neox.final_layer_norm.weight"));
    let (shape, data) = ck
        .read_tensor_f32("gpt_neox.final_layer_norm.weight")
        .unwrap();
    assert_eq!(shape, vec![4]);
    assert_close(&data, &[1.0; 4], EXACT);
    assert_eq!(ck.tensor_shape("embed_out.weight"), Some(vec![16, 4]));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn checkpoint_errors_name_shard_tensor_and_rows() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing_shard");
    copy_dir(&fixture("tiny_neox"), &missing);
    std::fs::remove_file(missing.join("model-00002-of-00002.safetensors")).unwrap();
    let untied = dir.path().join("untied_no_head");
    copy_dir(&fixture("tiny_tied"), &untied);
    std::fs::write(
        untied.join("config.json"),
        r#"{"architectures":["LlamaForCausalLM"],"tie_word_embeddings":false}"#,
    )
    .unwrap();
    let no_config = dir.path().join("no_config");
    std::fs::create_dir(&no_config).unwrap();
    let neox = fixture("tiny_neox");
    let cases: Vec<(&Path, ReadoutOptions)> = vec![
        (&missing, ReadoutOptions::default()),
        (&untied, ReadoutOptions::default()),
        (&no_config, ReadoutOptions::default()),
        (
            &neox,
            ReadoutOptions {
                vocab_rows: Some(17),
                tensor: None,
            },
        ),
        (
            &neox,
            ReadoutOptions {
                vocab_rows: None,
                tensor: Some("lm_head.weight".into()),
            },
        ),
        (
            &neox,
            ReadoutOptions {
                vocab_rows: None,
                tensor: Some("gpt_neox.final_layer_norm.weight".into()),
            },
        ),
    ];
    let msgs: Vec<String> = cases
        .into_iter()
        .map(|(p, o)| match read_readout(p, &o) {
            Ok(r) => format!("unexpected success: {}", r.tensor),
            Err(e) => redact(&e.to_string(), Some(dir.path())),
        })
        .collect();
    insta::assert_snapshot!(msgs.join("\n"));
}

/// The final norm's gain by architecture, folding it into W_U, centring W_U's rows, and a
/// checkpoint without a gain (OLMo-1's non-parametric LayerNorm) or a plain file as errors.
#[test]
fn final_norm_gain_fold_and_row_centring() {
    let extract = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/extract");
    let g = repgeom_io::read_final_norm_gain(&fixture("tiny_neox")).unwrap();
    assert_eq!(g.tensor, "gpt_neox.final_layer_norm.weight");
    assert_eq!(g.gain, vec![1.0; 4]);
    let g = repgeom_io::read_final_norm_gain(&extract.join("llama_tied")).unwrap();
    assert_eq!((g.tensor.as_str(), g.gain.len()), ("model.norm.weight", 32));
    let err = repgeom_io::read_final_norm_gain(&extract.join("olmo_clip"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("final norm")
            && err.contains("model.norm.weight")
            && err.contains("no gain to fold"),
        "{err}"
    );
    let err = repgeom_io::read_final_norm_gain(&fixture("tiny_neox/config.json"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("checkpoint directory"), "{err}");

    let mut r = read_readout(&fixture("tiny_neox"), &ReadoutOptions::default()).unwrap();
    let gamma = [2.0f32, 0.5, -1.0, 0.0];
    r.fold_gain(&gamma, "gamma").unwrap();
    let expected: Vec<f64> = (0..12)
        .flat_map(|v| (0..4).map(move |j| head(v, j) * f64::from(gamma[j])))
        .collect();
    assert_close(&r.matrix.data, &expected, EXACT);
    let err = r.fold_gain(&[1.0; 3], "gamma").unwrap_err().to_string();
    assert!(err.contains("gamma") && err.contains("[4]"), "{err}");

    let mut r = read_readout(&fixture("tiny_neox"), &ReadoutOptions::default()).unwrap();
    r.center_rows();
    // head(v, j) = (v − 2j)/8; the mean over v = 0..12 is (5.5 − 2j)/8.
    let expected: Vec<f64> = (0..12)
        .flat_map(|v| (0..4).map(move |_| (v as f64 - 5.5) / 8.0))
        .collect();
    assert_close(&r.matrix.data, &expected, EXACT);
}

/// `read_readout_prepared` is the read, the fold and the centring in that order (the same
/// numbers as doing them by hand), and refuses a non-finite W_U naming file, tensor and cell.
#[test]
fn prepared_readout_is_read_fold_centre_then_a_finite_check() {
    use repgeom_io::{ReadoutPrep, read_readout_prepared};
    let prep = ReadoutPrep {
        fold_norm: true,
        center: true,
        ..ReadoutPrep::default()
    };
    let got = read_readout_prepared(&fixture("tiny_neox"), &prep).unwrap();
    let mut by_hand = read_readout(&fixture("tiny_neox"), &ReadoutOptions::default()).unwrap();
    let g = repgeom_io::read_final_norm_gain(&fixture("tiny_neox")).unwrap();
    by_hand.fold_gain(&g.gain, &g.tensor).unwrap();
    by_hand.center_rows();
    assert_eq!(got.matrix.data, by_hand.matrix.data);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.npy");
    let mut data = vec![0.5f32; 5 * 3];
    data[2 * 3 + 1] = f32::INFINITY;
    write_npy_f32(&path, &[5, 3], &data).unwrap();
    let err = read_readout_prepared(&path, &ReadoutPrep::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("w.npy") && err.contains("[5, 3]") && err.contains("row 2, column 1"),
        "{err}"
    );
    // Folding needs a checkpoint directory; a bare matrix file says where the gain was sought.
    let err = read_readout_prepared(
        &path,
        &ReadoutPrep {
            fold_norm: true,
            ..ReadoutPrep::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("final norm"), "{err}");
}

/// A hub snapshot with only the readout's shard (issue 11): the readout reads as from the full
/// checkpoint; a tensor of the absent shard is an error naming the shard, not a wrong fallback.
#[test]
fn readout_from_a_checkpoint_missing_other_shards_issue_11() {
    let dir = tempfile::tempdir().unwrap();
    let partial = dir.path().join("readout_shard_only");
    copy_dir(&fixture("tiny_neox"), &partial);
    std::fs::remove_file(partial.join("model-00001-of-00002.safetensors")).unwrap();
    let full = read_readout(&fixture("tiny_neox"), &ReadoutOptions::default()).unwrap();
    let part = read_readout(&partial, &ReadoutOptions::default()).unwrap();
    assert_eq!(part.tensor, full.tensor);
    assert_eq!(part.matrix.data, full.matrix.data);
    let e = repgeom_io::read_final_norm_gain(&partial).unwrap_err();
    insta::assert_snapshot!(redact(&e.to_string(), Some(dir.path())), @"<tmp>/readout_shard_only/model.safetensors.index.json: shard `model-00001-of-00002.safetensors` listed in the index is missing");
    // open_checkpoint itself stays strict: extraction needs every shard.
    assert!(open_checkpoint(&partial).is_err());
}

/// `read_float_tensors`: every float tensor at its stored precision (bf16 and f16 as they are),
/// the values `read_tensor_f32` widens, in name order, the same tensors and hash at any thread
/// count.
#[test]
fn float_tensors_at_their_stored_precision() {
    use repgeom_io::FloatValues;
    let kind = |v: &FloatValues| match v {
        FloatValues::F16(_) => "f16",
        FloatValues::Bf16(_) => "bf16",
        FloatValues::F32(_) => "f32",
    };
    for (name, stored) in [("tiny_neox", "bf16"), ("tiny_tied", "f16")] {
        let ck = open_checkpoint(&fixture(name)).unwrap();
        let read = |threads: usize, hash: bool| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| ck.read_float_tensors(hash).unwrap())
        };
        let (tensors, digest) = read(1, true);
        assert_eq!(
            tensors.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
            ck.tensor_names(),
            "{name}"
        );
        for t in &tensors {
            let (shape, widened) = ck.read_tensor_f32(&t.name).unwrap();
            assert_eq!(t.shape, shape, "{name} {}", t.name);
            assert_eq!(t.values.to_f32(), widened, "{name} {}", t.name);
            if t.shape.len() == 2 {
                assert_eq!(kind(&t.values), stored, "{name} {}", t.name);
            }
        }
        let digest = digest.expect("every shard present");
        assert_eq!(digest.sha256.len(), 64);
        for threads in [2, 3] {
            let (again, d) = read(threads, true);
            assert_eq!(again, tensors, "{name} at {threads} threads");
            assert_eq!(d.as_ref(), Some(&digest), "{name} at {threads} threads");
        }
        let (unhashed, none) = read(3, false);
        assert_eq!((unhashed, none), (tensors, None), "{name} without the hash");
    }
}
