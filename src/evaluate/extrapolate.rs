//! Step times from the event simulator on the full model, or extrapolated from two shortened
//! copies of it.
//!
//! The simulated graph grows with p · dp devices × layers × micro-batches: METP at p = 32, dp = 2
//! on LLaMA-2 7B at 512k tokens is 24.6 M tasks (25 s and 6.5 GB in release), too much for a
//! planner that simulates tens of candidates. Every layer of a step is the same work — the same
//! forward and backward blocks, the same ZeRO gathers and gradient synchronisation — so step
//! time is affine in the layer count L: `T(L) = T₀ + L·t`, T₀ being the embedding, the head,
//! the optimizer's fixed part and the pipeline fill and drain. [`SimDepth::Extrapolate`]
//! simulates the model with 2 and 4 layers and extrapolates
//! `T(L) = T(2) + (L − 2)·(T(4) − T(2))/2`, for the step time and for the critical device's
//! compute, communication and exposed-communication time alike. Measured against full
//! simulations (tests/it/plan.rs and the unit tests below; LLaMA-2 7B, every method, with dp up
//! to 8 across nodes, ZeRO 0–3, recomputation, several micro-batches), the error stays below
//! 3·10⁻⁵ relative: what is not affine is the kernel model in the optimizer's size (its kernels
//! cost at least the host's time per op). Models of four layers or fewer are always simulated
//! whole.
//!
//! With a pipeline the model is shortened stage by stage: 2 and 4 layers per virtual stage
//! (pp · v · 2 and pp · v · 4 layers), extrapolated to L/(pp · v) (exact when pp · v divides
//! L, as the planner requires; an uneven split is approximated by its mean). Micro-batches are
//! then extrapolated from pp and 2·pp: from m = pp on, 1F1B is in its steady state and each
//! further micro-batch adds the same time on the slowest stage.
//!
//! Gradient accumulation is handled the same way: micro-batches run one after the other and
//! only the last one synchronises gradients, so step time is affine in the number of
//! micro-batches m (exactly, to rounding, in every case measured); more than two are
//! extrapolated from one and two, `T(m) = T(1) + (m − 1)·(T(2) − T(1))`, each of those
//! extrapolated in layers as above. Under ZeRO ≥ 2 every micro-batch synchronises and its
//! traffic overlaps the next micro-batch's forward, so the steady state starts at two: more
//! than four are extrapolated from two and four. Such a step is affine in the layers only
//! approximately when that traffic bounds it (the queue of one micro-batch's
//! synchronisations spills into the next micro-batch by an amount that grows with the layers
//! faster than linearly at first): within 0.5% in the cases measured (a ZeRO-3 Ulysses step
//! whose communication is 90% of it), against 3·10⁻⁵ otherwise.

use serde::Serialize;

use crate::config::ValidWorkload;
use crate::error::Result;
use crate::memory;
use crate::schedule::{self, Devices, StepTimes};
use crate::sim::{self, LinkModel};

/// How much of the model the simulator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SimDepth {
    /// Every layer.
    Full,
    /// [`EXTRAPOLATION_LAYERS`] layers and at most two micro-batches, extrapolated linearly to
    /// the workload's (module docs).
    #[default]
    Extrapolate,
}

/// The two layer counts [`SimDepth::Extrapolate`] simulates.
pub const EXTRAPOLATION_LAYERS: (u64, u64) = (2, 4);

/// One whole simulation of a shortened copy of `w` (its own inventory and plan).
fn simulate_once(w: &ValidWorkload, link: LinkModel) -> Result<StepTimes> {
    let stages = memory::stage_inventories(w);
    let plan = schedule::plan(w);
    Ok(sim::simulate_plan(
        w,
        &plan,
        &stages,
        link,
        sim::TraceScope::Off,
        Devices::Distinct,
    )?
    .times())
}

/// Whether `depth` simulates a model of `layers` layers whole (it always does for four layers
/// or fewer).
pub fn simulates_whole(layers: u64, depth: SimDepth) -> bool {
    depth == SimDepth::Full || layers <= EXTRAPOLATION_LAYERS.1
}

/// The same for a workload: a pipelined model is shortened to 4 layers per virtual stage, so
/// it runs whole when it has no more than that.
pub fn workload_simulates_whole(w: &ValidWorkload, depth: SimDepth) -> bool {
    depth == SimDepth::Full
        || w.model.layers <= EXTRAPOLATION_LAYERS.1 * w.outer.pp * w.outer.interleave
}

/// `x + k·(y − x)`, field by field.
fn lerp(x: StepTimes, y: StepTimes, k: f64) -> StepTimes {
    let f = |a: f64, b: f64| a + k * (b - a);
    StepTimes {
        step_time_s: f(x.step_time_s, y.step_time_s),
        compute_s: f(x.compute_s, y.compute_s),
        communication_s: f(x.communication_s, y.communication_s),
        exposed_communication_s: f(x.exposed_communication_s, y.exposed_communication_s),
    }
}

