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
        // Counted in 128 bits: only a count below the limit is used in 64 (total_params).
        let (l, h, f, v) = (
            self.layers as u128,
            self.hidden as u128,
            self.ffn_hidden as u128,
            self.vocab as u128,
        );
        let kv = self.kv_heads as u128 * (h / self.heads as u128);
        let params = l * (h * (2 * h + 2 * kv) + self.mlp_matrices() as u128 * h * f + 4 * h)
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
