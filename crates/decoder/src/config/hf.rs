//! Reading an HF `config.json`: the fields specx computes with, and a refusal by name of every
//! field that would change the arithmetic in a way specx does not implement (so a model never
//! runs silently wrong).

use super::rope::RopeScaling;
use super::{ModelConfig, SUPPORTED_ARCHITECTURES};
use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Map, Value};
use std::path::Path;

impl ModelConfig {
    /// Reads an HF `config.json`. Qwen2 always has q/k/v biases; Llama has them when
    /// `attention_bias` says so. The loader re-checks both against the weights present.
    pub fn from_hf_json(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let hf: Value = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let hf = hf.as_object().ok_or_else(|| anyhow!("{}: not a JSON object", path.display()))?;
        from_hf(hf).with_context(|| format!("{}", path.display()))
    }
}

fn from_hf(hf: &Map<String, Value>) -> Result<ModelConfig> {
    let architecture = match hf.get("model_type").and_then(Value::as_str) {
        Some("qwen2") => "qwen2",
        Some("qwen3") => "qwen3",
        Some("llama") | Some("mistral") | None => "llama",
        Some(other) => bail!(
            "model_type '{other}' is not a family specx runs ({SUPPORTED_ARCHITECTURES}; docs/guide/models.md lists \
             what each refusal means)"
        ),
    };
    refuse_unimplemented(hf)?;
    let usize_of = |key: &str| -> Result<Option<usize>> {
        match hf.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => {
                v.as_u64().map(|v| Some(v as usize)).ok_or_else(|| anyhow!("'{key}' is not a whole number: {v}"))
            }
        }
    };
    let need = |key: &str| usize_of(key)?.ok_or_else(|| anyhow!("'{key}' is missing"));
    let f64_of = |key: &str| hf.get(key).and_then(Value::as_f64);
    let bool_of = |key: &str| hf.get(key).and_then(Value::as_bool);
    let heads = need("num_attention_heads")?;
    let hidden = need("hidden_size")?;
    let head_dim = usize_of("head_dim")?.unwrap_or(hidden / heads.max(1));
    // transformers 5 writes `rope_parameters` (theta inside); earlier versions `rope_scaling`
    // beside `rope_theta`.
    let rope = rope_object(hf);
    let rope_theta = f64_of("rope_theta").or_else(|| rope.and_then(|r| r.get("rope_theta")).and_then(Value::as_f64));
    let rope_scaling = match rope {
        Some(r) => rope_scaling(r)?,
        None => RopeScaling::None,
    };
    let eos_token_ids = match hf.get("eos_token_id") {
        Some(Value::Number(n)) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_u64).map(|v| v as u32).collect(),
        _ => vec![],
    };
    let cfg = ModelConfig {
        architecture: architecture.to_string(),
        vocab_size: need("vocab_size")?,
        hidden_size: hidden,
        intermediate_size: need("intermediate_size")?,
        num_hidden_layers: need("num_hidden_layers")?,
        num_attention_heads: heads,
        num_key_value_heads: usize_of("num_key_value_heads")?.unwrap_or(heads),
        head_dim,
        rope_theta: rope_theta.unwrap_or(10_000.0),
        rope_scaling,
        rms_norm_eps: f64_of("rms_norm_eps").unwrap_or(1e-6),
        max_position_embeddings: usize_of("max_position_embeddings")?.unwrap_or(32_768),
        sliding_window: sliding_window(hf, architecture)?,
        attention_bias: architecture == "qwen2" || bool_of("attention_bias").unwrap_or(false),
        qk_norm: architecture == "qwen3",
        tie_word_embeddings: bool_of("tie_word_embeddings").unwrap_or(false),
        bos_token_id: usize_of("bos_token_id")?.map(|v| v as u32),
        eos_token_ids,
    };
    cfg.validate()?;
    Ok(cfg)
}

/// The RoPE parameters, where the config has any: `rope_scaling`, else transformers 5's
/// `rope_parameters`.
fn rope_object(hf: &Map<String, Value>) -> Option<&Map<String, Value>> {
    ["rope_scaling", "rope_parameters"].iter().find_map(|k| hf.get(*k).and_then(Value::as_object))
}

/// The scaling an HF RoPE object asks for (`rope_type`, or `type` in older configs).
fn rope_scaling(r: &Map<String, Value>) -> Result<RopeScaling> {
    let kind = r.get("rope_type").or_else(|| r.get("type")).and_then(Value::as_str).unwrap_or("default");
    let num = |key: &str| {
        r.get(key).and_then(Value::as_f64).ok_or_else(|| anyhow!("rope_scaling of type '{kind}' has no number '{key}'"))
    };
    if r.get("partial_rotary_factor").and_then(Value::as_f64).is_some_and(|f| f != 1.0) {
        bail!(
            "rope's partial_rotary_factor is set: specx rotates every value of a head (partial rotation is not implemented)"
        );
    }
    Ok(match kind {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: num("factor")? },
        "llama3" => RopeScaling::Llama3 {
            factor: num("factor")?,
            low_freq_factor: num("low_freq_factor")?,
            high_freq_factor: num("high_freq_factor")?,
            original_max_position_embeddings: num("original_max_position_embeddings")?,
        },
        other => bail!(
            "rope_scaling type '{other}' is not implemented (specx runs default, linear and llama3 RoPE); running it \
             with plain RoPE would compute wrong angles"
        ),
    })
}

