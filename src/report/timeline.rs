//! Simulator traces as timeline bars for `plot::write_timeline`.

use crate::plot;
use crate::schedule::Stream;
use crate::sim::{self, Span as SimSpan, Trace, Track};

/// Trace spans as timeline bars: one row per device stream and per link, coloured by what the
/// task does; `window_s` keeps only spans that start before it.
pub fn timeline_spans(trace: &Trace, window_s: Option<f64>) -> Vec<plot::Span> {
    let mut spans: Vec<&SimSpan> = trace.spans.iter().collect();
    spans.sort_by_key(|s| (s.track, s.start_ps, s.end_ps));
    spans
        .into_iter()
        .filter(|s| window_s.is_none_or(|w| sim::ps_to_secs(s.start_ps) < w))
        .map(|s| {
            let (track, category) = match s.track {
                Track::Stream { device, stream } => (
                    format!("gpu{device} {}", sim::trace::stream_name(stream)),
                    match stream {
                        Stream::Compute if s.label.name.contains("attn") => "attention",
                        Stream::Compute => "compute",
                        Stream::Comm(0) | Stream::Comm(2) | Stream::Comm(4) | Stream::Comm(6) => {
                            "send"
                        }
                        Stream::Comm(1) | Stream::Comm(3) | Stream::Comm(5) | Stream::Comm(7) => {
                            "recv"
                        }
                        Stream::Comm(_) => "collective",
                    },
                ),
                Track::Link { link } => (
                    trace
                        .links
                        .get(link as usize)
                        .cloned()
                        .unwrap_or_else(|| format!("link {link}")),
                    "send",
                ),
            };
            plot::Span::new(
                track,
                sim::ps_to_secs(s.start_ps),
                sim::ps_to_secs(s.end_ps),
                sim::trace::label_name(&s.label, s.collective_step),
                category,
            )
        })
        .collect()
}
