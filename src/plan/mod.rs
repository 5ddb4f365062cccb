//! Capacity planning: the configurations that train a model at a sequence length on N GPUs,
//! ranked by simulated throughput (DESIGN §6, `metp-sim plan`).
//!
//! Input: a [`PlanSpec`] — model, hardware profile, N GPUs, sequence length, global batch,
//! methods. Output: a [`Plan`].
//!
//! 1. **Enumerate.** For every method and every degree p that divides N (dp = N / p replicas;
//!    devices are numbered replica by replica and node by node, so a degree up to the node
//!    size keeps each ring inside a node with data parallelism across nodes, and larger degrees
//!    run the ring across nodes over InfiniBand): recomputation none, selective and full;
//!    micro-batch 1, 2 and 4 where it divides a replica's share of the global batch (the rest
//!    is gradient accumulation; the default global batch is dp, one sequence per replica);
//!    ZeRO stages 0–3; FlashAttention on (and off on request). METP runs with its default
//!    knobs (p head groups, broadcast weights, two receive buffers). The hardware profile's
//!    node count is set to ceil(N / GPUs per node). A ZeRO stage above 0 whose sharding group
//!    is one device (dp = 1 for the methods that shard weights) is the same configuration as
//!    stage 0 and is not enumerated; a recomputation policy that changes neither the memory
//!    inventory nor the step plan of a feasible configuration (METP with FlashAttention
//!    recomputes the attention core anyway: selective = none) is dropped after the policy
//!    before it (both counted in [`Plan::equivalent_skipped`]).
//! 2. **Check.** A degree the model does not allow, a global batch dp does not divide, or a
//!    sequence length that is not a multiple of the method's granule rejects the (method,
//!    degree) pair once, with the reason; every other combination is rejected if its memory
//!    inventory's peak exceeds device memory ([`RejectCategory`]).
//! 3. **Rank.** Each candidate goes through the one evaluation path ([`crate::evaluate`]): its
//!    closed-form estimate ranks everything that fits; the best [`PlanSpec::sim_candidates`] of
//!    those (default 3 × top) are simulated ([`crate::evaluate::extrapolated_times`]: by
//!    default extrapolated from 2 and 4 layers — exact to ~10⁻⁵) and ranked by simulated tokens
//!    per second. Ties, and the order of everything else, are broken by method (in
//!    [`crate::config::MethodId::ALL`] order), p, dp, recomputation (none, selective, full),
//!    micro-batch, ZeRO stage and FlashAttention (on first), so the same spec gives the same
//!    plan, byte for byte. Configurations that do not fit are rejected with `fits: false`, the
//!    peak and the capacity.
//!
//! Layout: [`spec`](PlanSpec), candidates and their enumeration, rejections, ranking. Depends on
//! `config`, `memory`, `evaluate`, `sim` (the link model), `shard` and `error`; never on `sweep`,
//! `report` or `cli`.

mod candidate;
mod check;
mod rank;
mod rejection;
mod spec;

pub use crate::evaluate::{SimDepth, EXTRAPOLATION_LAYERS};
pub use candidate::{enumerate, recompute_name, Candidate};
pub use check::{check_part, check_spec};
pub use rank::{
    merge, plan, plan_part, plan_part_with, plan_with, Plan, PlanPart, PlanProgress, Ranked,
    Simulated,
};
pub use rejection::{RejectCategory, Rejection};
pub use spec::{
    PlanSpec, INTERLEAVES, MAX_CP, MAX_GLOBAL_BATCH, MAX_GPUS, MAX_PP, MICRO_BATCHES, RECOMPUTE,
    ZERO,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load_hardware, load_model, MethodId, Recompute};

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
        // Default global batch = dp: one sequence per replica, micro-batch 1.
        assert!(cands
            .iter()
            .all(|c| c.micro_batch == 1 && c.micro_batches == 1 && c.p * c.dp == 8));
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
        assert_eq!(skipped, 3 * RECOMPUTE.len());
        // 2 methods × 4 degrees × 3 policies × 4 stages, less the skipped.
        assert_eq!(cands.len(), 2 * 4 * 3 * 4 - skipped);
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
