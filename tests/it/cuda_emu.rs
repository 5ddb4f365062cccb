//! The CUDA kernels (src/backend/cuda/kernels) run on a host emulator (tests/cuda-emu: each
//! CUDA thread an OS thread, the bf16 MMA computed from the PTX ISA's fragment layout) and
//! compared with double-precision references: the fused attention forward (alone and merging
//! two key blocks through the log-sum-exp) and backward, causal and not, q ≠ kv, head dimension
//! 64 and 128, and the unfused attention's row kernels. Needs g++ with C++20; prints
//! "skipped: …" without it. Runs without a GPU, in CI.

use std::path::PathBuf;
use std::process::Command;

use crate::skipped;

#[test]
fn cuda_kernels_match_references_on_the_host_emulator() {
    let _cpu = crate::cpu_exclusive();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("tests/cuda-emu/emu_test.cpp");
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("emu_test");
    // -fno-strict-aliasing: the kernels reinterpret shared memory as CUDA code does.
    let build = Command::new("g++")
        .args([
            "-std=c++20",
            "-O2",
            "-fno-strict-aliasing",
            "-pthread",
            "-w",
            "-o",
        ])
        .arg(&exe)
        .arg(&src)
        .output();
    match build {
        Err(e) => {
            skipped(format_args!("no g++ to build the CUDA emulator ({e})"));
            return;
        }
        Ok(o) if !o.status.success() => {
            let err = String::from_utf8_lossy(&o.stderr);
            if err.contains("barrier") && err.contains("No such file") {
                skipped(format_args!("g++ lacks C++20 <barrier>"));
                return;
            }
            panic!("the CUDA emulator does not build:\n{err}");
        }
        Ok(_) => {}
    }
    let out = Command::new(&exe).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}");
    assert!(out.status.success(), "emulated kernels failed:\n{text}");
    assert!(text.contains(", 0 failed"), "{text}");
}
