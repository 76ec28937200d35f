//! The NumPy `.npy` format, implemented here (v1, v2, v3 headers).
//!
//! Layout: magic `\x93NUMPY`, major and minor version bytes, header length (u16 little-endian
//! for v1, u32 for v2/v3), a Python dict literal `{'descr': '<f4', 'fortran_order': False,
//! 'shape': (3, 4), }` padded with spaces and ending in `\n`, then the raw data.

use std::borrow::Cow;
use std::path::Path;

use crate::tensor::{DType, RawTensor, check_extent};
use crate::{Error, Result};

const MAGIC: &[u8] = b"\x93NUMPY";

/// Parses an `.npy` image; `name` is the tensor name used in messages.
pub(crate) fn parse<'a>(bytes: Cow<'a, [u8]>, file: &Path, name: &str) -> Result<RawTensor<'a>> {
    let bad = |reason: String| Error::format(file, "npy", reason);
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(bad("missing the \\x93NUMPY magic string".into()));
    }
    let major = bytes[6];
    let (hlen, start) = match major {
        1 => (
            usize::from(u16::from_le_bytes([bytes[8], bytes[9]])),
            10usize,
        ),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err(bad("header length field is truncated".into()));
            }
            let n = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            (n as usize, 12usize)
        }
        v => return Err(bad(format!("unsupported format version {v}.{}", bytes[7]))),
    };
    let end = start
        .checked_add(hlen)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| {
            bad(format!(
                "header declares {hlen} bytes but the file has {}",
                bytes.len().saturating_sub(start)
            ))
        })?;
    let header = std::str::from_utf8(&bytes[start..end])
        .map_err(|_| bad("header is not valid text".into()))?;
    let h =
        parse_header(header).map_err(|r| bad(format!("{r} in header {:?}", header.trim_end())))?;
    let (dtype, big_endian) = parse_descr(&h.descr).ok_or_else(|| Error::UnsupportedDtype {
        file: file.to_path_buf(),
        tensor: name.to_string(),
        dtype: format!("'{}'", h.descr),
        expected: "one of <f2 <f4 <f8 |u1 |i1 <i2 <i4 <i8 <u2 <u4 <u8 |b1 (either byte order)",
    })?;
    let available = bytes.len() - end;
    let numel = check_extent(file, name, &h.shape, dtype, available, false)?;
    let data = match bytes {
        Cow::Borrowed(b) => Cow::Borrowed(&b[end..end + numel * dtype.size()]),
        Cow::Owned(mut v) => {
            v.drain(..end);
            Cow::Owned(v)
        }
    };
    Ok(RawTensor {
        name: name.to_string(),
        dtype,
        big_endian,
        shape: h.shape,
        fortran: h.fortran,
        data,
    })
}

struct Header {
    descr: String,
    fortran: bool,
    shape: Vec<usize>,
}

/// Maps a numpy type string to a dtype and byte order (`true` = big-endian).
fn parse_descr(d: &str) -> Option<(DType, bool)> {
    let mut chars = d.chars();
    let order = chars.next()?;
    let rest = chars.as_str();
    let big = match order {
        '<' | '|' | '=' => false,
        '>' => true,
        _ => return None,
    };
    let dt = match rest {
        "f2" => DType::F16,
        "f4" => DType::F32,
        "f8" => DType::F64,
        "u1" => DType::U8,
        "i1" => DType::I8,
        "b1" => DType::Bool,
        "u2" => DType::U16,
        "i2" => DType::I16,
        "u4" => DType::U32,
        "i4" => DType::I32,
        "u8" => DType::U64,
        "i8" => DType::I64,
        _ => return None,
    };
    // '=' means native order; numpy writes '<' or '>' explicitly in files, treat '=' as little.
    Some((dt, big && dt.size() > 1))
}

/// A minimal parser for the header's Python dict literal.
fn parse_header(s: &str) -> std::result::Result<Header, String> {
    let mut p = Lexer {
        s: s.as_bytes(),
        i: 0,
    };
    p.expect(b'{')?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        p.skip_ws();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.skip_ws();
        p.expect(b':')?;
        p.skip_ws();
        match key.as_str() {
            "descr" => {
                if p.peek() == Some(b'[') {
                    return Err("structured dtypes are not supported".into());
                }
                descr = Some(p.string()?);
            }
            "fortran_order" => fortran = Some(p.boolean()?),
            "shape" => shape = Some(p.tuple()?),
            other => return Err(format!("unexpected key '{other}'")),
        }
        p.skip_ws();
        if !p.eat(b',') {
            p.skip_ws();
            p.expect(b'}')?;
            break;
        }
    }
    let descr = descr.ok_or("missing 'descr'")?;
    if descr.contains('O') {
        return Err("object arrays are not supported".into());
    }
    Ok(Header {
        descr,
        fortran: fortran.ok_or("missing 'fortran_order'")?,
        shape: shape.ok_or("missing 'shape'")?,
    })
}

struct Lexer<'a> {
    s: &'a [u8],
    i: usize,
}

impl Lexer<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: u8) -> std::result::Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected '{}' at byte {}", c as char, self.i))
        }
    }
    fn string(&mut self) -> std::result::Result<String, String> {
        let q = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return Err(format!("expected a quoted string at byte {}", self.i)),
        };
        self.i += 1;
        let start = self.i;
        while let Some(c) = self.peek() {
            if c == q {
                let out = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
                self.i += 1;
                return Ok(out);
            }
            self.i += 1;
        }
        Err("unterminated string".into())
    }
    fn boolean(&mut self) -> std::result::Result<bool, String> {
        let rest = &self.s[self.i..];
        if rest.starts_with(b"True") {
            self.i += 4;
            Ok(true)
        } else if rest.starts_with(b"False") {
            self.i += 5;
            Ok(false)
        } else {
            Err(format!("expected True or False at byte {}", self.i))
        }
    }
    fn tuple(&mut self) -> std::result::Result<Vec<usize>, String> {
        self.expect(b'(')?;
        let mut out = Vec::new();
        loop {
            self.skip_ws();
            if self.eat(b')') {
                return Ok(out);
            }
            let start = self.i;
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.i += 1;
            }
            // Python 2 era files may write long integers as `3L`.
            let digits = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
            if digits.is_empty() {
                return Err(format!(
                    "expected a non-negative integer in shape at byte {}",
                    self.i
                ));
            }
            let v: usize = digits
                .parse()
                .map_err(|_| format!("shape entry {digits} is too large"))?;
            out.push(v);
            self.eat(b'L');
            self.skip_ws();
            if !self.eat(b',') {
                self.skip_ws();
                self.expect(b')')?;
                return Ok(out);
            }
        }
    }
}

/// Builds an `.npy` image: v1 header when it fits (v2 otherwise), aligned to 64 bytes.
pub(crate) fn encode(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let shape_s = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_s}, }}");
    let mut out = Vec::with_capacity(data.len() + 128);
    let fits_v1 = dict.len() + 11 < 65_000;
    let prefix = if fits_v1 { 10 } else { 12 };
    let total = (prefix + dict.len() + 1).div_ceil(64) * 64;
    let hlen = total - prefix;
    out.extend_from_slice(MAGIC);
    if fits_v1 {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(hlen as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&(hlen as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.resize(total - 1, b' ');
    out.push(b'\n');
    out.extend_from_slice(data);
    out
}
