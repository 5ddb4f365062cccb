//! The CUDA C sources of the backend's kernels (`kernels/*.cu`), compiled at run time by NVRTC
//! as one program: the shared helpers first, then each file. Plain text, built always, so that
//! tests without a GPU can compile them (NVRTC needs no driver) and `tests/cuda-emu` can run
//! them on the host.

/// (file name, text), in program order.
pub const FILES: [(&str, &str); 4] = [
    ("common.cuh", include_str!("kernels/common.cuh")),
    ("elementwise.cu", include_str!("kernels/elementwise.cu")),
    ("flash_fwd.cu", include_str!("kernels/flash_fwd.cu")),
    ("flash_bwd.cu", include_str!("kernels/flash_bwd.cu")),
];

/// Every kernel the backend loads, by name.
pub const KERNELS: [&str; 20] = [
    "gelu_fwd",
    "random_bf16",
    "gelu_bwd",
    "swiglu_fwd",
    "swiglu_bwd",
    "scale_bf16",
    "f32_to_bf16",
    "fill_f32",
    "add_f32",
    "add_bf16",
    "empty_kernel",
    "softmax_rows",
    "probs_from_lse",
    "grad_scores",
    "lse_merge",
    "attn_delta",
    "flash_fwd_d64",
    "flash_fwd_d128",
    "flash_bwd_d64",
    "flash_bwd_d128",
];

/// The whole program NVRTC compiles.
pub fn program() -> String {
    let mut s = String::new();
    for (name, text) in FILES {
        s.push_str(&format!("// ---- {name} ----\n"));
        s.push_str(text);
        s.push('\n');
    }
    s
}

/// Query rows per CTA of the forward kernel and keys per CTA of the backward kernel (mirrors
/// FA_BR / FB_BK in the sources).
pub const FLASH_TILE: usize = 64;
/// Threads per CTA of both flash kernels.
pub const FLASH_THREADS: u32 = 128;

/// Dynamic shared memory of the forward kernel for head dimension `d`: K (64 × (d + 8)) and
/// Vᵀ (d × 72), bf16 (mirrors flash_fwd.cu).
pub fn flash_fwd_smem_bytes(d: usize) -> usize {
    2 * (FLASH_TILE * (d + 8) + d * (FLASH_TILE + 8))
}

/// Query rows per tile of the backward kernel for head dimension `d` (64 for d = 64, 32 for
/// d = 128: mirrors the instantiations in flash_bwd.cu).
pub fn flash_bwd_query_tile(d: usize) -> usize {
    if d == 64 {
        64
    } else {
        32
    }
}

/// Dynamic shared memory of the backward kernel (mirrors FB_SMEM_BYTES in flash_bwd.cu): K,
/// V, Q, dO (row-major, stride d + 8), Kᵀ (stride 72), Qᵀ and dOᵀ (stride BQ + 8), dS
/// (BQ × 72) in bf16, and the tile's log-sum-exp and D in fp32.
pub fn flash_bwd_smem_bytes(d: usize) -> usize {
    let bq = flash_bwd_query_tile(d);
    let (bk, pad) = (FLASH_TILE, 8);
    2 * (2 * bk * (d + pad)
        + d * (bk + pad)
        + 2 * bq * (d + pad)
        + 2 * d * (bq + pad)
        + bq * (bk + pad))
        + 8 * bq
}

/// The kernel model of these flash kernels for one pass, for a fit of what this backend
/// measured: `base`'s per-call and per-block times as starting values, no split-KV, and one
/// kernel per head dimension with these kernels' tiles — forward 64 queries × 64 keys,
/// backward 64 keys × [`flash_bwd_query_tile`] queries, 4 warps each — and their occupancy:
/// 128 threads at 166–244 registers each (`ptxas -v`, README) leave two or three blocks per SM
/// of 64 Ki registers (three for the lightest, the forward at d = 64), far fewer than shared
/// memory would ([`flash_fwd_smem_bytes`], [`flash_bwd_smem_bytes`] of 228 KiB). Their rates
/// are starting values the fit replaces.
pub fn attention_model(
    base: &crate::config::AttentionModel,
    pass: crate::schedule::AttnPass,
) -> crate::config::AttentionModel {
    use crate::config::{AttentionTiles, Figure};
    use crate::schedule::AttnPass;
    let fig = |value: f64, source: &str| Figure {
        value,
        source: source.to_string(),
    };
    let file = match pass {
        AttnPass::Fwd => "src/backend/cuda/kernels/flash_fwd.cu",
        AttnPass::Bwd => "src/backend/cuda/kernels/flash_bwd.cu",
    };
    let tiles = [64usize, 128]
        .into_iter()
        .map(|d| {
            let (bq, bk) = match pass {
                AttnPass::Fwd => (FLASH_TILE, FLASH_TILE),
                AttnPass::Bwd => (flash_bwd_query_tile(d), FLASH_TILE),
            };
            let ctas = if pass == AttnPass::Fwd && d == 64 {
                3.0
            } else {
                2.0
            };
            AttentionTiles {
                head_dim: d as u64,
                block_q: fig(
                    bq as f64,
                    &format!("{file}: query rows per tile at d = {d}"),
                ),
                block_k: fig(bk as f64, &format!("{file}: key rows per tile at d = {d}")),
                ctas_per_sm: fig(
                    ctas,
                    "register-bound occupancy: 128 threads x 166-244 registers (ptxas -v, \
                     README) of 64 Ki per SM (assumption within that range)",
                ),
                mma_fraction: fig(0.1, "starting value for the fit of this backend's kernel"),
                solo_fraction: fig(0.7, "starting value for the fit of this backend's kernel"),
                split_block_q: None,
                split_block_k: None,
            }
        })
        .collect();
    let isolated_extra_s = match pass {
        AttnPass::Fwd => fig(
            0.0,
            "0: the backend launches its forward kernel directly (no framework around it)",
        ),
        AttnPass::Bwd => fig(
            3e-6,
            "starting value: the launch of the D = rowsum(dO o O) pre-pass before the kernel",
        ),
    };
    crate::config::AttentionModel {
        isolated_extra_s,
        solo_fraction: None,
        max_splits: None,
        tiles,
        ..base.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calib_cuda_sources_name_every_kernel() {
        let p = program();
        for k in KERNELS {
            assert!(
                p.contains(&format!("void {k}(")) || p.contains(&format!("\n    {k}(")),
                "{k}"
            );
        }
        // Shared memory sizes the tests/cuda-emu harness also derives from the sources:
        // forward 64×72 + 64×72 bf16 for d = 64; backward 74 240 B (d = 64, BQ = 64) and
        // 96 000 B (d = 128, BQ = 32).
        assert_eq!(flash_fwd_smem_bytes(64), 18432);
        assert_eq!(flash_fwd_smem_bytes(128), 35840);
        assert_eq!(flash_bwd_smem_bytes(64), 74240);
        assert_eq!(flash_bwd_smem_bytes(128), 96000);
    }
}
