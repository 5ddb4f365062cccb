//! Running a program on p virtual devices: one scoped OS thread each, wired with channels;
//! a failure or panic on one device stops the others, and unreceived messages are an error.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{exec_error, CommStats, Device, Link, Mem, Msg, StepTime};
use crate::backend::unit::device::MemStats;
use crate::error::Result;

/// Sets the shared abort flag if its thread unwinds (a panic in a device program).
struct AbortOnPanic(Arc<AtomicBool>);

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

/// What one device's run produced.
pub struct DeviceRun<T> {
    /// The program's result.
    pub output: T,
    /// Memory record.
    pub mem: MemStats,
    /// Communication counters.
    pub comm: CommStats,
    /// Seconds the device's program ran.
    pub busy_s: f64,
    /// Ring-step timestamps the program recorded.
    pub steps: Vec<StepTime>,
}

/// Runs `program` on `p` virtual devices (one thread each) and returns every device's result
/// and the wall time of the whole parallel run. Fails if any device fails, panics, or leaves a
/// message unreceived.
pub fn run_devices<T, F>(
    p: usize,
    link: Option<Link>,
    program: F,
) -> Result<(Vec<DeviceRun<T>>, f64)>
where
    T: Send,
    F: Fn(&mut Device) -> Result<T> + Sync,
{
    if p == 0 {
        return Err(exec_error("no devices"));
    }
    let mut senders = Vec::with_capacity(p);
    let mut receivers = Vec::with_capacity(p);
    for _ in 0..p {
        let (tx, rx) = channel::<Msg>();
        senders.push(tx);
        receivers.push(rx);
    }
    let abort = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    type Joined<T> = (Result<T>, MemStats, CommStats, f64, usize, Vec<StepTime>);
    let joined: Vec<std::thread::Result<Joined<T>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = receivers
            .into_iter()
            .enumerate()
            .map(|(rank, rx)| {
                let senders = senders.clone();
                let program = &program;
                let abort = Arc::clone(&abort);
                scope.spawn(move || {
                    let _guard = AbortOnPanic(Arc::clone(&abort));
                    let t0 = Instant::now();
                    let mut dev = Device {
                        rank,
                        p,
                        mem: Mem::default(),
                        senders,
                        rx,
                        stash: HashMap::new(),
                        link,
                        link_free: vec![t0; p],
                        comm: CommStats::default(),
                        abort,
                        started: t0,
                        steps: Vec::new(),
                    };
                    let out = program(&mut dev);
                    if out.is_err() {
                        dev.abort.store(true, Ordering::SeqCst);
                    }
                    let busy = t0.elapsed().as_secs_f64();
                    // Drop the senders first so that the leftover count below cannot block.
                    dev.senders.clear();
                    let mut leftover = dev.stash.len();
                    let deadline =
                        Instant::now() + Duration::from_secs(if out.is_ok() { 5 } else { 0 });
                    // Peers may still be finishing sends addressed to us; count what arrives.
                    while let Ok(_m) = dev
                        .rx
                        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                    {
                        leftover += 1;
                    }
                    let steps = std::mem::take(&mut dev.steps);
                    (out, dev.mem.stats(), dev.comm, busy, leftover, steps)
                })
            })
            .collect();
        drop(senders);
        handles.into_iter().map(|h| h.join()).collect()
    });
    let wall = start.elapsed().as_secs_f64();
    let mut runs = Vec::with_capacity(p);
    let mut first_err = None;
    for (rank, j) in joined.into_iter().enumerate() {
        match j {
            Err(_) => {
                first_err.get_or_insert(exec_error(format!("device {rank} panicked")));
            }
            Ok((Err(e), ..)) => {
                // Prefer the root cause over the peers that stopped because of it (waiting for
                // a failed device, or sending to one that has stopped).
                let follows = |e: &crate::error::Error| {
                    let s = e.to_string();
                    s.contains("another device failed") || s.contains("it has stopped")
                };
                match &first_err {
                    Some(f) if !follows(f) || follows(&e) => {}
                    _ => first_err = Some(e),
                }
            }
            Ok((Ok(output), mem, comm, busy_s, leftover, steps)) => {
                if leftover > 0 {
                    first_err.get_or_insert(exec_error(format!(
                        "device {rank} finished with {leftover} message(s) never received"
                    )));
                }
                runs.push(DeviceRun {
                    output,
                    mem,
                    comm,
                    busy_s,
                    steps,
                });
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok((runs, wall)),
    }
}
