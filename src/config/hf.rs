//! Hugging Face `config.json` files as models: `--model path/to/config.json` reads the file
//! people already have for LLaMA, Mistral, Qwen2 and GPT-NeoX models and maps its fields onto
//! a [`Model`]. Anything the model cannot represent is refused in one line naming the field
//! (an unknown `model_type`, a gated MLP with an activation other than SiLU, sliding-window
//! attention, a head dimension other than hidden / heads, mixture-of-experts fields).
//!
//! | config.json | model field |
//! |---|---|
//! | `num_hidden_layers` | `layers` |
//! | `hidden_size` | `hidden` |
//! | `num_attention_heads` | `heads` |
//! | `num_key_value_heads` (absent: `num_attention_heads`) | `kv_heads` |
//! | `intermediate_size` | `ffn_hidden` |
//! | `vocab_size` | `vocab` |
//! | `tie_word_embeddings` (absent: false, the four families' default) | `tied_embeddings` |
//! | `hidden_act`: `silu` with the gated MLP of llama, mistral, qwen2; `gelu*` for gpt_neox | `activation`: swiglu / gelu |
//! | family: RMSNorm for llama, mistral, qwen2; LayerNorm for gpt_neox | `norm` |
//! | `attention_dropout`, `hidden_dropout` (gpt_neox), above 0 | `dropout` |

use std::path::Path;

use serde_json::{Map, Value};

use super::{Activation, Model, Norm};
use crate::error::{Error, Result};

/// The `model_type`s this import maps.
pub const FAMILIES: [&str; 4] = ["llama", "mistral", "qwen2", "gpt_neox"];

/// Whether a parsed JSON file is a Hugging Face config (it names a `model_type`).
pub fn is_hf_config(v: &Value) -> bool {
    v.get("model_type").is_some_and(Value::is_string)
}

