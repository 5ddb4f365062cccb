//! Model description (`models/*.json`) and the derived sizes the cost model needs.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// MLP activation function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// GeLU: two MLP matrices (h×f, f×h).
    Gelu,
    /// SwiGLU: three MLP matrices (gate and up h×f, down f×h).
    Swiglu,
}

/// Normalisation layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Norm {
    /// LayerNorm: weight and bias.
    Layernorm,
    /// RMSNorm: weight only.
    Rmsnorm,
}

/// Which linear layers carry a bias (none, in the bundled models: Megatron's parameter count
/// leaves them out, `theoretical_memory_usage.py`). Imported Hugging Face configs set them:
/// Qwen2's Q, K and V projections, GPT-NeoX's every linear, LLaMA's `attention_bias` (Q, K, V
/// and the output projection) and `mlp_bias`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinearBiases {
    /// Biases on the Q, K and V projections (h + 2·kv_heads·d per layer).
    #[serde(default)]
    pub qkv: bool,
    /// A bias on the attention output projection (h per layer; row-parallel, so replicated on
    /// every device of a weight-splitting method, as Megatron keeps it).
    #[serde(default)]
    pub attention_out: bool,
    /// Biases on the MLP linears: the first layer's f (2f for SwiGLU's gate and up, column-
    /// parallel) and the second's h (row-parallel, replicated).
    #[serde(default)]
    pub mlp: bool,
}

impl LinearBiases {
    /// No biases at all (the field is then left out of written model files).
    pub fn is_none(&self) -> bool {
        *self == LinearBiases::default()
    }
}

/// A Transformer model, as in DESIGN §8.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    /// Display name.
    pub name: String,
    /// Transformer layers L.
    pub layers: u64,
    /// Hidden size h.
    pub hidden: u64,
    /// Query heads a.
    pub heads: u64,
    /// Key/value heads (a for MHA, fewer for GQA).
    pub kv_heads: u64,
    /// MLP width f.
    pub ffn_hidden: u64,
    /// Vocabulary size v.
    pub vocab: u64,
    /// MLP activation.
    pub activation: Activation,
    /// Normalisation.
    pub norm: Norm,
    /// Whether the model trains with dropout.
    pub dropout: bool,
    /// Whether the output head shares the input embedding.
    pub tied_embeddings: bool,
    /// Linear biases (optional; none when absent).
    #[serde(default, skip_serializing_if = "LinearBiases::is_none")]
    pub biases: LinearBiases,
    /// Sliding-window attention: each query sees at most this many keys (optional; full
    /// attention when absent). metp-sim models full attention, which is exact while the
    /// sequence is no longer than the window: longer sequences are refused
    /// (`Workload::validate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<u64>,
    /// Rotary position embedding (RoPE) on the queries and keys of every layer (LLaMA,
    /// Mistral, Qwen2, GPT-NeoX, Nemotron-4): a memory-bound pass after the QKV projection and
    /// its backward. Absent: false — positions enter once at the embedding (GPT-2/3's learned
    /// table) or inside the attention scores (BLOOM's ALiBi), with no pass of their own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rotary: bool,
    /// Where the figures come from.
    pub source: String,
}

