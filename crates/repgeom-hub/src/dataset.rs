//! Datasets by name: which parquet files of a hub dataset hold a (config, split), and
//! downloading them into the hub cache (`datasets--org--name/{refs,blobs,snapshots}`).
//!
//! The data files of a config and split are chosen as the `datasets` library chooses them
//! for a parquet dataset (`src/datasets/data_files.py` and `utils/metadata.py` of
//! huggingface/datasets, read at commit b7cb10b0e38ab8bbefdb142d0279bc85ac8c7ab8):
//!
//! 1. the `configs:` section of `README.md`'s YAML header, when there is one: each
//!    `config_name` with its `data_files` (a glob or list of globs: split `train`; or a list
//!    of `{split, path}`), the default config being the one marked `default: true`, else the
//!    one named `default`, else the only one (`MetadataConfigs.get_default_config_name`);
//! 2. else `data/{split}-NNNNN-of-NNNNN*.parquet` (`SPLIT_PATTERN_SHARDED`): one config,
//!    `default`, with a split per name;
//! 3. else one directory level per config, `{config}/{split}-NNNNN-of-NNNNN.parquet` (what
//!    `push_to_hub` writes for a named config) or `{config}/{split}/NNNN.parquet` (the hub's
//!    parquet conversion at revision `refs/convert/parquet`);
//! 4. else one config, `default`, whose splits are found by keyword in file or folder names
//!    (`SPLIT_KEYWORDS`: `train`/`training`, `validation`/`valid`/`dev`/`val`,
//!    `test`/`testing`/`eval`/`evaluation`, set off by `-._ ` or digits), all files being
//!    `train` when none has a keyword.
//!
//! Only `*.parquet` files are data files here; a split's files are in path order.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use repgeom_io::RelPath;

use crate::cache::{RepoCache, RepoType, is_commit, ref_name};
use crate::client::{DownloadProgress, Hub, RepoFile, check_id};
use crate::{Error, Result};

/// A dataset named in a manifest: `{ hub = "Salesforce/wikitext", config =
/// "wikitext-103-raw-v1", split = "test" }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetRef {
    /// The dataset id, `org/name`.
    pub id: String,
    /// Branch, tag or commit (`main` by default; `refs/convert/parquet` is the hub's parquet
    /// conversion).
    pub revision: String,
    /// The config (subset); `None` is the dataset's default config.
    pub config: Option<String>,
    /// The split (`train`, `test`, ...).
    pub split: String,
}

impl DatasetRef {
    /// `id` at `main`, its default config, split `split`.
    ///
    /// ```
    /// use repgeom_hub::DatasetRef;
    /// let d = DatasetRef::new("fancyzhx/ag_news", "test");
    /// assert_eq!((d.revision.as_str(), d.config), ("main", None));
    /// let w = DatasetRef::new("Salesforce/wikitext", "test").config("wikitext-103-raw-v1");
    /// assert_eq!(w.config.as_deref(), Some("wikitext-103-raw-v1"));
    /// ```
    pub fn new(id: &str, split: &str) -> Self {
        DatasetRef {
            id: id.into(),
            revision: "main".into(),
            config: None,
            split: split.into(),
        }
    }

    /// This dataset with config `config`.
    pub fn config(mut self, config: &str) -> Self {
        self.config = Some(config.into());
        self
    }

    /// This dataset at revision `revision`.
    pub fn revision(mut self, revision: &str) -> Self {
        self.revision = revision.into();
        self
    }
}

/// The parquet files of a dataset's (config, split), in the hub cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetFiles {
    /// The dataset id.
    pub dataset: String,
    /// The revision asked for.
    pub revision: String,
    /// The commit it resolved to.
    pub commit: String,
    /// The config: the one asked for, or the default.
    pub config: String,
    /// The split.
    pub split: String,
    /// `snapshots/<commit>` in the cache.
    pub dir: PathBuf,
    /// The split's parquet files under `dir`, in path order (the order of the rows).
    pub files: Vec<PathBuf>,
}

