//! Unit tests of the private parsers.

use std::borrow::Cow;
use std::path::Path;

use crate::npy;
use crate::tensor::{DType, checked_numel};

fn file() -> &'static Path {
    Path::new("x.npy")
}

#[test]
fn npy_header_round_trip() {
    let data: Vec<u8> = [1.5f32, -2.0, 3.25, 0.0, 7.0, 8.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let img = npy::encode("<f4", &[2, 3], &data);
    assert_eq!(
        (img.len() - data.len()) % 64,
        0,
        "header must be 64-byte aligned"
    );
    let t = npy::parse(Cow::Borrowed(&img), file(), "a").unwrap();
    assert_eq!(t.shape, vec![2, 3]);
    assert_eq!(t.dtype, DType::F32);
    assert!(!t.fortran);
    assert_eq!(
        t.to_f32(file()).unwrap(),
        vec![1.5, -2.0, 3.25, 0.0, 7.0, 8.0]
    );
}

#[test]
fn npy_header_variants_parse() {
    // Python 2 long suffix, double quotes, no trailing comma, 1-D and 0-D shapes.
    for (dict, shape) in [
        (
            "{'descr': '<f8', 'fortran_order': False, 'shape': (2L, 1L), }",
            vec![2, 1],
        ),
        (
            "{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": (2,)}",
            vec![2],
        ),
        (
            "{'shape': (), 'fortran_order': False, 'descr': '<f8'}",
            vec![],
        ),
    ] {
        let n: usize = shape.iter().product();
        let mut img = b"\x93NUMPY\x01\x00".to_vec();
        img.extend_from_slice(&(dict.len() as u16 + 1).to_le_bytes());
        img.extend_from_slice(dict.as_bytes());
        img.push(b'\n');
        img.extend(std::iter::repeat_n(0u8, n * 8));
        let t = npy::parse(Cow::Borrowed(&img), file(), "a").unwrap();
        assert_eq!(t.shape, shape, "{dict}");
    }
}

#[test]
fn numel_guards_overflow() {
    assert_eq!(checked_numel(&[3, 4]), Some(12));
    assert_eq!(checked_numel(&[]), Some(1));
    assert_eq!(checked_numel(&[1 << 21, 1 << 20]), None);
    assert_eq!(checked_numel(&[usize::MAX, 2]), None);
}

/// A large array converted by chunks on a pool is the sequential conversion, value for
/// value, for every float dtype, either byte order, and a trailing partial element; and so is
/// its conversion to `f64` through each task's own `f32` buffer, and the half-precision words
/// a model keeps.
#[test]
fn pooled_conversion_equals_the_sequential_one() {
    use crate::tensor::{
        convert_f32, convert_f32_pooled, convert_f64_pooled, u16_words, u16_words_pooled,
    };
    let n = 3 * (1 << 18) + 77; // three chunks and a partial one
    let bytes: Vec<u8> = (0..n * 8 + 3)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3])
        .collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    for big_endian in [false, true] {
        let b = &bytes[..n * 2 + 1];
        let pooled = pool.install(|| u16_words_pooled(b, big_endian));
        assert!(
            pooled == u16_words(b, big_endian),
            "u16, big endian {big_endian}"
        );
    }
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for big_endian in [false, true] {
            let b = &bytes[..n * dtype.size() + 1];
            let alone = convert_f32(b, dtype, big_endian);
            let pooled = pool.install(|| convert_f32_pooled(b, dtype, big_endian));
            assert_eq!(alone.len(), n, "{dtype:?}");
            // Bits, so that NaN payloads count too.
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(
                bits(&alone) == bits(&pooled),
                "{dtype:?}, big endian {big_endian}"
            );
            let wide = pool.install(|| convert_f64_pooled(b, dtype, big_endian));
            let widened: Vec<u64> = alone.iter().map(|&x| f64::from(x).to_bits()).collect();
            assert!(
                wide.iter().map(|x| x.to_bits()).collect::<Vec<_>>() == widened,
                "f64: {dtype:?}, big endian {big_endian}"
            );
        }
    }
}
