//! Plots: SVG and PNG files are written, carry their text, decode, and are byte-identical when
//! drawn twice; bad input gives clear errors.
//!
//! Set `METP_SIM_PLOT_SAMPLES=<dir>` to also write the sample plots there, for looking at them.

use std::path::{Path, PathBuf};

use metp_sim::plot::{
    max_seq_chart, write_chart, write_timeline, write_timeline_with, AxisFormat, Chart, Series,
    Span, TimelineOptions,
};
use metp_sim::Error;

const GIB: f64 = 1073741824.0;
const METHODS: [&str; 6] = ["metp", "tp", "tp-sp", "ulysses", "ring", "rsa"];

/// Memory per device vs sequence length for six methods on 80 GiB devices: a made-up but
/// realistically shaped static + linear + quadratic model; points above capacity are infeasible.
fn memory_chart() -> Chart {
    let mut chart = Chart::new(
        "Peak memory per device, LLaMA-13B, p = 8",
        "sequence length (tokens)",
        "peak memory per device",
    )
    .with_formats(AxisFormat::Tokens, AxisFormat::Bytes)
    .with_log(true, false)
    .with_reference(80.0 * GIB, "device memory 80 GiB")
    .with_note("micro-batch 1, FlashAttention on, no recompute; × = does not fit or invalid");
    let shapes = [
        (4.0, 0.03, 0.0),
        (5.0, 0.35, 0.0),
        (5.0, 0.12, 0.0),
        (27.0, 0.09, 0.0),
        (27.0, 0.08, 0.0),
        (27.0, 0.06, 0.0006),
    ];
    for (name, (fixed, per_k, per_k2)) in METHODS.iter().zip(shapes) {
        let mut series = Series::new(*name, Vec::new());
        for e in 12..=19 {
            let s = f64::from(1u32 << e);
            let k = s / 1024.0;
            let bytes = (fixed + per_k * k + per_k2 * k * k) * GIB;
            if bytes <= 80.0 * GIB {
                series.points.push((s, bytes));
            } else {
                series.infeasible.push(s);
            }
        }
        chart.series.push(series);
    }
    chart
}

fn max_seq() -> Chart {
    let mut rows = Vec::new();
    for (m, base) in METHODS
        .iter()
        .zip([40_960u64, 12_288, 20_480, 16_384, 24_576, 8_192])
    {
        for p in [1u64, 2, 4, 8, 16] {
            let max = if *m == "ulysses" && p == 16 {
                None
            } else {
                Some(base * p * (10 + p) / 11)
            };
            rows.push((*m, p, max));
        }
    }
    let mut chart = max_seq_chart("Longest sequence that fits, LLaMA-13B on A100-80GB", rows);
    chart
        .notes
        .push("ulysses needs heads divisible by p (40 heads)".into());
    chart
}

/// Two forward layers of METP-like work on 4 devices: compute and two comm streams per GPU.
fn timeline_spans(layers: usize) -> Vec<Span> {
    let mut spans = Vec::new();
    let p = 4;
    let step = 180e-6;
    for gpu in 0..p {
        let mut t = 0.0;
        for layer in 0..layers {
            for g in 0..p {
                let qkv = 60e-6 * (1.0 + 0.1 * gpu as f64);
                spans.push(Span::new(
                    format!("gpu{gpu} compute"),
                    t,
                    t + qkv,
                    format!("qkv L{layer} g{g}"),
                    "compute",
                ));
                spans.push(Span::new(
                    format!("gpu{gpu} comm0"),
                    t,
                    t + 40e-6,
                    format!("w g{}", (g + 1) % p),
                    "recv",
                ));
                t += qkv;
                for b in 0..p {
                    spans.push(Span::new(
                        format!("gpu{gpu} compute"),
                        t,
                        t + step,
                        format!("attn g{g} b{b}"),
                        "attention",
                    ));
                    spans.push(Span::new(
                        format!("gpu{gpu} comm1"),
                        t + 5e-6,
                        t + 5e-6 + 150e-6,
                        format!("kv b{b}"),
                        "send",
                    ));
                    t += step;
                }
            }
            spans.push(Span::new(
                format!("gpu{gpu} comm0"),
                t,
                t + 300e-6,
                format!("all-reduce L{layer}"),
                "collective",
            ));
            t += 310e-6;
        }
        spans.push(Span::new(
            format!("link gpu{gpu}->gpu{}", (gpu + 1) % p),
            0.0,
            t,
            "ring",
            "link busy",
        ));
    }
    spans
}