/// One config of a dataset and its splits' data files, as [`dataset_configs`] finds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataConfig {
    /// The config name (`default` when the dataset does not name its configs).
    pub name: String,
    /// Whether it is the default config.
    pub default: bool,
    /// Split name → its parquet files (repository paths, sorted).
    pub splits: BTreeMap<String, Vec<String>>,
}

/// The configs of a dataset revision with `files` (repository paths) and, if it has one,
/// `readme` (the text of `README.md`), by the rules of the module docs. `readme_path` names
/// the card in errors. An empty answer means no parquet data files.
///
/// ```
/// use repgeom_hub::dataset_configs;
/// let files = ["README.md", "data/test-00000-of-00001.parquet", "data/train-00000-of-00001.parquet"]
///     .map(String::from);
/// let configs = dataset_configs(&files, None, "README.md".as_ref()).unwrap();
/// assert_eq!(configs[0].name, "default");
/// assert_eq!(configs[0].splits["test"], ["data/test-00000-of-00001.parquet"]);
/// ```
pub fn dataset_configs(
    files: &[String],
    readme: Option<&str>,
    readme_path: &Path,
) -> Result<Vec<DataConfig>> {
    let parquet: Vec<&str> = {
        let mut p: Vec<&str> = files
            .iter()
            .map(String::as_str)
            .filter(|f| f.ends_with(".parquet"))
            .collect();
        p.sort();
        p
    };
    if let Some(text) = readme
        && let Some(configs) = card_configs(text).map_err(|reason| Error::Format {
            path: readme_path.to_path_buf(),
            reason,
        })?
    {
        let configs = from_card(&configs, &parquet);
        let any = configs
            .iter()
            .any(|c| c.splits.values().any(|f| !f.is_empty()));
        return Ok(if any { configs } else { Vec::new() });
    }
    if parquet.is_empty() {
        return Ok(Vec::new());
    }
    // 2. data/{split}-NNNNN-of-NNNNN*.parquet
    let sharded: Vec<(&str, &str)> = parquet
        .iter()
        .filter_map(|f| Some((sharded_split(f.strip_prefix("data/")?)?, *f)))
        .collect();
    if !sharded.is_empty() {
        return Ok(vec![one_config("default", true, sharded)]);
    }
    // 3. {config}/{split}-NNNNN-of-NNNNN.parquet or {config}/{split}/NNNN.parquet
    let by_dir: Vec<(&str, &str, &str)> = parquet
        .iter()
        .filter_map(|f| {
            let (config, rest) = f.split_once('/')?;
            let split = match rest.split_once('/') {
                Some((split, file)) if !file.contains('/') && is_numbered(file) => split,
                Some(_) => return None,
                None => sharded_split(rest)?,
            };
            Some((config, split, *f))
        })
        .collect();
    if by_dir.len() == parquet.len() {
        let mut configs: Vec<DataConfig> = Vec::new();
        for (config, split, file) in by_dir {
            if configs.last().is_none_or(|c| c.name != config) {
                configs.push(one_config(config, false, Vec::new()));
            }
            let c = configs.last_mut().expect("just pushed");
            c.splits.entry(split.into()).or_default().push(file.into());
        }
        mark_default(&mut configs);
        return Ok(configs);
    }
    // 4. split keywords in file or folder names; else everything is `train`.
    let mut keyed: Vec<(&str, &str)> = Vec::new();
    for f in &parquet {
        if let Some(split) = keyword_split(f) {
            keyed.push((split, f));
        }
    }
    if keyed.is_empty() {
        keyed = parquet.iter().map(|f| ("train", *f)).collect();
    }
    Ok(vec![one_config("default", true, keyed)])
}

fn one_config(name: &str, default: bool, files: Vec<(&str, &str)>) -> DataConfig {
    let mut splits: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (split, f) in files {
        splits.entry(split.into()).or_default().push(f.into());
    }
    DataConfig {
        name: name.into(),
        default,
        splits,
    }
}

/// The default among configs without a `default: true`: the one named `default`, else the
/// only one.
fn mark_default(configs: &mut [DataConfig]) {
    if configs.iter().any(|c| c.default) {
        return;
    }
    let n = configs.len();
    if let Some(c) = configs.iter_mut().find(|c| c.name == "default" || n == 1) {
        c.default = true;
    }
}

