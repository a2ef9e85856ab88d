//! Weight sources: HF safetensors directories and GGUF files, both seen through HF tensor
//! names (`model.layers.0.self_attn.q_proj.weight`, ...) and handed out one tensor at a time
//! as f32, so peak memory stays near the size of the finished model.

use crate::config::ModelConfig;
use crate::gguf::{GgmlType, GgufFile};
use crate::quant::{QuantPart, has_native_kernel};
use anyhow::{Context, Result, anyhow, bail};
use half::{bf16, f16};
use memmap2::Mmap;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

/// A dense f32 tensor on the host, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// Where model weights come from.
pub trait WeightSource {
    /// Whether a tensor of that HF name exists.
    fn contains(&self, name: &str) -> bool;
    /// Every tensor the source holds, by HF name where it has one (else as stored), less
    /// those the configuration consumed (a GGUF's `rope_freqs.weight`).
    fn tensor_names(&self) -> Vec<String>;
    /// Loads one tensor (HF name, HF layout) as f32.
    fn load(&self, name: &str) -> Result<HostTensor>;
    /// Loads a 2-D tensor in its stored ggml block format (HF shape and row order) when it is
    /// stored in a type with a native kernel ([`crate::quant::has_native_kernel`], F32 excluded);
    /// `None` otherwise, and for sources that store no blocks.
    fn load_blocks(&self, _name: &str) -> Result<Option<(Vec<usize>, QuantPart)>> {
        Ok(None)
    }
    /// The ggml type a tensor is stored in, where the source has one (GGUF).
    fn stored_type(&self, _name: &str) -> Option<GgmlType> {
        None
    }
    /// Loads a 2-D tensor stored in 16-bit floats (safetensors F16 or BF16) as rows of the ggml
    /// type of the same bytes, as stored: a GPU's block product reads half the bytes of f32 and
    /// computes on the same values. `None` for other dtypes and other sources. The CPU does not
    /// use it (its f32 kernels are the reference path for safetensors models).
    fn load_half(&self, _name: &str) -> Result<Option<(Vec<usize>, QuantPart)>> {
        Ok(None)
    }
}

/// An HF model directory: `config.json` plus one or several `*.safetensors` files.
pub struct SafetensorsDir {
    maps: Vec<(PathBuf, Mmap)>,
    index: HashMap<String, usize>,
}

impl SafetensorsDir {
    pub fn open(dir: &Path) -> Result<Self> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("reading model directory {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        files.sort();
        if files.is_empty() {
            bail!("{}: no *.safetensors files", dir.display());
        }
        let mut maps = Vec::new();
        let mut index = HashMap::new();
        for path in files {
            let f = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
            // SAFETY: read-only map of a file specx does not modify.
            let map = unsafe { Mmap::map(&f) }.with_context(|| format!("mapping {}", path.display()))?;
            let st = SafeTensors::deserialize(&map)
                .map_err(|e| anyhow!("{}: malformed or truncated safetensors file: {e}", path.display()))?;
            for name in st.names() {
                if index.insert(name.to_string(), maps.len()).is_some() {
                    bail!("tensor '{name}' appears in two safetensors files (second: {})", path.display());
                }
            }
            maps.push((path, map));
        }
        Ok(Self { maps, index })
    }

    /// The tensor `name` and the file it is in; `None` when no file has it.
    fn view(&self, name: &str) -> Result<Option<(&Path, TensorView<'_>)>> {
        let Some(&i) = self.index.get(name) else { return Ok(None) };
        let (path, map) = &self.maps[i];
        let st = SafeTensors::deserialize(map).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        let view = st.tensor(name).map_err(|e| anyhow!("{}: tensor '{name}': {e}", path.display()))?;
        Ok(Some((path.as_path(), view)))
    }

    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.maps.iter().map(|(p, _)| p.as_path())
    }
}

impl WeightSource for SafetensorsDir {
    fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    fn tensor_names(&self) -> Vec<String> {
        self.index.keys().cloned().collect()
    }

