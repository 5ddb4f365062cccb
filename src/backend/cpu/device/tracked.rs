//! Byte accounting: a [`Tracked`] buffer adds its bytes (in the modelled [`Dtype`]) to its
//! device's [`Mem`] while it lives; the device records its high-water mark and the per-name
//! breakdown at that moment.

use super::{Device, Mat, Mem};
use crate::backend::unit::device::Dtype;

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
