//! The GGUF container: header, metadata, tensor table, and bounds-checked access to tensor
//! data in a memory-mapped file.

use super::dequant::{GgmlType, dequantize};
use anyhow::{Context, Result, anyhow, bail};
use memmap2::Mmap;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<MetaValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl MetaValue {
    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, if it is numeric.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            // The shortest decimal that round-trips the f32: a stored 1e-6 reads as 1e-6,
            // not 9.99999997e-7, so configs from GGUF and config.json compare equal.
            Self::F32(v) => v.to_string().parse().ok(),
            Self::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }
}

/// One entry of the tensor table.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions in ggml order: the first is the innermost (contiguous) one.
    pub dims: Vec<u64>,
    /// ggml type id (see [`GgmlType::from_id`]).
    pub type_id: u32,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// Shape in row-major order (outermost first), as HF and burn write it.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    pub fn num_elements(&self) -> usize {
        self.dims.iter().product::<u64>() as usize
    }
}

/// An opened, validated GGUF file.
pub struct GgufFile {
    path: PathBuf,
    map: Mmap,
    pub version: u32,
    pub metadata: BTreeMap<String, MetaValue>,
    pub tensors: BTreeMap<String, TensorInfo>,
    data_start: usize,
}

/// A little-endian cursor that reports where it ran out of bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or_else(|| {
            anyhow!(
                "file ends at byte {} while reading {what} ({n} bytes at offset {}): truncated or not GGUF",
                self.bytes.len(),
                self.pos
            )
        })?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2, what)?.try_into().unwrap()))
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64(what)?;
        if len > self.bytes.len() as u64 {
            bail!("{what}: string length {len} at offset {} exceeds the file size", self.pos - 8);
        }
        let raw = self.take(len as usize, what)?;
        String::from_utf8(raw.to_vec()).with_context(|| format!("{what}: not UTF-8"))
    }
    fn value(&mut self, type_id: u32, what: &str, depth: usize) -> Result<MetaValue> {
        Ok(match type_id {
            0 => MetaValue::U8(self.u8(what)?),
            1 => MetaValue::I8(self.u8(what)? as i8),
            2 => MetaValue::U16(self.u16(what)?),
            3 => MetaValue::I16(self.u16(what)? as i16),
            4 => MetaValue::U32(self.u32(what)?),
            5 => MetaValue::I32(self.u32(what)? as i32),
            6 => MetaValue::F32(f32::from_bits(self.u32(what)?)),
            7 => MetaValue::Bool(self.u8(what)? != 0),
            8 => MetaValue::String(self.string(what)?),
            9 => {
                if depth > 4 {
                    bail!("{what}: arrays nested too deeply");
                }
                let item_type = self.u32(what)?;
                let len = self.u64(what)?;
                if len > (self.bytes.len() - self.pos) as u64 {
                    bail!("{what}: array of {len} items cannot fit in the rest of the file");
                }
                let mut items = Vec::with_capacity(len as usize);
                for _ in 0..len {
                    items.push(self.value(item_type, what, depth + 1)?);
                }
                MetaValue::Array(items)
            }
            10 => MetaValue::U64(self.u64(what)?),
            11 => MetaValue::I64(self.u64(what)? as i64),
            12 => MetaValue::F64(f64::from_bits(self.u64(what)?)),
            other => bail!("{what}: unknown metadata value type {other} at offset {}", self.pos),
        })
    }
}