    fn load(&self, name: &str) -> Result<HostTensor> {
        let (path, view) =
            self.view(name)?.ok_or_else(|| anyhow!("weight '{name}' is missing from the safetensors files"))?;
        let bytes = view.data();
        let data: Vec<f32> = match view.dtype() {
            Dtype::F32 => bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            Dtype::F16 => bytes.chunks_exact(2).map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            Dtype::BF16 => bytes.chunks_exact(2).map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            other => bail!("{}: tensor '{name}' has dtype {other:?}; specx reads F32, F16 and BF16", path.display()),
        };
        Ok(HostTensor { shape: view.shape().to_vec(), data })
    }

    fn load_half(&self, name: &str) -> Result<Option<(Vec<usize>, QuantPart)>> {
        let Some((_, view)) = self.view(name)? else { return Ok(None) };
        let ty = match view.dtype() {
            Dtype::F16 => GgmlType::F16,
            Dtype::BF16 => GgmlType::BF16,
            _ => return Ok(None),
        };
        let shape = view.shape().to_vec();
        if shape.len() != 2 {
            return Ok(None);
        }
        let part = QuantPart::rows(ty, shape[0], view.data().to_vec());
        Ok(Some((shape, part)))
    }
}

/// A GGUF file seen through HF names. Llama-architecture files store q/k rows permuted for
/// ggml's interleaved RoPE; they are permuted back so one RoPE implementation serves both.
pub struct GgufSource {
    pub file: GgufFile,
    arch: String,
    n_head: usize,
    n_kv_head: usize,
}

/// HF tensor names that are the same in every layer -> llama.cpp's (GGUF) names.
const FIXED_NAMES: [(&str, &str); 3] = [
    ("model.embed_tokens.weight", "token_embd.weight"),
    ("model.norm.weight", "output_norm.weight"),
    ("lm_head.weight", "output.weight"),
];

