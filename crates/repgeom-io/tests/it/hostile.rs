//! A local checkpoint whose index names a shard outside its folder is refused before anything
//! is opened: every name of `fixtures/hub/hostile-names.json`, through every reader of a
//! checkpoint folder.

use std::path::{Path, PathBuf};

use repgeom_io::{Error, ReadoutOptions, open_checkpoint, open_checkpoint_partial, read_readout};

use crate::fixture;

/// One reader of a checkpoint folder, its result reduced to success or the error.
type Reader<'a> = Box<dyn Fn() -> repgeom_io::Result<()> + 'a>;

/// `tiny_neox` copied to `<tmp>/a/b/ckpt`, its index naming `shard` for the readout tensor, and
/// the real shard's bytes placed at every path above the folder that `shard` could reach
/// (`<tmp>/a/b/x`, `<tmp>/a/x`, ...), so that a reader that followed the name would succeed.
fn checkpoint_naming(tmp: &Path, shard: &str) -> PathBuf {
    let dir = tmp.join("a/b/ckpt");
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(fixture("tiny_neox")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    let index = serde_json::json!({
        "metadata": {"total_size": 272},
        "weight_map": {
            "gpt_neox.embed_in.weight": "model-00001-of-00002.safetensors",
            "gpt_neox.final_layer_norm.weight": "model-00001-of-00002.safetensors",
            "embed_out.weight": shard,
        }
    });
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let bytes = std::fs::read(fixture("tiny_neox/model-00002-of-00002.safetensors")).unwrap();
    for base in [tmp.join("a/b"), tmp.join("a"), tmp.to_path_buf()] {
        if let Some(rel) = shard.strip_prefix("../")
            && !rel.contains('\0')
            && rel.len() < 200
        {
            let target = base.join(rel.trim_start_matches("../"));
            if target.starts_with(tmp) && !target.ends_with("..") {
                let _ = std::fs::create_dir_all(target.parent().unwrap());
                let _ = std::fs::write(&target, &bytes);
            }
        }
    }
    dir
}

#[test]
fn a_checkpoint_index_naming_a_file_outside_its_folder_is_refused() {
    let names = repgeom_testkit::hostile_names();
    assert!(names.len() >= 20, "the table has {} names", names.len());
    for name in &names {
        let e = repgeom_io::RelPath::new(name).expect_err(name);
        assert!(!e.reason.is_empty());
        assert!(
            repgeom_io::RelPath::git_ref(name).is_err(),
            "{name:?} as a ref"
        );
        let tmp = tempfile::tempdir().unwrap();
        let dir = checkpoint_naming(tmp.path(), name);
        let readers: [(&str, Reader<'_>); 3] = [
            (
                "open_checkpoint",
                Box::new(|| open_checkpoint(&dir).map(|_| ())),
            ),
            (
                "open_checkpoint_partial",
                Box::new(|| open_checkpoint_partial(&dir).map(|_| ())),
            ),
            (
                "read_readout",
                Box::new(|| read_readout(&dir, &ReadoutOptions::default()).map(|_| ())),
            ),
        ];
        for (reader, read) in readers {
            match read() {
                Err(Error::UnsafeName {
                    file, name: bad, ..
                }) => {
                    assert!(
                        file.ends_with("model.safetensors.index.json"),
                        "{reader} {name:?}"
                    );
                    assert_eq!(bad.name, name.chars().take(300).collect::<String>());
                }
                other => panic!("{reader} {name:?}: expected UnsafeName, got {other:?}"),
            }
        }
    }
}

#[test]
fn the_refusal_names_the_index_the_name_and_the_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = checkpoint_naming(tmp.path(), "../../../../escaped-00001.safetensors");
    let e = open_checkpoint(&dir).unwrap_err().to_string();
    let e = e.replace(&tmp.path().display().to_string(), "<tmp>");
    insta::assert_snapshot!(e, @"<tmp>/a/b/ckpt/model.safetensors.index.json: refused the file name `../../../../escaped-00001.safetensors` has a `..` component: a name there must stay inside <tmp>/a/b/ckpt");
}

/// A shard in a subfolder of the checkpoint is inside it: read as before.
#[test]
fn a_shard_in_a_subfolder_is_inside() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = checkpoint_naming(tmp.path(), "shards/model-00002-of-00002.safetensors");
    std::fs::create_dir_all(dir.join("shards")).unwrap();
    std::fs::rename(
        dir.join("model-00002-of-00002.safetensors"),
        dir.join("shards/model-00002-of-00002.safetensors"),
    )
    .unwrap();
    let a = read_readout(&dir, &ReadoutOptions::default()).unwrap();
    let b = read_readout(&fixture("tiny_neox"), &ReadoutOptions::default()).unwrap();
    assert_eq!(a.matrix.data, b.matrix.data);
}