impl GgufFile {
    /// Opens and validates `path`: header, metadata, tensor table, and that every tensor's
    /// data lies inside the file. Errors name the file and what is wrong.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        Self::open_inner(path).with_context(|| format!("GGUF file {}", path.display()))
    }

    fn open_inner(path: &Path) -> Result<Self> {
        let file = File::open(path).context("cannot open")?;
        // SAFETY: the map is read-only; specx never writes model files while they are open.
        let map = unsafe { Mmap::map(&file) }.context("cannot memory-map")?;
        let mut c = Cursor { bytes: &map, pos: 0 };
        let magic = c.take(4, "magic")?;
        if magic != MAGIC {
            bail!("not a GGUF file (magic {magic:?}, expected \"GGUF\")");
        }
        let version = c.u32("version")?;
        if !(2..=3).contains(&version) {
            bail!("GGUF version {version} is not supported (2 and 3 are)");
        }
        let n_tensors = c.u64("tensor count")?;
        let n_kv = c.u64("metadata count")?;
        if n_tensors > 1 << 24 || n_kv > 1 << 24 {
            bail!("implausible header: {n_tensors} tensors, {n_kv} metadata entries");
        }
        let mut metadata = BTreeMap::new();
        for i in 0..n_kv {
            let key = c.string(&format!("metadata key #{i}"))?;
            let ty = c.u32(&format!("type of metadata '{key}'"))?;
            let value = c.value(ty, &format!("metadata '{key}'"), 0)?;
            if metadata.insert(key.clone(), value).is_some() {
                bail!("metadata key '{key}' appears twice");
            }
        }
        let mut tensors = BTreeMap::new();
        for i in 0..n_tensors {
            let name = c.string(&format!("name of tensor #{i}"))?;
            let what = format!("tensor '{name}'");
            let n_dims = c.u32(&what)?;
            if n_dims == 0 || n_dims > 4 {
                bail!("{what}: {n_dims} dimensions (1 to 4 expected)");
            }
            let dims = (0..n_dims).map(|_| c.u64(&what)).collect::<Result<Vec<_>>>()?;
            let type_id = c.u32(&what)?;
            let offset = c.u64(&what)?;
            let info = TensorInfo { name: name.clone(), dims, type_id, offset };
            if tensors.insert(name.clone(), info).is_some() {
                bail!("tensor '{name}' appears twice");
            }
        }
        let alignment = match metadata.get("general.alignment") {
            Some(v) => v
                .as_u64()
                .filter(|&a| a > 0 && a.is_power_of_two())
                .ok_or_else(|| anyhow!("general.alignment = {v:?} is not a power of two"))?,
            None => DEFAULT_ALIGNMENT,
        };
        let data_start = (c.pos as u64).div_ceil(alignment) * alignment;
        let file_len = map.len() as u64;
        for t in tensors.values() {
            let nbytes = match GgmlType::from_id(t.type_id) {
                Some(ty) => ty.byte_size(t.num_elements()).with_context(|| format!("tensor '{}'", t.name))?,
                None => continue, // reported if the tensor is ever loaded
            } as u64;
            let end = data_start + t.offset + nbytes;
            if end > file_len {
                bail!("truncated: tensor '{}' needs bytes up to {end} but the file has {file_len} bytes", t.name);
            }
        }
        Ok(Self { path: path.to_path_buf(), map, version, metadata, tensors, data_start: data_start as usize })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.get(key)
    }

    /// A required unsigned metadata value.
    pub fn u64(&self, key: &str) -> Result<u64> {
        self.get(key)
            .ok_or_else(|| anyhow!("{}: metadata '{key}' is missing", self.path.display()))?
            .as_u64()
            .ok_or_else(|| anyhow!("{}: metadata '{key}' is not an unsigned integer", self.path.display()))
    }

    /// A required string metadata value.
    pub fn str(&self, key: &str) -> Result<&str> {
        self.get(key)
            .ok_or_else(|| anyhow!("{}: metadata '{key}' is missing", self.path.display()))?
            .as_str()
            .ok_or_else(|| anyhow!("{}: metadata '{key}' is not a string", self.path.display()))
    }

    /// The raw bytes of a tensor.
    pub fn tensor_bytes(&self, name: &str) -> Result<(&TensorInfo, GgmlType, &[u8])> {
        let info =
            self.tensors.get(name).ok_or_else(|| anyhow!("{}: tensor '{name}' is missing", self.path.display()))?;
        let ty = GgmlType::from_id(info.type_id).ok_or_else(|| {
            anyhow!(
                "{}: tensor '{name}' has ggml type {} which specx cannot dequantize \
                 (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)",
                self.path.display(),
                info.type_id
            )
        })?;
        let start = self.data_start + info.offset as usize;
        let len = ty.byte_size(info.num_elements())?;
        Ok((info, ty, &self.map[start..start + len]))
    }

    /// A tensor dequantized to f32, with its row-major shape.
    pub fn tensor_f32(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        let (info, ty, bytes) = self.tensor_bytes(name)?;
        let mut out = vec![0f32; info.num_elements()];
        dequantize(ty, bytes, &mut out).with_context(|| format!("{}: tensor '{name}'", self.path.display()))?;
        Ok((info.shape(), out))
    }
}