/// A layer's HF module names -> llama.cpp's (GGUF) names.
const LAYER_NAMES: [(&str, &str); 11] = [
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("self_attn.q_norm", "attn_q_norm"),
    ("self_attn.k_norm", "attn_k_norm"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
    ("input_layernorm", "attn_norm"),
    ("post_attention_layernorm", "ffn_norm"),
];

/// HF tensor name -> GGUF tensor name.
pub fn gguf_name(hf: &str) -> Option<String> {
    renamed(hf, "model.layers.", "blk.", |(h, g)| (h, g))
}

/// GGUF tensor name -> HF tensor name.
fn hf_name(gguf: &str) -> Option<String> {
    renamed(gguf, "blk.", "model.layers.", |(h, g)| (g, h))
}

/// `name` under the tables, read as `from -> to` by `pick`, its layer prefix `from_layers`
/// replaced by `to_layers`.
fn renamed(
    name: &str,
    from_layers: &str,
    to_layers: &str,
    pick: impl Fn((&'static str, &'static str)) -> (&'static str, &'static str),
) -> Option<String> {
    if let Some((_, to)) = FIXED_NAMES.iter().map(|&p| pick(p)).find(|(from, _)| *from == name) {
        return Some(to.to_string());
    }
    let (layer, rest) = name.strip_prefix(from_layers)?.split_once('.')?;
    let (module, suffix) = rest.rsplit_once('.')?;
    let (_, to) = LAYER_NAMES.iter().map(|&p| pick(p)).find(|(from, _)| *from == module)?;
    Some(format!("{to_layers}{layer}.{to}.{suffix}"))
}

/// The GGUF tensor of llama.cpp's per-frequency RoPE divisors (Llama 3.1+).
const ROPE_FREQS: &str = "rope_freqs.weight";

/// Undoes llama.cpp's HF->GGUF q/k permutation: rows were reordered from
/// (head, half, i) to (head, i, half) within each head.
/// Rows are `row_len` consecutive items (f32 values, or the bytes of a row of ggml blocks).
pub fn unpermute_qk_rows<T: Copy>(data: &mut [T], rows: usize, row_len: usize, n_head: usize) {
    permute_rows(data, rows, row_len, n_head, true)
}

/// llama.cpp's HF->GGUF q/k permutation (used to write realistic llama GGUF test files).
pub fn permute_qk_rows(data: &mut [f32], rows: usize, cols: usize, n_head: usize) {
    permute_rows(data, rows, cols, n_head, false)
}

fn permute_rows<T: Copy>(data: &mut [T], rows: usize, cols: usize, n_head: usize, inverse: bool) {
    let per_head = rows / n_head;
    let half = per_head / 2;
    let src = data.to_vec();
    for h in 0..n_head {
        for s in 0..2 {
            for i in 0..half {
                // HF row (h, s, i) is written at GGUF row (h, i, s).
                let hf_row = h * per_head + s * half + i;
                let gg_row = h * per_head + i * 2 + s;
                let (from, to) = if inverse { (gg_row, hf_row) } else { (hf_row, gg_row) };
                data[to * cols..(to + 1) * cols].copy_from_slice(&src[from * cols..(from + 1) * cols]);
            }
        }
    }
}

impl GgufSource {
    pub fn open(path: &Path) -> Result<Self> {
        let file = GgufFile::open(path)?;
        let arch = file.str("general.architecture")?.to_string();
        let n_head = file.u64(&format!("{arch}.attention.head_count"))? as usize;
        let n_kv_head =
            file.get(&format!("{arch}.attention.head_count_kv")).and_then(|v| v.as_u64()).unwrap_or(n_head as u64)
                as usize;
        Ok(Self { file, arch, n_head, n_kv_head })
    }

    /// The model configuration from GGUF metadata and tensor shapes.
    pub fn config(&self) -> Result<ModelConfig> {
        let freqs =
            if self.file.tensors.contains_key(ROPE_FREQS) { Some(self.file.tensor_f32(ROPE_FREQS)?.1) } else { None };
        ModelConfig::from_gguf(&self.file, freqs)
    }

    /// The token strings stored in the file, if any (used to compare vocabularies).
    pub fn token_list(&self) -> Option<Vec<&str>> {
        match self.file.get("tokenizer.ggml.tokens")? {
            crate::gguf::MetaValue::Array(items) => items.iter().map(|v| v.as_str()).collect(),
            _ => None,
        }
    }
}

impl WeightSource for GgufSource {
    fn contains(&self, name: &str) -> bool {
        gguf_name(name).is_some_and(|g| self.file.tensors.contains_key(&g))
    }

    fn tensor_names(&self) -> Vec<String> {
        self.file.tensors.keys().filter(|g| *g != ROPE_FREQS).map(|g| hf_name(g).unwrap_or_else(|| g.clone())).collect()
    }

    fn load(&self, name: &str) -> Result<HostTensor> {
        let g = self.gguf_name(name)?;
        let (shape, mut data) = self.file.tensor_f32(&g)?;
        if let Some(h) = self.permuted_heads(&g) {
            let cols = if shape.len() == 2 { shape[1] } else { 1 };
            unpermute_qk_rows(&mut data, shape[0], cols, h);
        }
        Ok(HostTensor { shape, data })
    }

    fn load_blocks(&self, name: &str) -> Result<Option<(Vec<usize>, QuantPart)>> {
        let g = self.gguf_name(name)?;
        let (info, ty, bytes) = self.file.tensor_bytes(&g)?;
        let shape = info.shape();
        if shape.len() != 2 || ty == GgmlType::F32 || !has_native_kernel(ty) {
            return Ok(None);
        }
        let mut data = crate::hugepages::copy_advised(bytes);
        if let Some(h) = self.permuted_heads(&g) {
            let row_bytes = data.len() / shape[0];
            unpermute_qk_rows(&mut data, shape[0], row_bytes, h);
        }
        Ok(Some((shape.clone(), QuantPart::rows(ty, shape[0], data))))
    }

    fn stored_type(&self, name: &str) -> Option<GgmlType> {
        let g = gguf_name(name)?;
        GgmlType::from_id(self.file.tensors.get(&g)?.type_id)
    }
}

impl GgufSource {
    fn gguf_name(&self, name: &str) -> Result<String> {
        gguf_name(name).ok_or_else(|| anyhow!("no GGUF name for weight '{name}'"))
    }

    /// For llama-architecture q/k tensors, the head count their rows were permuted with.
    fn permuted_heads(&self, g: &str) -> Option<usize> {
        if self.arch != "llama" {
            return None;
        }
        if g.ends_with("attn_q.weight") || g.ends_with("attn_q.bias") {
            Some(self.n_head)
        } else if g.ends_with("attn_k.weight") || g.ends_with("attn_k.bias") {
            Some(self.n_kv_head)
        } else {
            None
        }
    }
}