/// `{split}-NNNNN-of-NNNNN*.parquet` → `split`.
fn sharded_split(name: &str) -> Option<&str> {
    if name.contains('/') {
        return None;
    }
    let stem = name.strip_suffix(".parquet")?;
    let (split, rest) = stem.split_once('-')?;
    let b = rest.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    (!split.is_empty() && digits(0..5) && b.get(5..9) == Some(b"-of-") && digits(9..14))
        .then_some(split)
}

/// `0000.parquet`, `0001.parquet`: the parquet conversion's shard names.
fn is_numbered(name: &str) -> bool {
    name.strip_suffix(".parquet")
        .is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
}

/// The split a path names by keyword, as `datasets`' `DEFAULT_PATTERNS_SPLIT_IN_DIR_NAME`
/// (tried first) and `DEFAULT_PATTERNS_SPLIT_IN_FILENAME` do: a path component that is the
/// keyword, or has it set off by `-._ ` or digits at either end.
fn keyword_split(path: &str) -> Option<&'static str> {
    const KEYWORDS: [(&str, &[&str]); 3] = [
        ("train", &["train", "training"]),
        ("validation", &["validation", "valid", "dev", "val"]),
        ("test", &["test", "testing", "eval", "evaluation"]),
    ];
    let sep = |c: char| "-._ ".contains(c) || c.is_ascii_digit();
    let comps: Vec<&str> = path.split('/').collect();
    let (dirs, file) = comps.split_at(comps.len() - 1);
    let has = |comp: &str, kw: &str| comp.split(sep).any(|w| w == kw);
    for (split, kws) in KEYWORDS {
        if dirs.iter().any(|d| kws.iter().any(|k| has(d, k))) {
            return Some(split);
        }
    }
    for (split, kws) in KEYWORDS {
        if kws.iter().any(|k| has(file[0], k)) {
            return Some(split);
        }
    }
    None
}

/// One config of the card: its name, `default: true`, and (split, globs) pairs.
#[derive(Debug, Clone, PartialEq)]
struct CardConfig {
    name: String,
    default: bool,
    data_files: Vec<(String, Vec<String>)>,
}

fn from_card(configs: &[CardConfig], parquet: &[&str]) -> Vec<DataConfig> {
    let mut out: Vec<DataConfig> = configs
        .iter()
        .map(|c| DataConfig {
            name: c.name.clone(),
            default: c.default,
            splits: c
                .data_files
                .iter()
                .map(|(split, globs)| {
                    let files = parquet
                        .iter()
                        .filter(|f| globs.iter().any(|g| glob_match(g, f)))
                        .map(|f| f.to_string())
                        .collect();
                    (split.clone(), files)
                })
                .collect(),
        })
        .collect();
    mark_default(&mut out);
    out
}

/// fsspec-style glob: `*` and `?` stay within one path component, `**` crosses them,
/// `[...]` is a character class (`[0-9]`, `[!a]`). A leading `./` is ignored.
pub(crate) fn glob_match(pattern: &str, path: &str) -> bool {
    fn class(p: &[char], c: char) -> Option<(bool, usize)> {
        // p starts after '['; returns (matched, chars consumed including ']').
        let mut i = 0;
        let negate = matches!(p.first(), Some('!') | Some('^'));
        if negate {
            i += 1;
        }
        let mut hit = false;
        let start = i;
        while i < p.len() {
            if p[i] == ']' && i > start {
                return Some((hit != negate, i + 1));
            }
            if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
                hit |= p[i] <= c && c <= p[i + 2];
                i += 3;
            } else {
                hit |= p[i] == c;
                i += 1;
            }
        }
        None
    }
    fn go(p: &[char], s: &[char]) -> bool {
        match p.first() {
            None => s.is_empty(),
            Some('*') if p.get(1) == Some(&'*') => {
                let rest = &p[2..];
                // `**/x` also matches `x` with no folder in front.
                (rest.first() == Some(&'/') && go(&rest[1..], s))
                    || (0..=s.len()).any(|k| go(rest, &s[k..]))
            }
            Some('*') => (0..=s.len())
                .take_while(|&k| k == 0 || s[k - 1] != '/')
                .any(|k| go(&p[1..], &s[k..])),
            Some('?') => s.first().is_some_and(|&c| c != '/') && go(&p[1..], &s[1..]),
            Some('[') => match (s.first(), class(&p[1..], *s.first().unwrap_or(&'\0'))) {
                (Some(&c), Some((true, used))) if c != '/' => go(&p[1 + used..], &s[1..]),
                (_, Some(_)) => false,
                (Some(&c), None) => c == '[' && go(&p[1..], &s[1..]),
                (None, None) => false,
            },
            Some(&c) => s.first() == Some(&c) && go(&p[1..], &s[1..]),
        }
    }
    let pattern = pattern.trim_start_matches("./");
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = path.chars().collect();
    go(&p, &s)
}