fn samples_dir() -> Option<PathBuf> {
    std::env::var_os("METP_SIM_PLOT_SAMPLES").map(PathBuf::from)
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Decodes a PNG, returning (width, height, RGB bytes).
fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().expect("PNG header decodes");
    let mut buf = vec![0; reader.output_buffer_size().expect("PNG size fits")];
    let info = reader.next_frame(&mut buf).expect("PNG decodes");
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

/// Dark pixels (text, axes) in rows `y0..y1`.
fn dark_pixels(rgb: &[u8], width: u32, y0: u32, y1: u32) -> usize {
    let row = width as usize * 3;
    rgb[y0 as usize * row..y1 as usize * row]
        .chunks(3)
        .filter(|px| px.iter().all(|&c| c < 100))
        .count()
}

/// The text content of every `<text>` element.
fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim().to_string())
        })
        .collect()
}

#[test]
fn chart_writes_svg_and_png_with_text() {
    let dir = tempfile::tempdir().unwrap();
    let chart = memory_chart();
    let svg_path = dir.path().join("memory.svg");
    let png_path = dir.path().join("memory.png");
    write_chart(&chart, &svg_path).unwrap();
    write_chart(&chart, &png_path).unwrap();

    let svg = String::from_utf8(read(&svg_path)).unwrap();
    assert!(
        svg.starts_with("<svg") || svg.starts_with("<?xml"),
        "{}",
        &svg[..40]
    );
    let texts = svg_texts(&svg);
    for want in [
        chart.title.as_str(),
        "sequence length (tokens)",
        "peak memory per device",
        "device memory 80 GiB",
        "4k",
        "512k",
        "80 GiB",
    ]
    .into_iter()
    .chain(METHODS)
    {
        assert!(
            texts.iter().any(|t| t == want),
            "no <text>{want}</text> in {texts:?}"
        );
    }
    // Long legend entries wrap onto several lines.
    assert!(
        texts
            .join(" ")
            .contains("infeasible (out of memory or invalid)"),
        "{texts:?}"
    );
    assert!(svg.contains("font-family=\"sans-serif\""));

    let (w, h, rgb) = decode_png(&read(&png_path));
    assert_eq!((w, h), (1200, 750));
    // The title is rasterised: its band holds dark glyph pixels.
    assert!(dark_pixels(&rgb, w, 0, 50) > 500, "title glyphs missing");
    // Each method colour appears (lines and markers drawn).
    for m in METHODS {
        let c = metp_sim::plot::method_color(m).unwrap();
        let n = rgb.chunks(3).filter(|px| px == &[c.0, c.1, c.2]).count();
        assert!(n > 100, "{m}: {n} pixels of its colour");
    }
    if let Some(out) = samples_dir() {
        write_chart(&chart, &out.join("memory.png")).unwrap();
        write_chart(&chart, &out.join("memory.svg")).unwrap();
        write_chart(&max_seq(), &out.join("maxseq.png")).unwrap();
    }
}

#[test]
fn same_data_gives_identical_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let spans = timeline_spans(2);
    for ext in ["svg", "png"] {
        let a = dir.path().join(format!("a.{ext}"));
        let b = dir.path().join(format!("b.{ext}"));
        write_chart(&memory_chart(), &a).unwrap();
        write_chart(&memory_chart(), &b).unwrap();
        assert!(read(&a) == read(&b), "chart .{ext} differs between renders");
        write_timeline("t", &spans, &a).unwrap();
        write_timeline("t", &spans, &b).unwrap();
        assert!(
            read(&a) == read(&b),
            "timeline .{ext} differs between renders"
        );
    }
    // Only the four plots: no temporary files left behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 4);
}

#[test]
fn unknown_extension_is_a_clear_error_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["plot.jpg", "plot"] {
        let path = dir.path().join(name);
        let err = write_chart(&memory_chart(), &path).unwrap_err();
        assert!(matches!(err, Error::Plot { .. }), "{err:?}");
        assert_eq!(err.exit_code(), 1);
        let msg = err.to_string();
        assert!(msg.contains(name) && msg.contains(".svg or .png"), "{msg}");
        let err = write_timeline("t", &timeline_spans(1), &path).unwrap_err();
        assert!(err.to_string().contains(".svg or .png"), "{err}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn empty_chart_is_drawn_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let mut chart = Chart::new("Nothing yet", "sequence length", "memory")
        .with_formats(AxisFormat::Tokens, AxisFormat::Bytes)
        .with_log(true, true);
    for ext in ["svg", "png"] {
        let path = dir.path().join(format!("empty.{ext}"));
        write_chart(&chart, &path).unwrap();
        assert!(!read(&path).is_empty());
    }
    let svg = String::from_utf8(read(&dir.path().join("empty.svg"))).unwrap();
    let texts = svg_texts(&svg);
    assert!(texts.iter().any(|t| t == "no data"), "{texts:?}");
    // A series with no points is empty too.
    chart.series.push(Series::new("tp", vec![]));
    write_chart(&chart, &dir.path().join("empty2.png")).unwrap();
}

#[test]
fn points_that_cannot_be_drawn_name_their_series() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.svg");
    let chart = Chart::new("t", "x", "y")
        .with_log(false, true)
        .with_series(Series::new("ring", vec![(1.0, 2.0), (2.0, 0.0)]));
    let msg = write_chart(&chart, &path).unwrap_err().to_string();
    assert!(msg.contains("'ring'") && msg.contains("log y"), "{msg}");
    let chart = Chart::new("t", "x", "y").with_series(Series::new("a", vec![(f64::NAN, 1.0)]));
    assert!(write_chart(&chart, &path).is_err());
    assert!(!path.exists());
}

