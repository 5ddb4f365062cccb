//! Launches of the NVRTC kernels on a GPU's compute stream, on raw device pointers: the
//! element-wise passes, the unfused attention's row kernels, and the fused attention forward
//! and backward (with the checks their vector loads need).

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};

use crate::backend::cuda::sources;
use crate::backend::AttnCall;

use super::gpu::Gpu;
use super::{gpu_err, Error, Result};

/// Threads per block of the element-wise kernels.
const THREADS: u32 = 256;

/// A grid-stride launch over `n` elements (at most 65 535 × 4 blocks: the loop covers the rest).
fn flat(n: u64) -> LaunchConfig {
    let blocks = n.div_ceil(THREADS as u64).clamp(1, 65535 * 4) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// One warp per row: `rows` rows, 4 warps per block.
fn warps(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows.div_ceil(4).max(1) as u32, 1, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn launched<T>(what: &str, r: std::result::Result<T, cudarc::driver::DriverError>) -> Result<()> {
    r.map(|_| ()).map_err(|e| gpu_err(what, e))
}

fn int(what: &str, x: usize) -> Result<i32> {
    i32::try_from(x).map_err(|_| gpu_err(what, format!("{x} exceeds 32 bits")))
}

/// `rep` as the kernels take it: at least 1 and dividing the query heads.
fn heads_per_kv(g: &AttnCall, rep: usize) -> Result<i32> {
    if rep == 0 || !g.heads.is_multiple_of(rep) {
        return Err(gpu_err(
            "fused attention",
            format!(
                "{} query heads do not share K/V heads {rep} by {rep}",
                g.heads
            ),
        ));
    }
    int("query heads per K/V head", rep)
}

impl Gpu {
    fn launch1(
        &self,
        f: &CudaFunction,
        what: &str,
        args: &[&u64],
        tail: Option<f32>,
        n: u64,
    ) -> Result<()> {
        self.bind()?;
        let mut l = self.compute.launch_builder(f);
        for a in args {
            l.arg(*a);
        }
        if let Some(c) = tail.as_ref() {
            l.arg(c);
        }
        l.arg(&n);
        // SAFETY: every element-wise kernel takes its pointers (as u64), an optional f32 and
        // then the element count; the callers pass buffers of at least n elements.
        launched(what, unsafe { l.launch(flat(n)) })
    }

    /// y = GeLU(x) over n bf16 elements.
    pub fn gelu_fwd(&self, x: u64, y: u64, n: usize) -> Result<()> {
        self.launch1(&self.k.gelu_fwd, "gelu", &[&x, &y], None, n as u64)
    }

    /// g *= GeLU'(z) over n bf16 elements.
    pub fn gelu_bwd(&self, g: u64, z: u64, n: usize) -> Result<()> {
        self.launch1(&self.k.gelu_bwd, "gelu backward", &[&g, &z], None, n as u64)
    }

    /// a = SiLU(gate)·up over `rows` rows: h is rows × 2·fp (`[gate | up]`), a rows × fp.
    pub fn swiglu_fwd(&self, h: u64, a: u64, rows: usize, fp: usize) -> Result<()> {
        let fp64 = fp as u64;
        self.launch1(
            &self.k.swiglu_fwd,
            "swiglu",
            &[&h, &a, &fp64],
            None,
            (rows * fp) as u64,
        )
    }

    /// SwiGLU's backward in place: dh (rows × 2·fp) holds dA in its up half on entry and
    /// `[dA·up·SiLU'(gate) | dA·SiLU(gate)]` on exit, from h (rows × 2·fp).
    pub fn swiglu_bwd(&self, dh: u64, h: u64, rows: usize, fp: usize) -> Result<()> {
        let fp64 = fp as u64;
        self.launch1(
            &self.k.swiglu_bwd,
            "swiglu backward",
            &[&dh, &h, &fp64],
            None,
            (rows * fp) as u64,
        )
    }

    /// x = pseudo-random bf16 values in [-1, 1) (from `seed`) over n elements.
    pub fn random_bf16(&self, x: u64, seed: u64, n: usize) -> Result<()> {
        self.bind()?;
        let n64 = n as u64;
        let mut l = self.compute.launch_builder(&self.k.random_bf16);
        l.arg(&x).arg(&seed).arg(&n64);
        // SAFETY: (u16*, u64, u64); x holds n elements.
        launched("random fill", unsafe { l.launch(flat(n64)) })
    }

    /// y = c·x over n bf16 elements.
    pub fn scale_bf16(&self, x: u64, y: u64, c: f32, n: usize) -> Result<()> {
        self.launch1(&self.k.scale_bf16, "scale", &[&x, &y], Some(c), n as u64)
    }

    /// y = bf16(x) over n elements.
    pub fn to_bf16(&self, x: u64, y: u64, n: usize) -> Result<()> {
        self.launch1(
            &self.k.f32_to_bf16,
            "f32 to bf16",
            &[&x, &y],
            None,
            n as u64,
        )
    }

    /// x = v over n fp32 elements.
    pub fn fill(&self, x: u64, v: f32, n: usize) -> Result<()> {
        self.launch1(&self.k.fill_f32, "fill", &[&x], Some(v), n as u64)
    }

    /// acc += x over n fp32 elements.
    pub fn add_f32(&self, acc: u64, x: u64, n: usize) -> Result<()> {
        self.launch1(&self.k.add_f32, "add fp32", &[&acc, &x], None, n as u64)
    }

    /// acc += x over n bf16 elements.
    pub fn add_bf16(&self, acc: u64, x: u64, n: usize) -> Result<()> {
        self.launch1(&self.k.add_bf16, "add bf16", &[&acc, &x], None, n as u64)
    }

    /// An empty kernel (the host-overhead measurement).
    pub fn empty(&self) -> Result<()> {
        self.bind()?;
        let mut l = self.compute.launch_builder(&self.k.empty);
        // SAFETY: the kernel takes no argument.
        launched("empty kernel", unsafe {
            l.launch(LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (32, 1, 1),
                shared_mem_bytes: 0,
            })
        })
    }
}

/// 1/√d, the softmax scale of a call with head dimension d.
pub(crate) fn softmax_scale(g: &AttnCall) -> f32 {
    1.0 / (g.head_dim as f32).sqrt()
}

/// A bf16 or fp32 matrix in device memory: pointer and row stride in elements.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DevMat {
    pub ptr: u64,
    pub ld: usize,
}