/// Maps a Hugging Face config onto a model; `path` names the file in errors and the source.
pub fn from_hf_config(v: &Value, path: &Path) -> Result<Model> {
    let bad = |field: &str, message: String| Error::InvalidField {
        path: path.to_path_buf(),
        field: field.to_string(),
        message,
    };
    let obj: &Map<String, Value> = v
        .as_object()
        .ok_or_else(|| bad("", "a config.json must be a JSON object".into()))?;
    let family = obj
        .get("model_type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !FAMILIES.contains(&family) {
        return Err(bad(
            "model_type",
            format!(
                "'{family}' cannot be mapped (supported: {})",
                FAMILIES.join(", ")
            ),
        ));
    }
    let count = |field: &str| -> Result<u64> {
        match obj.get(field) {
            Some(x) => x
                .as_u64()
                .filter(|&n| n > 0)
                .ok_or_else(|| bad(field, format!("must be a positive integer, got {x}"))),
            None => Err(bad(field, "is missing".into())),
        }
    };
    let flag = |field: &str| -> Result<bool> {
        match obj.get(field) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(x) => Err(bad(field, format!("must be true or false, got {x}"))),
        }
    };
    let rate = |field: &str| -> Result<f64> {
        match obj.get(field) {
            None | Some(Value::Null) => Ok(0.0),
            Some(x) => x
                .as_f64()
                .filter(|r| (0.0..1.0).contains(r))
                .ok_or_else(|| bad(field, format!("must be a rate in [0, 1), got {x}"))),
        }
    };
    // What this model cannot represent.
    for field in ["num_local_experts", "num_experts", "n_routed_experts"] {
        if obj.get(field).is_some_and(|x| !x.is_null()) {
            return Err(bad(
                field,
                "mixture-of-experts layers cannot be mapped (dense MLPs only)".into(),
            ));
        }
    }
    let sliding = match family {
        "qwen2" => flag("use_sliding_window")?,
        "mistral" => obj.get("sliding_window").is_some_and(|x| !x.is_null()),
        _ => false,
    };
    if sliding {
        let field = if family == "qwen2" {
            "use_sliding_window"
        } else {
            "sliding_window"
        };
        return Err(bad(
            field,
            "sliding-window attention cannot be mapped (metp-sim models full attention)".into(),
        ));
    }
    let layers = count("num_hidden_layers")?;
    let hidden = count("hidden_size")?;
    let heads = count("num_attention_heads")?;
    let kv_heads = match obj.get("num_key_value_heads") {
        None | Some(Value::Null) => heads,
        Some(_) => count("num_key_value_heads")?,
    };
    let ffn_hidden = count("intermediate_size")?;
    let vocab = count("vocab_size")?;
    if let Some(hd) = obj.get("head_dim").filter(|x| !x.is_null()) {
        if heads == 0 || hd.as_u64() != Some(hidden / heads) || hidden % heads != 0 {
            return Err(bad(
                "head_dim",
                format!(
                    "{hd} differs from hidden_size / num_attention_heads ({hidden} / {heads}); \
                     metp-sim's attention has head dimension hidden / heads"
                ),
            ));
        }
    }
    let act = obj.get("hidden_act").and_then(Value::as_str).unwrap_or("");
    let (activation, norm) = if family == "gpt_neox" {
        if !act.starts_with("gelu") {
            return Err(bad(
                "hidden_act",
                format!("'{act}' cannot be mapped for gpt_neox (GeLU MLPs only)"),
            ));
        }
        (Activation::Gelu, Norm::Layernorm)
    } else {
        if act != "silu" && act != "swish" {
            return Err(bad(
                "hidden_act",
                format!(
                    "'{act}' cannot be mapped: the gated MLP of {family} is modelled as SwiGLU \
                     (hidden_act silu)"
                ),
            ));
        }
        (Activation::Swiglu, Norm::Rmsnorm)
    };
    let dropout =
        rate("attention_dropout")? > 0.0 || (family == "gpt_neox" && rate("hidden_dropout")? > 0.0);
    let name = obj
        .get("_name_or_path")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| {
            path.parent()
                .and_then(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| format!("{family} model"))
        });
    let model = Model {
        name,
        layers,
        hidden,
        heads,
        kv_heads,
        ffn_hidden,
        vocab,
        activation,
        norm,
        dropout,
        tied_embeddings: flag("tie_word_embeddings")?,
        source: format!(
            "Hugging Face config.json ({}, model_type {family}) mapped by metp-sim: \
             num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads, \
             intermediate_size, vocab_size, tie_word_embeddings, hidden_act ({act}); {} by family",
            path.display(),
            match norm {
                Norm::Rmsnorm => "RMSNorm",
                Norm::Layernorm => "LayerNorm",
            }
        ),
    };
    model.validate(path)?;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(json: &str) -> Result<Model> {
        from_hf_config(
            &serde_json::from_str(json).unwrap(),
            Path::new("x/config.json"),
        )
    }

    #[test]
    fn gpt_neox_maps_to_gelu_layernorm() {
        let m = map(
            r#"{"model_type": "gpt_neox", "hidden_act": "gelu", "hidden_size": 2048,
            "num_attention_heads": 16, "num_hidden_layers": 16, "intermediate_size": 8192,
            "vocab_size": 50304, "tie_word_embeddings": false, "attention_dropout": 0.0,
            "hidden_dropout": 0.0}"#,
        )
        .unwrap();
        assert_eq!(
            (m.activation, m.norm, m.kv_heads, m.dropout, m.name.as_str()),
            (Activation::Gelu, Norm::Layernorm, 16, false, "x")
        );
    }

    #[test]
    fn what_cannot_be_mapped_is_named_in_one_line() {
        let base = r#""hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
            "intermediate_size": 14336, "vocab_size": 32000"#;
        for (json, needle) in [
            (
                format!(r#"{{"model_type": "falcon", {base}}}"#),
                "'falcon' cannot be mapped",
            ),
            (
                format!(
                    r#"{{"model_type": "mistral", "hidden_act": "silu", "sliding_window": 4096, {base}}}"#
                ),
                "sliding_window",
            ),
            (
                format!(r#"{{"model_type": "llama", "hidden_act": "gelu", {base}}}"#),
                "hidden_act",
            ),
            (
                format!(
                    r#"{{"model_type": "mistral", "hidden_act": "silu", "num_local_experts": 8, {base}}}"#
                ),
                "num_local_experts",
            ),
            (
                r#"{"model_type": "llama", "hidden_act": "silu", "hidden_size": 4096}"#.into(),
                "num_hidden_layers",
            ),
            (
                format!(
                    r#"{{"model_type": "qwen2", "hidden_act": "silu", "head_dim": 256, {base}}}"#
                ),
                "head_dim",
            ),
        ] {
            let e = map(&json).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
