//! Where a text may be cut so that tokenising the pieces gives the ids of tokenising it whole.
//!
//! A text is cut only at a line start: just after a `\n`, before an ASCII letter or digit
//! ([`crate::text_blocks`]). Whether the pieces' ids are the whole text's depends on the
//! tokenizer's pipeline, so [`Cuts::of`] reads it (the loaded tokenizer, serialised) and says
//! yes only where that follows from the pipeline's parts:
//!
//! - **added tokens** are found in the text before anything else; none may contain a `\n`
//!   (it could span the cut), and none that starts with a letter or digit may strip the
//!   whitespace to its left (it would take the `\n` before the cut);
//! - the **normalizer** maps characters one by one (none, NFC/NFD/NFKC/NFKD, lowercase, or a
//!   literal replacement that involves neither `\n` nor a letter or digit);
//! - the **pre-tokenizer** either splits every text at such a place (GPT-2's byte-level
//!   pattern; the Llama 3, Qwen2 and GPT-2 patterns as a `Split`; whitespace splitting), or
//!   cuts only by rules that look at neighbouring characters (none, Metaspace, byte mapping,
//!   digits, a literal split) and the model is a BPE whose vocabulary has no token with a `\n`
//!   (or byte-level `Ċ`) followed by a letter or digit, and no dropout, fused unknowns,
//!   whole-word lookup or word affixes: then no merge joins the two sides, and BPE on each
//!   side alone is BPE on both;
//! - nothing is **prepended** to the text (a prefix space; a `Prepend` normalizer, a Metaspace
//!   that prepends to every segment), except a Metaspace `▁` prepended to the text's first
//!   word only: a piece after the first is then tokenised by a copy that prepends nothing.
//!
//! Anything else (a SentencePiece vocabulary with tokens such as `.\nThe`, a `Prepend`
//! normalizer, a regex pattern not on the list) is tokenised whole, as before: slower on many
//! cores, never different.

use serde_json::Value;
use tokenizers::Tokenizer;

/// The Llama 3 (also OLMo-2's) and Qwen2 pre-tokenizer patterns and GPT-2's, as `Split`
/// regexes: in each, a match that holds a `\n` ends at a `\n` or holds only whitespace, so
/// every match ends before a letter or digit that follows a `\n`, and the next starts there.
const SPLITTING_PATTERNS: [&str; 3] = [
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
];

/// How a tokenizer's text may be cut (see the module's text).
#[derive(Debug)]
pub(crate) enum Cuts {
    /// Pieces cut at line starts tokenise to the whole text's ids: the first piece by the
    /// tokenizer itself, every later one by `rest` where it is given (a copy that prepends
    /// nothing), else by the tokenizer.
    Lines {
        /// The tokenizer for pieces after the first, where it differs.
        rest: Option<Box<Tokenizer>>,
    },
    /// The text is tokenised whole; why.
    Whole(String),
}

/// What the pre-tokenizer does at a cut.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AtCut {
    /// Every text is split there.
    Splits,
    /// Only neighbouring characters decide where it splits; the model must not join the sides.
    Local,
}

impl Cuts {
    /// Reads `tokenizer`'s pipeline.
    pub(crate) fn of(tokenizer: &Tokenizer) -> Self {
        let json = match tokenizer.to_string(false) {
            Ok(s) => s,
            Err(e) => return Cuts::Whole(format!("the tokenizer does not serialise: {e}")),
        };
        let value: Value = match serde_json::from_str(&json) {
            Ok(v) => v,
            Err(e) => return Cuts::Whole(format!("the tokenizer's JSON does not parse: {e}")),
        };
        match Self::read(&value) {
            Ok(false) => Cuts::Lines { rest: None },
            Ok(true) => {
                let mut rest = value.clone();
                never_prepend(&mut rest["pre_tokenizer"]);
                match rest.to_string().parse::<Tokenizer>() {
                    Ok(t) => Cuts::Lines {
                        rest: Some(Box::new(t)),
                    },
                    Err(e) => Cuts::Whole(format!("its copy without the prefix: {e}")),
                }
            }
            Err(why) => Cuts::Whole(why),
        }
    }

