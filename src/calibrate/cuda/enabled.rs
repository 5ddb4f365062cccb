//! The CUDA/NCCL backend (feature `cuda`), on cudarc 0.19 with the libraries loaded at run
//! time.
//!
//! - **Probe first.** cudarc panics when a library is missing, so [`probe`] checks the driver,
//!   NVRTC and cuBLAS (and NCCL, needed only with two GPUs or more) with
//!   `sys::is_culib_present()` and asks the driver for a device before anything else; every
//!   failure is one [`Error::Unavailable`] line.
//! - **GEMMs**: bf16 operands, fp32 accumulation (cuBLAS `gemm_ex` through cudarc's `Gemm`
//!   trait), row-major matrices passed to the column-major library as their transposes:
//!   `C = A·B` is issued as `Cᵀ = Bᵀ·Aᵀ` ([`Gpu::gemm_rm`]).
//! - **NVRTC kernels** (no headers; bf16 handled as 16-bit words with round-to-nearest-even):
//!   GeLU (tanh form, as the CPU runtime), row softmax with its log-sum-exp (one warp per row,
//!   scale and causal mask), the log-sum-exp merge of a block into the running output, and
//!   fp32 → bf16.
//! - **Streams and events**: kernels on a compute stream, transfers on a second stream; cudarc
//!   records an event per buffer access, so the copy into double-buffer slot t+1 overlaps the
//!   compute on slot t and the compute waits for its slot's copy. Times come from events
//!   created with `CU_EVENT_DEFAULT` (timing enabled).
//! - **Transfers**: with two GPUs and NCCL, `Comm::from_devices` over GPUs 0 and 1 and a
//!   grouped send/recv (`group_start`/`group_end`) from this one process. **With one GPU — a
//!   stated emulation —** a transfer is a device-to-device copy on the second stream (it costs
//!   HBM bandwidth, not link bandwidth: hardware.md §8.2 item 3).
//! - **Units**: METP attention and MLP, and TP, forward only, b = 1, on p virtual devices
//!   emulated on GPU 0 (their buffers all on one device, their kernels serialised on its
//!   compute stream, ring hops as copies on the second stream, double buffered). Output
//!   checked against the f64 reference; `measured_peak_bytes` is the bytes each virtual device
//!   allocates (all its buffers live for the whole run). The backward pass and units spread
//!   over several GPUs with NCCL are not implemented.

use std::sync::Arc;
use std::time::Instant;

use cudarc::cublas::{sys as blas_sys, CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig,
    PushKernelArg,
};
use cudarc::nccl::{group_end, group_start, Comm};
use half::bf16;

use crate::calibrate::backend::{AttnCall, Backend, GemmShape, Pass, SlowdownSample};
use crate::calibrate::fit::median;
use crate::error::{Error, Result};
use crate::exec::{DeviceReport, ExecMethod, RunReport, RunSpec, Unit};

fn unavailable(message: impl Into<String>) -> Error {
    Error::Unavailable {
        backend: "cuda",
        message: message.into(),
    }
}

fn gpu_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Execution {
        message: format!("cuda: {what}: {e}"),
    }
}

/// `NcclError` implements neither `Display` nor `Error`.
fn nccl_err(what: &str, e: cudarc::nccl::result::NcclError) -> Error {
    Error::Execution {
        message: format!("nccl: {what}: {:?}", e.0),
    }
}

/// What the probe found.
struct Found {
    devices: usize,
    name: String,
    nccl: bool,
}

fn find() -> Result<Found> {
    // SAFETY: each call only tries to open a shared library by name.
    let present = |f: unsafe fn() -> bool| unsafe { f() };
    if !present(cudarc::driver::sys::is_culib_present) {
        return Err(unavailable(
            "no NVIDIA driver: libcuda.so was not found (install the driver, or run on a GPU \
             machine)",
        ));
    }
    for (lib, ok) in [
        (
            "NVRTC (libnvrtc.so)",
            present(cudarc::nvrtc::sys::is_culib_present),
        ),
        (
            "cuBLAS (libcublas.so)",
            present(cudarc::cublas::sys::is_culib_present),
        ),
        (
            "cuBLASLt (libcublasLt.so)",
            present(cudarc::cublaslt::sys::is_culib_present),
        ),
    ] {
        if !ok {
            return Err(unavailable(format!(
                "{lib} was not found: install the CUDA 12 runtime libraries or add their folder \
                 to LD_LIBRARY_PATH"
            )));
        }
    }
    let n = CudaContext::device_count()
        .map_err(|e| unavailable(format!("the driver reports no usable device: {e}")))?;
    if n < 1 {
        return Err(unavailable("the driver reports no CUDA device"));
    }
    let ctx = CudaContext::new(0).map_err(|e| unavailable(format!("GPU 0: {e}")))?;
    let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
    Ok(Found {
        devices: n as usize,
        name,
        nccl: present(cudarc::nccl::sys::is_culib_present),
    })
}

/// Checks the libraries and the device; returns a one-line description.
pub fn probe() -> Result<String> {
    let f = find()?;
    Ok(format!(
        "{} x {}{}",
        f.devices,
        f.name,
        if f.nccl {
            ", NCCL found"
        } else {
            ", no NCCL (libnccl.so)"
        }
    ))
}

/// Opens the backend: `devices` virtual devices for the units (emulated on GPU 0).
pub fn open(devices: usize, quick: bool) -> Result<Box<dyn Backend>> {
    Ok(Box::new(CudaBackend::new(devices, quick)?))
}