/// Simulated times of one step of `w` from shortened copies of it (memory is not judged here:
/// the caller has the full model's inventory): layers extrapolated from 2 and 4, and more than
/// two micro-batches from 1 and 2 (module docs). With [`SimDepth::Full`] the whole model runs
/// (the caller's own simulation does that; this is for tests and comparisons).
pub fn extrapolated_times(
    w: &ValidWorkload,
    link: LinkModel,
    depth: SimDepth,
) -> Result<StepTimes> {
    let at = |layers: u64, micro_batches: u64| {
        let mut v = w.clone().into_workload();
        v.model.layers = layers;
        v.micro_batches = micro_batches;
        simulate_once(&v.validate()?, link)
    };
    // Layers per virtual stage (all layers without a pipeline); a pipelined model is shortened
    // stage by stage, keeping pp · v virtual stages of 2 and 4 layers each.
    let virtual_stages = w.outer.pp * w.outer.interleave;
    let in_layers = |m: u64| -> Result<StepTimes> {
        let layers = w.model.layers;
        if depth == SimDepth::Full || layers <= EXTRAPOLATION_LAYERS.1 * virtual_stages {
            return at(layers, m);
        }
        let (lo, hi) = EXTRAPOLATION_LAYERS;
        let per_stage = layers as f64 / virtual_stages as f64;
        let k = (per_stage - lo as f64) / (hi - lo) as f64;
        Ok(lerp(
            at(lo * virtual_stages, m)?,
            at(hi * virtual_stages, m)?,
            k,
        ))
    };
    // Micro-batches: one and two without a pipeline; with one, pp and 2·pp (1F1B's steady
    // state is reached from m = pp on, and interleaving needs multiples of pp). Under ZeRO ≥ 2
    // every micro-batch's gradient synchronisation overlaps the next one's forward, which the
    // first micro-batch has none of: without a pipeline the steady state starts at two.
    let m = w.micro_batches;
    let m1 = if w.outer.pp == 1 && w.zero_stage() >= crate::config::ZeroStage::Zero2 {
        2
    } else {
        // LLaMA 3's flexible schedule (`config::runtime`) repeats in rounds of its own size.
        match w.options.runtime.pp_round {
            Some(round) if w.outer.interleave > 1 => round.max(w.outer.pp),
            _ => w.outer.pp,
        }
    };
    let t = if depth == SimDepth::Full || m <= 2 * m1 {
        in_layers(m)?
    } else {
        lerp(
            in_layers(m1)?,
            in_layers(2 * m1)?,
            (m - m1) as f64 / m1 as f64,
        )
    };
    let clamp = |x: f64| x.max(0.0);
    Ok(StepTimes {
        step_time_s: clamp(t.step_time_s),
        compute_s: clamp(t.compute_s),
        communication_s: clamp(t.communication_s),
        exposed_communication_s: clamp(t.exposed_communication_s),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load_hardware, load_model, MethodId, Options, Workload, ZeroStage};

    /// Extrapolation from 2 and 4 layers (and from 1 and 2 micro-batches) against the whole
    /// 12-layer model with all its micro-batches, on small cases with data parallelism across
    /// two nodes (gradient synchronisation over InfiniBand).
    #[test]
    fn extrapolation_matches_full_simulation() {
        let mut model = load_model("llama2-7b").unwrap();
        model.layers = 12;
        let mut hardware = load_hardware("dgx-a100-80gb").unwrap();
        hardware.nodes = 2;
        for (method, p, dp, zero, micro_batches) in [
            (MethodId::Metp, 8, 2, ZeroStage::Zero1, 2),
            (MethodId::Ulysses, 4, 4, ZeroStage::Zero3, 3),
            (MethodId::TpSp, 4, 4, ZeroStage::Zero2, 6),
        ] {
            let w = Workload {
                model: model.clone(),
                hardware: hardware.clone(),
                method,
                p,
                dp,
                outer: crate::config::OuterAxes::default(),
                seq: 8192,
                micro_batch: 1,
                micro_batches,
                options: Options {
                    zero: Some(zero),
                    ..Options::default()
                },
            };
            let w = w.validate().unwrap();
            let full = extrapolated_times(&w, LinkModel::MaxMin, SimDepth::Full).unwrap();
            let ext = extrapolated_times(&w, LinkModel::MaxMin, SimDepth::Extrapolate).unwrap();
            let rel = |a: f64, b: f64| (a - b).abs() / b.max(1e-12);
            // Every micro-batch synchronising (ZeRO ≥ 2) on a step bound by that traffic is
            // affine in the layers only to within 1% (module docs); the rest to 1e-4.
            let tol = if zero >= ZeroStage::Zero2 { 1e-2 } else { 1e-4 };
            assert!(
                rel(ext.step_time_s, full.step_time_s) < tol,
                "{method}: {ext:?} vs {full:?}"
            );
            assert!(rel(ext.compute_s, full.compute_s) < tol, "{method}");
            assert!(
                rel(ext.communication_s, full.communication_s) < tol,
                "{method}"
            );
            assert!(
                (ext.exposed_communication_s - full.exposed_communication_s).abs()
                    < tol * full.step_time_s,
                "{method}"
            );
        }
    }
}