#[test]
fn step_time_on_a_log_axis_and_percentages() {
    let dir = tempfile::tempdir().unwrap();
    let mut time = Chart::new("Step time, p = 8", "sequence length (tokens)", "step time")
        .with_formats(AxisFormat::Tokens, AxisFormat::Seconds)
        .with_log(true, true);
    let mut share = Chart::new("Exposed communication", "sequence length (tokens)", "share")
        .with_formats(AxisFormat::Tokens, AxisFormat::Percent)
        .with_log(true, false);
    for (i, m) in METHODS.iter().enumerate() {
        let pts = |f: &dyn Fn(f64) -> f64| -> Vec<(f64, f64)> {
            (12..=19)
                .map(|e| f64::from(1u32 << e))
                .map(|s| (s, f(s)))
                .collect()
        };
        let c = 1.0 + i as f64 * 0.15;
        time.series
            .push(Series::new(*m, pts(&|s| c * (2e-7 * s + 4e-12 * s * s))));
        share
            .series
            .push(Series::new(*m, pts(&|s| c * 0.3 * 4096.0 / s)));
    }
    let svg = dir.path().join("time.svg");
    write_chart(&time, &svg).unwrap();
    let texts = svg_texts(&String::from_utf8(read(&svg)).unwrap());
    for want in ["1 ms", "10 ms", "100 ms", "1 s"] {
        assert!(texts.iter().any(|t| t == want), "no {want} in {texts:?}");
    }
    let svg = dir.path().join("share.svg");
    write_chart(&share, &svg).unwrap();
    let texts = svg_texts(&String::from_utf8(read(&svg)).unwrap());
    assert!(
        texts.iter().any(|t| t == "0%") && texts.iter().any(|t| t == "20%"),
        "{texts:?}"
    );
    if let Some(out) = samples_dir() {
        write_chart(&time, &out.join("step-time.png")).unwrap();
        write_chart(&share, &out.join("exposed.png")).unwrap();
    }
}

#[test]
fn max_seq_chart_groups_rows_by_method() {
    let chart = max_seq_chart(
        "m",
        [
            ("tp", 1, Some(4096)),
            ("metp", 1, None),
            ("tp", 2, Some(8192)),
        ],
    );
    assert_eq!(chart.series.len(), 2);
    assert_eq!(chart.series[0].name, "tp");
    assert_eq!(chart.series[0].points, vec![(1.0, 4096.0), (2.0, 8192.0)]);
    assert_eq!(chart.series[1].infeasible, vec![1.0]);
    assert!(chart.x_log2 && chart.y_log);
    let dir = tempfile::tempdir().unwrap();
    write_chart(&max_seq(), &dir.path().join("maxseq.svg")).unwrap();
}

