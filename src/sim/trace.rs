//! Chrome trace output (the `traceEvents` JSON that Perfetto and `chrome://tracing` open).
//!
//! One process per simulated device (named by its place in the cluster when the caller names
//! it: pipeline stage, ranks, and how many devices it stands for) with one thread (track) per
//! stream, and one process "network" with
//! one thread per link that carried traffic. Each span becomes a complete event (`"ph": "X"`)
//! with microsecond timestamps; names come from the task's [`Label`]. Process and thread names
//! are metadata events (`"ph": "M"`). Events are sorted (metadata by track, then spans by track,
//! start, end, task), so the same trace always serialises to the same bytes.

use std::io::Write;

use serde::Serialize;

use super::queue::SimTime;
use crate::schedule::{DeviceId, Label, Pass, Stream, TaskId};

/// Where a span is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Track {
    /// A device stream.
    Stream {
        /// Device.
        device: DeviceId,
        /// Stream.
        stream: Stream,
    },
    /// A link of the network (index into [`Trace::links`]).
    Link {
        /// Link index.
        link: u32,
    },
}

/// One interval of a trace. On a stream, a task's span runs from when it started (for a
/// send, recv or collective this includes waiting for its peers) to when it finished; on a link,
/// a flow's span runs from when its bytes started moving (after α) to when they arrived.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Span {
    /// Where.
    pub track: Track,
    /// Start, in ps.
    pub start_ps: SimTime,
    /// End, in ps.
    pub end_ps: SimTime,
    /// The task (for a link span: the send, or the first rank's collective task).
    pub task: TaskId,
    /// The task's label.
    pub label: Label,
    /// For a collective's flow: its ring step.
    pub collective_step: Option<u32>,
}

/// A recorded trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trace {
    /// Spans in the order they ended.
    pub spans: Vec<Span>,
    /// Link names, by link index.
    pub links: Vec<String>,
    /// Device names, by device id (e.g. `stage 2 · rank 0 (cluster rank 130)`); a device
    /// without one is `device <id>`.
    pub devices: Vec<String>,
}

/// A task's display name: `fwd.L3.attention.kv-send.o2.s5`, with `.mb<k>` for micro-batches
/// other than 0 and ` [ring step k]` for a collective's step.
pub fn label_name(label: &Label, collective_step: Option<u32>) -> String {
    use std::fmt::Write as _;
    let mut s = String::from(match label.pass {
        Pass::Fwd => "fwd",
        Pass::Bwd => "bwd",
        Pass::Opt => "opt",
    });
    if let Some(l) = label.layer {
        let _ = write!(s, ".L{l}");
    }
    let _ = write!(s, ".{}.{}", label.block, label.name);
    if let Some(o) = label.outer {
        let _ = write!(s, ".o{o}");
    }
    if let Some(k) = label.step {
        let _ = write!(s, ".s{k}");
    }
    if label.micro_batch != 0 {
        let _ = write!(s, ".mb{}", label.micro_batch);
    }
    if let Some(k) = collective_step {
        let _ = write!(s, " [ring step {k}]");
    }
    s
}

/// A stream's display name: `compute`, `comm0`, `comm1`, ….
pub fn stream_name(stream: Stream) -> String {
    match stream {
        Stream::Compute => "compute".to_string(),
        Stream::Comm(c) => format!("comm{c}"),
    }
}

#[derive(Serialize)]
struct NameArgs {
    name: String,
}

#[derive(Serialize)]
struct SortArgs {
    sort_index: u32,
}