impl DevMat {
    pub fn new(ptr: u64, ld: usize) -> DevMat {
        DevMat { ptr, ld }
    }
}

/// The flash kernels load 8 bf16 at a time: row strides must be multiples of 8 elements and
/// base addresses 16-byte aligned; the head dimension 64 or 128.
fn check_flash(g: &AttnCall, mats: &[(&str, DevMat)]) -> Result<()> {
    if g.head_dim != 64 && g.head_dim != 128 {
        return Err(Error::Calibration {
            message: format!(
                "the cuda backend's fused attention kernel supports head dimension 64 and 128, \
                 not {} (use unfused attention, --no-flash, for other head dimensions)",
                g.head_dim
            ),
        });
    }
    for (name, m) in mats {
        if m.ld % 8 != 0 || m.ptr % 16 != 0 {
            return Err(gpu_err(
                "fused attention",
                format!(
                    "{name}: row stride {} or address {:#x} not aligned",
                    m.ld, m.ptr
                ),
            ));
        }
    }
    if g.batch * g.heads > 65535 {
        return Err(gpu_err(
            "fused attention",
            "more than 65 535 sequences × heads",
        ));
    }
    Ok(())
}

impl Gpu {
    /// Fused attention forward, merged into the running (acc, lse): see flash_fwd.cu. `rep`
    /// query heads share each K/V head of k and v (grouped-query attention; 1 without).
    #[allow(clippy::too_many_arguments)]
    pub fn flash_fwd(
        &self,
        g: &AttnCall,
        q: DevMat,
        k: DevMat,
        v: DevMat,
        acc: DevMat,
        lse: u64,
        rep: usize,
    ) -> Result<()> {
        check_flash(g, &[("Q", q), ("K", k), ("V", v)])?;
        if g.q_tokens == 0 || g.kv_tokens == 0 {
            return Ok(());
        }
        self.bind()?;
        let f = if g.head_dim == 64 {
            &self.k.flash_fwd_d64
        } else {
            &self.k.flash_fwd_d128
        };
        let (ldq, ldk, ldv, lda) = (q.ld as i64, k.ld as i64, v.ld as i64, acc.ld as i64);
        let (heads, nq, nkv) = (
            int("heads", g.heads)?,
            int("queries", g.q_tokens)?,
            int("keys", g.kv_tokens)?,
        );
        let (scale, causal) = (softmax_scale(g), i32::from(g.causal));
        let rep = heads_per_kv(g, rep)?;
        let mut l = self.compute.launch_builder(f);
        l.arg(&q.ptr)
            .arg(&k.ptr)
            .arg(&v.ptr)
            .arg(&ldq)
            .arg(&ldk)
            .arg(&ldv)
            .arg(&acc.ptr)
            .arg(&lda)
            .arg(&lse)
            .arg(&heads)
            .arg(&nq)
            .arg(&nkv)
            .arg(&scale)
            .arg(&causal)
            .arg(&rep);
        let cfg = LaunchConfig {
            grid_dim: (
                g.q_tokens.div_ceil(sources::FLASH_TILE) as u32,
                (g.batch * g.heads) as u32,
                1,
            ),
            block_dim: (sources::FLASH_THREADS, 1, 1),
            shared_mem_bytes: sources::flash_fwd_smem_bytes(g.head_dim) as u32,
        };
        // SAFETY: the argument list matches flash_fwd_d64/d128 (pointers as u64, strides as
        // i64, then i32 heads/nq/nkv, f32 scale, i32 causal, i32 rep); the callers' buffers
        // hold batch·nq (q, acc, lse) and batch·nkv (k, v) rows of their strides, k and v
        // heads/rep heads of d columns.
        launched("fused attention forward", unsafe { l.launch(cfg) })
    }

