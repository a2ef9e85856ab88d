//! A small GGUF v3 writer: enough to save synthetic test models and fixtures.

use super::dequant::GgmlType;
use super::reader::MetaValue;
use anyhow::{Context, Result, bail};
use std::path::Path;

const ALIGNMENT: usize = 32;

/// Collects metadata and tensors in memory, then writes them in one go.
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<(String, Vec<u64>, GgmlType, Vec<u8>)>,
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn meta(&mut self, key: &str, value: MetaValue) -> &mut Self {
        self.metadata.push((key.to_string(), value));
        self
    }

    /// Adds an f32 tensor with a row-major `shape` (outermost first).
    pub fn tensor_f32(&mut self, name: &str, shape: &[usize], data: &[f32]) -> Result<&mut Self> {
        let bytes = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor_raw(name, shape, GgmlType::F32, bytes)
    }

    /// Adds a tensor already encoded as `ty` blocks.
    pub fn tensor_raw(&mut self, name: &str, shape: &[usize], ty: GgmlType, bytes: Vec<u8>) -> Result<&mut Self> {
        let n: usize = shape.iter().product();
        if ty.byte_size(n)? != bytes.len() {
            bail!("tensor '{name}': {} bytes do not hold {n} {ty:?} values", bytes.len());
        }
        let dims = shape.iter().rev().map(|&d| d as u64).collect();
        self.tensors.push((name.to_string(), dims, ty, bytes));
        Ok(self)
    }

    /// Writes the file (atomically: a temporary file renamed into place).
    pub fn write(&self, path: &Path) -> Result<()> {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_string(&mut out, key);
            put_value(&mut out, value, true);
        }
        let mut offset = 0usize;
        for (name, dims, ty, bytes) in &self.tensors {
            put_string(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&ty.id().to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offset += bytes.len().div_ceil(ALIGNMENT) * ALIGNMENT;
        }
        for (_, _, _, bytes) in &self.tensors {
            out.resize(out.len().div_ceil(ALIGNMENT) * ALIGNMENT, 0);
            out.extend_from_slice(bytes);
        }
        crate::fsutil::write_atomic(path, &out).with_context(|| format!("writing {}", path.display()))
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn type_id(v: &MetaValue) -> u32 {
    match v {
        MetaValue::U8(_) => 0,
        MetaValue::I8(_) => 1,
        MetaValue::U16(_) => 2,
        MetaValue::I16(_) => 3,
        MetaValue::U32(_) => 4,
        MetaValue::I32(_) => 5,
        MetaValue::F32(_) => 6,
        MetaValue::Bool(_) => 7,
        MetaValue::String(_) => 8,
        MetaValue::Array(_) => 9,
        MetaValue::U64(_) => 10,
        MetaValue::I64(_) => 11,
        MetaValue::F64(_) => 12,
    }
}

fn put_value(out: &mut Vec<u8>, v: &MetaValue, with_type: bool) {
    if with_type {
        out.extend_from_slice(&type_id(v).to_le_bytes());
    }
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.push(*x as u8),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(*x as u8),
        MetaValue::String(s) => put_string(out, s),
        MetaValue::Array(items) => {
            let item_type = items.first().map_or(4, type_id);
            out.extend_from_slice(&item_type.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value(out, item, false);
            }
        }
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}
