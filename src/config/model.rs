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
        for (field, value) in [
            ("layers", self.layers),
            ("hidden", self.hidden),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("ffn_hidden", self.ffn_hidden),
            ("vocab", self.vocab),
        ] {
            if value == 0 {
                return Err(bad(field, "must be a positive integer, got 0".into()));
            }
            // Keeps every product the cost model forms (e.g. 4·s·b·v at s = 2^40) inside u128.
            if value > 1 << 32 {
                return Err(bad(field, format!("{value} is larger than 2^32")));
            }
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

    /// Parameters of one layer's attention GEMMs: W_qkv (h × (h + 2·h_kv)) and W_o (h × h).
    /// Linear biases are not counted (as in Megatron's `theoretical_memory_usage.py`).
    pub fn attention_params_per_layer(&self) -> u64 {
        self.hidden * (2 * self.hidden + 2 * self.kv_hidden())
    }

    /// Parameters of one layer's MLP GEMMs.
    pub fn mlp_params_per_layer(&self) -> u64 {
        self.mlp_matrices() * self.hidden * self.ffn_hidden
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
