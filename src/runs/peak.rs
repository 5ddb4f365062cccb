//! A run's peak memory, part by part: what is a tensor the schedule holds and what is the
//! profile's reserve, and how much allocator headroom the run could have had and still fit.
//!
//! A published run that ran but does not fit by the tool's memory model is either holding
//! tensors the model counts wrongly or leaving less headroom than the profile assumes; these
//! parts say which, in numbers. Reads the evaluation's inventory and the profile's reserve;
//! depends on `evaluate` and `config` only.

use serde::Serialize;

use crate::evaluate::Evaluation;

/// The peak of the device that decides whether a run fits, part by part (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PeakParts {
    /// Weights, gradients and optimizer state.
    pub static_bytes: u128,
    /// Stored activations of one layer for one micro-batch.
    pub activation_bytes_per_layer: u128,
    /// Layers whose activations are held at the peak (micro-batches in flight × layers).
    pub in_flight_layers: u64,
    /// All stored activations at the peak (those layers, embedding and head inputs).
    pub stored_bytes: u128,
    /// The transient working set at the peak.
    pub transient_bytes: u128,
    /// The profile's CUDA context.
    pub cuda_context_bytes: u128,
    /// The profile's NCCL buffers.
    pub nccl_bytes: u128,
    /// The profile's allocator headroom (its fraction of device memory).
    pub allocator_headroom_bytes: u128,
    /// That fraction.
    pub allocator_headroom_fraction: f64,
    /// Device memory.
    pub capacity_bytes: u128,
    /// The largest allocator headroom, as a fraction of device memory, with which the peak
    /// still fits (`None` when the tensors, context and NCCL buffers alone do not).
    pub headroom_fraction_that_fits: Option<f64>,
}

impl PeakParts {
    /// The parts of `e`'s critical device.
    pub fn of(e: &Evaluation) -> PeakParts {
        let inv = &e.inventory;
        let hw = &e.workload.hardware;
        let r = &hw.reserved;
        let cuda_context_bytes = r.cuda_context_bytes.value.round() as u128;
        let nccl_bytes = r.nccl_bytes.value.round() as u128;
        let allocator_headroom_bytes = inv
            .reserved_bytes
            .saturating_sub(cuda_context_bytes + nccl_bytes);
        let without_headroom = inv.peak_bytes.saturating_sub(allocator_headroom_bytes);
        let memory = hw.memory_bytes().max(1) as f64;
        let headroom_fraction_that_fits = (without_headroom <= inv.capacity_bytes)
            .then(|| (inv.capacity_bytes - without_headroom) as f64 / memory);
        PeakParts {
            static_bytes: inv.static_bytes,
            activation_bytes_per_layer: inv.activation_bytes_per_layer,
            in_flight_layers: inv.in_flight_layers,
            stored_bytes: inv.stored_bytes,
            transient_bytes: inv.transient_peak_bytes,
            cuda_context_bytes,
            nccl_bytes,
            allocator_headroom_bytes,
            allocator_headroom_fraction: r.allocator_headroom_fraction.value,
            capacity_bytes: inv.capacity_bytes,
            headroom_fraction_that_fits,
        }
    }

    /// The tensors: static, stored and transient.
    pub fn tensor_bytes(&self) -> u128 {
        self.static_bytes + self.stored_bytes + self.transient_bytes
    }

    /// Device memory left by the tensors, the context and the NCCL buffers (0 when they
    /// exceed it): the most allocator headroom with which the peak fits.
    pub fn spare_without_headroom_bytes(&self) -> u128 {
        self.capacity_bytes
            .saturating_sub(self.tensor_bytes() + self.cuda_context_bytes + self.nccl_bytes)
    }

    /// The most stored activations one layer in flight could take for the peak to fit, the
    /// weights, the transient working set, the other stored inputs (embedding and head) and the
    /// profile's reserve as they are — with the allocator headroom or without it. `None` when
    /// no layer is in flight or nothing is left for them: then the activations alone cannot
    /// make the run fit.
    pub fn activation_bytes_per_layer_that_fits(&self, with_headroom: bool) -> Option<u128> {
        if self.in_flight_layers == 0 {
            return None;
        }
        let layers = self.activation_bytes_per_layer * self.in_flight_layers as u128;
        let others = self.stored_bytes.saturating_sub(layers);
        let headroom = if with_headroom {
            self.allocator_headroom_bytes
        } else {
            0
        };
        let fixed = self.static_bytes
            + self.transient_bytes
            + others
            + self.cuda_context_bytes
            + self.nccl_bytes
            + headroom;
        let budget = self.capacity_bytes.checked_sub(fixed).filter(|b| *b > 0)?;
        Some(budget / self.in_flight_layers as u128)
    }

    /// The peak: the tensors and the reserve.
    pub fn peak_bytes(&self) -> u128 {
        self.tensor_bytes()
            + self.cuda_context_bytes
            + self.nccl_bytes
            + self.allocator_headroom_bytes
    }
}
