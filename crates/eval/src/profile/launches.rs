//! Kernel launches and bytes read per forward on a GPU (`specx profile --device wgpu|cuda`):
//! what tells a launch-bound path from a bandwidth-bound one. A decode step and a 5-row call
//! are counted layer by layer, after a warm-up call of the same shape (autotuning launches
//! kernels of its own on a shape's first call).

use crate::common::profile_data::{ForwardCurve, LaunchCount, ModelProfile};
use crate::report::markdown_table;
use anyhow::Result;
use specx_decoder::{KvCache, LoadedModel};

/// Row counts whose forwards are counted: a decode step and a verification of K = 4.
pub const COUNTED_ROWS: [usize; 2] = [1, 5];

/// The launches of a forward of `rows` rows of `tokens` after the `context` tokens `cache`
/// holds ([`specx_decoder::Transformer::forward_counted`]), with the bytes it must read;
/// `None` in a build without a GPU backend.
pub fn count(
    lm: &LoadedModel,
    tokens: &[u32],
    context: usize,
    rows: usize,
    cache: &mut KvCache,
) -> Result<Option<LaunchCount>> {
    let model = &lm.model;
    let Some((launches, by_kernel)) = model.forward_counted(&tokens[context..context + rows], cache)? else {
        return Ok(None);
    };
    let bytes = model.weight_bytes_per_token() + model.config().kv_bytes_per_token(context + rows);
    Ok(Some(LaunchCount {
        rows,
        context,
        attention: launches.attn,
        mlp: launches.mlp,
        lm_head: launches.lm_head,
        total: launches.total,
        bytes_read: bytes as u64,
        by_kernel,
    }))
}

/// `a` or `a-b` over a layer's counts.
fn span(v: &[u64]) -> String {
    match (v.iter().min(), v.iter().max()) {
        (Some(a), Some(b)) if a == b => a.to_string(),
        (Some(a), Some(b)) => format!("{a}-{b}"),
        _ => "-".into(),
    }
}

/// The forward curve's median seconds of `rows` rows after `context`, if measured.
fn seconds(forward: &[ForwardCurve], context: usize, rows: usize) -> Option<f64> {
    forward.iter().find(|c| c.context == context)?.seconds.get(rows - 1).copied()
}

/// The launch table (empty when no model was counted: a CPU profile), then each model's most
/// launched kernels in its one-row step.
pub fn table(models: &[ModelProfile]) -> String {
    let mut rows = Vec::new();
    for m in models {
        for c in &m.launches {
            let secs = seconds(&m.forward, c.context, c.rows);
            rows.push(vec![
                m.role.clone(),
                c.context.to_string(),
                c.rows.to_string(),
                span(&c.attention),
                span(&c.mlp),
                span(&c.per_layer()),
                c.lm_head.to_string(),
                c.total.to_string(),
                format!("{:.1}", c.bytes_read as f64 / 1e6),
                secs.map_or("-".into(), |s| format!("{:.2}", s * 1e3)),
                secs.map_or("-".into(), |s| format!("{:.1}", c.bytes_read as f64 / s / 1e9)),
            ]);
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "Kernel launches per forward (attention: norm, projections, RoPE, cache write, attention, output \
         projection, residual add; MLP: norm, MLP, residual add), and the bytes it must read (weights as stored on the \
         device, keys and values of the cache) over its median time:\n\n",
    );
    s.push_str(&markdown_table(
        &[
            "model",
            "context",
            "rows",
            "attention / layer",
            "MLP / layer",
            "layer",
            "LM head",
            "forward",
            "MB read",
            "ms",
            "GB/s",
        ],
        &rows,
    ));
    for m in models {
        if let Some(c) = m.launches.iter().find(|c| c.rows == 1) {
            let top: Vec<String> = c.by_kernel.iter().take(8).map(|(k, n)| format!("{n} x {}", short(k))).collect();
            s.push_str(&format!("\n{} one-row step, most launched kernels: {}.\n", m.role, top.join(", ")));
        }
    }
    s.push('\n');
    s
}

/// A kernel's type name without module paths (`KernelBinop<MulOp>`: an elementwise kernel's
/// one generic argument is its operation), and without its generic arguments when there are
/// several (a matmul's dozen).
fn short(name: &str) -> String {
    let (mut out, mut path) = (String::new(), String::new());
    for c in name.chars() {
        if matches!(c, '<' | '>' | ',' | ' ' | '(' | ')') {
            out.push_str(path.rsplit("::").next().unwrap_or_default());
            path.clear();
            out.push(c);
        } else {
            path.push(c);
        }
    }
    out.push_str(path.rsplit("::").next().unwrap_or_default());
    if out.contains(',') { out.split('<').next().unwrap_or_default().to_string() } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_lose_paths_and_generics() {
        assert_eq!(
            short("burn_cubecl::kernel::binary::kernel_binop::KernelBinop<burn_cubecl::kernel::binary::MulOp>"),
            "KernelBinop<MulOp>"
        );
        assert_eq!(
            short("cubek_matmul::MatmulEntry<cubek_matmul::args::TensorArgs, cubecl_core::Dyn<A>, B>"),
            "MatmulEntry"
        );
        assert_eq!(short("matmul"), "matmul");
        assert_eq!(span(&[4, 4, 4]), "4");
        assert_eq!(span(&[3, 5]), "3-5");
        assert_eq!(span(&[]), "-");
    }
}