/// The `configs:` section of a dataset card's YAML header; `Ok(None)` when the card has no
/// header or no such section, `Err` when the section is not the form `datasets` reads.
fn card_configs(card: &str) -> std::result::Result<Option<Vec<CardConfig>>, String> {
    let mut lines = card.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Ok(None);
    }
    let header: Vec<&str> = lines.take_while(|l| l.trim_end() != "---").collect();
    let Some(start) = header.iter().position(|l| l.trim_end() == "configs:") else {
        return Ok(None);
    };
    // The section: the lines after `configs:` up to the next top-level key.
    let mut block: Vec<(usize, String)> = Vec::new();
    for l in &header[start + 1..] {
        let t = strip_comment(l);
        if t.trim().is_empty() {
            continue;
        }
        let indent = t.len() - t.trim_start().len();
        if indent == 0 && !t.starts_with('-') {
            break;
        }
        block.push((indent, t.trim_end().to_string()));
    }
    let mut i = 0;
    let Yaml::List(items) = parse_block(&mut block, &mut i)? else {
        return Err("`configs` is not a list".into());
    };
    let mut out = Vec::new();
    for item in items {
        let Yaml::Map(entries) = item else {
            return Err("a `configs` entry is not a mapping".into());
        };
        let get = |k: &str| entries.iter().find(|(key, _)| key == k).map(|(_, v)| v);
        let name = match get("config_name") {
            Some(Yaml::Str(s)) => s.clone(),
            None => "default".into(),
            Some(_) => return Err("`config_name` is not a string".into()),
        };
        let default = matches!(get("default"), Some(Yaml::Str(s)) if s == "true" || s == "True");
        let data_files = match get("data_files") {
            None => Vec::new(),
            Some(Yaml::Str(g)) => vec![("train".into(), vec![g.clone()])],
            Some(Yaml::List(list)) if list.iter().all(|v| matches!(v, Yaml::Str(_))) => {
                vec![("train".into(), strings(list))]
            }
            Some(Yaml::List(list)) => {
                let mut splits = Vec::new();
                for v in list {
                    let Yaml::Map(kv) = v else {
                        return Err(format!(
                            "config `{name}`: a data_files entry is not a mapping"
                        ));
                    };
                    let get = |k: &str| kv.iter().find(|(key, _)| key == k).map(|(_, v)| v);
                    let split = match get("split") {
                        Some(Yaml::Str(s)) => s.clone(),
                        _ => {
                            return Err(format!(
                                "config `{name}`: data_files entry without `split`"
                            ));
                        }
                    };
                    let globs = match get("path") {
                        Some(Yaml::Str(s)) => vec![s.clone()],
                        Some(Yaml::List(l)) => strings(l),
                        _ => {
                            return Err(format!("config `{name}`: split `{split}` without `path`"));
                        }
                    };
                    splits.push((split, globs));
                }
                splits
            }
            Some(Yaml::Map(_)) => {
                return Err(format!("config `{name}`: `data_files` is a mapping"));
            }
        };
        out.push(CardConfig {
            name,
            default,
            data_files,
        });
    }
    Ok(Some(out))
}

fn strings(list: &[Yaml]) -> Vec<String> {
    list.iter()
        .filter_map(|v| match v {
            Yaml::Str(s) => Some(s.clone()),
            _ => None,
        })
        .collect()
}