const KERNELS: &str = r#"
__device__ __forceinline__ float bf(unsigned short x) { return __uint_as_float(((unsigned int)x) << 16); }
__device__ __forceinline__ unsigned short tobf(float f) {
    unsigned int u = __float_as_uint(f);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

extern "C" __global__ void gelu(const unsigned short* x, unsigned short* y, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (; i < n; i += step) {
        float v = bf(x[i]);
        float t = tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v));
        y[i] = tobf(0.5f * v * (1.0f + t));
    }
}

// Rows of `cols` scores (bf16, row-major); row r of the launch belongs to head
// r / rows_per_head and is query row r % rows_per_head of its block. Writes probabilities in place and the row's log-sum-exp.
extern "C" __global__ void softmax_lse(unsigned short* s, float* lse, int rows, int cols,
                                       int rows_per_head, float scale, int causal) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (warp >= rows) return;
    int q = warp % rows_per_head;
    unsigned short* row = s + (unsigned long long)warp * cols;
    float m = neg_inf();
    for (int j = lane; j < cols; j += 32) {
        if (causal && j > q) continue;
        m = fmaxf(m, bf(row[j]) * scale);
    }
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0.0f;
    for (int j = lane; j < cols; j += 32) {
        if (causal && j > q) continue;
        sum += __expf(bf(row[j]) * scale - m);
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    float l = m + logf(sum);
    for (int j = lane; j < cols; j += 32) {
        float p = (causal && j > q) ? 0.0f : __expf(bf(row[j]) * scale - l);
        row[j] = tobf(p);
    }
    if (lane == 0) lse[warp] = l;
}

// Merges a block's normalised output `ob` (rows x ag*d, bf16) with block log-sum-exp `blse`
// ([ag][rows]) into the running output `acc` (fp32, rows x ag*d) and `lse` ([rows][ag]).
extern "C" __global__ void lse_merge(float* acc, float* lse, const unsigned short* ob,
                                     const float* blse, int rows, int ag, int d) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= rows * ag) return;
    int r = t / ag, h = t % ag;
    float old = lse[r * ag + h];
    float b = blse[h * rows + r];
    float m = fmaxf(old, b);
    if (m == neg_inf()) return;
    float nw = m + logf(__expf(old - m) + __expf(b - m));
    float wa = __expf(old - nw), wb = __expf(b - nw);
    int w = ag * d;
    for (int c = 0; c < d; c++) {
        int i = r * w + h * d + c;
        acc[i] = acc[i] * wa + bf(ob[i]) * wb;
    }
    lse[r * ag + h] = nw;
}

extern "C" __global__ void to_bf16(const float* x, unsigned short* y, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = tobf(x[i]);
}

extern "C" __global__ void fill_f32(float* x, float v, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}
"#;

struct Kernels {
    gelu: CudaFunction,
    softmax: CudaFunction,
    merge: CudaFunction,
    to_bf16: CudaFunction,
    fill: CudaFunction,
}

/// GPU 0: context, two streams, cuBLAS on the compute stream, the kernels.
struct Gpu {
    ctx: Arc<CudaContext>,
    compute: Arc<CudaStream>,
    comm: Arc<CudaStream>,
    blas: CudaBlas,
    k: Kernels,
}

type B16 = CudaSlice<bf16>;

fn cfg1d(n: usize) -> LaunchConfig {
    LaunchConfig::for_num_elems(n.max(1) as u32)
}

impl Gpu {
    fn new() -> Result<Gpu> {
        let ctx = CudaContext::new(0).map_err(|e| gpu_err("context on GPU 0", e))?;
        // Two non-blocking streams (the legacy default stream would serialise with others).
        let compute = ctx.new_stream().map_err(|e| gpu_err("compute stream", e))?;
        let comm = ctx.new_stream().map_err(|e| gpu_err("copy stream", e))?;
        let blas = CudaBlas::new(compute.clone()).map_err(|e| gpu_err("cuBLAS handle", e))?;
        let ptx = cudarc::nvrtc::compile_ptx(KERNELS).map_err(|e| gpu_err("NVRTC", e))?;
        let module = ctx.load_module(ptx).map_err(|e| gpu_err("module", e))?;
        let f = |name: &str| {
            module
                .load_function(name)
                .map_err(|e| gpu_err(&format!("kernel {name}"), e))
        };
        let k = Kernels {
            gelu: f("gelu")?,
            softmax: f("softmax_lse")?,
            merge: f("lse_merge")?,
            to_bf16: f("to_bf16")?,
            fill: f("fill_f32")?,
        };
        Ok(Gpu {
            ctx,
            compute,
            comm,
            blas,
            k,
        })
    }

    fn zeros_b(&self, n: usize) -> Result<B16> {
        self.compute
            .alloc_zeros::<bf16>(n.max(1))
            .map_err(|e| gpu_err("alloc", e))
    }

    fn zeros_f(&self, n: usize) -> Result<CudaSlice<f32>> {
        self.compute
            .alloc_zeros::<f32>(n.max(1))
            .map_err(|e| gpu_err("alloc", e))
    }

    fn upload(&self, v: &[bf16]) -> Result<B16> {
        self.compute.clone_htod(v).map_err(|e| gpu_err("upload", e))
    }

