//! What one unit run takes on the host, estimated from its shape before anything runs: every
//! unit is checked against an unsharded f64 reference on the CPU ([`super::reference`]), whose
//! attention holds s × s matrices per head, and on the CPU backend its f32 runtime holds the
//! inputs, outputs and gradients beside it. A run beyond the tool's bound on operations
//! (`config::limits::MAX_UNIT_REFERENCE_FLOPS`) or the memory this process may take
//! (`config::limits::host_memory_budget_bytes`) is refused in one line with the figures.

use super::RunSpec;
use crate::config::limits::{gib, host_memory_budget_bytes, MAX_UNIT_REFERENCE_FLOPS};
use crate::config::Unit;
use crate::error::{Error, Result};

/// The f64 reference's floating-point operations and peak bytes, and the f32 runtime's bytes
/// beside it (half the reference's: the same tensors in f32), for `spec`.
pub fn host_cost(spec: &RunSpec) -> (f64, f64) {
    let sh = spec.shape;
    let [b, s, h, a, f, _] = sh.as_u64().map(|x| x as f64);
    let (flops, bytes) = match spec.unit {
        Unit::Attention => {
            let d = h / a.max(1.0);
            // Per sequence and head: QKᵀ twice (forward, and recomputed in backward), P·V, and
            // four products of backward (14·s²·d), with the softmax and its gradient (13·s²);
            // the projections and their gradients, 24·b·s·h². Live at once: about twelve
            // (b·s)×h tensors, the weights and their gradients (8·h²), and six s × s matrices.
            (
                b * a * (14.0 * s * s * d + 13.0 * s * s) + 24.0 * b * s * h * h,
                8.0 * (12.0 * b * s * h + 8.0 * h * h + 6.0 * s * s),
            )
        }
        Unit::Mlp => (
            12.0 * b * s * h * f + 10.0 * b * s * f,
            8.0 * (4.0 * b * s * h + 4.0 * b * s * f + 4.0 * h * f),
        ),
    };
    (flops, bytes * 1.5)
}

/// Refuses a run whose reference would take more than the tool's bound on operations or more
/// memory than this process may take (module docs).
pub fn check_host_cost(spec: &RunSpec) -> Result<()> {
    let (flops, bytes) = host_cost(spec);
    let sh = spec.shape;
    let what = format!(
        "the {} unit at s = {}, h = {}, a = {}, f = {}, b = {}",
        match spec.unit {
            Unit::Attention => "attention",
            Unit::Mlp => "MLP",
        },
        sh.s,
        sh.h,
        sh.a,
        sh.f,
        sh.b
    );
    let advice = "use a shorter --seq or a smaller --hidden, --heads or --ffn";
    if flops > MAX_UNIT_REFERENCE_FLOPS {
        return Err(Error::TooLarge {
            message: format!(
                "{what}: its f64 reference on the host would take {flops:.2e} floating-point \
                 operations, more than {MAX_UNIT_REFERENCE_FLOPS:e} (minutes on one core); \
                 {advice}"
            ),
        });
    }
    let budget = host_memory_budget_bytes();
    if bytes > budget as f64 {
        return Err(Error::TooLarge {
            message: format!(
                "{what}: its f64 reference and runtime on the host would hold about {}, more \
                 than the {} this process may take (half the memory available and of what the \
                 address-space limit leaves); {advice}",
                gib(bytes.min(u64::MAX as f64) as u64),
                gib(budget)
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ExecMethod, UnitShape};

    fn spec(unit: Unit, s: usize, h: usize, a: usize) -> RunSpec {
        RunSpec::new(
            unit,
            ExecMethod::Metp,
            UnitShape {
                b: 1,
                s,
                h,
                a,
                f: 4 * h,
                p: 2,
            },
        )
    }

    /// The default `run` and `calibrate --quick` units pass; a million tokens, or the GPU
    /// check's LLaMA-7B layer at 8 × 2048 tokens, do not.
    #[test]
    fn small_units_run_and_large_ones_are_refused() {
        check_host_cost(&spec(Unit::Attention, 256, 64, 4)).unwrap();
        check_host_cost(&spec(Unit::Mlp, 256, 64, 4)).unwrap();
        let e = check_host_cost(&spec(Unit::Attention, 1 << 20, 64, 4)).unwrap_err();
        assert!(e.to_string().contains("floating-point operations"), "{e}");
        assert!(check_host_cost(&spec(Unit::Attention, 16384, 4096, 32)).is_err());
        // The GPU check's one-device 7B layer: 1.1e12 operations, within the bound.
        let (flops, _) = host_cost(&spec(Unit::Attention, 2048, 4096, 32));
        assert!(
            flops > 1e12 && flops < MAX_UNIT_REFERENCE_FLOPS,
            "{flops:e}"
        );
    }
}