/// The YAML the `configs:` section uses: block mappings and sequences, plain or quoted
/// scalars, and flow sequences of scalars (`[a, b]`).
#[derive(Debug, Clone, PartialEq)]
enum Yaml {
    Str(String),
    List(Vec<Yaml>),
    Map(Vec<(String, Yaml)>),
}

fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (c, quote) {
            ('\'' | '"', None) => quote = Some(c),
            (q, Some(open)) if q == open => quote = None,
            ('#', None) if i == 0 || line[..i].ends_with(' ') => return &line[..i],
            _ => {}
        }
    }
    line
}

fn scalar(s: &str) -> Yaml {
    let s = s.trim();
    if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return Yaml::List(
            inner
                .split(',')
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .map(scalar)
                .collect(),
        );
    }
    let unq = s
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .or_else(|| s.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')))
        .unwrap_or(s);
    Yaml::Str(unq.to_string())
}

/// Parses the block starting at line `i` (all lines of the block share its indentation).
fn parse_block(lines: &mut [(usize, String)], i: &mut usize) -> std::result::Result<Yaml, String> {
    let Some((indent, first)) = lines.get(*i).cloned() else {
        return Ok(Yaml::Str(String::new()));
    };
    if first.trim_start().starts_with('-') {
        let mut items = Vec::new();
        while let Some((ind, text)) = lines.get(*i).cloned() {
            let t = text.trim_start();
            if ind != indent || !t.starts_with('-') {
                break;
            }
            let rest = t[1..].trim_start();
            if rest.is_empty() {
                *i += 1;
                items.push(match lines.get(*i) {
                    Some((ind2, _)) if *ind2 > indent => parse_block(lines, i)?,
                    _ => Yaml::Str(String::new()),
                });
            } else if is_key(rest) {
                // `- key: value` starts a mapping indented at the key.
                let key_indent = ind + (t.len() - rest.len());
                lines[*i] = (key_indent, rest.to_string());
                items.push(parse_block(lines, i)?);
            } else {
                items.push(scalar(rest));
                *i += 1;
            }
        }
        return Ok(Yaml::List(items));
    }
    let mut entries = Vec::new();
    while let Some((ind, text)) = lines.get(*i).cloned() {
        let t = text.trim_start();
        if ind != indent || t.starts_with('-') {
            if ind > indent {
                return Err(format!("unexpected indentation at `{}`", t));
            }
            break;
        }
        let Some((key, value)) = split_key(t) else {
            return Err(format!("expected `key: value`, found `{t}`"));
        };
        *i += 1;
        let value = if value.trim().is_empty() {
            match lines.get(*i) {
                Some((ind2, next))
                    if *ind2 > indent
                        || (*ind2 == indent && next.trim_start().starts_with('-')) =>
                {
                    parse_block(lines, i)?
                }
                _ => Yaml::Str(String::new()),
            }
        } else {
            scalar(value)
        };
        entries.push((key, value));
    }
    Ok(Yaml::Map(entries))
}

fn is_key(s: &str) -> bool {
    split_key(s).is_some() && !s.starts_with('"') && !s.starts_with('\'')
}

fn split_key(s: &str) -> Option<(String, &str)> {
    let (k, v) = match s.find(": ") {
        Some(p) => (&s[..p], &s[p + 2..]),
        None => (s.strip_suffix(':')?, ""),
    };
    let k = k.trim();
    if k.is_empty() || (k.contains(' ') && !k.starts_with('"')) {
        return None;
    }
    match scalar(k) {
        Yaml::Str(k) => Some((k, v)),
        _ => None,
    }
}