impl Model {
    /// Checks every number; `path` is used in the error message.
    pub fn validate(&self, path: &Path) -> Result<()> {
        let bad = |field: &str, message: String| Error::InvalidField {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        use super::limits::{
            check_name, check_text, MAX_FFN_HIDDEN, MAX_HEADS, MAX_HIDDEN, MAX_LAYERS, MAX_PARAMS,
            MAX_TEXT_CHARS, MAX_VOCAB,
        };
        check_name(&self.name).map_err(|m| bad("name", m))?;
        check_text(&self.source, MAX_TEXT_CHARS).map_err(|m| bad("source", m))?;
        for (field, value, max, max_text) in [
            ("layers", self.layers, MAX_LAYERS, "2^20"),
            ("hidden", self.hidden, MAX_HIDDEN, "2^24"),
            ("heads", self.heads, MAX_HEADS, "2^16"),
            ("kv_heads", self.kv_heads, MAX_HEADS, "2^16"),
            ("ffn_hidden", self.ffn_hidden, MAX_FFN_HIDDEN, "2^26"),
            ("vocab", self.vocab, MAX_VOCAB, "2^32"),
        ] {
            if value == 0 {
                return Err(bad(field, "must be a positive integer, got 0".into()));
            }
            // With the workload's sequence bounds, keeps every byte count the memory model
            // forms inside u128 (config::limits).
            if value > max {
                return Err(bad(
                    field,
                    format!("{value} is larger than {max_text}, the most this tool models"),
                ));
            }
        }
        if self.sliding_window == Some(0) {
            return Err(bad(
                "sliding_window",
                "must be a positive number of tokens, got 0".into(),
            ));
        }
        // Counted in 128 bits: only a count below the limit is used in 64 (total_params). The
        // biases are at most 2h + 2f + 2·kv per layer, inside the 4h + 4f margin below.
        let (l, h, f, v) = (
            self.layers as u128,
            self.hidden as u128,
            self.ffn_hidden as u128,
            self.vocab as u128,
        );
        let kv = self.kv_heads as u128 * (h / self.heads as u128);
        let params = l
            * (h * (2 * h + 2 * kv) + self.mlp_matrices() as u128 * h * f + 8 * h + 4 * f)
            + 2 * h
            + 2 * v * h;
        if params > MAX_PARAMS as u128 {
            return Err(bad(
                "layers",
                format!(
                    "the model has about {params:.3e} parameters, more than 2^50 (1.1e15) — \
                     1,000 times the largest published model",
                    params = params as f64
                ),
            ));
        }
        if !self.hidden.is_multiple_of(self.heads) {
            return Err(bad(
                "heads",
                format!(
                    "hidden ({}) is not divisible by heads ({})",
                    self.hidden, self.heads
                ),
            ));
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(bad(
                "kv_heads",
                format!(
                    "heads ({}) is not divisible by kv_heads ({})",
                    self.heads, self.kv_heads
                ),
            ));
        }
        Ok(())
    }

    /// Head dimension d = h / a.
    pub fn head_dim(&self) -> u64 {
        self.hidden / self.heads
    }

    /// Width of the K (or V) projection: kv_heads · d (= h for MHA).
    pub fn kv_hidden(&self) -> u64 {
        self.kv_heads * self.head_dim()
    }

    /// Number of MLP matrices of size h×f: 2 for GeLU, 3 for SwiGLU.
    pub fn mlp_matrices(&self) -> u64 {
        match self.activation {
            Activation::Gelu => 2,
            Activation::Swiglu => 3,
        }
    }

    /// Parameters of one layer's attention: W_qkv (h × (h + 2·h_kv)) and W_o (h × h), plus the
    /// biases the model has ([`LinearBiases`]; none in the bundled models, as in Megatron's
    /// `theoretical_memory_usage.py`).
    pub fn attention_params_per_layer(&self) -> u64 {
        let b = &self.biases;
        self.hidden * (2 * self.hidden + 2 * self.kv_hidden())
            + u64::from(b.qkv) * (self.hidden + 2 * self.kv_hidden())
            + u64::from(b.attention_out) * self.hidden
    }

    /// Parameters of one layer's MLP: its GEMMs, plus biases when the model has them (f per
    /// first-layer matrix, h for the second).
    pub fn mlp_params_per_layer(&self) -> u64 {
        self.mlp_matrices() * self.hidden * self.ffn_hidden
            + u64::from(self.biases.mlp)
                * ((self.mlp_matrices() - 1) * self.ffn_hidden + self.hidden)
    }

    /// Parameters of one layer that a weight-splitting method keeps whole on every device: the
    /// biases of the row-parallel linears (attention output, MLP second layer), which Megatron
    /// adds after the reduction instead of splitting.
    pub fn replicated_params_per_layer(&self) -> u64 {
        let b = &self.biases;
        (u64::from(b.attention_out) + u64::from(b.mlp)) * self.hidden
    }

    /// Parameters of one normalisation layer (weight, plus bias for LayerNorm).
    pub fn norm_params(&self) -> u64 {
        match self.norm {
            Norm::Layernorm => 2 * self.hidden,
            Norm::Rmsnorm => self.hidden,
        }
    }

    /// Parameters of the input embedding (v × h).
    pub fn embedding_params(&self) -> u64 {
        self.vocab * self.hidden
    }

    /// Parameters of the output head: 0 when tied to the embedding.
    pub fn head_params(&self) -> u64 {
        if self.tied_embeddings {
            0
        } else {
            self.vocab * self.hidden
        }
    }

    /// Total parameter count Ψ (layers, two norms per layer, final norm, embedding, head).
    pub fn total_params(&self) -> u64 {
        self.layers
            * (self.attention_params_per_layer()
                + self.mlp_params_per_layer()
                + 2 * self.norm_params())
            + self.norm_params()
            + self.embedding_params()
            + self.head_params()
    }
}