    /// Row-major `C (m×n) = op(A)·op(B) + β·C`, op(X) = Xᵀ when `t_x`; `ld_x` are row
    /// strides. Issued to the column-major library as `Cᵀ = op(B)ᵀ·op(A)ᵀ`.
    #[allow(clippy::too_many_arguments)]
    fn gemm_rm<A: DevicePtr<bf16>, Bm: DevicePtr<bf16>, C: DevicePtrMut<bf16>>(
        &self,
        (m, n, k): (usize, usize, usize),
        a: &A,
        lda: usize,
        t_a: bool,
        b: &Bm,
        ldb: usize,
        t_b: bool,
        c: &mut C,
        ldc: usize,
        beta: f32,
    ) -> Result<()> {
        let op = |t: bool| {
            if t {
                blas_sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                blas_sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let cfg = GemmConfig {
            transa: op(t_b),
            transb: op(t_a),
            m: n as i32,
            n: m as i32,
            k: k as i32,
            alpha: bf16::ONE,
            lda: ldb as i32,
            ldb: lda as i32,
            beta: bf16::from_f32(beta),
            ldc: ldc as i32,
        };
        // SAFETY: the callers pass buffers of at least the sizes the shapes and strides imply.
        unsafe { self.blas.gemm(cfg, b, a, c) }.map_err(|e| gpu_err("cuBLAS gemm", e))
    }

    /// The same, batched over `batch` matrices `stride_x` elements apart.
    #[allow(clippy::too_many_arguments)]
    fn gemm_rm_batched<A: DevicePtr<bf16>, Bm: DevicePtr<bf16>, C: DevicePtrMut<bf16>>(
        &self,
        (m, n, k): (usize, usize, usize),
        batch: usize,
        (a, lda, t_a, sa): (&A, usize, bool, usize),
        (b, ldb, t_b, sb): (&Bm, usize, bool, usize),
        (c, ldc, sc): (&mut C, usize, usize),
    ) -> Result<()> {
        let op = |t: bool| {
            if t {
                blas_sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                blas_sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let cfg = StridedBatchedConfig {
            gemm: GemmConfig {
                transa: op(t_b),
                transb: op(t_a),
                m: n as i32,
                n: m as i32,
                k: k as i32,
                alpha: bf16::ONE,
                lda: ldb as i32,
                ldb: lda as i32,
                beta: bf16::ZERO,
                ldc: ldc as i32,
            },
            batch_size: batch as i32,
            stride_a: sb as i64,
            stride_b: sa as i64,
            stride_c: sc as i64,
        };
        // SAFETY: as for `gemm_rm`.
        unsafe { self.blas.gemm_strided_batched(cfg, b, a, c) }
            .map_err(|e| gpu_err("cuBLAS batched gemm", e))
    }

    fn gelu(&self, x: &B16, y: &mut B16, n: usize) -> Result<()> {
        let n64 = n as u64;
        let mut l = self.compute.launch_builder(&self.k.gelu);
        l.arg(x).arg(y).arg(&n64);
        // SAFETY: kernel signature (const u16*, u16*, u64) matches the arguments.
        unsafe { l.launch(cfg1d(n)) }
            .map(|_| ())
            .map_err(|e| gpu_err("gelu", e))
    }

    fn fill(&self, x: &mut CudaSlice<f32>, v: f32, n: usize) -> Result<()> {
        let n64 = n as u64;
        let mut l = self.compute.launch_builder(&self.k.fill);
        l.arg(x).arg(&v).arg(&n64);
        // SAFETY: (f32*, f32, u64).
        unsafe { l.launch(cfg1d(n)) }
            .map(|_| ())
            .map_err(|e| gpu_err("fill", e))
    }

    fn to_bf16(&self, x: &CudaSlice<f32>, y: &mut B16, n: usize) -> Result<()> {
        let n64 = n as u64;
        let mut l = self.compute.launch_builder(&self.k.to_bf16);
        l.arg(x).arg(y).arg(&n64);
        // SAFETY: (const f32*, u16*, u64).
        unsafe { l.launch(cfg1d(n)) }
            .map(|_| ())
            .map_err(|e| gpu_err("to_bf16", e))
    }

    /// Seconds of `f` on the compute stream (after `comm` joins it), timed with events.
    fn timed(&self, f: impl FnOnce() -> Result<()>) -> Result<f64> {
        let ev = |s: &CudaStream| {
            s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(|e| gpu_err("event", e))
        };
        let start = ev(&self.compute)?;
        f()?;
        self.compute
            .join(&self.comm)
            .map_err(|e| gpu_err("join", e))?;
        let end = ev(&self.compute)?;
        let ms = start.elapsed_ms(&end).map_err(|e| gpu_err("elapsed", e))?;
        Ok(f64::from(ms) / 1e3)
    }
}

/// Workspace of one attention block: scores, block log-sum-exp, block output.
struct BlockWs {
    s: B16,
    blse: CudaSlice<f32>,
    ob: B16,
}

impl BlockWs {
    fn new(gpu: &Gpu, rows: usize, keys: usize, ag: usize, d: usize) -> Result<BlockWs> {
        Ok(BlockWs {
            s: gpu.zeros_b(ag * rows * keys)?,
            blse: gpu.zeros_f(ag * rows)?,
            ob: gpu.zeros_b(rows * ag * d)?,
        })
    }
    fn bytes(&self) -> u64 {
        2 * self.s.len() as u64 + 4 * self.blse.len() as u64 + 2 * self.ob.len() as u64
    }
}

/// One attention block for `ag` heads of dimension `d`: Q (rows × ag·d, row stride `ldq`)
/// against K and V (keys × ag·d each; K at column 0 and V at column ag·d of a buffer with row
/// stride `ldkv`): scores, softmax with log-sum-exp, P·V, merge into (acc, lse).
#[allow(clippy::too_many_arguments)]
fn attention_block(
    gpu: &Gpu,
    q: &B16,
    ldq: usize,
    kv: &B16,
    ldkv: usize,
    (rows, keys, ag, d): (usize, usize, usize, usize),
    causal_diag: bool,
    ws: &mut BlockWs,
    acc: &mut CudaSlice<f32>,
    lse: &mut CudaSlice<f32>,
) -> Result<()> {
    let hg = ag * d;
    // S_h = Q_h · K_hᵀ (rows × keys per head).
    gpu.gemm_rm_batched(
        (rows, keys, d),
        ag,
        (q, ldq, false, d),
        (kv, ldkv, true, d),
        (&mut ws.s, keys, rows * keys),
    )?;
    let (r32, k32, q32, causal) = (
        (ag * rows) as i32,
        keys as i32,
        rows as i32,
        i32::from(causal_diag),
    );
    let scale = 1.0f32 / (d as f32).sqrt();
    let mut l = gpu.compute.launch_builder(&gpu.k.softmax);
    l.arg(&mut ws.s)
        .arg(&mut ws.blse)
        .arg(&r32)
        .arg(&k32)
        .arg(&q32)
        .arg(&scale)
        .arg(&causal);
    let warps_per_block = 4usize;
    let cfg = LaunchConfig {
        grid_dim: ((ag * rows).div_ceil(warps_per_block).max(1) as u32, 1, 1),
        block_dim: (32 * warps_per_block as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: (u16*, f32*, i32, i32, i32, f32, i32); s holds ag·rows·keys, blse ag·rows.
    unsafe { l.launch(cfg) }.map_err(|e| gpu_err("softmax", e))?;
    // O_h = P_h · V_h, written at column h·d of the block output (row stride hg).
    let v = kv.slice(hg..);
    gpu.gemm_rm_batched(
        (rows, d, keys),
        ag,
        (&ws.s, keys, false, rows * keys),
        (&v, ldkv, false, d),
        (&mut ws.ob, hg, d),
    )?;
    let (rows32, ag32, d32) = (rows as i32, ag as i32, d as i32);
    let mut l = gpu.compute.launch_builder(&gpu.k.merge);
    l.arg(acc)
        .arg(lse)
        .arg(&ws.ob)
        .arg(&ws.blse)
        .arg(&rows32)
        .arg(&ag32)
        .arg(&d32);
    // SAFETY: (f32*, f32*, const u16*, const f32*, i32, i32, i32) with the sizes above.
    unsafe { l.launch(cfg1d(rows * ag)) }.map_err(|e| gpu_err("lse merge", e))?;
    Ok(())
}

/// The CUDA backend.
pub struct CudaBackend {
    gpu: Gpu,
    found: Found,
    devices: usize,
    reps: usize,
    /// Communicators over GPUs 0 and 1 (two GPUs and NCCL present).
    nccl: Option<Vec<Comm>>,
    /// Why NCCL is not used, when there are two GPUs.
    nccl_note: String,
}

impl CudaBackend {
    fn new(devices: usize, quick: bool) -> Result<CudaBackend> {
        let found = find()?;
        let gpu = Gpu::new()?;
        // NCCL between GPUs 0 and 1 when there are two and the library is there; if its
        // set-up fails, transfers fall back to the one-GPU emulation (and `device()` says why).
        let (nccl, nccl_note) = if found.devices >= 2 && found.nccl {
            match Self::nccl_pair() {
                Ok(c) => (Some(c), String::new()),
                Err(e) => (None, format!(" (NCCL unusable: {e})")),
            }
        } else if found.devices >= 2 {
            (None, " (libnccl.so not found)".to_string())
        } else {
            (None, String::new())
        };
        Ok(CudaBackend {
            gpu,
            found,
            devices: devices.max(1),
            reps: if quick { 5 } else { 20 },
            nccl,
            nccl_note,
        })
    }

    fn nccl_pair() -> Result<Vec<Comm>> {
        let streams = (0..2)
            .map(|o| {
                CudaContext::new(o)
                    .map(|c| c.default_stream())
                    .map_err(|e| gpu_err(&format!("context on GPU {o}"), e))
            })
            .collect::<Result<Vec<_>>>()?;
        Comm::from_devices(streams).map_err(|e| nccl_err("ncclCommInitAll", e))
    }

    /// Median seconds of `f` over the repetitions (one warm-up first).
    fn median_of(&self, mut f: impl FnMut() -> Result<f64>) -> Result<f64> {
        f()?;
        let mut v = (0..self.reps).map(|_| f()).collect::<Result<Vec<f64>>>()?;
        Ok(median(&mut v))
    }

    fn transfer_once(&self, bytes: u64) -> Result<f64> {
        let n = (bytes / 2).max(1) as usize;
        match &self.nccl {
            Some(comms) => {
                let src = comms[0]
                    .stream()
                    .alloc_zeros::<bf16>(n)
                    .map_err(|e| gpu_err("alloc", e))?;
                let mut dst = comms[1]
                    .stream()
                    .alloc_zeros::<bf16>(n)
                    .map_err(|e| gpu_err("alloc", e))?;
                for c in comms {
                    c.stream().synchronize().map_err(|e| gpu_err("sync", e))?;
                }
                let t0 = Instant::now();
                group_start().map_err(|e| nccl_err("group start", e))?;
                comms[0].send(&src, 1).map_err(|e| nccl_err("send", e))?;
                comms[1]
                    .recv(&mut dst, 0)
                    .map_err(|e| nccl_err("recv", e))?;
                group_end().map_err(|e| nccl_err("group end", e))?;
                for c in comms {
                    c.stream().synchronize().map_err(|e| gpu_err("sync", e))?;
                }
                Ok(t0.elapsed().as_secs_f64())
            }
            None => {
                // Emulation on one GPU: a device-to-device copy on the second stream.
                let src = self.gpu.zeros_b(n)?;
                let mut dst = self.gpu.zeros_b(n)?;
                self.gpu
                    .compute
                    .synchronize()
                    .map_err(|e| gpu_err("sync", e))?;
                self.gpu.timed(|| {
                    self.gpu
                        .comm
                        .memcpy_dtod(&src, &mut dst)
                        .map_err(|e| gpu_err("copy", e))
                })
            }
        }
    }

    fn gemm_once(&self, g: GemmShape) -> Result<f64> {
        let a = self.gpu.zeros_b(g.m * g.k)?;
        let b = self.gpu.zeros_b(g.k * g.n)?;
        let mut c = self.gpu.zeros_b(g.m * g.n)?;
        self.gpu.timed(|| {
            self.gpu.gemm_rm(
                (g.m, g.n, g.k),
                &a,
                g.k,
                false,
                &b,
                g.n,
                false,
                &mut c,
                g.n,
                0.0,
            )
        })
    }

    fn run_forward(&mut self, spec: &RunSpec) -> Result<RunReport> {
        unit::run(self, spec)
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn device(&self) -> String {
        format!(
            "{} (GPU 0 of {}; {} virtual devices emulated on it for units; transfers: {})",
            self.found.name,
            self.found.devices,
            self.devices,
            if self.nccl.is_some() {
                "NCCL send/recv GPU 0 -> GPU 1".to_string()
            } else {
                format!(
                    "emulated by device-to-device copies on a second stream{}",
                    self.nccl_note
                )
            }
        )
    }

    fn devices(&self) -> usize {
        self.devices
    }

    fn memory_bytes(&self) -> u64 {
        self.gpu.ctx.total_mem().map(|b| b as u64).unwrap_or(0)
    }

    fn gemm_s(&mut self, g: GemmShape) -> Result<f64> {
        self.median_of(|| self.gemm_once(g))
    }

    fn attention_s(&mut self, call: AttnCall, pass: Pass) -> Result<f64> {
        if pass == Pass::Backward {
            return Err(gpu_err(
                "attention backward",
                "not implemented on the cuda backend (forward only)",
            ));
        }
        // Adapter to the AttnCall signature (kernel branch): square unmasked blocks only, until
        // the CUDA backend runs any shape.
        if call.q_tokens != call.kv_tokens || call.causal {
            return Err(gpu_err(
                "attention",
                "only square unmasked blocks on the cuda backend so far",
            ));
        }
        struct Blk {
            b: usize,
            c: usize,
        }
        let blk = Blk {
            b: call.batch,
            c: call.q_tokens,
        };
        let (rows, ag, d) = (blk.b * blk.c, call.heads, call.head_dim);
        let hg = ag * d;
        let q = self.gpu.zeros_b(rows * hg)?;
        let kv = self.gpu.zeros_b(rows * 2 * hg)?;
        let mut ws = BlockWs::new(&self.gpu, blk.c, blk.c, ag, d)?;
        let mut acc = self.gpu.zeros_f(rows * hg)?;
        let mut lse = self.gpu.zeros_f(rows * ag)?;
        self.median_of(|| {
            self.gpu.fill(&mut lse, f32::NEG_INFINITY, rows * ag)?;
            self.gpu.timed(|| {
                for _ in 0..blk.b {
                    attention_block(
                        &self.gpu,
                        &q,
                        hg,
                        &kv,
                        2 * hg,
                        (blk.c, blk.c, ag, d),
                        false,
                        &mut ws,
                        &mut acc,
                        &mut lse,
                    )?;
                }
                Ok(())
            })
        })
    }

    fn elementwise_s(&mut self, bytes: u64) -> Result<f64> {
        let n = (bytes / 4).max(1) as usize;
        let x = self.gpu.zeros_b(n)?;
        let mut y = self.gpu.zeros_b(n)?;
        self.median_of(|| self.gpu.timed(|| self.gpu.gelu(&x, &mut y, n)))
    }

    fn copy_s(&mut self, bytes: u64) -> Result<f64> {
        let n = (bytes / 4).max(1) as usize;
        let x = self.gpu.zeros_b(n)?;
        let mut y = self.gpu.zeros_b(n)?;
        self.median_of(|| {
            self.gpu.timed(|| {
                self.gpu
                    .compute
                    .memcpy_dtod(&x, &mut y)
                    .map_err(|e| gpu_err("copy", e))
            })
        })
    }

    fn transfer_s(&mut self, bytes: u64) -> Result<f64> {
        self.median_of(|| self.transfer_once(bytes))
    }

    fn slowdown(&mut self, g: GemmShape, bytes: u64) -> Result<SlowdownSample> {
        let alone = self.median_of(|| self.gemm_once(g))?;
        // A stream of copies on the second stream, long enough to cover the GEMMs.
        let n = (bytes / 2).max(1 << 20) as usize;
        let src = self.gpu.zeros_b(n)?;
        let mut dst = self.gpu.zeros_b(n)?;
        let a = self.gpu.zeros_b(g.m * g.k)?;
        let b = self.gpu.zeros_b(g.k * g.n)?;
        let mut c = self.gpu.zeros_b(g.m * g.n)?;
        let copy_s = self.transfer_once(2 * n as u64)?.max(1e-7);
        let copies = ((alone * self.reps as f64 / copy_s).ceil() as usize).clamp(1, 256);
        for _ in 0..copies {
            self.gpu
                .comm
                .memcpy_dtod(&src, &mut dst)
                .map_err(|e| gpu_err("copy", e))?;
        }
        let ev = |s: &CudaStream| {
            s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(|e| gpu_err("event", e))
        };
        let mut with = Vec::new();
        for _ in 0..self.reps {
            let start = ev(&self.gpu.compute)?;
            self.gpu.gemm_rm(
                (g.m, g.n, g.k),
                &a,
                g.k,
                false,
                &b,
                g.n,
                false,
                &mut c,
                g.n,
                0.0,
            )?;
            let end = ev(&self.gpu.compute)?;
            with.push(f64::from(start.elapsed_ms(&end).map_err(|e| gpu_err("elapsed", e))?) / 1e3);
        }
        self.gpu
            .comm
            .synchronize()
            .map_err(|e| gpu_err("sync", e))?;
        Ok(SlowdownSample {
            alone_s: alone,
            with_transfer_s: median(&mut with),
        })
    }

    fn run_unit(&mut self, spec: &RunSpec) -> Result<RunReport> {
        self.run_forward(spec)
    }

    fn forward_only(&self) -> bool {
        true
    }

    fn compute_scale(&self, p: usize, _profile_devices: usize) -> f64 {
        // Virtual devices share GPU 0: their kernels run one after the other.
        p as f64
    }

    fn transfer_scale(&self, p: usize) -> f64 {
        // Their ring copies share the second stream.
        p as f64
    }
}

/// Forward units on virtual devices emulated on GPU 0.
// The loops index several per-device vectors at once (device i, its peer j).
#[allow(clippy::needless_range_loop)]
mod unit {
    use super::*;
    use crate::exec::attention::AttnData;
    use crate::exec::device::Mat;
    use crate::exec::mlp::MlpData;
    use crate::exec::rng::SplitMix64;
    use crate::exec::{reference, rel_error, to64};

    /// Row-major bf16 copy of a matrix.
    fn rm(m: &Mat) -> Vec<bf16> {
        let mut v = Vec::with_capacity(m.len());
        for r in 0..m.nrows() {
            for c in 0..m.ncols() {
                v.push(bf16::from_f32(m[(r, c)]));
            }
        }
        v
    }

    /// A matrix from row-major bf16.
    fn from_rm(v: &[bf16], rows: usize, cols: usize) -> Mat {
        Mat::from_fn(rows, cols, |r, c| v[r * cols + c].to_f32())
    }

    fn cols(m: &Mat, start: usize, n: usize) -> Mat {
        m.columns(start, n).into_owned()
    }

    fn row_block(m: &Mat, start: usize, n: usize) -> Mat {
        m.rows(start, n).into_owned()
    }

    /// Bytes allocated per virtual device.
    struct Tally(Vec<u64>);

    impl Tally {
        fn add(&mut self, i: usize, b: u64) {
            self.0[i] += b;
        }
    }

    pub(super) fn run(be: &mut CudaBackend, spec: &RunSpec) -> Result<RunReport> {
        let sh = spec.shape;
        sh.check(spec.unit, spec.method)?;
        if sh.b != 1 {
            return Err(Error::InvalidConfig {
                method: spec.method.id().into(),
                p: sh.p as u64,
                message: "the cuda backend runs units with micro-batch 1".into(),
            });
        }
        let mut rng = SplitMix64::new(spec.seed);
        let mut tally = Tally(vec![0; sh.p]);
        let (out, want, time) = match spec.unit {
            Unit::Attention => {
                let data = AttnData::random(&sh, &mut rng);
                let (out, t) = attention(be, spec, &data, &mut tally)?;
                let r = reference::attention(
                    &to64(&data.x),
                    &to64(&data.wqkv),
                    &to64(&data.wo),
                    &to64(&data.dout),
                    sh.b,
                    sh.a,
                    spec.causal,
                );
                (out, r.out, t)
            }
            Unit::Mlp => {
                let data = MlpData::random(&sh, &mut rng);
                let (out, t) = mlp(be, spec, &data, &mut tally)?;
                let r = reference::mlp(
                    &to64(&data.x),
                    &to64(&data.w1),
                    &to64(&data.w2),
                    &to64(&data.dout),
                );
                (out, r.out, t)
            }
        };
        let err = rel_error(&out, &want);
        Ok(RunReport {
            spec: *spec,
            max_rel_error: err,
            errors: [("out".to_string(), err)].into_iter().collect(),
            measured_peak_bytes: tally.0.iter().copied().max().unwrap_or(0),
            inventory_peak_bytes: None,
            measured_time_s: time,
            devices: tally
                .0
                .iter()
                .enumerate()
                .map(|(rank, &b)| DeviceReport {
                    rank,
                    peak_bytes: b,
                    peak_breakdown: Default::default(),
                    end_live_bytes: 0,
                    inventory_peak_bytes: None,
                    busy_s: time,
                    comm: Default::default(),
                    steps: vec![],
                })
                .collect(),
        })
    }

    /// Attention forward: METP (two-level loop; weights and K/V blocks copied between virtual
    /// devices on the second stream, double buffered) or TP (own heads over all tokens, then
    /// the partial outputs summed into the replicated output, with the all-reduce's
    /// 2(p−1) chunk copies per device on the second stream).
    fn attention(
        be: &mut CudaBackend,
        spec: &RunSpec,
        data: &AttnData,
        tally: &mut Tally,
    ) -> Result<(Mat, f64)> {
        let g = &be.gpu;
        let sh = spec.shape;
        let (s, h, p, hg, ag, d) = (sh.s, sh.h, sh.p, sh.hg(), sh.ag(), sh.d());
        let metp = spec.method == ExecMethod::Metp;
        let rows = if metp { sh.c() } else { s };
        // Per device: its input rows, its weight shard (Q, K|V, O parts).
        let mut x = Vec::new();
        let mut wq = Vec::new();
        let mut wkv = Vec::new();
        let mut wo = Vec::new();
        for i in 0..p {
            let xi = if metp {
                row_block(&data.x, i * rows, rows)
            } else {
                data.x.clone()
            };
            x.push(g.upload(&rm(&xi))?);
            let mut kv = Mat::zeros(h, 2 * hg);
            kv.columns_mut(0, hg)
                .copy_from(&cols(&data.wqkv, h + i * hg, hg));
            kv.columns_mut(hg, hg)
                .copy_from(&cols(&data.wqkv, 2 * h + i * hg, hg));
            wq.push(g.upload(&rm(&cols(&data.wqkv, i * hg, hg)))?);
            wkv.push(g.upload(&rm(&kv))?);
            wo.push(g.upload(&rm(&row_block(&data.wo, i * hg, hg)))?);
            tally.add(i, 2 * (rows * h + 4 * h * hg) as u64);
        }
        let alloc_b = |n: usize| g.zeros_b(n);
        let mut q = Vec::new();
        let mut kvb = Vec::new();
        let mut kv_recv: Vec<[B16; 2]> = Vec::new();
        let mut w_recv: Vec<[(B16, B16, B16); 2]> = Vec::new();
        let mut ws = Vec::new();
        let mut acc = Vec::new();
        let mut lse = Vec::new();
        let mut accb = Vec::new();
        let mut out = Vec::new();
        for i in 0..p {
            q.push(alloc_b(rows * hg)?);
            kvb.push(alloc_b(rows * 2 * hg)?);
            let mut per = 2 * (3 * rows * hg + rows * hg + rows * h) as u64;
            if metp && p > 1 {
                kv_recv.push([alloc_b(rows * 2 * hg)?, alloc_b(rows * 2 * hg)?]);
                let w = || -> Result<(B16, B16, B16)> {
                    Ok((alloc_b(h * hg)?, alloc_b(h * 2 * hg)?, alloc_b(hg * h)?))
                };
                w_recv.push([w()?, w()?]);
                per += 2 * 2 * (rows * 2 * hg + 4 * h * hg) as u64;
            }
            let b = BlockWs::new(g, rows, rows, ag, d)?;
            per += b.bytes() + 4 * (rows * hg + rows * ag) as u64;
            ws.push(b);
            acc.push(g.zeros_f(rows * hg)?);
            lse.push(g.zeros_f(rows * ag)?);
            accb.push(alloc_b(rows * hg)?);
            out.push(alloc_b(rows * h)?);
            tally.add(i, per);
        }
        g.compute.synchronize().map_err(|e| gpu_err("sync", e))?;
        let copy = |src: &B16, dst: &mut B16| {
            g.comm
                .memcpy_dtod(src, dst)
                .map_err(|e| gpu_err("ring copy", e))
        };
        let groups = if metp { p } else { 1 };
        let time = g.timed(|| {
            for grp in 0..groups {
                // Weights of group grp (METP; TP uses its own shard): own, or copied into the
                // slot grp % 2 on the second stream.
                for i in 0..p {
                    let owner = if metp { grp } else { i };
                    if owner != i {
                        let slot = &mut w_recv[i][grp % 2];
                        copy(&wq[owner], &mut slot.0)?;
                        copy(&wkv[owner], &mut slot.1)?;
                        copy(&wo[owner], &mut slot.2)?;
                    }
                }
                for i in 0..p {
                    let owner = if metp { grp } else { i };
                    let (wq_g, wkv_g) = if owner == i {
                        (&wq[i], &wkv[i])
                    } else {
                        (&w_recv[i][grp % 2].0, &w_recv[i][grp % 2].1)
                    };
                    g.gemm_rm(
                        (rows, hg, h),
                        &x[i],
                        h,
                        false,
                        wq_g,
                        hg,
                        false,
                        &mut q[i],
                        hg,
                        0.0,
                    )?;
                    g.gemm_rm(
                        (rows, 2 * hg, h),
                        &x[i],
                        h,
                        false,
                        wkv_g,
                        2 * hg,
                        false,
                        &mut kvb[i],
                        2 * hg,
                        0.0,
                    )?;
                    g.fill(&mut acc[i], 0.0, rows * hg)?;
                    g.fill(&mut lse[i], f32::NEG_INFINITY, rows * ag)?;
                }
                let steps = if metp { p } else { 1 };
                for t in 0..steps {
                    // Post the next block: device i's block for step t+1 is j = i − t − 1.
                    if t + 1 < steps {
                        for i in 0..p {
                            let j = (i + 2 * p - t - 1) % p;
                            copy(&kvb[j], &mut kv_recv[i][(t + 1) % 2])?;
                        }
                    }
                    for i in 0..p {
                        let j = (i + p - t) % p;
                        let diag = spec.causal && (!metp || j == i);
                        if metp && spec.causal && j > i {
                            continue;
                        }
                        let kv_cur = if t == 0 { &kvb[i] } else { &kv_recv[i][t % 2] };
                        attention_block(
                            g,
                            &q[i],
                            hg,
                            kv_cur,
                            2 * hg,
                            (rows, rows, ag, d),
                            diag,
                            &mut ws[i],
                            &mut acc[i],
                            &mut lse[i],
                        )?;
                    }
                }
                for i in 0..p {
                    let owner = if metp { grp } else { i };
                    let wo_g = if owner == i {
                        &wo[i]
                    } else {
                        &w_recv[i][grp % 2].2
                    };
                    g.to_bf16(&acc[i], &mut accb[i], rows * hg)?;
                    let beta = if metp && grp > 0 { 1.0 } else { 0.0 };
                    g.gemm_rm(
                        (rows, h, hg),
                        &accb[i],
                        hg,
                        false,
                        wo_g,
                        h,
                        false,
                        &mut out[i],
                        h,
                        beta,
                    )?;
                }
            }
            if !metp && p > 1 {
                // The all-reduce: each device sends 2(p−1) chunks of s·h/p elements.
                let chunk = (rows * h).div_ceil(p);
                for i in 0..p {
                    for _ in 0..2 * (p - 1) {
                        let src = out[(i + 1) % p].slice(0..chunk);
                        let mut dst = accb[i].slice_mut(0..chunk.min(rows * hg));
                        g.comm
                            .memcpy_dtod(&src, &mut dst)
                            .map_err(|e| gpu_err("all-reduce copy", e))?;
                    }
                }
            }
            Ok(())
        })?;
        // Assemble: METP rows by device; TP sums the partial outputs (the all-reduce's result).
        let mut full = Mat::zeros(s, h);
        for (i, o) in out.iter().enumerate() {
            let host = g
                .compute
                .clone_dtoh(o)
                .map_err(|e| gpu_err("download", e))?;
            let m = from_rm(&host, rows, h);
            if metp {
                full.rows_mut(i * rows, rows).copy_from(&m);
            } else {
                full += m;
            }
        }
        Ok((full, time))
    }

    /// MLP forward: METP (the (W1, W2) shard pair copied along the ring on the second stream,
    /// double buffered) or TP (own columns over all tokens, partial outputs summed).
    fn mlp(
        be: &mut CudaBackend,
        spec: &RunSpec,
        data: &MlpData,
        tally: &mut Tally,
    ) -> Result<(Mat, f64)> {
        let g = &be.gpu;
        let sh = spec.shape;
        let (s, h, p, fp) = (sh.s, sh.h, sh.p, sh.fp());
        let metp = spec.method == ExecMethod::Metp;
        let rows = if metp { sh.c() } else { s };
        let mut x = Vec::new();
        let mut w1 = Vec::new();
        let mut w2 = Vec::new();
        let mut recv: Vec<[(B16, B16); 2]> = Vec::new();
        let mut hbuf = Vec::new();
        let mut act = Vec::new();
        let mut out = Vec::new();
        for i in 0..p {
            let xi = if metp {
                row_block(&data.x, i * rows, rows)
            } else {
                data.x.clone()
            };
            x.push(g.upload(&rm(&xi))?);
            w1.push(g.upload(&rm(&cols(&data.w1, i * fp, fp)))?);
            w2.push(g.upload(&rm(&row_block(&data.w2, i * fp, fp)))?);
            let mut per = 2 * (rows * h + 2 * h * fp + 2 * rows * fp + rows * h) as u64;
            if metp && p > 1 {
                let pair =
                    || -> Result<(B16, B16)> { Ok((g.zeros_b(h * fp)?, g.zeros_b(fp * h)?)) };
                recv.push([pair()?, pair()?]);
                per += 2 * 2 * 2 * (h * fp) as u64;
            }
            hbuf.push(g.zeros_b(rows * fp)?);
            act.push(g.zeros_b(rows * fp)?);
            out.push(g.zeros_b(rows * h)?);
            tally.add(i, per);
        }
        g.compute.synchronize().map_err(|e| gpu_err("sync", e))?;
        let steps = if metp { p } else { 1 };
        let time = g.timed(|| {
            for t in 0..steps {
                if t + 1 < steps {
                    for i in 0..p {
                        let j = (i + 2 * p - t - 1) % p;
                        let slot = &mut recv[i][(t + 1) % 2];
                        g.comm
                            .memcpy_dtod(&w1[j], &mut slot.0)
                            .map_err(|e| gpu_err("ring copy", e))?;
                        g.comm
                            .memcpy_dtod(&w2[j], &mut slot.1)
                            .map_err(|e| gpu_err("ring copy", e))?;
                    }
                }
                for i in 0..p {
                    let (a, b) = if t == 0 {
                        (&w1[i], &w2[i])
                    } else {
                        (&recv[i][t % 2].0, &recv[i][t % 2].1)
                    };
                    g.gemm_rm(
                        (rows, fp, h),
                        &x[i],
                        h,
                        false,
                        a,
                        fp,
                        false,
                        &mut hbuf[i],
                        fp,
                        0.0,
                    )?;
                    g.gelu(&hbuf[i], &mut act[i], rows * fp)?;
                    let beta = if t == 0 { 0.0 } else { 1.0 };
                    g.gemm_rm(
                        (rows, h, fp),
                        &act[i],
                        fp,
                        false,
                        b,
                        h,
                        false,
                        &mut out[i],
                        h,
                        beta,
                    )?;
                }
            }
            if !metp && p > 1 {
                let chunk = (rows * h).div_ceil(p).min(rows * fp);
                for i in 0..p {
                    for _ in 0..2 * (p - 1) {
                        let src = out[(i + 1) % p].slice(0..chunk);
                        let mut dst = hbuf[i].slice_mut(0..chunk);
                        g.comm
                            .memcpy_dtod(&src, &mut dst)
                            .map_err(|e| gpu_err("all-reduce copy", e))?;
                    }
                }
            }
            Ok(())
        })?;
        let mut full = Mat::zeros(s, h);
        for (i, o) in out.iter().enumerate() {
            let host = g
                .compute
                .clone_dtoh(o)
                .map_err(|e| gpu_err("download", e))?;
            let m = from_rm(&host, rows, h);
            if metp {
                full.rows_mut(i * rows, rows).copy_from(&m);
            } else {
                full += m;
            }
        }
        Ok((full, time))
    }
}
