//! GGUF: every block type against gguf-py's dequantization, and clear errors for broken files.

mod common;
use common::*;
use specx_decoder::gguf::{GgmlType, GgufFile, GgufWriter, MetaValue, dequantize};
use specx_decoder::synthetic::{StDtype, tiny_qwen2};

#[derive(serde::Deserialize)]
struct Case {
    #[serde(rename = "type")]
    name: String,
    ggml_id: u32,
    hex: String,
    values: Vec<f32>,
}

#[derive(serde::Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn every_block_type_matches_gguf_py() {
    let text = std::fs::read_to_string(manifest_dir().join("tests/fixtures/quant_blocks.json")).unwrap();
    let fx: Fixture = serde_json::from_str(&text).unwrap();
    let mut seen = Vec::new();
    for case in &fx.cases {
        let ty = GgmlType::from_id(case.ggml_id).unwrap_or_else(|| panic!("{} unsupported", case.name));
        let bytes = unhex(&case.hex);
        let mut out = vec![0f32; case.values.len()];
        dequantize(ty, &bytes, &mut out).unwrap();
        let scale = case.values.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
        for (i, (a, b)) in out.iter().zip(&case.values).enumerate() {
            assert!((a - b).abs() <= 1e-6 * scale, "{}: value {i}: specx {a}, gguf-py {b}", case.name);
        }
        seen.push(case.name.clone());
    }
    for t in ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16", "F32"] {
        assert!(seen.iter().any(|s| s == t), "no fixture for {t}");
    }
}

#[test]
fn dequantize_refuses_a_partial_block() {
    let err = dequantize(GgmlType::Q4K, &[0u8; 100], &mut [0f32; 256]).unwrap_err();
    assert!(err.to_string().contains("bytes cannot hold"), "{err}");
}

fn write_model(dir: &std::path::Path) -> std::path::PathBuf {
    write_both(dir, &tiny_qwen2(VOCAB), 1, StDtype::F32, GgmlType::F32).1
}

#[test]
fn truncated_file_names_the_file_and_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_model(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 100]).unwrap();
    let err = format!("{:#}", GgufFile::open(&path).err().unwrap());
    assert!(err.contains("model.gguf") && err.contains("truncated") && err.contains("tensor"), "{err}");
    // Cut inside the header: still a clear message, no panic.
    std::fs::write(&path, &bytes[..40]).unwrap();
    let err = format!("{:#}", GgufFile::open(&path).err().unwrap());
    assert!(err.contains("model.gguf") && err.contains("truncated"), "{err}");
}

#[test]
fn wrong_magic_and_version_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.gguf");
    std::fs::write(&path, b"NOPE\x03\x00\x00\x00").unwrap();
    assert!(format!("{:#}", GgufFile::open(&path).err().unwrap()).contains("not a GGUF file"));
    std::fs::write(&path, b"GGUF\x09\x00\x00\x00").unwrap();
    assert!(format!("{:#}", GgufFile::open(&path).err().unwrap()).contains("version 9"));
}

#[test]
fn metadata_round_trips_and_missing_keys_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let mut w = GgufWriter::new();
    w.meta("a.u32", MetaValue::U32(7))
        .meta("a.str", MetaValue::String("qwen2".into()))
        .meta("a.arr", MetaValue::Array(vec![MetaValue::String("x".into()), MetaValue::String("y".into())]))
        .meta("a.f32", MetaValue::F32(1.5));
    w.tensor_f32("t", &[2, 3], &[1., 2., 3., 4., 5., 6.]).unwrap();
    w.write(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.u64("a.u32").unwrap(), 7);
    assert_eq!(f.str("a.str").unwrap(), "qwen2");
    assert_eq!(f.get("a.f32").unwrap().as_f64(), Some(1.5));
    let (shape, data) = f.tensor_f32("t").unwrap();
    assert_eq!((shape, data), (vec![2, 3], vec![1., 2., 3., 4., 5., 6.]));
    let err = f.u64("qwen2.block_count").unwrap_err().to_string();
    assert!(err.contains("qwen2.block_count") && err.contains("missing"), "{err}");
}

/// This crate's directory as cargo reports it when running the test (a build directory shared
/// between checkouts can hold a binary compiled in another checkout, so the compile-time value
/// is only the fallback).
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
}