    /// Fused attention backward, accumulating into dq (atomics), dk and dv (fp32; atomics when
    /// `rep` > 1 query heads share a K/V head): see flash_bwd.cu. `delta` = rowsum(dO ∘ O)
    /// from [`Gpu::attn_delta`].
    #[allow(clippy::too_many_arguments)]
    pub fn flash_bwd(
        &self,
        g: &AttnCall,
        q: DevMat,
        k: DevMat,
        v: DevMat,
        dout: DevMat,
        lse: u64,
        delta: u64,
        dq: DevMat,
        dk: DevMat,
        dv: DevMat,
        rep: usize,
    ) -> Result<()> {
        check_flash(g, &[("Q", q), ("K", k), ("V", v), ("dO", dout)])?;
        if g.q_tokens == 0 || g.kv_tokens == 0 {
            return Ok(());
        }
        self.bind()?;
        let f = if g.head_dim == 64 {
            &self.k.flash_bwd_d64
        } else {
            &self.k.flash_bwd_d128
        };
        let lds: [i64; 7] = [q.ld, k.ld, v.ld, dout.ld, dq.ld, dk.ld, dv.ld].map(|x| x as i64);
        let (heads, nq, nkv) = (
            int("heads", g.heads)?,
            int("queries", g.q_tokens)?,
            int("keys", g.kv_tokens)?,
        );
        let (scale, causal) = (softmax_scale(g), i32::from(g.causal));
        let rep = heads_per_kv(g, rep)?;
        let mut l = self.compute.launch_builder(f);
        l.arg(&q.ptr)
            .arg(&k.ptr)
            .arg(&v.ptr)
            .arg(&dout.ptr)
            .arg(&lds[0])
            .arg(&lds[1])
            .arg(&lds[2])
            .arg(&lds[3])
            .arg(&lse)
            .arg(&delta)
            .arg(&dq.ptr)
            .arg(&dk.ptr)
            .arg(&dv.ptr)
            .arg(&lds[4])
            .arg(&lds[5])
            .arg(&lds[6])
            .arg(&heads)
            .arg(&nq)
            .arg(&nkv)
            .arg(&scale)
            .arg(&causal)
            .arg(&rep);
        let cfg = LaunchConfig {
            grid_dim: (
                g.kv_tokens.div_ceil(sources::FLASH_TILE) as u32,
                (g.batch * g.heads) as u32,
                1,
            ),
            block_dim: (sources::FLASH_THREADS, 1, 1),
            shared_mem_bytes: sources::flash_bwd_smem_bytes(g.head_dim) as u32,
        };
        // SAFETY: the argument list matches flash_bwd_d64/d128; buffers as for flash_fwd,
        // lse and delta hold batch·nq·heads floats, dq/dk/dv the rows of their strides.
        launched("fused attention backward", unsafe { l.launch(cfg) })
    }

    /// delta[row][head] = Σ dO ∘ O over the head's d columns (bf16 inputs), rows × heads.
    pub fn attn_delta(
        &self,
        dout: DevMat,
        o: DevMat,
        delta: u64,
        rows: usize,
        heads: usize,
        d: usize,
    ) -> Result<()> {
        self.bind()?;
        let (r, h, dd) = (int("rows", rows)?, int("heads", heads)?, int("d", d)?);
        let (lda, ldb) = (dout.ld as i64, o.ld as i64);
        let mut l = self.compute.launch_builder(&self.k.attn_delta);
        l.arg(&dout.ptr)
            .arg(&o.ptr)
            .arg(&delta)
            .arg(&r)
            .arg(&h)
            .arg(&dd)
            .arg(&lda)
            .arg(&ldb);
        // SAFETY: (const u16*, const u16*, f32*, i32, i32, i32, i64, i64) as attn_delta.
        launched("attention D pre-pass", unsafe {
            l.launch(warps(rows * heads))
        })
    }

