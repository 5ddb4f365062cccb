//! Capacity planning: the configurations that train a model at a sequence length on N GPUs,
//! ranked by simulated throughput (DESIGN §6, `metp-sim plan`).
//!
//! Input: a [`PlanSpec`] — model, hardware profile, N GPUs, sequence length, the one global
//! batch every configuration trains (given, or about 4M tokens: [`default_global_batch`]),
//! methods, the axes the user fixed ([`Constraints`]), and optionally the tokens to train and
//! the price of a GPU-hour. Output: a [`Plan`].
//!
//! 1. **Enumerate.** For every method and every degree p that divides N: context parallelism
//!    (tp-sp) over divisors of N/p, pipeline stages over divisors of N/(p·cp) no more than the
//!    layers (split as evenly as possible: LLaMA 3 405B's 126 over 16 stages), every interleave
//!    that divides the layers of the fullest stage, dp = N/(p·cp·pp); recomputation none,
//!    selective and full; micro-batch 1, 2 and 4 where it divides a replica's share of the
//!    global batch (the rest is gradient accumulation; interleaving needs the micro-batches to
//!    be a multiple of pp); ZeRO stages 0–3; FlashAttention on (and off on request) — each axis
//!    restricted to the values the user fixed. METP runs with its default knobs. The hardware
//!    profile's node count is set to ceil(N / GPUs per node). A ZeRO stage above 0 whose
//!    sharding group is one device is the same configuration as stage 0 and is not enumerated
//!    (unless ZeRO was fixed); a recomputation policy that changes neither the memory nor the
//!    closed-form times of a feasible configuration (METP with FlashAttention recomputes the
//!    attention core anyway: selective = none) is dropped after the policy before it (both
//!    counted in [`Plan::equivalent_skipped`]).
//! 2. **Check.** A degree the model does not allow, a global batch dp does not divide, or a
//!    sequence length that is not a multiple of the method's granule rejects the (method,
//!    degree) pair once, with the reason; every other combination is rejected if its memory
//!    inventory's peak exceeds device memory ([`RejectCategory`]).
//! 3. **Rank.** Each candidate goes through the one evaluation path ([`crate::evaluate`]): its
//!    closed-form estimate ranks everything that fits (only what ranks is kept: thousands of
//!    candidates' stage inventories would not fit in memory); the best
//!    [`PlanSpec::sim_candidates`] of those (default 3 × top) are evaluated again and
//!    simulated — exactly where the step is small (a shortened copy where the simulator proves
//!    the rest repeats it), else composed from its distinct op programs (within 1–3%; `--full-sim`
//!    simulates all of them exactly) — and ranked by simulated tokens per second. Ties, and the
//!    order of everything else, are broken by method (in [`crate::config::MethodId::ALL`]
//!    order), p, cp, pp, interleave, dp, recomputation (none, selective, full), micro-batch,
//!    ZeRO stage and FlashAttention (on first), so the same spec gives the same plan, byte for
//!    byte. The plan says what separates the best from the next ([`Comparison`]: compute,
//!    recomputation, exposed communication, bubble, memory headroom) and, given the tokens,
//!    each configuration's days, GPU-hours and cost ([`Training`]).
//!
//! Layout: [`spec`](PlanSpec), candidates and their enumeration, rejections, ranking, the
//! merge of a plan's parts, the comparison. Depends on `config`, `memory`, `evaluate`, `sim`
//! (the link model), `shard` and `error`; never on `sweep`, `report` or `cli`.

mod candidate;
mod check;
mod compare;
mod heaviest;
mod merge;
mod rank;
mod rejection;
mod spec;

