//! The sizes of a workload that the memory and time formulas use, in the number type each needs:
//! `Dims<u128>` for byte counts (products of sizes never wrap), `Dims<f64>` for FLOP and time
//! arithmetic. One type, so both layers read the same sizes under the same names.

use super::Workload;

/// A number type a [`Dims`] can hold: a count converted exactly (`u128`) or to the nearest
/// float (`f64`).
pub trait Size: Copy {
    /// The value of `n`.
    fn of(n: u64) -> Self;
}

impl Size for u128 {
    fn of(n: u64) -> u128 {
        n as u128
    }
}

impl Size for f64 {
    fn of(n: u64) -> f64 {
        n as f64
    }
}

/// Model and workload sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dims<T> {
    /// Micro-batch b.
    pub b: T,
    /// Sequence length s.
    pub s: T,
    /// Hidden size h.
    pub h: T,
    /// Query heads a.
    pub a: T,
    /// K/V heads.
    pub a_kv: T,
    /// Head dimension h/a.
    pub d: T,
    /// MLP width f.
    pub f: T,
    /// Vocabulary.
    pub v: T,
    /// Degree p.
    pub p: T,
    /// Context-parallel ranks (1 without context parallelism).
    pub cp: T,
    /// Layers (a count, never a factor of a size).
    pub layers: u64,
}

impl<T: Size> Dims<T> {
    /// The sizes of `w`.
    pub fn new(w: &Workload) -> Dims<T> {
        let m = &w.model;
        Dims {
            b: T::of(w.micro_batch),
            s: T::of(w.seq),
            h: T::of(m.hidden),
            a: T::of(m.heads),
            a_kv: T::of(m.kv_heads),
            d: T::of(m.head_dim()),
            f: T::of(m.ffn_hidden),
            v: T::of(m.vocab),
            p: T::of(w.p),
            cp: T::of(w.outer.cp),
            layers: m.layers,
        }
    }
}

impl Dims<u128> {
    /// K/V heads held by one of `groups` head groups. Wherever a method splits heads, validation
    /// makes `groups` divide the K/V heads (`config::method::kv_heads_split`, Megatron's rule);
    /// more groups than K/V heads (never built by a valid workload) would read one each.
    pub fn kv_heads_per(&self, groups: u128) -> u128 {
        if self.a_kv >= groups {
            self.a_kv / groups
        } else {
            1
        }
    }
}

impl Dims<f64> {
    /// K/V heads per one of `groups` head groups, as the time formulas count them (a fraction
    /// when `groups` does not divide them; replicated below one per group).
    pub fn kv_per(&self, groups: f64) -> f64 {
        (self.a_kv / groups).max(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load_hardware, load_model, MethodId, Options};

    /// LLaMA-2 7B (h = 4096, a = 32, 32 K/V heads, f = 11008): both number types read the same
    /// sizes; K/V heads split 32 / 8 = 4 per group, and replicate to 1 beyond 32 groups.
    #[test]
    fn both_number_types_hold_the_same_sizes() {
        let w = Workload {
            model: load_model("llama2-7b").unwrap(),
            hardware: load_hardware("dgx-a100-80gb").unwrap(),
            method: MethodId::Metp,
            p: 8,
            dp: 1,
            outer: crate::config::OuterAxes::default(),
            seq: 4096,
            micro_batch: 2,
            micro_batches: 1,
            options: Options::default(),
        };
        let exact = Dims::<u128>::new(&w);
        let float = Dims::<f64>::new(&w);
        for (e, f) in [
            (exact.b, float.b),
            (exact.s, float.s),
            (exact.h, float.h),
            (exact.a, float.a),
            (exact.d, float.d),
            (exact.f, float.f),
            (exact.p, float.p),
        ] {
            assert_eq!(e as f64, f);
        }
        assert_eq!((exact.h, exact.d, exact.f), (4096, 128, 11008));
        assert_eq!(exact.kv_heads_per(8), 4);
        assert_eq!(exact.kv_heads_per(64), 1);
        assert_eq!(float.kv_per(8.0), 4.0);
        assert_eq!(float.kv_per(64.0), 1.0);
    }
}