    /// Whether the pieces' ids are the whole text's (`Ok(true)`: once the first word's
    /// Metaspace prefix is off for pieces after the first), or why not.
    fn read(t: &Value) -> Result<bool, String> {
        for a in t["added_tokens"].as_array().into_iter().flatten() {
            let content = a["content"].as_str().unwrap_or_default();
            if content.contains('\n') {
                return Err(format!("the added token {content:?} holds a newline"));
            }
            let starts_word = content.starts_with(|c: char| c.is_ascii_alphanumeric());
            if starts_word && a["lstrip"].as_bool() == Some(true) {
                return Err(format!(
                    "the added token {content:?} strips whitespace to its left"
                ));
            }
        }
        normalizer(&t["normalizer"])?;
        let mut first_prefix = false;
        let at_cut = pre_tokenizer(&t["pre_tokenizer"], &mut first_prefix)?;
        let model = &t["model"];
        if !model["dropout"].is_null() {
            return Err("the model drops merges at random".into());
        }
        if at_cut == AtCut::Local {
            if model["type"] != "BPE" {
                return Err(format!(
                    "the pre-tokenizer does not split at line starts and the model is {}",
                    model["type"]
                ));
            }
            for (flag, what) in [
                ("fuse_unk", "fuses unknown tokens"),
                ("ignore_merges", "takes a word whole where it is a token"),
            ] {
                if model[flag].as_bool() == Some(true) {
                    return Err(format!(
                        "the pre-tokenizer does not split at line starts and the model {what}"
                    ));
                }
            }
            for affix in ["continuing_subword_prefix", "end_of_word_suffix"] {
                if model[affix].as_str().is_some_and(|s| !s.is_empty()) {
                    return Err(format!(
                        "the pre-tokenizer does not split at line starts and the model marks words ({affix})"
                    ));
                }
            }
            let vocab = model["vocab"]
                .as_object()
                .ok_or("the BPE model has no vocabulary")?;
            if let Some(token) = vocab.keys().find(|k| joins_lines(k)) {
                return Err(format!(
                    "the pre-tokenizer does not split at line starts and the token {token:?} joins a line to the next"
                ));
            }
        }
        Ok(first_prefix)
    }
}

/// Whether `token` holds a newline (raw, or byte-level `Ċ`) followed by a letter or digit.
fn joins_lines(token: &str) -> bool {
    let mut chars = token.chars().peekable();
    while let Some(c) = chars.next() {
        if matches!(c, '\n' | 'Ċ') && chars.peek().is_some_and(char::is_ascii_alphanumeric) {
            return true;
        }
    }
    false
}

/// `Ok` where the normalizer maps characters one by one without touching newlines, letters
/// or digits' neighbours; it never prepends.
fn normalizer(n: &Value) -> Result<(), String> {
    if n.is_null() {
        return Ok(());
    }
    match n["type"].as_str().unwrap_or_default() {
        "NFC" | "NFD" | "NFKC" | "NFKD" | "Lowercase" => Ok(()),
        "Sequence" => n["normalizers"]
            .as_array()
            .into_iter()
            .flatten()
            .try_for_each(normalizer),
        "Replace" => {
            let Some(pattern) = n["pattern"]["String"].as_str() else {
                return Err("the normalizer replaces a regex".into());
            };
            let content = n["content"].as_str().unwrap_or_default();
            let plain =
                |s: &str| !s.contains('\n') && !s.contains(|c: char| c.is_ascii_alphanumeric());
            if plain(pattern) && plain(content) && !pattern.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "the normalizer replaces {pattern:?} by {content:?}"
                ))
            }
        }
        other => Err(format!(
            "the normalizer {other} may act across a line start"
        )),
    }
}

/// What the pre-tokenizer does at a line start; `first_prefix` is set where a Metaspace
/// prepends `▁` to the text's first word.
fn pre_tokenizer(p: &Value, first_prefix: &mut bool) -> Result<AtCut, String> {
    if p.is_null() {
        return Ok(AtCut::Local);
    }
    let kind = p["type"].as_str().unwrap_or_default();
    match kind {
        "Sequence" => {
            let mut at = AtCut::Local;
            for q in p["pretokenizers"].as_array().into_iter().flatten() {
                if pre_tokenizer(q, first_prefix)? == AtCut::Splits {
                    at = AtCut::Splits;
                }
            }
            Ok(at)
        }
        "ByteLevel" => {
            if p["add_prefix_space"].as_bool() == Some(true) {
                return Err("the pre-tokenizer adds a space before every segment".into());
            }
            Ok(if p["use_regex"].as_bool() == Some(false) {
                AtCut::Local
            } else {
                AtCut::Splits
            })
        }
        "Metaspace" => match p["prepend_scheme"].as_str() {
            Some("never") => Ok(AtCut::Local),
            Some("first") => {
                *first_prefix = true;
                Ok(AtCut::Local)
            }
            scheme => Err(format!(
                "the Metaspace pre-tokenizer prepends `▁` to every segment ({scheme:?})"
            )),
        },
        "Whitespace" | "WhitespaceSplit" => Ok(AtCut::Splits),
        "Digits" => Ok(AtCut::Local),
        "Split" => {
            let isolated = p["behavior"] == "Isolated" && p["invert"] == false;
            if let Some(s) = p["pattern"]["String"].as_str() {
                if s.contains('\n') {
                    return Err(format!("the pre-tokenizer splits on {s:?}"));
                }
                return Ok(AtCut::Local);
            }
            let regex = p["pattern"]["Regex"].as_str().unwrap_or_default();
            if isolated && SPLITTING_PATTERNS.contains(&regex) {
                Ok(AtCut::Splits)
            } else {
                Err(format!(
                    "the pre-tokenizer splits by a pattern not known to split at line starts ({regex:?})"
                ))
            }
        }
        other => Err(format!(
            "the pre-tokenizer {other} may act across a line start"
        )),
    }
}

/// Sets every Metaspace of `p` to prepend nothing.
fn never_prepend(p: &mut Value) {
    if p["type"] == "Metaspace" {
        p["prepend_scheme"] = Value::from("never");
    }
    if let Some(list) = p.get_mut("pretokenizers").and_then(Value::as_array_mut) {
        list.iter_mut().for_each(never_prepend);
    }
}
