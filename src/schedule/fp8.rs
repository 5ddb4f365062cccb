//! FP8 linear layers: turns a step plan's layer GEMMs into FP8 GEMMs and adds the casts that
//! feed them, as Transformer Engine's FP8 `Linear` and `LayerNormLinear` run under
//! Megatron-Core and NeMo (`config::LinearDtype::Fp8`).
//!
//! Only the transformer layers' linear GEMMs change (the kernels `kernels::linear_fwd` and
//! `linear_bwd` mark); attention, the embedding and the output head stay bf16. Per linear
//! layer Y = X·W and micro-batch (TE 1.x, delayed scaling):
//!
//! | GEMM | FP8 operands | cast before it, per element of its left operand |
//! |---|---|---|
//! | forward Y = X·W | X, W | X cast to FP8 with a transposed FP8 copy for the weight gradient: read 2 bytes, write 1 + 1 = 4; where X is a norm's output (QKV, the MLP's first projection: `LayerNormLinear`) the norm writes FP8 itself, 1 byte less than the bf16 it is priced to write, and only the transposed copy is made (1 + 1): 1 |
//! | input gradient dX = dY·Wᵀ | dY, Wᵀ | dY cast to FP8 with its transposed copy: 4 |
//! | weight gradient dW = Xᵀ·dY | both transposed copies made above | none |
//!
//! With sequence parallelism the norm's FP8 output is what is all-gathered before QKV and the
//! MLP's first projection (TE 1.x `_LayerNormLinear`/`_LayerNormMLP`: the norm writes a uint8
//! `ln_out`, straight into the userbuffer when the gather is overlapped, else gathered by
//! `gather_along_first_dim`), and so is its re-gather for the weight gradient in the backward:
//! those gathers move one byte per element ([`FP8_GATHERS`]). The reduce-scatters (bf16
//! outputs and input gradients) and the gathers of output gradients stay bf16.
//!
//! The weights' FP8 copies (and their transposes) are made at a step's first micro-batch and
//! reused (`is_first_microbatch`): at most 4 bytes per parameter per step, a few milliseconds,
//! not priced. Not modelled either: the amax reductions and scale updates of delayed scaling
//! (one small kernel per tensor per step), and FP8 reduce-scatter buffers (Transformer
//! Engine's `fp8_buf` userbuffer option).
//!
//! Depends on the plan's types only.

use super::graph::CollectiveOp;
use super::shape::{GemmDtype, KernelShape};
use super::stage::{Axis, Kernel, LinearGemm, Stage, StepPlan};

/// Bytes per element of X the forward's cast moves (module table).
const CAST_TRANSPOSE_BYTES: f64 = 4.0;
/// The same where a norm writes X in FP8 itself (module table).
const NORM_FED_BYTES: f64 = 1.0;

/// TP + SP's gathers of a norm's output (forward, and again for the weight gradient), blocking
/// or under their GEMM: FP8 data under FP8 training (module docs). Names of `tp_sp`'s stages.
pub const FP8_GATHERS: [&str; 6] = [
    "all-gather",
    "all-gather-input",
    "qkv-all-gather",
    "fc1-all-gather",
    "qkv-dgrad-all-gather-input",
    "fc1-dgrad-all-gather-input",
];

/// The plan with its layers' linear GEMMs in FP8 and their casts added, and the gathers of
/// their FP8 inputs moving FP8 (module docs).
pub fn apply(plan: &mut StepPlan) {
    for block in plan.layer_fwd.iter_mut().chain(plan.layer_bwd.iter_mut()) {
        for stage in &mut block.stages {
            stage_fp8(stage);
        }
    }
}

fn stage_fp8(stage: &mut Stage) {
    match stage {
        Stage::Compute(ks) => kernels_fp8(ks),
        Stage::Collective { name, op, bytes } => {
            if *op == CollectiveOp::AllGather && FP8_GATHERS.contains(name) {
                *bytes = bytes.div_ceil(2);
            }
        }
        Stage::Ring(r) => {
            if r.axis == Axis::Method && FP8_GATHERS.contains(&r.name) {
                r.prefetch_bytes = r.prefetch_bytes.div_ceil(2);
            }
            for step in &mut r.steps {
                kernels_fp8(&mut step.kernels);
                kernels_fp8(&mut step.accumulate);
                if let Some(c) = &mut step.causal {
                    kernels_fp8(&mut c.diagonal);
                    kernels_fp8(&mut c.key_half);
                    kernels_fp8(&mut c.query_half);
                }
            }
        }
        Stage::Outer(o) => o.body.iter_mut().for_each(stage_fp8),
    }
}

/// Whether a linear layer's input comes straight out of a norm (Transformer Engine's
/// `LayerNormLinear`): the attention's QKV and the MLP's first projection.
fn norm_fed(name: &str) -> bool {
    name.starts_with("qkv") || name.starts_with("fc1")
}

