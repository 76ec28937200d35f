//! [`RelPath`]: a name from outside the user's command line (a hub listing, an index file, a
//! revision) that is safe to join below a folder.
//!
//! A repository, a hub or a shared manifest decides these names, so they are untrusted: a shard
//! called `../../.bashrc` or a revision called `../../x` must not make repgeom write or read
//! outside the folder the name is joined to. The checks are lexical and done once, when the
//! value is built; the only way to put such a name below a folder is [`RelPath::under`], so a
//! new call site cannot forget them.

use std::fmt;
use std::path::{Path, PathBuf};

/// The longest name accepted, in bytes (Linux's `PATH_MAX`).
pub const MAX_NAME_BYTES: usize = 4096;
/// The longest component accepted, in bytes (Linux's `NAME_MAX`).
pub const MAX_COMPONENT_BYTES: usize = 255;

/// A relative path of `/`-separated components that stays below whatever folder it is joined
/// to: not empty, not absolute, no drive prefix (`C:`), no `.`, `..` or empty component, no
/// backslash, NUL or other control character, at most [`MAX_NAME_BYTES`] bytes and
/// [`MAX_COMPONENT_BYTES`] per component.
///
/// [`RelPath::new`] takes a file name (hub listings, index files);
/// [`RelPath::git_ref`] takes a branch or tag name under git's stricter rules
/// (`git check-ref-format`). The checks are the same on every platform.
///
/// ```
/// use std::path::Path;
/// use repgeom_io::RelPath;
/// let shard = RelPath::new("model-00001-of-00002.safetensors").unwrap();
/// assert_eq!(shard.under(Path::new("/snap")), Path::new("/snap/model-00001-of-00002.safetensors"));
/// let err = RelPath::new("../../.bashrc").unwrap_err();
/// assert_eq!(err.to_string(), "`../../.bashrc` has a `..` component");
/// assert!(RelPath::git_ref("refs/pr/1").is_ok());
/// assert!(RelPath::git_ref("step1000/../../x").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelPath(String);

/// Why a name was refused: the name (escaped for printing) and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{}` {reason}", name.escape_debug())]
pub struct BadName {
    /// The name as given (at most its first 300 characters).
    pub name: String,
    /// The rule it breaks.
    pub reason: &'static str,
}

impl RelPath {
    /// A file path inside a folder (`config.json`, `data/train-00000-of-00002.parquet`).
    pub fn new(name: &str) -> Result<Self, BadName> {
        check_path(name).map_err(|reason| bad(name, reason))?;
        Ok(RelPath(name.to_owned()))
    }

    /// A branch or tag name (`main`, `step3000`, `refs/pr/1`, `refs/convert/parquet`) under
    /// git's rules for ref names, as a path below a cache's `refs/` folder.
    pub fn git_ref(name: &str) -> Result<Self, BadName> {
        check_path(name)
            .and_then(|()| check_ref(name))
            .map_err(|reason| bad(name, reason))?;
        Ok(RelPath(name.to_owned()))
    }

    /// The name as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its components.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// `base/<name>`: the one way to put the name below a folder.
    pub fn under(&self, base: &Path) -> PathBuf {
        let mut p = base.to_path_buf();
        for c in self.components() {
            p.push(c);
        }
        p
    }
}

fn bad(name: &str, reason: &'static str) -> BadName {
    BadName {
        name: name.chars().take(300).collect(),
        reason,
    }
}

fn check_path(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("is empty");
    }
    if name.len() > MAX_NAME_BYTES {
        return Err("is longer than 4096 bytes");
    }
    if name.bytes().any(|b| b == 0) {
        return Err("has a NUL byte");
    }
    if name.chars().any(char::is_control) {
        return Err("has a control character");
    }
    if name.contains('\\') {
        return Err("has a backslash");
    }
    if name.starts_with('/') {
        return Err("is absolute");
    }
    let b = name.as_bytes();
    if b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' {
        return Err("has a drive prefix");
    }
    for c in name.split('/') {
        match c {
            "" => return Err("has an empty component"),
            "." => return Err("has a `.` component"),
            ".." => return Err("has a `..` component"),
            _ if c.len() > MAX_COMPONENT_BYTES => {
                return Err("has a component longer than 255 bytes");
            }
            _ => {}
        }
    }
    Ok(())
}

/// `git check-ref-format`'s rules, beyond those of a path.
fn check_ref(name: &str) -> Result<(), &'static str> {
    if name.contains("..") {
        return Err("has `..` (not a git ref name)");
    }
    if name.contains("@{") || name == "@" {
        return Err("has `@{` or is `@` (not a git ref name)");
    }
    if let Some(c) = name
        .chars()
        .find(|c| matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '['))
    {
        return Err(match c {
            ' ' => "has a space (not a git ref name)",
            _ => "has one of `~^:?*[` (not a git ref name)",
        });
    }
    if name.ends_with('.') {
        return Err("ends with `.` (not a git ref name)");
    }
    for c in name.split('/') {
        if c.starts_with('.') {
            return Err("has a component starting with `.` (not a git ref name)");
        }
        if c.ends_with(".lock") {
            return Err("has a component ending with `.lock` (not a git ref name)");
        }
    }
    Ok(())
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for RelPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for RelPath {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for RelPath {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for RelPath {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for RelPath {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl From<RelPath> for String {
    fn from(p: RelPath) -> String {
        p.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_names_pass_and_join_below() {
        for n in [
            "config.json",
            "model-00001-of-00002.safetensors",
            "data/train-00000-of-00002.parquet",
            "wikitext-103-raw-v1/test/0000.parquet",
            "%2e%2e/x",
            "...",
            "a..b",
            ".gitattributes",
        ] {
            let p = RelPath::new(n).unwrap();
            let base = Path::new("/base");
            assert!(p.under(base).starts_with(base));
            assert_eq!(p.under(base).components().count(), 2 + n.split('/').count());
        }
        for r in [
            "main",
            "step3000",
            "v1.0",
            "refs/pr/1",
            "refs/convert/parquet",
        ] {
            RelPath::git_ref(r).unwrap();
        }
        for r in [
            "a..b", "x.lock", "a b", "a:b", "a@{1}", "@", ".hidden", "x.",
        ] {
            assert!(RelPath::git_ref(r).is_err(), "{r}");
        }
    }
}
