//! The README's "Use it as a library" program is the one CI builds: its code blocks are
//! `examples/library/Cargo.toml` and `examples/library/src/main.rs`, byte for byte.

use std::path::Path;

/// The fenced blocks of `lang` in `text` after the heading `heading`, in order.
fn blocks<'a>(text: &'a str, heading: &str, lang: &str) -> Vec<&'a str> {
    let start = text.find(heading).expect("the README has the section");
    let section = &text[start + heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let fence = format!("```{lang}\n");
    section
        .match_indices(&fence)
        .map(|(i, _)| {
            let body = &section[i + fence.len()..];
            &body[..body.find("```").expect("closed fence")]
        })
        .collect()
}

#[test]
fn readme_library_example_is_the_built_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for (lang, file) in [
        ("toml", "examples/library/Cargo.toml"),
        ("rust", "examples/library/src/main.rs"),
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        assert_eq!(
            blocks(&readme, "## Use it as a library", lang),
            [text.as_str()],
            "README's {lang} block differs from {file}: copy the file into the README"
        );
    }
}
