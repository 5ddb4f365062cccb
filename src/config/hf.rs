//! Hugging Face `config.json` files as models: `--model path/to/config.json` reads the file
//! people already have for LLaMA, Mistral, Qwen2 and GPT-NeoX models and maps its fields onto
//! a [`Model`]. Each family reads only the fields its architecture has (GPT-NeoX has no
//! grouped-query attention, so a `num_key_value_heads` in its file is not read). Anything the
//! model cannot represent is refused in one line naming the field: an unknown `model_type`
//! (with the reason for the known ones: mixture-of-experts families, Gemma's alternating
//! local/global attention), any mixture-of-experts field, a gated MLP with an activation other
//! than SiLU, a head dimension other than hidden / heads.
//!
//! | config.json | model field | families |
//! |---|---|---|
//! | `num_hidden_layers` | `layers` | all |
//! | `hidden_size` | `hidden` | all |
//! | `num_attention_heads` | `heads` | all |
//! | `num_key_value_heads` (absent: `num_attention_heads`) | `kv_heads` | llama, mistral, qwen2 (gpt_neox: `heads`) |
//! | `head_dim` (must be hidden / heads when present) | — | llama, mistral, qwen2 |
//! | `intermediate_size` | `ffn_hidden` | all |
//! | `vocab_size` | `vocab` | all |
//! | `tie_word_embeddings` (absent: false) | `tied_embeddings` | all |
//! | `hidden_act` (absent: the family's transformers default, silu or gelu): `silu` with the gated MLP; `gelu*` for gpt_neox | `activation`: swiglu / gelu | all |
//! | family: RMSNorm for llama, mistral, qwen2; LayerNorm for gpt_neox | `norm` | all |
//! | `attention_dropout` (gpt_neox also `attention_probs_dropout_prob`, `hidden_dropout`, `hidden_dropout_prob`), above 0 | `dropout` | all |
//! | `attention_bias` (Q, K, V, output), `mlp_bias` | `biases` | llama |
//! | always Q, K, V biases | `biases.qkv` | qwen2 |
//! | `attention_bias` (absent: true) for Q, K, V and output; MLP biases always | `biases` | gpt_neox |
//! | `sliding_window` (null: none) | `sliding_window` | mistral |
//! | `sliding_window` when `use_sliding_window` is true and `max_window_layers` < layers | `sliding_window` | qwen2 |
//! | family: rotary position embedding (GPT-NeoX: on `rotary_pct` of each head, priced whole) | `rotary` (true) | all |
//!
//! A sliding window is modelled exactly where it does not bind: a workload longer than the
//! window is refused (`Workload::validate`), since metp-sim models full attention.

use std::path::Path;

use serde_json::{Map, Value};

use super::{Activation, LinearBiases, Model, Norm};
use crate::error::{Error, Result};

/// The `model_type`s this import maps.
pub const FAMILIES: [&str; 4] = ["llama", "mistral", "qwen2", "gpt_neox"];

/// Fields that only a mixture-of-experts config has (Mixtral, Qwen-MoE, DeepSeek-MoE, DBRX,
/// …): any of them with a value other than null, 0 or false refuses the file.
pub const MOE_FIELDS: [&str; 11] = [
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "first_k_dense_replace",
    "n_shared_experts",
    "moe_layer_freq",
    "shared_expert_intermediate_size",
    "decoder_sparse_step",
    "moe_num_experts",
];