#[test]
fn timeline_writes_tracks_categories_and_labels() {
    let dir = tempfile::tempdir().unwrap();
    let spans = timeline_spans(2);
    let svg_path = dir.path().join("timeline.svg");
    let png_path = dir.path().join("timeline.png");
    write_timeline("METP forward, p = 4", &spans, &svg_path).unwrap();
    write_timeline("METP forward, p = 4", &spans, &png_path).unwrap();
    let svg = String::from_utf8(read(&svg_path)).unwrap();
    let texts = svg_texts(&svg);
    for want in [
        "METP forward, p = 4",
        "gpu0 compute",
        "gpu3 comm1",
        "link gpu3-&gt;gpu0",
        "compute",
        "attention",
        "send",
        "recv",
        "collective",
        "link busy",
        "time",
        "ring",
    ] {
        assert!(
            texts.iter().any(|t| t == want),
            "no <text>{want}</text> in {texts:?}"
        );
    }
    // Tracks in first-appearance order (plotters draws the y labels top to bottom).
    let tracks: Vec<&String> = texts.iter().filter(|t| t.starts_with("gpu0")).collect();
    assert_eq!(tracks, ["gpu0 compute", "gpu0 comm0", "gpu0 comm1"]);
    let (w, h, rgb) = decode_png(&read(&png_path));
    assert_eq!(w, 1600);
    assert!(h > 300);
    assert!(dark_pixels(&rgb, w, 0, 50) > 300, "title glyphs missing");

    // A window zooms in and clips.
    let zoom = TimelineOptions {
        window_s: Some((0.0, 1e-3)),
        ..TimelineOptions::default()
    };
    let zoom_path = dir.path().join("zoom.svg");
    write_timeline_with("zoom", &spans, &zoom, &zoom_path).unwrap();
    // Zoomed in, the attention blocks are wide enough for their labels.
    let zoomed = svg_texts(&String::from_utf8(read(&zoom_path)).unwrap());
    assert!(zoomed.iter().any(|t| t == "attn g0 b0"), "{zoomed:?}");
    assert!(
        zoomed.iter().any(|t| t.contains("window 0 to 1 ms")),
        "{zoomed:?}"
    );
    if let Some(out) = samples_dir() {
        write_timeline("METP forward, p = 4", &spans, &out.join("timeline.png")).unwrap();
        write_timeline_with("zoom", &spans, &zoom, &out.join("timeline-zoom.png")).unwrap();
    }
}

#[test]
fn timeline_with_tens_of_thousands_of_spans_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    let spans = timeline_spans(150);
    assert!(spans.len() > 20_000, "{}", spans.len());
    let path = dir.path().join("big.svg");
    write_timeline("many spans", &spans, &path).unwrap();
    let size = read(&path).len();
    // Narrow spans are merged: far fewer elements than spans.
    assert!(size < 3_000_000, "{size} bytes");
    let svg = String::from_utf8(read(&path)).unwrap();
    assert!(svg_texts(&svg).iter().any(|t| t.contains("merged")));
    write_timeline("many spans", &spans, &dir.path().join("big.png")).unwrap();
    if let Some(out) = samples_dir() {
        write_timeline("many spans", &spans, &out.join("timeline-big.png")).unwrap();
    }
}

#[test]
fn many_tracks_get_thinner_rows() {
    let dir = tempfile::tempdir().unwrap();
    let spans: Vec<Span> = (0..192)
        .map(|i| {
            let t = i as f64 * 1e-5;
            Span::new(
                format!("gpu{} stream{}", i / 3, i % 3),
                t,
                t + 1e-3,
                "x",
                "compute",
            )
        })
        .collect();
    let path = dir.path().join("tracks.png");
    write_timeline("192 tracks", &spans, &path).unwrap();
    let (_, h, _) = decode_png(&read(&path));
    assert!(h < 192 * 14 + 400, "{h}");
    if let Some(out) = samples_dir() {
        write_timeline("192 tracks", &spans, &out.join("timeline-tracks.png")).unwrap();
    }
    // Thousands of tracks: rows too thin for names, the image stays bounded.
    let spans: Vec<Span> = (0..3000)
        .map(|i| Span::new(format!("t{i}"), 0.0, 1.0, "", "compute"))
        .collect();
    let path = dir.path().join("thin.svg");
    write_timeline("3000 tracks", &spans, &path).unwrap();
    let svg = String::from_utf8(read(&path)).unwrap();
    assert!(svg_texts(&svg).iter().any(|t| t.contains("too thin")));
    let spans: Vec<Span> = (0..9000)
        .map(|i| Span::new(format!("t{i}"), 0.0, 1.0, "", "compute"))
        .collect();
    let msg = write_timeline("9000 tracks", &spans, &path)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("9000 tracks"), "{msg}");
}

#[test]
fn bad_spans_and_windows_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.svg");
    let spans = vec![Span::new("gpu0", 2.0, 1.0, "backwards", "compute")];
    let msg = write_timeline("t", &spans, &path).unwrap_err().to_string();
    assert!(msg.contains("span 0") && msg.contains("backwards"), "{msg}");
    let bad_window = TimelineOptions {
        window_s: Some((1.0, 1.0)),
        ..TimelineOptions::default()
    };
    assert!(write_timeline_with("t", &timeline_spans(1), &bad_window, &path).is_err());
    // No spans: an empty timeline with a note.
    write_timeline("t", &[], &path).unwrap();
    let svg = String::from_utf8(read(&path)).unwrap();
    assert!(svg_texts(&svg).iter().any(|t| t == "no spans"));
}