fn kernels_fp8(ks: &mut Vec<Kernel>) {
    if !ks.iter().any(|k| k.linear.is_some()) {
        return;
    }
    let mut out = Vec::with_capacity(ks.len() * 2);
    for k in ks.drain(..) {
        let (Some(role), KernelShape::Gemm(mut g)) = (k.linear, k.shape) else {
            out.push(k);
            continue;
        };
        let per_elem = match role {
            LinearGemm::Forward if norm_fed(k.name) => NORM_FED_BYTES,
            LinearGemm::Forward | LinearGemm::InputGrad => CAST_TRANSPOSE_BYTES,
            LinearGemm::WeightGrad => 0.0,
        };
        // A share of a GEMM (`Gemm::parts`) casts its share of the left operand.
        let a_elems = g.batch as f64 * g.m as f64 * g.k as f64 * g.share_fraction();
        if per_elem > 0.0 && a_elems > 0.0 {
            out.push(Kernel::memory("fp8-cast", per_elem * a_elems));
        }
        g.dtype = GemmDtype::Fp8;
        out.push(Kernel {
            shape: KernelShape::Gemm(g),
            ..k
        });
    }
    *ks = out;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::gpt3_tp_sp;
    use crate::config::Options;
    use crate::schedule::kernels::{linear_bwd, linear_fwd};

    /// Every gather's name and bytes (a ring's per-step bytes) of a plan's layers.
    fn gathers(plan: &StepPlan) -> Vec<(&'static str, u64)> {
        let mut out = Vec::new();
        for block in plan.layer_fwd.iter().chain(&plan.layer_bwd) {
            for stage in &block.stages {
                match stage {
                    Stage::Collective {
                        name,
                        op: CollectiveOp::AllGather,
                        bytes,
                    } => out.push((*name, *bytes)),
                    Stage::Ring(r) if r.axis == Axis::Method && r.prefetch_bytes > 0 => {
                        out.push((r.name, r.prefetch_bytes))
                    }
                    _ => {}
                }
            }
        }
        out
    }

    #[test]
    fn the_norms_fp8_outputs_are_gathered_in_fp8_and_nothing_else_is() {
        // TP + SP with its collectives blocking and overlapped: every name of FP8_GATHERS is a
        // gather of one of the two plans (a renamed stage fails here), those halve, the
        // gradients' gathers do not.
        let mut seen = Vec::new();
        for overlap in [false, true] {
            let options = Options {
                tp_comm_overlap: overlap,
                ..Options::default()
            };
            let w = gpt3_tp_sp(2, (1, 1, 1), 1, 1, options);
            let bf16 = crate::schedule::plan(&w);
            let mut fp8 = bf16.clone();
            apply(&mut fp8);
            let (before, after) = (gathers(&bf16), gathers(&fp8));
            assert_eq!(before.len(), after.len());
            for ((name, b), (_, a)) in before.iter().zip(&after) {
                let expect = if FP8_GATHERS.contains(name) {
                    b.div_ceil(2)
                } else {
                    *b
                };
                assert_eq!(*a, expect, "{name} (overlap {overlap})");
                seen.push(*name);
            }
            assert!(before.iter().any(|(n, _)| !FP8_GATHERS.contains(n)));
        }
        for name in FP8_GATHERS {
            assert!(seen.contains(&name), "{name} is no longer a stage of tp_sp");
        }
    }

    #[test]
    fn a_share_of_a_gemm_casts_its_share_of_the_input() {
        // An input gradient run whole beside a collective is priced in p shares (`Gemm::parts`):
        // the p casts together move what the whole call's one cast does, 4 bytes per element of
        // dY (1024 × 256), and each share becomes FP8.
        let [dgrad, _] = linear_bwd("fc1-bwd", 1024.0, 256.0, 512.0);
        let cast = |k: Kernel| {
            let mut ks = vec![k];
            kernels_fp8(&mut ks);
            match (ks[0].shape, ks[1].shape) {
                (KernelShape::Elementwise { bytes }, KernelShape::Gemm(g)) => {
                    assert_eq!(g.dtype, GemmDtype::Fp8);
                    bytes
                }
                _ => panic!("{ks:?}"),
            }
        };
        assert_eq!(cast(dgrad), 4 * 1024 * 256);
        assert_eq!(8 * cast(dgrad.share(8)), 4 * 1024 * 256);
    }

    #[test]
    fn linear_gemms_become_fp8_with_their_casts_and_nothing_else_changes() {
        let attn = Kernel::batched_gemm("attn-qk", 4.0, 128.0, 128.0, 64.0);
        let mut ks = vec![linear_fwd("qkv", 1024.0, 768.0, 256.0), attn];
        ks.extend(linear_bwd("fc2-bwd", 1024.0, 256.0, 512.0));
        kernels_fp8(&mut ks);
        let names: Vec<_> = ks.iter().map(|k| k.name).collect();
        assert_eq!(
            names,
            ["fp8-cast", "qkv", "attn-qk", "fp8-cast", "fc2-bwd", "fc2-bwd"]
        );
        let bytes = |k: &Kernel| match k.shape {
            KernelShape::Elementwise { bytes } => bytes,
            _ => panic!("{k:?}"),
        };
        // QKV's input comes from the norm: 1 byte per element of X (1024 × 256).
        assert_eq!(bytes(&ks[0]), 1024 * 256);
        // fc2's input gradient: dY (1024 × 256) cast and transposed, 4 bytes per element.
        assert_eq!(bytes(&ks[3]), 4 * 1024 * 256);
        let dtype = |k: &Kernel| match k.shape {
            KernelShape::Gemm(g) => g.dtype,
            _ => panic!("{k:?}"),
        };
        assert_eq!(dtype(&ks[1]), GemmDtype::Fp8);
        assert_eq!(dtype(&ks[2]), GemmDtype::Bf16, "attention stays bf16");
        assert_eq!(dtype(&ks[4]), GemmDtype::Fp8);
        assert_eq!(
            dtype(&ks[5]),
            GemmDtype::Fp8,
            "the weight gradient needs no cast"
        );
    }
}