#[derive(Serialize)]
struct SpanArgs {
    task: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    collective_step: Option<u32>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Args {
    Name(NameArgs),
    Sort(SortArgs),
    Span(SpanArgs),
}

#[derive(Serialize)]
struct Event {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'static str>,
    ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    tid: u32,
    args: Args,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct File {
    trace_events: Vec<Event>,
    display_time_unit: &'static str,
}

/// (pid, tid) of a track: devices are processes `0..devices`, the network is process `devices`.
fn ids(track: Track, devices: u32) -> (u32, u32) {
    match track {
        Track::Stream { device, stream } => (
            device,
            match stream {
                Stream::Compute => 0,
                Stream::Comm(c) => 1 + c as u32,
            },
        ),
        Track::Link { link } => (devices, link),
    }
}

fn ps_to_us(ps: u64) -> f64 {
    ps as f64 / 1e6
}

/// Writes `trace` (recorded on a graph of `devices` devices) as Chrome trace JSON.
pub fn write_chrome_trace(
    trace: &Trace,
    devices: u32,
    out: impl Write,
) -> Result<(), serde_json::Error> {
    let mut spans: Vec<&Span> = trace.spans.iter().collect();
    spans.sort_by_key(|s| {
        let (pid, tid) = ids(s.track, devices);
        (pid, tid, s.start_ps, s.end_ps, s.task, s.collective_step)
    });
    let mut tracks: Vec<(u32, u32, Track)> = spans
        .iter()
        .map(|s| {
            let (p, t) = ids(s.track, devices);
            (p, t, s.track)
        })
        .collect();
    tracks.dedup_by_key(|t| (t.0, t.1));

    let mut events = Vec::with_capacity(spans.len() + 3 * tracks.len());
    let mut last_pid = None;
    for &(pid, tid, track) in &tracks {
        if last_pid != Some(pid) {
            last_pid = Some(pid);
            let name = match track {
                Track::Stream { device, .. } => trace
                    .devices
                    .get(device as usize)
                    .cloned()
                    .unwrap_or_else(|| format!("device {device}")),
                Track::Link { .. } => "network".to_string(),
            };
            for (name, args) in [
                ("process_name", Args::Name(NameArgs { name })),
                (
                    "process_sort_index",
                    Args::Sort(SortArgs { sort_index: pid }),
                ),
            ] {
                events.push(Event {
                    name: name.to_string(),
                    cat: None,
                    ph: "M",
                    ts: None,
                    dur: None,
                    pid,
                    tid: 0,
                    args,
                });
            }
        }
        let name = match track {
            Track::Stream { stream, .. } => stream_name(stream),
            Track::Link { link } => trace
                .links
                .get(link as usize)
                .cloned()
                .unwrap_or_else(|| format!("link {link}")),
        };
        for (name, args) in [
            ("thread_name", Args::Name(NameArgs { name })),
            (
                "thread_sort_index",
                Args::Sort(SortArgs { sort_index: tid }),
            ),
        ] {
            events.push(Event {
                name: name.to_string(),
                cat: None,
                ph: "M",
                ts: None,
                dur: None,
                pid,
                tid,
                args,
            });
        }
    }
    for s in spans {
        let (pid, tid) = ids(s.track, devices);
        let cat = match s.track {
            Track::Stream {
                stream: Stream::Compute,
                ..
            } => "compute",
            Track::Stream { .. } => "comm",
            Track::Link { .. } => "link",
        };
        events.push(Event {
            name: label_name(&s.label, s.collective_step),
            cat: Some(cat),
            ph: "X",
            ts: Some(ps_to_us(s.start_ps)),
            dur: Some(ps_to_us(s.end_ps - s.start_ps)),
            pid,
            tid,
            args: Args::Span(SpanArgs {
                task: s.task,
                collective_step: s.collective_step,
            }),
        });
    }
    serde_json::to_writer(
        out,
        &File {
            trace_events: events,
            display_time_unit: "ns",
        },
    )
}

/// [`write_chrome_trace`] into a string.
pub fn chrome_trace_json(trace: &Trace, devices: u32) -> String {
    let mut buf = Vec::new();
    write_chrome_trace(trace, devices, &mut buf).expect("writing to a Vec cannot fail");
    String::from_utf8(buf).expect("serde_json writes UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::schedule::{CollectiveOp, KernelShape, TaskGraph, Work};
    use crate::sim::{simulate, LinkModel, SimOptions};

    fn label(name: &'static str) -> Label {
        Label {
            pass: Pass::Bwd,
            layer: Some(3),
            block: "attention",
            name,
            outer: Some(2),
            step: Some(5),
            micro_batch: 0,
        }
    }

    #[test]
    fn names_come_from_the_label() {
        assert_eq!(
            label_name(&label("kv-send"), None),
            "bwd.L3.attention.kv-send.o2.s5"
        );
        let l = Label {
            pass: Pass::Opt,
            layer: None,
            block: "optimizer",
            name: "adam",
            outer: None,
            step: None,
            micro_batch: 2,
        };
        assert_eq!(
            label_name(&l, Some(4)),
            "opt.optimizer.adam.mb2 [ring step 4]"
        );
        assert_eq!(stream_name(Stream::Comm(3)), "comm3");
    }

    #[test]
    fn chrome_trace_has_tracks_and_complete_events() {
        // Device 0: a kernel, then a 230 MB send to device 1 (3 µs + 1000 µs), then a 2-rank
        // all-reduce of 460 MB (2 steps of 3 µs + 1000 µs each).
        let hw = crate::sim::test_hardware();
        let mut g = TaskGraph::new(2);
        let kernel = g.add_kernel(KernelShape::gemm(8192, 8192, 8192));
        let k = g.add(
            0,
            Stream::Compute,
            Work::Compute { kernel },
            vec![],
            label("qkv"),
        );
        g.add(
            0,
            Stream::Comm(0),
            Work::Send {
                to: 1,
                bytes: 230_000_000,
                tag: 0,
            },
            vec![k],
            label("kv-send"),
        );
        g.add(
            1,
            Stream::Comm(0),
            Work::Recv {
                from: 0,
                bytes: 230_000_000,
                tag: 0,
            },
            vec![],
            label("kv-recv"),
        );
        for d in 0..2 {
            g.add(
                d,
                Stream::Comm(1),
                Work::Collective {
                    op: CollectiveOp::AllReduce,
                    id: 0,
                    group: vec![0, 1],
                    bytes: 460_000_000,
                },
                vec![],
                label("grad-ar"),
            );
        }
        let r = simulate(
            &g,
            &hw,
            LinkModel::MaxMin,
            SimOptions {
                trace: true,
                ..SimOptions::default()
            },
        )
        .unwrap();
        let json = chrome_trace_json(r.trace.as_ref().unwrap(), 2);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let threads: Vec<(u64, u64, &str)> = events
            .iter()
            .filter(|e| e["name"] == "thread_name")
            .map(|e| {
                (
                    e["pid"].as_u64().unwrap(),
                    e["tid"].as_u64().unwrap(),
                    e["args"]["name"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            threads,
            [
                (0, 0, "compute"),
                (0, 1, "comm0"),
                (0, 2, "comm1"),
                (1, 1, "comm0"),
                (1, 2, "comm1"),
                (2, 0, "gpu0 egress"),
                (2, 1, "gpu0 ingress"),
                (2, 2, "gpu1 egress"),
                (2, 3, "gpu1 ingress"),
            ]
        );
        let procs: Vec<&str> = events
            .iter()
            .filter(|e| e["name"] == "process_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(procs, ["device 0", "device 1", "network"]);
        let xs: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        // 5 task spans; link spans: p2p 2 links, all-reduce 2 steps x 2 flows x 2 links.
        assert_eq!(xs.len(), 5 + 2 + 8);
        let send = xs
            .iter()
            .find(|e| e["name"] == "bwd.L3.attention.kv-send.o2.s5" && e["pid"] == 0)
            .unwrap();
        assert_eq!(send["cat"], "comm");
        let recv_link = xs
            .iter()
            .find(|e| e["name"] == "bwd.L3.attention.kv-send.o2.s5" && e["pid"] == 2)
            .unwrap();
        // On the link the flow lasts bytes / B = 1000 µs (after α).
        assert_eq!(recv_link["dur"].as_f64().unwrap(), 1000.0);
        assert!(xs.iter().any(
            |e| e["name"] == "bwd.L3.attention.grad-ar.o2.s5 [ring step 1]" && e["cat"] == "link"
        ));
        // Ordered: spans sorted by (pid, tid, ts).
        let keys: Vec<(u64, u64, f64)> = xs
            .iter()
            .map(|e| {
                (
                    e["pid"].as_u64().unwrap(),
                    e["tid"].as_u64().unwrap(),
                    e["ts"].as_f64().unwrap(),
                )
            })
            .collect();
        assert!(keys.windows(2).all(|w| w[0] <= w[1]));
    }
}
