//! Names from outside the command line (`repgeom_io::RelPath`): whatever bytes come in, an
//! accepted name joined below a folder stays below it (lexically: no `..`, no root, no
//! prefix), and git's ref rules only ever refuse more.
#![no_main]

use std::path::{Component, Path};

use libfuzzer_sys::fuzz_target;
use repgeom_io::RelPath;

fuzz_target!(|data: &[u8]| {
    let Ok(name) = std::str::from_utf8(data) else {
        return;
    };
    let base = Path::new("/base/folder");
    let file = RelPath::new(name);
    if let Ok(p) = &file {
        let joined = p.under(base);
        assert!(joined.starts_with(base), "{name:?} left the folder");
        assert!(
            joined
                .strip_prefix(base)
                .expect("below base")
                .components()
                .all(|c| matches!(c, Component::Normal(_))),
            "{name:?} has a component that is not a plain name"
        );
    }
    if RelPath::git_ref(name).is_ok() {
        assert!(file.is_ok(), "{name:?}: a ref name must be a file name too");
    }
});