/// Known `model_type`s this import refuses, and why (anything else: "cannot be mapped").
const REFUSED_FAMILIES: [(&str, &str); 7] = [
    ("mixtral", "a mixture-of-experts model"),
    ("qwen2_moe", "a mixture-of-experts model"),
    (
        "deepseek_v2",
        "a mixture-of-experts model with latent attention",
    ),
    (
        "deepseek_v3",
        "a mixture-of-experts model with latent attention",
    ),
    ("dbrx", "a mixture-of-experts model"),
    (
        "gemma2",
        "its layers alternate sliding-window (local) and global attention",
    ),
    (
        "gemma3_text",
        "its layers alternate sliding-window (local) and global attention",
    ),
];

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
    // Mixture of experts first, whatever the family says: a dense reading would be wrong.
    for field in MOE_FIELDS {
        let moe = match obj.get(field) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(x) => x.as_f64() != Some(0.0),
        };
        if moe {
            return Err(bad(
                field,
                "mixture-of-experts layers are not modelled (metp-sim models dense MLPs only)"
                    .into(),
            ));
        }
    }
    let family = obj
        .get("model_type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !FAMILIES.contains(&family) {
        let why = REFUSED_FAMILIES
            .iter()
            .find(|(f, _)| *f == family)
            .map(|(_, why)| format!(", {why}"))
            .unwrap_or_default();
        return Err(bad(
            "model_type",
            format!(
                "'{family}' cannot be mapped{why} (supported: {})",
                FAMILIES.join(", ")
            ),
        ));
    }
    let neox = family == "gpt_neox";
    let count = |field: &str| -> Result<u64> {
        match obj.get(field) {
            Some(x) => x
                .as_u64()
                .filter(|&n| n > 0)
                .ok_or_else(|| bad(field, format!("must be a positive integer, got {x}"))),
            None => Err(bad(field, "is missing".into())),
        }
    };
    let flag_or = |field: &str, default: bool| -> Result<bool> {
        match obj.get(field) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(x) => Err(bad(field, format!("must be true or false, got {x}"))),
        }
    };
    let flag = |field: &str| flag_or(field, false);
    let rate = |field: &str| -> Result<f64> {
        match obj.get(field) {
            None | Some(Value::Null) => Ok(0.0),
            Some(x) => x
                .as_f64()
                .filter(|r| (0.0..1.0).contains(r))
                .ok_or_else(|| bad(field, format!("must be a rate in [0, 1), got {x}"))),
        }
    };
    let layers = count("num_hidden_layers")?;
    let hidden = count("hidden_size")?;
    let heads = count("num_attention_heads")?;
    // GPT-NeoX has no grouped-query attention: its K/V heads are its heads.
    let kv_heads = match obj.get("num_key_value_heads") {
        _ if neox => heads,
        None | Some(Value::Null) => heads,
        Some(_) => count("num_key_value_heads")?,
    };
    let ffn_hidden = count("intermediate_size")?;
    let vocab = count("vocab_size")?;
    if let Some(hd) = obj.get("head_dim").filter(|x| !x.is_null() && !neox) {
        if hd.as_u64() != Some(hidden / heads) || !hidden.is_multiple_of(heads) {
            return Err(bad(
                "head_dim",
                format!(
                    "{hd} differs from hidden_size / num_attention_heads ({hidden} / {heads}); \
                     metp-sim's attention has head dimension hidden / heads"
                ),
            ));
        }
    }
    // Absent, the family's default in transformers' config classes (LlamaConfig, MistralConfig,
    // Qwen2Config: silu; GPTNeoXConfig: gelu), as transformers itself would read the file.
    let act = match obj.get("hidden_act") {
        None => {
            if neox {
                "gelu"
            } else {
                "silu"
            }
        }
        Some(v) => v
            .as_str()
            .ok_or_else(|| bad("hidden_act", format!("must be a string, got {v}")))?,
    };
    let (activation, norm) = if neox {
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
    let dropout = if neox {
        rate("attention_dropout")? > 0.0
            || rate("attention_probs_dropout_prob")? > 0.0
            || rate("hidden_dropout")? > 0.0
            || rate("hidden_dropout_prob")? > 0.0
    } else {
        rate("attention_dropout")? > 0.0
    };
    let biases = match family {
        "llama" => {
            let attention = flag("attention_bias")?;
            LinearBiases {
                qkv: attention,
                attention_out: attention,
                mlp: flag("mlp_bias")?,
            }
        }
        // Qwen2's Q, K and V projections always carry a bias; its output and MLP never do.
        "qwen2" => LinearBiases {
            qkv: true,
            ..LinearBiases::default()
        },
        "gpt_neox" => {
            let attention = flag_or("attention_bias", true)?;
            LinearBiases {
                qkv: attention,
                attention_out: attention,
                mlp: true,
            }
        }
        _ => LinearBiases::default(),
    };
    let window = |field: &str| -> Result<Option<u64>> {
        match obj.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => count(field).map(Some),
        }
    };
    let sliding_window = match family {
        "mistral" => window("sliding_window")?,
        // Qwen2 applies its window from layer `max_window_layers` on, and only when
        // `use_sliding_window` says so.
        "qwen2" if flag("use_sliding_window")? => {
            let from = match obj.get("max_window_layers") {
                None | Some(Value::Null) => 0,
                Some(_) => count("max_window_layers")?,
            };
            if from < layers {
                Some(window("sliding_window")?.ok_or_else(|| {
                    bad(
                        "sliding_window",
                        "is missing although use_sliding_window is true".into(),
                    )
                })?)
            } else {
                None
            }
        }
        _ => None,
    };
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
    let read = match family {
        "llama" => "num_key_value_heads, head_dim, attention_dropout, attention_bias, mlp_bias",
        "mistral" => "num_key_value_heads, head_dim, attention_dropout, sliding_window",
        "qwen2" => {
            "num_key_value_heads, head_dim, attention_dropout, use_sliding_window, \
             max_window_layers, sliding_window; Q/K/V biases by family"
        }
        _ => {
            "attention_dropout, attention_probs_dropout_prob, hidden_dropout, \
             hidden_dropout_prob, attention_bias; MLP biases by family, K/V heads = heads"
        }
    };
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
        biases,
        sliding_window,
        // Every family this import maps rotates its queries and keys (GPT-NeoX only the
        // `rotary_pct` share of each head; the pass is priced over whole heads).
        rotary: true,
        source: format!(
            "Hugging Face config.json ({}, model_type {family}) mapped by metp-sim: \
             num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, vocab_size, \
             tie_word_embeddings, hidden_act ({act}{}), {read}; {} by family",
            path.display(),
            if obj.contains_key("hidden_act") {
                ""
            } else {
                ", the family's default"
            },
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
    fn gpt_neox_maps_to_gelu_layernorm_with_biases() {
        let m = map(
            r#"{"model_type": "gpt_neox", "hidden_act": "gelu", "hidden_size": 2048,
            "num_attention_heads": 16, "num_hidden_layers": 16, "intermediate_size": 8192,
            "vocab_size": 50304, "tie_word_embeddings": false, "attention_dropout": 0.0,
            "hidden_dropout": 0.0, "num_key_value_heads": 4}"#,
        )
        .unwrap();
        assert_eq!(
            (m.activation, m.norm, m.kv_heads, m.dropout, m.name.as_str()),
            (Activation::Gelu, Norm::Layernorm, 16, false, "x")
        );
        assert_eq!(
            m.biases,
            LinearBiases {
                qkv: true,
                attention_out: true,
                mlp: true
            }
        );
    }

    #[test]
    fn what_cannot_be_mapped_is_named_in_one_line() {
        let base = r#""hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
            "intermediate_size": 14336, "vocab_size": 32000"#;
        for (json, needle) in [
            (
                format!(r#"{{"model_type": "falcon", {base}}}"#),
                "'falcon' cannot be mapped (supported",
            ),
            (
                format!(r#"{{"model_type": "gemma2", {base}}}"#),
                "alternate sliding-window (local) and global attention",
            ),
            (
                format!(r#"{{"model_type": "llama", "hidden_act": "gelu", {base}}}"#),
                "hidden_act",
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
            (
                format!(
                    r#"{{"model_type": "mistral", "hidden_act": "silu", "sliding_window": 0, {base}}}"#
                ),
                "sliding_window",
            ),
        ] {
            let e = map(&json).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    /// A config without `hidden_act` takes its family's default as transformers does (llama:
    /// silu → SwiGLU; gpt_neox: gelu) and says so in the source; a non-string is refused.
    #[test]
    fn hidden_act_absent_is_the_familys_default() {
        let llama = r#"{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
            "num_hidden_layers": 32, "intermediate_size": 11008, "vocab_size": 32000}"#;
        let m = map(llama).unwrap();
        assert_eq!(m.activation, Activation::Swiglu);
        assert!(
            m.source.contains("silu, the family's default"),
            "{}",
            m.source
        );
        let neox = r#"{"model_type": "gpt_neox", "hidden_size": 2048, "num_attention_heads": 16,
            "num_hidden_layers": 24, "intermediate_size": 8192, "vocab_size": 50304}"#;
        assert_eq!(map(neox).unwrap().activation, Activation::Gelu);
        let e = map(&llama.replace("\"hidden_size\"", "\"hidden_act\": 3, \"hidden_size\""))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("hidden_act") && e.contains("must be a string"),
            "{e}"
        );
    }

    /// Every mixture-of-experts field refuses the file, in any family; null, 0 and false are
    /// dense configs' way of saying "none".
    #[test]
    fn any_mixture_of_experts_field_is_refused() {
        let base = r#""model_type": "llama", "hidden_act": "silu", "hidden_size": 4096,
            "num_attention_heads": 32, "num_hidden_layers": 32, "intermediate_size": 14336,
            "vocab_size": 32000"#;
        for field in MOE_FIELDS {
            let e = map(&format!(r#"{{{base}, "{field}": 2}}"#))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(field) && e.contains("mixture-of-experts") && !e.contains('\n'),
                "{e}"
            );
            for none in ["null", "0", "false"] {
                map(&format!(r#"{{{base}, "{field}": {none}}}"#)).unwrap();
            }
        }
    }

    /// Qwen2's window counts only when `use_sliding_window` is true and some layer is at or
    /// beyond `max_window_layers`.
    #[test]
    fn qwen2_reads_its_window_only_when_it_applies() {
        let base = r#""model_type": "qwen2", "hidden_act": "silu", "hidden_size": 3584,
            "num_attention_heads": 28, "num_key_value_heads": 4, "num_hidden_layers": 28,
            "intermediate_size": 18944, "vocab_size": 152064, "sliding_window": 4096"#;
        let window = |extra: &str| map(&format!("{{{base}{extra}}}")).unwrap().sliding_window;
        assert_eq!(window(""), None);
        assert_eq!(window(r#", "use_sliding_window": false"#), None);
        assert_eq!(
            window(r#", "use_sliding_window": true, "max_window_layers": 28"#),
            None
        );
        assert_eq!(
            window(r#", "use_sliding_window": true, "max_window_layers": 21"#),
            Some(4096)
        );
    }
}