    /// Unfused forward: probabilities and block log-sum-exp from scores (softmax_rows).
    #[allow(clippy::too_many_arguments)]
    pub fn softmax_rows(&self, g: &AttnCall, scores: u64, probs: u64, blse: u64) -> Result<()> {
        self.bind()?;
        let rows = g.batch * g.heads * g.q_tokens;
        let (r, q, kv, h) = (
            int("rows", rows)?,
            int("queries", g.q_tokens)?,
            int("keys", g.kv_tokens)?,
            int("heads", g.heads)?,
        );
        let (scale, causal) = (softmax_scale(g), i32::from(g.causal));
        let mut l = self.compute.launch_builder(&self.k.softmax_rows);
        l.arg(&scores)
            .arg(&probs)
            .arg(&blse)
            .arg(&r)
            .arg(&q)
            .arg(&kv)
            .arg(&h)
            .arg(&scale)
            .arg(&causal);
        // SAFETY: matches softmax_rows; scores/probs hold rows·nkv, blse batch·nq·heads.
        launched("softmax", unsafe { l.launch(warps(rows)) })
    }

    /// Unfused backward: probabilities recomputed in place from the stored log-sum-exp.
    pub fn probs_from_lse(&self, g: &AttnCall, s: u64, lse: u64) -> Result<()> {
        self.bind()?;
        let rows = g.batch * g.heads * g.q_tokens;
        let (r, q, kv, h) = (
            int("rows", rows)?,
            int("queries", g.q_tokens)?,
            int("keys", g.kv_tokens)?,
            int("heads", g.heads)?,
        );
        let (scale, causal) = (softmax_scale(g), i32::from(g.causal));
        let mut l = self.compute.launch_builder(&self.k.probs_from_lse);
        l.arg(&s)
            .arg(&lse)
            .arg(&r)
            .arg(&q)
            .arg(&kv)
            .arg(&h)
            .arg(&scale)
            .arg(&causal);
        // SAFETY: matches probs_from_lse.
        launched("probabilities from log-sum-exp", unsafe {
            l.launch(warps(rows))
        })
    }

    /// Unfused backward: dS = P ∘ (dP − D).
    pub fn grad_scores(&self, g: &AttnCall, p: u64, dp: u64, delta: u64, ds: u64) -> Result<()> {
        self.bind()?;
        let rows = g.batch * g.heads * g.q_tokens;
        let (r, q, kv, h) = (
            int("rows", rows)?,
            int("queries", g.q_tokens)?,
            int("keys", g.kv_tokens)?,
            int("heads", g.heads)?,
        );
        let mut l = self.compute.launch_builder(&self.k.grad_scores);
        l.arg(&p)
            .arg(&dp)
            .arg(&delta)
            .arg(&ds)
            .arg(&r)
            .arg(&q)
            .arg(&kv)
            .arg(&h);
        // SAFETY: matches grad_scores.
        launched("score gradient", unsafe { l.launch(warps(rows)) })
    }

    /// Unfused forward: merges a block output (bf16) and its log-sum-exp into (acc, lse).
    #[allow(clippy::too_many_arguments)]
    pub fn lse_merge(
        &self,
        acc: DevMat,
        lse: u64,
        ob: DevMat,
        blse: u64,
        rows: usize,
        heads: usize,
        d: usize,
    ) -> Result<()> {
        self.bind()?;
        let (r, h, dd) = (int("rows", rows)?, int("heads", heads)?, int("d", d)?);
        let (lda, ldo) = (acc.ld as i64, ob.ld as i64);
        let mut l = self.compute.launch_builder(&self.k.lse_merge);
        l.arg(&acc.ptr)
            .arg(&lse)
            .arg(&ob.ptr)
            .arg(&blse)
            .arg(&r)
            .arg(&h)
            .arg(&dd)
            .arg(&lda)
            .arg(&ldo);
        let n = rows * heads;
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(128).max(1) as u32, 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: matches lse_merge.
        launched("log-sum-exp merge", unsafe { l.launch(cfg) })
    }
}
