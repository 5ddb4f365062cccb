//! Collective prices remembered across cost models of one hardware profile.
//!
//! A plan prices tens of thousands of configurations; they differ in method, recomputation,
//! ZeRO stage and micro-batch far more often than in the collectives they run, so the same
//! (operation, group, bytes) over the same profile recurs thousands of times — and pricing one
//! over a group of thousands of ranks routes and sorts every transfer. A price is a pure
//! function of the profile and the key, so remembering it changes no result: the memo of a
//! profile is shared only with profiles equal to it field for field, and both the number of
//! profiles and the prices kept are bounded (the oldest profile, or a full table, is dropped).
//! Depends on `config` and `schedule`'s plain data only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::collective::CollectiveKey;
use crate::config::Hardware;

/// Profiles whose prices are kept at once (a process plans on one or a few).
const PROFILES: usize = 4;
/// Prices kept per profile before the table starts over.
const PRICES: usize = 1 << 16;

/// The prices of one profile.
#[derive(Debug, Default)]
pub struct Memo {
    prices: Mutex<HashMap<CollectiveKey, f64>>,
}

impl Memo {
    /// The price of `key`, or `price()` remembered.
    pub fn get_or(&self, key: &CollectiveKey, price: impl FnOnce() -> f64) -> f64 {
        let lock = |m: &Mutex<HashMap<CollectiveKey, f64>>| {
            // A panic while holding the lock cannot leave a half-written price behind.
            m.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(key)
                .copied()
        };
        if let Some(t) = lock(&self.prices) {
            return t;
        }
        // Priced outside the lock: another thread may price the same key meanwhile, to the
        // same bits.
        let t = price();
        let mut prices = self.prices.lock().unwrap_or_else(PoisonError::into_inner);
        if prices.len() >= PRICES {
            prices.clear();
        }
        prices.insert(key.clone(), t);
        t
    }

    /// Prices held (for tests).
    pub fn len(&self) -> usize {
        self.prices
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no price is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

static MEMOS: Mutex<Vec<(Hardware, Arc<Memo>)>> = Mutex::new(Vec::new());

/// The memo of profile `hw` (shared with every equal profile).
pub fn memo(hw: &Hardware) -> Arc<Memo> {
    let mut memos = MEMOS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, m)) = memos.iter().find(|(h, _)| h == hw) {
        return m.clone();
    }
    if memos.len() >= PROFILES {
        memos.remove(0);
    }
    let m = Arc::new(Memo::default());
    memos.push((hw.clone(), m.clone()));
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_hardware;
    use crate::schedule::CollectiveOp;

    /// Equal profiles share one memo; a profile that differs in one figure gets its own, so a
    /// price can never cross profiles.
    #[test]
    fn prices_are_shared_by_equal_profiles_only() {
        let a = load_hardware("dgx-h100").unwrap();
        let mut b = a.clone();
        b.nodes += 1;
        assert!(Arc::ptr_eq(&memo(&a), &memo(&a.clone())));
        assert!(!Arc::ptr_eq(&memo(&a), &memo(&b)));
        let key = (CollectiveOp::AllReduce, vec![0, 1, 2, 3], 1 << 20);
        let m = memo(&b);
        assert_eq!(m.get_or(&key, || 1.5), 1.5);
        // Remembered: the second pricing is never run.
        assert_eq!(m.get_or(&key, || unreachable!()), 1.5);
        assert!(!m.is_empty());
    }
}