/// Every file under `dir`, as repository paths (`/`-separated), sorted.
fn local_files(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else if p.is_file()
                && let Ok(rel) = p.strip_prefix(base)
            {
                let parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push(parts.join("/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Picks `want`'s config and split among `configs`, or the error that lists what exists.
fn choose<'a>(
    configs: &'a [DataConfig],
    want: &DatasetRef,
) -> Result<(&'a DataConfig, &'a [String])> {
    let names = || configs.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    let config = match &want.config {
        Some(name) => {
            configs
                .iter()
                .find(|c| &c.name == name)
                .ok_or_else(|| Error::NoSuchConfig {
                    dataset: want.id.clone(),
                    revision: want.revision.clone(),
                    config: name.clone(),
                    configs: names(),
                })?
        }
        None => configs
            .iter()
            .find(|c| c.default)
            .ok_or_else(|| Error::NoDefaultConfig {
                dataset: want.id.clone(),
                revision: want.revision.clone(),
                configs: names(),
            })?,
    };
    let files = config
        .splits
        .get(&want.split)
        .filter(|f| !f.is_empty())
        .ok_or_else(|| Error::NoSuchSplit {
            dataset: want.id.clone(),
            config: config.name.clone(),
            split: want.split.clone(),
            splits: config
                .splits
                .iter()
                .filter(|(_, f)| !f.is_empty())
                .map(|(s, _)| s.clone())
                .collect(),
        })?;
    Ok((config, files))
}

/// Whether `files` holds every shard its `-NNNNN-of-MMMMM` names announce.
fn shards_complete(files: &[String]) -> bool {
    let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for f in files {
        let stem = f.strip_suffix(".parquet").unwrap_or(f);
        if let Some(p) = stem.rfind("-of-")
            && let Ok(total) = stem[p + 4..].parse::<usize>()
        {
            let prefix = stem[..p].rsplit_once('-').map_or(stem, |(a, _)| a);
            let e = counts.entry(prefix.to_string()).or_insert((0, total));
            e.0 += 1;
        }
    }
    counts.values().all(|(have, total)| have >= total)
}

impl Hub {
    /// The cache folder of dataset `id` (`datasets--org--name`).
    pub fn dataset_cache(&self, id: &str) -> RepoCache {
        RepoCache::of(RepoType::Dataset, &self.config().cache, id)
    }

    /// The parquet files of `want`'s (config, split), in the hub cache (downloading what is
    /// missing, with `README.md` for its `configs:`), and the commit they are from.
    ///
    /// As for models ([`Hub::snapshot`]): with a commit hash, or a branch or tag already
    /// recorded in the cache, files already in the snapshot are used without any request
    /// (unless [`crate::HubConfig::refresh`]); offline, what is missing is an
    /// [`Error::Offline`]. A dataset, config or split that does not exist is an error that
    /// lists the configs or splits that do.
    pub fn dataset(
        &self,
        want: &DatasetRef,
        progress: &mut dyn FnMut(&DownloadProgress<'_>),
    ) -> Result<DatasetFiles> {
        check_id(&want.id)?;
        if !is_commit(&want.revision) {
            ref_name(&want.revision, || {
                format!("the revision asked of dataset {}", want.id)
            })?;
        }
        let cfg = self.config();
        let cache = self.dataset_cache(&want.id);
        let out = |commit: &str, config: &DataConfig, files: &[String]| DatasetFiles {
            dataset: want.id.clone(),
            revision: want.revision.clone(),
            commit: commit.into(),
            config: config.name.clone(),
            split: want.split.clone(),
            dir: cache.snapshot_dir(commit),
            // Listed names were checked when listed, and local ones are files found below
            // the snapshot: every one passes.
            files: files
                .iter()
                .filter_map(|f| RelPath::new(f).ok())
                .map(|f| cache.snapshot_file(commit, &f))
                .collect(),
        };
        let cached = if is_commit(&want.revision) || cfg.offline || !cfg.refresh {
            cache.commit_of(&want.revision)
        } else {
            None
        };
        if let Some(commit) = &cached {
            let dir = cache.snapshot_dir(commit);
            let local = local_files(&dir);
            let readme = fs::read_to_string(dir.join("README.md")).ok();
            let configs = dataset_configs(&local, readme.as_deref(), &dir.join("README.md"))?;
            match choose(&configs, want) {
                Ok((config, files)) if shards_complete(files) => {
                    return Ok(out(commit, config, files));
                }
                _ if cfg.offline => {
                    return Err(Error::Offline {
                        model: want.id.clone(),
                        revision: want.revision.clone(),
                        cache: cache.dir(),
                        missing: vec![format!(
                            "the parquet files of config {} split `{}`",
                            want.config
                                .as_deref()
                                .map_or("(default)".to_string(), |c| format!("`{c}`")),
                            want.split
                        )],
                    });
                }
                _ => {}
            }
        } else if cfg.offline {
            return Err(Error::Offline {
                model: want.id.clone(),
                revision: want.revision.clone(),
                cache: cache.dir(),
                missing: vec![format!(
                    "refs/{} (this revision was never downloaded)",
                    want.revision
                )],
            });
        }
        let commit = match cached {
            Some(c) if is_commit(&want.revision) => c,
            _ => self.resolve_repo(RepoType::Dataset, &want.id, &want.revision)?,
        };
        let tree = self
            .list_repo_files(RepoType::Dataset, &want.id, &commit)
            .map_err(|e| match e {
                Error::RevisionNotFound {
                    model, endpoint, ..
                } => Error::RevisionNotFound {
                    model,
                    revision: want.revision.clone(),
                    endpoint,
                },
                other => other,
            })?;
        let readme = match tree.iter().find(|f| f.path == "README.md") {
            Some(f) => {
                let p = self.fetch(&cache, &want.id, &want.revision, &commit, f, progress)?;
                Some(fs::read_to_string(&p).map_err(Error::io(&p))?)
            }
            None => None,
        };
        let paths: Vec<String> = tree.iter().map(|f| f.path.to_string()).collect();
        let configs = dataset_configs(
            &paths,
            readme.as_deref(),
            &cache.snapshot_dir(&commit).join("README.md"),
        )?;
        if configs.is_empty() {
            return Err(Error::NoParquet {
                dataset: want.id.clone(),
                revision: want.revision.clone(),
                files: paths.into_iter().take(20).collect(),
            });
        }
        let (config, files) = choose(&configs, want)?;
        for f in files {
            let entry: &RepoFile = tree
                .iter()
                .find(|t| t.path == *f)
                .expect("chosen among the listed files");
            self.fetch(&cache, &want.id, &want.revision, &commit, entry, progress)?;
        }
        Ok(out(&commit, config, files))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(files: &[&str], readme: Option<&str>, want: &[&str]) {
        let files: Vec<String> = files.iter().map(|f| f.to_string()).collect();
        let got: Vec<String> = match dataset_configs(&files, readme, Path::new("README.md")) {
            Ok(configs) => configs
                .iter()
                .flat_map(|c| {
                    c.splits.iter().map(move |(s, f)| {
                        format!(
                            "{}{} {s}: {}",
                            c.name,
                            if c.default { "*" } else { "" },
                            f.join(" ")
                        )
                    })
                })
                .collect(),
            Err(e) => vec![e.to_string()],
        };
        assert_eq!(got, want, "{files:?}");
    }

    #[test]
    fn data_files_by_layout() {
        // data/{split}-NNNNN-of-NNNNN.parquet: ag_news.
        check(
            &[
                "README.md",
                "data/test-00000-of-00001.parquet",
                "data/train-00000-of-00002.parquet",
                "data/train-00001-of-00002.parquet",
            ],
            None,
            &[
                "default* test: data/test-00000-of-00001.parquet",
                "default* train: data/train-00000-of-00002.parquet data/train-00001-of-00002.parquet",
            ],
        );
        // {config}/{split}-NNNNN-of-NNNNN.parquet without a card: a config per folder.
        check(
            &[
                "wikitext-103-raw-v1/test-00000-of-00001.parquet",
                "wikitext-2-raw-v1/test-00000-of-00001.parquet",
                "wikitext-2-raw-v1/train-00000-of-00001.parquet",
            ],
            None,
            &[
                "wikitext-103-raw-v1 test: wikitext-103-raw-v1/test-00000-of-00001.parquet",
                "wikitext-2-raw-v1 test: wikitext-2-raw-v1/test-00000-of-00001.parquet",
                "wikitext-2-raw-v1 train: wikitext-2-raw-v1/train-00000-of-00001.parquet",
            ],
        );
        // {config}/{split}/NNNN.parquet: the hub's parquet conversion.
        check(
            &[
                "default/test/0000.parquet",
                "default/train/0000.parquet",
                "default/train/0001.parquet",
            ],
            None,
            &[
                "default* test: default/test/0000.parquet",
                "default* train: default/train/0000.parquet default/train/0001.parquet",
            ],
        );
        // Keywords in folder or file names; the rest is train.
        check(
            &["dev/x.parquet", "my_test.parquet", "other.parquet"],
            None,
            &[
                "default* test: my_test.parquet",
                "default* validation: dev/x.parquet",
            ],
        );
        check(
            &["a.parquet", "b.parquet", "notes.txt"],
            None,
            &["default* train: a.parquet b.parquet"],
        );
        check(&["data.csv"], None, &[]);
    }

    const WIKITEXT_CARD: &str = "---
annotations_creators:
- no-annotation
dataset_info:
- config_name: wikitext-103-raw-v1
  features:
  - name: text
    dtype: string
  splits:
  - name: test
    num_bytes: 1305088
configs:
- config_name: wikitext-103-raw-v1
  data_files:
  - split: test
    path: wikitext-103-raw-v1/test-*
  - split: train
    path:
    - wikitext-103-raw-v1/train-*
- config_name: wikitext-2-raw-v1 # comment
  default: true
  data_files:
  - split: test
    path: \"wikitext-2-raw-v1/test-*\"
---

# Dataset Card for wikitext
";

    #[test]
    fn data_files_from_the_card() {
        let files = [
            "README.md",
            "wikitext-103-raw-v1/test-00000-of-00001.parquet",
            "wikitext-103-raw-v1/train-00000-of-00002.parquet",
            "wikitext-103-raw-v1/train-00001-of-00002.parquet",
            "wikitext-2-raw-v1/test-00000-of-00001.parquet",
        ];
        check(
            &files,
            Some(WIKITEXT_CARD),
            &[
                "wikitext-103-raw-v1 test: wikitext-103-raw-v1/test-00000-of-00001.parquet",
                "wikitext-103-raw-v1 train: wikitext-103-raw-v1/train-00000-of-00002.parquet \
                 wikitext-103-raw-v1/train-00001-of-00002.parquet",
                "wikitext-2-raw-v1* test: wikitext-2-raw-v1/test-00000-of-00001.parquet",
            ],
        );
        // A string or list of globs is the train split; a card without configs is ignored.
        check(
            &["x/a.parquet", "x/b.parquet"],
            Some("---\nconfigs:\n- config_name: only\n  data_files: [\"x/*.parquet\"]\n---\n"),
            &["only* train: x/a.parquet x/b.parquet"],
        );
        check(
            &["data/test-00000-of-00001.parquet"],
            Some("---\nlicense: mit\n---\n"),
            &["default* test: data/test-00000-of-00001.parquet"],
        );
        check(
            &["a.parquet"],
            Some("---\nconfigs:\n- config_name: x\n  data_files:\n  - split: train\n---\n"),
            &["README.md: config `x`: split `train` without `path`"],
        );
    }

    #[test]
    fn globs() {
        let check = |p: &str, s: &str, want: bool| assert_eq!(glob_match(p, s), want, "{p} {s}");
        check("data/train-*", "data/train-00000-of-00001.parquet", true);
        check("data/train-*", "data/x/train-0.parquet", false);
        check("data/*", "data/a/b.parquet", false);
        check("data/**", "data/a/b.parquet", true);
        check("**/*.parquet", "a.parquet", true);
        check("**/*.parquet", "a/b/c.parquet", true);
        check("data/train-[0-9][0-9]*", "data/train-01.parquet", true);
        check("data/train-[0-9]*", "data/train-x.parquet", false);
        check("./x?.parquet", "x1.parquet", true);
    }

    #[test]
    fn shard_counts() {
        assert!(shards_complete(&["d/train-00000-of-00001.parquet".into()]));
        assert!(!shards_complete(&["d/train-00000-of-00002.parquet".into()]));
        assert!(shards_complete(&["d/train/0000.parquet".into()]));
    }
}
