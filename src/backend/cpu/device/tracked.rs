//! Byte accounting: a [`Tracked`] buffer adds its bytes (in the modelled [`Dtype`]) to its
//! device's [`Mem`] while it lives; the device records its high-water mark and the per-name
//! breakdown at that moment.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use serde::Serialize;

use super::{Device, Mat};

/// The dtype a buffer models (the CPU always computes in f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// 2 bytes per element: activations, weights, K/V blocks, score blocks.
    Bf16,
    /// 4 bytes per element: accumulators, log-sum-exp, main gradients.
    Fp32,
}

impl Dtype {
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Bf16 => 2,
            Dtype::Fp32 => 4,
        }
    }
}

#[derive(Debug, Default)]
struct MemState {
    live: u64,
    peak: u64,
    live_by_name: BTreeMap<&'static str, u64>,
    peak_by_name: BTreeMap<&'static str, u64>,
    allocations: u64,
}

/// One device's live-bytes counter (shared by the device's [`Tracked`] buffers; never leaves
/// the device's thread).
#[derive(Clone, Default)]
pub struct Mem(Rc<RefCell<MemState>>);

impl Mem {
    /// Counts `bytes` of buffer `name` as held (also by the CUDA backend's tracked allocator,
    /// whose buffers are device memory).
    pub(crate) fn alloc(&self, name: &'static str, bytes: u64) {
        let mut s = self.0.borrow_mut();
        s.live += bytes;
        s.allocations += 1;
        *s.live_by_name.entry(name).or_insert(0) += bytes;
        if s.live > s.peak {
            s.peak = s.live;
            s.peak_by_name = s
                .live_by_name
                .iter()
                .filter(|(_, &b)| b > 0)
                .map(|(&k, &v)| (k, v))
                .collect();
        }
    }

    /// Stops counting `bytes` of buffer `name`.
    pub(crate) fn free(&self, name: &'static str, bytes: u64) {
        let mut s = self.0.borrow_mut();
        s.live -= bytes;
        if let Some(b) = s.live_by_name.get_mut(name) {
            *b -= bytes;
        }
    }

    /// Bytes held now.
    pub fn live(&self) -> u64 {
        self.0.borrow().live
    }

    /// High-water mark so far.
    pub fn peak(&self) -> u64 {
        self.0.borrow().peak
    }

    /// The record so far: high-water mark, live bytes, allocations, breakdown at the peak.
    pub(crate) fn stats(&self) -> MemStats {
        let s = self.0.borrow();
        MemStats {
            peak_bytes: s.peak,
            end_live_bytes: s.live,
            allocations: s.allocations,
            peak_breakdown: s
                .peak_by_name
                .iter()
                .map(|(&k, &v)| (k.to_string(), v))
                .collect(),
        }
    }
}

/// A device's memory record.
#[derive(Debug, Clone, Serialize)]
pub struct MemStats {
    /// High-water mark of the tracked bytes.
    pub peak_bytes: u64,
    /// Bytes still tracked when the device's program returned (its outputs are handed back
    /// untracked, so this should be 0).
    pub end_live_bytes: u64,
    /// Number of tracked allocations.
    pub allocations: u64,
    /// Live bytes per buffer name at the high-water mark.
    pub peak_breakdown: BTreeMap<String, u64>,
}

/// Something whose elements can be counted (what a [`Tracked`] holds).
pub trait Buffer {
    /// Elements held.
    fn elements(&self) -> usize;
    /// An empty value (left behind by [`Tracked::into_inner`]).
    fn empty() -> Self;
}

impl Buffer for Mat {
    fn elements(&self) -> usize {
        self.len()
    }
    fn empty() -> Self {
        Mat::zeros(0, 0)
    }
}

impl Buffer for Vec<Mat> {
    fn elements(&self) -> usize {
        self.iter().map(|m| m.len()).sum()
    }
    fn empty() -> Self {
        Vec::new()
    }
}

/// A buffer a device holds: its bytes count while it lives.
pub struct Tracked<T: Buffer> {
    value: T,
    name: &'static str,
    dtype: Dtype,
    bytes: u64,
    mem: Mem,
}

impl<T: Buffer> Tracked<T> {
    /// Name of the buffer (the inventory's tensor name where one exists).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Modelled dtype.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Bytes counted for this buffer.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Hands the value out of the device (its bytes stop counting).
    pub fn into_inner(mut self) -> T {
        std::mem::replace(&mut self.value, T::empty())
    }
}

impl<T: Buffer> std::ops::Deref for Tracked<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Buffer> std::ops::DerefMut for Tracked<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T: Buffer> Drop for Tracked<T> {
    fn drop(&mut self) {
        self.mem.free(self.name, self.bytes);
    }
}

impl Device {
    /// Starts tracking `value` as buffer `name` of dtype `dtype`.
    pub fn track<T: Buffer>(&self, name: &'static str, dtype: Dtype, value: T) -> Tracked<T> {
        let bytes = value.elements() as u64 * dtype.bytes();
        self.mem.alloc(name, bytes);
        Tracked {
            value,
            name,
            dtype,
            bytes,
            mem: self.mem.clone(),
        }
    }

    /// A zero-filled tracked matrix.
    pub fn zeros(
        &self,
        name: &'static str,
        dtype: Dtype,
        rows: usize,
        cols: usize,
    ) -> Tracked<Mat> {
        self.track(name, dtype, Mat::zeros(rows, cols))
    }
}