pub use crate::evaluate::SimDepth;
pub use crate::evaluate::Training;
pub use candidate::{enumerate, recompute_name, Candidate};
pub use check::{check_part, check_spec};
pub use compare::{Comparison, Part};
pub use merge::merge;
pub use rank::{
    plan, plan_part, plan_part_with, plan_with, Plan, PlanPart, PlanProgress, Ranked, Simulated,
    Simulation,
};
pub use rejection::{RejectCategory, Rejection};
pub use spec::{
    default_global_batch, Constraints, PlanSpec, DEFAULT_BATCH_TOKENS, MAX_CP, MAX_GLOBAL_BATCH,
    MAX_GPUS, MAX_INTERLEAVE, MAX_PP, MICRO_BATCHES, RECOMPUTE, ZERO,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load_hardware, load_model, MethodId, Recompute};
    use crate::plan::spec::default_global_batch;

    fn spec(model: &str, gpus: u64, seq: u64) -> PlanSpec {
        PlanSpec::new(
            load_model(model).unwrap(),
            load_hardware("dgx-a100-80gb").unwrap(),
            gpus,
            seq,
        )
    }

    #[test]
    fn enumeration_covers_divisors_stages_and_batch_splits() {
        let mut s = spec("llama2-7b", 8, 32768);
        s.methods = vec![MethodId::Metp, MethodId::Ring];
        // Method × p × dp (the outer axes: tests/it/plan.rs).
        s.outer_axes = false;
        let (cands, rejected, skipped) = enumerate(&s).unwrap();
        assert!(rejected.is_empty(), "{rejected:?}");
        let mut degrees: Vec<u64> = cands.iter().map(|c| c.p).collect();
        degrees.sort();
        degrees.dedup();
        assert_eq!(degrees, [1, 2, 4, 8]);
        // The default global batch, about 4M tokens: 2^22 / 32k = 128 sequences, the same for
        // every configuration; micro-batches 1, 2 and 4 all divide each replica's share.
        assert_eq!(s.global_batch_or_default(), 128);
        assert!(cands
            .iter()
            .all(|c| c.micro_batch * c.micro_batches * c.dp == 128 && c.p * c.dp == 8));
        // METP at p = 8 (dp = 1) shards over a one-device ZeRO group: stage 0 only (3 skipped
        // per recompute policy); ring replicates weights, so ZeRO shards over its 8 devices.
        let stages = |m: MethodId, p: u64| {
            let mut z: Vec<u8> = cands
                .iter()
                .filter(|c| c.method == m && c.p == p)
                .map(|c| c.zero)
                .collect();
            z.sort();
            z.dedup();
            z
        };
        assert_eq!(stages(MethodId::Metp, 8), [0]);
        assert_eq!(stages(MethodId::Metp, 4), [0, 1, 2, 3]);
        assert_eq!(stages(MethodId::Ring, 8), [0, 1, 2, 3]);
        assert_eq!(skipped, 3 * MICRO_BATCHES.len() * RECOMPUTE.len());
        // 2 methods × 4 degrees × 3 policies × 3 micro-batch sizes × 4 stages, less the skipped.
        assert_eq!(cands.len(), 2 * 4 * 3 * 3 * 4 - skipped);
    }

    /// The default global batch is about 4M tokens, a power of two, at least 1.
    #[test]
    fn the_default_global_batch_is_about_four_million_tokens() {
        for (seq, g) in [
            (2048, 2048),
            (32768, 128),
            (131072, 32),
            (1 << 22, 1),
            (1 << 30, 1),
        ] {
            assert_eq!(default_global_batch(seq), g, "{seq}");
        }
        // 3000 tokens: 2^22 / 3000 ≈ 1398, nearest power of two on a log scale 1024.
        assert_eq!(default_global_batch(3000), 1024);
    }

    /// Fixed axes restrict the search to their values; one that cannot split the GPUs is a
    /// usage error naming the flag.
    #[test]
    fn fixed_axes_restrict_the_search() {
        let mut s = spec("llama2-7b", 16, 32768);
        s.methods = vec![MethodId::TpSp, MethodId::Tp];
        s.constraints = Constraints {
            p: Some(vec![4]),
            pp: Some(vec![2]),
            zero: Some(vec![1]),
            recompute: Some(vec![Recompute::Selective]),
            micro_batch: Some(vec![1]),
            ..Constraints::default()
        };
        let (cands, _, _) = enumerate(&s).unwrap();
        assert!(!cands.is_empty());
        assert!(cands.iter().all(|c| c.p == 4
            && c.outer.pp == 2
            && c.zero == 1
            && c.recompute == Recompute::Selective
            && c.micro_batch == 1));
        // Every interleave that divides a stage's 16 layers (32 over 2 stages) is tried.
        let mut vs: Vec<u64> = cands.iter().map(|c| c.outer.interleave).collect();
        vs.sort();
        vs.dedup();
        assert_eq!(vs, [1, 2, 4, 8, 16]);
        s.constraints.p = Some(vec![3]);
        let e = enumerate(&s).unwrap_err().to_string();
        assert!(e.contains("--p") && e.contains("does not divide"), "{e}");
    }

    /// Uneven splits are planned as Megatron runs them: LLaMA 3 405B's 126 layers over 16
    /// stages (7 on the first and last, 8 on the others) with the interleaves that divide 8.
    #[test]
    fn uneven_pipelines_and_their_interleaves_are_tried() {
        let mut s = spec("llama3-405b", 16384, 131072);
        s.hardware = load_hardware("dgx-h100").unwrap();
        s.methods = vec![MethodId::TpSp];
        s.global_batch = Some(128);
        s.constraints = Constraints {
            p: Some(vec![8]),
            cp: Some(vec![16]),
            pp: Some(vec![16]),
            ..Constraints::default()
        };
        let (cands, _, _) = enumerate(&s).unwrap();
        let mut vs: Vec<u64> = cands.iter().map(|c| c.outer.interleave).collect();
        vs.sort();
        vs.dedup();
        assert_eq!(vs, [1, 2, 4]);
        assert!(cands
            .iter()
            .all(|c| c.dp == 8 && c.micro_batch * c.micro_batches == 16));
    }

    /// Parts merged are the plan; a part given twice (its simulations twice, the other
    /// part's none) or a part of another plan is refused.
    #[test]
    fn parts_merge_into_the_plan_and_foreign_parts_are_refused() {
        use crate::shard::Shard;
        let mut s = spec("gpt3-1.3b", 4, 16384);
        s.methods = vec![MethodId::Metp, MethodId::TpSp];
        s.top = 3;
        let part = |s: &PlanSpec, k| plan_part(s, Shard { index: k, count: 2 }).unwrap();
        let (p0, p1) = (part(&s, 0), part(&s, 1));
        assert!(!p0.simulated.is_empty() && !p1.simulated.is_empty());
        assert!(p1.rejected.is_empty());
        let whole = plan(&s).unwrap();
        assert_eq!(merge(&s, vec![p0.clone(), p1.clone()]).unwrap(), whole);
        let e = merge(&s, vec![p0.clone(), p0.clone()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("simulated"), "{e}");
        let mut other = s.clone();
        other.seq = 8192;
        let e = merge(&s, vec![p0, part(&other, 1)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("not parts of one plan"), "{e}");
    }

    /// The planner sits below the command line (DESIGN §3).
    #[test]
    fn does_not_depend_on_the_cli() {
        for (file, src) in [
            ("mod.rs", include_str!("mod.rs")),
            ("spec.rs", include_str!("spec.rs")),
            ("candidate.rs", include_str!("candidate.rs")),
            ("check.rs", include_str!("check.rs")),
            ("rejection.rs", include_str!("rejection.rs")),
            ("rank.rs", include_str!("rank.rs")),
            ("merge.rs", include_str!("merge.rs")),
            ("heaviest.rs", include_str!("heaviest.rs")),
        ] {
            // The code above the tests only.
            let code = src.split("#[cfg(test)]").next().unwrap_or(src);
            for path in ["crate::cli", "metp_sim::cli", "clap::"] {
                let hit = code
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("//"))
                    .any(|l| l.contains(path));
                assert!(!hit, "src/plan/{file} uses {path}");
            }
        }
    }

    /// The simulations start costliest first (one worker thread: in exactly that order), the
    /// progress they report adds up to the cost announced, and the plan is the one the default
    /// pool gives, byte for byte.
    #[test]
    fn simulations_run_costliest_first_and_the_plan_is_unchanged() {
        use std::sync::Mutex;
        let mut s = spec("gpt3-1.3b", 4, 16384);
        s.methods = vec![MethodId::Metp, MethodId::TpSp];
        s.top = 4;
        let announced = Mutex::new(None);
        let done = Mutex::new(Vec::new());
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let p = pool
            .install(|| {
                plan_with(&s, &|e| match e {
                    PlanProgress::Simulating { simulations, cost } => {
                        *announced.lock().unwrap() = Some((simulations, cost))
                    }
                    PlanProgress::Simulated { cost } => done.lock().unwrap().push(cost),
                    _ => {}
                })
            })
            .unwrap();
        let done = done.into_inner().unwrap();
        let (n, total) = announced.into_inner().unwrap().unwrap();
        assert_eq!((done.len(), done.iter().sum::<u64>()), (n, total));
        assert!(done.windows(2).all(|w| w[0] >= w[1]), "{done:?}");
        assert!(done.first() > done.last(), "costs differ: {done:?}");
        assert_eq!(p, plan(&s).unwrap());
    }

    #[test]
    fn flash_off_only_on_request() {
        let mut s = spec("llama2-7b", 2, 4096);
        assert!(enumerate(&s).unwrap().0.iter().all(|c| c.flash));
        s.include_no_flash = true;
        assert!(enumerate(&s).unwrap().0.iter().any(|c| !c.flash));
    }

    /// A small plan end to end: METP's selective recomputation (a no-op with FlashAttention) is
    /// folded into `none`, and the list is ordered by tokens/s, then by the tie-break key.
    #[test]
    fn ranks_by_tokens_then_key_without_equivalent_duplicates() {
        let mut s = spec("gpt3-1.3b", 4, 16384);
        s.methods = vec![MethodId::Metp, MethodId::TpSp];
        s.top = 100;
        s.sim_candidates = Some(100);
        let p = plan(&s).unwrap();
        assert!(p.feasible > 0 && p.ranked.len() == p.feasible.min(100));
        assert!(p.equivalent_skipped > 0);
        assert!(
            !p.ranked.iter().any(|r| r.candidate.method == MethodId::Metp
                && r.candidate.recompute == Recompute::Selective)
        );
        for w in p.ranked.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            assert!(
                a.tokens_per_s > b.tokens_per_s
                    || (a.tokens_per_s == b.tokens_per_s && a.candidate.key() < b.candidate.key())
            );
            assert_eq!(a.rank + 1, b.rank);
        }
        assert!(p
            .ranked
            .iter()
            .all(|r| r.peak_bytes + r.headroom_bytes == r.capacity_bytes));
    }
}