/// The attention window, where the config enables one. Qwen configs carry a `sliding_window`
/// that only `use_sliding_window: true` turns on; Mistral's is on whenever it is a number;
/// transformers 5 also lists `layer_types`.
fn sliding_window(hf: &Map<String, Value>, architecture: &str) -> Result<Option<usize>> {
    let window = hf.get("sliding_window").and_then(Value::as_u64).map(|v| v as usize);
    let sliding_layers = hf
        .get("layer_types")
        .and_then(Value::as_array)
        .is_some_and(|types| types.iter().any(|t| t.as_str() == Some("sliding_attention")));
    let on = match architecture {
        "qwen2" | "qwen3" => hf.get("use_sliding_window").and_then(Value::as_bool) == Some(true) || sliding_layers,
        _ => window.is_some(),
    };
    if !on {
        return Ok(None);
    }
    window.map(Some).ok_or_else(|| anyhow!("sliding-window attention is on but 'sliding_window' is not a number"))
}

/// Fields whose presence changes a forward in ways specx does not implement, each refused by
/// its name: `(key, what specx would have to do)`. A key counts when it is set to anything
/// but null, false, 0 or (for factors) 1.
const UNIMPLEMENTED: &[(&str, &str)] = &[
    ("attn_logit_softcapping", "soft-capping of attention scores"),
    ("final_logit_softcapping", "soft-capping of the output logits"),
    ("num_experts", "a mixture of experts"),
    ("num_local_experts", "a mixture of experts"),
    ("n_routed_experts", "a mixture of experts"),
    ("mlp_bias", "biases in the MLP's projections"),
    ("partial_rotary_factor", "RoPE on part of a head"),
    ("query_pre_attn_scalar", "attention scores scaled by a configured scalar"),
    ("embedding_multiplier", "a scaled embedding"),
    ("logits_scaling", "scaled output logits"),
    ("residual_multiplier", "a scaled residual stream"),
    ("attention_multiplier", "a configured attention scale"),
];

fn refuse_unimplemented(hf: &Map<String, Value>) -> Result<()> {
    for (key, what) in UNIMPLEMENTED {
        let set = match hf.get(*key) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::Number(n)) => {
                let v = n.as_f64().unwrap_or(0.0);
                v != 0.0 && !(v == 1.0 && key.ends_with("factor"))
            }
            Some(_) => true,
        };
        if set {
            bail!("'{key}' is set: it asks for {what}, which specx does not implement");
        }
    }
    if let Some(act) = hf.get("hidden_act").or_else(|| hf.get("hidden_activation")).and_then(Value::as_str)
        && act != "silu"
    {
        bail!("hidden_act '{act}': specx's MLP is SwiGLU (silu); another activation is not implemented");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Map<String, Value> {
        serde_json::json!({
            "model_type": "llama", "vocab_size": 32, "hidden_size": 16, "intermediate_size": 32,
            "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
            "hidden_act": "silu", "rope_theta": 500000.0, "max_position_embeddings": 256
        })
        .as_object()
        .unwrap()
        .clone()
    }

    fn with(key: &str, v: Value) -> Map<String, Value> {
        let mut m = base();
        m.insert(key.into(), v);
        m
    }

    fn err(m: Map<String, Value>) -> String {
        format!("{:#}", from_hf(&m).unwrap_err())
    }

    #[test]
    fn llama3_rope_scaling_is_read_from_either_spelling() {
        let scaling = serde_json::json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64});
        let old = from_hf(&with("rope_scaling", scaling.clone())).unwrap();
        let mut params = scaling.as_object().unwrap().clone();
        params.insert("rope_theta".into(), 500000.0.into());
        let mut new = base();
        new.remove("rope_theta");
        new.insert("rope_parameters".into(), Value::Object(params));
        let new = from_hf(&new).unwrap();
        assert_eq!(old, new);
        assert_eq!(
            old.rope_scaling,
            RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 64.0
            }
        );
        assert_eq!(new.rope_theta, 500000.0);
    }

    #[test]
    fn every_unimplemented_field_is_refused_by_name() {
        for (key, _) in UNIMPLEMENTED {
            let e = err(with(key, 2.0.into()));
            assert!(e.contains(key) && e.contains("does not implement"), "{key}: {e}");
        }
        for kind in ["yarn", "dynamic", "longrope", "su"] {
            let e = err(with("rope_scaling", serde_json::json!({"rope_type": kind, "factor": 4.0})));
            assert!(e.contains(kind) && e.contains("not implemented"), "{e}");
        }
        assert!(err(with("hidden_act", "gelu_pytorch_tanh".into())).contains("gelu_pytorch_tanh"));
        for family in ["gemma2", "gemma3_text", "phi3", "mixtral"] {
            assert!(err(with("model_type", family.into())).contains(family));
        }
        // Unset, null, false and neutral factors pass.
        for (key, v) in
            [("mlp_bias", Value::Bool(false)), ("partial_rotary_factor", 1.0.into()), ("num_experts", 0.into())]
        {
            from_hf(&with(key, v)).unwrap();
        }
        from_hf(&with("final_logit_softcapping", Value::Null)).unwrap();
    }

    #[test]
    fn sliding_windows_are_read_where_they_are_on() {
        assert_eq!(from_hf(&with("sliding_window", 4096.into())).unwrap().sliding_window, Some(4096));
        assert_eq!(from_hf(&with("sliding_window", Value::Null)).unwrap().sliding_window, None);
        let mut qwen = with("model_type", "qwen2".into());
        qwen.insert("sliding_window".into(), 4096.into());
        qwen.insert("use_sliding_window".into(), false.into());
        assert_eq!(from_hf(&qwen).unwrap().sliding_window, None);
        qwen.insert("use_sliding_window".into(), true.into());
        assert_eq!(from_hf(&qwen).unwrap().sliding_window, Some(4096));
    }
}
