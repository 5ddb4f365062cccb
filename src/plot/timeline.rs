//! Gantt timeline of simulated spans: one row per track (a device's compute stream, a
//! communication stream, a link), bars coloured by category, time along x.
//!
//! Readable from a handful to tens of thousands of spans: neighbouring spans of one category on
//! one track that are narrower than a few pixels are merged into one bar (the footer says so),
//! every bar is at least one pixel wide, and a span's label is written only when it fits inside
//! its bar. [`TimelineOptions::window_s`] zooms into a time window.

use std::collections::HashMap;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axis::{linear_ticks_n, AxisFormat, Keyed};
use super::palette::{category_colors, text_on};
use super::{center_dy, plot_error, render, text, text_width, Drawing};
use crate::error::Result;

/// One simulated interval on one track.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Span {
    /// The row: `"gpu0 compute"`, `"gpu0 comm0"`, `"link gpu0->gpu1"`. Rows appear in the order
    /// their first span appears.
    pub track: String,
    /// Start, seconds.
    pub start_s: f64,
    /// End, seconds (≥ start).
    pub end_s: f64,
    /// Text written inside the bar when it fits (`"attn fwd g2 b5"`).
    pub label: String,
    /// Colour class: `compute`, `gemm`, `attention`, `send`, `recv`, `collective`, `memory`,
    /// `idle`, `wait` have fixed colours; other names get colours in order of appearance.
    pub category: String,
}

impl Span {
    /// A span.
    pub fn new(
        track: impl Into<String>,
        start_s: f64,
        end_s: f64,
        label: impl Into<String>,
        category: impl Into<String>,
    ) -> Span {
        Span {
            track: track.into(),
            start_s,
            end_s,
            label: label.into(),
            category: category.into(),
        }
    }
}

/// Options for [`write_timeline_with`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TimelineOptions {
    /// Draw only this time window `(from_s, to_s)`; spans crossing its edges are clipped. Default:
    /// from the earliest start to the latest end.
    pub window_s: Option<(f64, f64)>,
    /// Image width in pixels (default 1600; clamped to 400..=16000).
    pub width_px: Option<u32>,
}

/// Writes a timeline of `spans` to `path` (SVG or PNG by extension), whole time range.
pub fn write_timeline(title: &str, spans: &[Span], path: &Path) -> Result<()> {
    write_timeline_with(title, spans, &TimelineOptions::default(), path)
}

/// Writes a timeline of `spans` to `path` with options. A span that ends before it starts or has a
/// non-finite time is an error naming it; no spans gives an empty chart with a note.
pub fn write_timeline_with(
    title: &str,
    spans: &[Span],
    options: &TimelineOptions,
    path: &Path,
) -> Result<()> {
    let drawing = Timeline::new(title, spans, options).map_err(|m| plot_error(path, m))?;
    render(&drawing, path)
}

const DEFAULT_WIDTH: u32 = 1600;
const TITLE_SIZE: f64 = 28.0;
const DESC_SIZE: f64 = 20.0;
const TICK_SIZE: f64 = 17.0;
const TRACK_SIZE: f64 = 16.0;
const LEGEND_SIZE: f64 = 17.0;
const NOTE_SIZE: f64 = 15.0;
const TITLE_H: u32 = 52;
const LEGEND_LINE_H: u32 = 28;
const X_LABEL_AREA: u32 = 62;
const FOOTER_H: u32 = 28;
const MARGIN: u32 = 14;
/// Spans of one category on one track are merged when the gap between them is under a pixel and
/// one of them is narrower than this many pixels.
const MERGE_BELOW_PX: f64 = 4.0;
/// The most pixels all rows together may take (keeps a PNG under about 40 MB of RGB in memory).
const MAX_ROWS_PX: u32 = 8000;
/// Track names are written only on rows at least this tall.
const MIN_NAMED_ROW_PX: u32 = 8;
const DARK: RGBColor = RGBColor(40, 40, 40);
const GREY: RGBColor = RGBColor(110, 110, 110);
const GRID: RGBColor = RGBColor(215, 215, 215);
const ZEBRA: RGBColor = RGBColor(246, 246, 246);

struct Timeline<'a> {
    title: &'a str,
    spans: &'a [Span],
    tracks: Vec<&'a str>,
    /// Track index of each span.
    span_track: Vec<usize>,
    categories: Vec<&'a str>,
    colors: Vec<RGBColor>,
    /// Category index of each span.
    span_category: Vec<usize>,
    lo: f64,
    hi: f64,
    width: u32,
    row_h: u32,
}

impl<'a> Timeline<'a> {
    fn new(
        title: &'a str,
        spans: &'a [Span],
        options: &TimelineOptions,
    ) -> Result<Timeline<'a>, String> {
        for (i, s) in spans.iter().enumerate() {
            if !s.start_s.is_finite() || !s.end_s.is_finite() || s.end_s < s.start_s {
                return Err(format!(
                    "span {i} ('{}' on track '{}'): start {} s and end {} s must be finite, \
                     end ≥ start",
                    s.label, s.track, s.start_s, s.end_s
                ));
            }
        }
        let mut tracks: Vec<&str> = Vec::new();
        let mut track_index: HashMap<&str, usize> = HashMap::new();
        let mut categories: Vec<&str> = Vec::new();
        let mut category_index: HashMap<&str, usize> = HashMap::new();
        let mut span_track = Vec::with_capacity(spans.len());
        let mut span_category = Vec::with_capacity(spans.len());
        for s in spans {
            let t = *track_index.entry(s.track.as_str()).or_insert_with(|| {
                tracks.push(s.track.as_str());
                tracks.len() - 1
            });
            let c = *category_index
                .entry(s.category.as_str())
                .or_insert_with(|| {
                    categories.push(s.category.as_str());
                    categories.len() - 1
                });
            span_track.push(t);
            span_category.push(c);
        }
        let (lo, hi) = match options.window_s {
            Some((a, b)) => {
                if !(a.is_finite() && b.is_finite() && b > a) {
                    return Err(format!(
                        "time window {a} s .. {b} s: both ends must be finite, end > start"
                    ));
                }
                (a, b)
            }
            None => {
                let lo = spans
                    .iter()
                    .map(|s| s.start_s)
                    .fold(f64::INFINITY, f64::min);
                let hi = spans
                    .iter()
                    .map(|s| s.end_s)
                    .fold(f64::NEG_INFINITY, f64::max);
                if !lo.is_finite() {
                    (0.0, 1e-3)
                } else if hi > lo {
                    (lo, hi)
                } else {
                    (lo, lo + 1e-6)
                }
            }
        };
        let n = tracks.len().max(1) as u32;
        // Rows of 32 px, thinner (down to 12 px) for many tracks; past MAX_ROWS_PX in all, rows
        // get as thin as needed (track names are then left out below 8 px).
        let mut row_h = if n <= 16 { 32 } else { (640 / n).clamp(12, 32) };
        if n * row_h > MAX_ROWS_PX {
            row_h = MAX_ROWS_PX / n;
        }
        if row_h == 0 {
            return Err(format!(
                "{n} tracks do not fit in one timeline (at most {MAX_ROWS_PX}); \
                 plot fewer tracks at a time"
            ));
        }
        Ok(Timeline {
            title,
            spans,
            tracks,
            span_track,
            colors: category_colors(categories.iter().copied()),
            categories,
            span_category,
            lo,
            hi,
            width: options.width_px.unwrap_or(DEFAULT_WIDTH).clamp(400, 16000),
            row_h,
        })
    }

    /// The category legend laid out in lines: (category index, x offset) per entry, wrapped at
    /// the image width.
    fn legend_lines(&self) -> Vec<Vec<(usize, i32)>> {
        let mut lines: Vec<Vec<(usize, i32)>> = vec![Vec::new()];
        let mut x = MARGIN as i32;
        for (i, c) in self.categories.iter().enumerate() {
            let w = 28 + text_width(c, LEGEND_SIZE) as i32 + 30;
            if x + w > self.width as i32 - MARGIN as i32 && x > MARGIN as i32 {
                lines.push(Vec::new());
                x = MARGIN as i32;
            }
            if let Some(line) = lines.last_mut() {
                line.push((i, x));
            }
            x += w;
        }
        lines
    }

    fn height(&self) -> u32 {
        let legend_h = LEGEND_LINE_H * self.legend_lines().len() as u32;
        TITLE_H + legend_h + 2 * MARGIN + self.rows() * self.row_h + X_LABEL_AREA + FOOTER_H
    }

    fn rows(&self) -> u32 {
        self.tracks.len().max(1) as u32
    }
}

/// A bar to draw: a span or a run of merged narrow spans.
struct Bar {
    track: usize,
    category: usize,
    start: f64,
    end: f64,
    /// The span whose label it carries, if it is one span.
    span: Option<usize>,
}

impl Drawing for Timeline<'_> {
    fn size(&self) -> (u32, u32) {
        (self.width, self.height())
    }

    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        raster: bool,
    ) -> Result<(), String> {
        let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
        let (w, h) = self.size();
        root.draw(&Text::new(
            self.title.to_string(),
            (
                w as i32 / 2,
                TITLE_H as i32 / 2 + 2 + center_dy(raster, TITLE_SIZE),
            ),
            text(TITLE_SIZE, DARK).pos(Pos::new(HPos::Center, VPos::Center)),
        ))
        .map_err(e)?;

        // Category legend under the title.
        let legend = self.legend_lines();
        let legend_style = text(LEGEND_SIZE, DARK).pos(Pos::new(HPos::Left, VPos::Center));
        for (line_no, line) in legend.iter().enumerate() {
            let cy = (TITLE_H + LEGEND_LINE_H * line_no as u32 + LEGEND_LINE_H / 2) as i32;
            for &(c, x) in line {
                root.draw(&Rectangle::new(
                    [(x, cy - 9), (x + 18, cy + 9)],
                    self.colors[c].filled(),
                ))
                .map_err(e)?;
                root.draw(&Text::new(
                    self.categories[c].to_string(),
                    (x + 26, cy + center_dy(raster, LEGEND_SIZE)),
                    legend_style.clone(),
                ))
                .map_err(e)?;
            }
        }
        let legend_h = LEGEND_LINE_H * legend.len() as u32;
        let (_, body) = root.split_vertically(TITLE_H + legend_h);
        let (main, footer) = body.split_vertically(h - TITLE_H - legend_h - FOOTER_H);

        // Track names on the left, first track on top.
        let n = self.rows() as usize;
        // Track names shrink with the rows so that they never overlap.
        let track_size = TRACK_SIZE.min(f64::from(self.row_h) - 1.0);
        let track_style = text(track_size, DARK);
        let names: Vec<String> = if self.row_h >= MIN_NAMED_ROW_PX {
            self.tracks.iter().map(|t| shorten(t, 48)).collect()
        } else {
            Vec::new()
        };
        let name_w = names
            .iter()
            .map(|t| text_width(t, track_size))
            .max()
            .unwrap_or(0);
        let y_key: Vec<f64> = (0..self.tracks.len())
            .map(|i| (n - i) as f64 - 0.5)
            .collect();
        let x_ticks = linear_ticks_n(AxisFormat::Seconds, self.lo, self.hi, 10.0);
        let x_key: Vec<f64> = x_ticks.iter().map(|&(p, _)| p).collect();
        let mut cc = ChartBuilder::on(&main)
            .margin_top(MARGIN)
            .margin_bottom(MARGIN)
            .margin_left(MARGIN)
            .margin_right(MARGIN + 10)
            .x_label_area_size(X_LABEL_AREA)
            .y_label_area_size((name_w + 16).min(w / 3))
            .build_cartesian_2d(
                Keyed::new(self.lo, self.hi, x_key),
                Keyed::new(0.0, n as f64, y_key),
            )
            .map_err(e)?;
        let x_fmt = |v: &f64| {
            x_ticks
                .iter()
                .min_by(|a, b| (a.0 - v).abs().total_cmp(&(b.0 - v).abs()))
                .map(|(_, l)| l.clone())
                .unwrap_or_default()
        };
        let y_fmt = |v: &f64| {
            let i = n as f64 - 0.5 - v;
            names
                .get(i.round().max(0.0) as usize)
                .cloned()
                .unwrap_or_default()
        };

        // Zebra rows first, under the grid and the bars.
        {
            let area = cc.plotting_area();
            for i in (1..n).step_by(2) {
                let top = (n - i) as f64;
                area.draw(&Rectangle::new(
                    [(self.lo, top - 1.0), (self.hi, top)],
                    ZEBRA.filled(),
                ))
                .map_err(e)?;
            }
        }
        cc.configure_mesh()
            .x_desc("time")
            .axis_desc_style(text(DESC_SIZE, DARK))
            .label_style(text(TICK_SIZE, DARK))
            .y_label_style(track_style.clone())
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .disable_y_mesh()
            .bold_line_style(GRID.stroke_width(1))
            .light_line_style(TRANSPARENT)
            .max_light_lines(0)
            .axis_style(GREY.stroke_width(1))
            .set_all_tick_mark_size(4)
            .y_label_offset(center_dy(raster, track_size))
            .draw()
            .map_err(e)?;

        let area = cc.plotting_area();
        let plot_w = f64::from(area.dim_in_pixel().0.max(1));
        let px = plot_w / (self.hi - self.lo);
        let (bars, merged) = self.bars(px);
        let label_size = (f64::from(self.row_h) * 0.5).min(14.0);
        let inset = 0.16;
        for bar in &bars {
            let top = (n - bar.track) as f64 - inset;
            let bottom = (n - bar.track - 1) as f64 + inset;
            let width_px = (bar.end - bar.start) * px;
            // At least one pixel wide; wider bars leave a one-pixel gap at their right end so that
            // back-to-back spans stay distinguishable.
            let end = if width_px < 1.0 {
                bar.start + 1.0 / px
            } else if width_px >= 4.0 {
                bar.end - 1.0 / px
            } else {
                bar.end
            };
            let color = self.colors[bar.category];
            area.draw(&Rectangle::new(
                [(bar.start, bottom), (end, top)],
                color.filled(),
            ))
            .map_err(e)?;
            if let Some(i) = bar.span {
                let label = &self.spans[i].label;
                if width_px >= 24.0 && !label.is_empty() && self.row_h >= 16 {
                    let style = text(label_size, text_on(color));
                    let tw = f64::from(text_width(label, label_size));
                    if tw + 8.0 <= width_px {
                        area.draw(
                            &(EmptyElement::at(((bar.start + end) / 2.0, (top + bottom) / 2.0))
                                + Text::new(
                                    label.clone(),
                                    (0, center_dy(raster, label_size)),
                                    style.pos(Pos::new(HPos::Center, VPos::Center)),
                                )),
                        )
                        .map_err(e)?;
                    }
                }
            }
        }

        let mut footer_text = format!(
            "{} spans on {} tracks; window {} to {}",
            self.spans.len(),
            self.tracks.len(),
            AxisFormat::Seconds.format_value(self.lo),
            AxisFormat::Seconds.format_value(self.hi)
        );
        if merged > 0 {
            footer_text.push_str(&format!(
                "; {merged} spans narrower than {MERGE_BELOW_PX} px merged with their neighbours"
            ));
        }
        if self.row_h < MIN_NAMED_ROW_PX {
            footer_text.push_str("; rows too thin for track names");
        }
        if self.spans.is_empty() {
            footer_text = "no spans".to_string();
        }
        footer
            .draw(&Text::new(
                footer_text,
                (
                    MARGIN as i32 + 6,
                    FOOTER_H as i32 / 2 + center_dy(raster, NOTE_SIZE),
                ),
                text(NOTE_SIZE, GREY).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(e)?;
        Ok(())
    }
}

impl Timeline<'_> {
    /// The bars to draw at `px` pixels per second: spans clipped to the window, sorted by track
    /// then start, narrow neighbours of one category merged. Also returns how many spans were
    /// merged into another bar.
    fn bars(&self, px: f64) -> (Vec<Bar>, usize) {
        let mut order: Vec<usize> = (0..self.spans.len())
            .filter(|&i| self.spans[i].end_s >= self.lo && self.spans[i].start_s <= self.hi)
            .collect();
        order.sort_by(|&a, &b| {
            let (sa, sb) = (&self.spans[a], &self.spans[b]);
            self.span_track[a]
                .cmp(&self.span_track[b])
                .then(sa.start_s.total_cmp(&sb.start_s))
                .then(sa.end_s.total_cmp(&sb.end_s))
                .then(a.cmp(&b))
        });
        let mut bars: Vec<Bar> = Vec::new();
        let mut merged = 0;
        for i in order {
            let s = &self.spans[i];
            let bar = Bar {
                track: self.span_track[i],
                category: self.span_category[i],
                start: s.start_s.max(self.lo),
                end: s.end_s.min(self.hi),
                span: Some(i),
            };
            if let Some(last) = bars.last_mut() {
                let narrow = (last.end - last.start) * px < MERGE_BELOW_PX
                    || (bar.end - bar.start) * px < MERGE_BELOW_PX;
                if last.track == bar.track
                    && last.category == bar.category
                    && narrow
                    && (bar.start - last.end) * px < 1.0
                {
                    last.end = last.end.max(bar.end);
                    last.span = None;
                    merged += 1;
                    continue;
                }
            }
            bars.push(bar);
        }
        (bars, merged)
    }
}

/// `s` cut to `max` characters with an ellipsis.
fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline(spans: &[Span]) -> Timeline<'_> {
        Timeline::new("t", spans, &TimelineOptions::default()).unwrap()
    }

    #[test]
    fn narrow_neighbours_of_one_category_merge() {
        // At 1 px per µs: three 1 µs compute spans back to back merge into one bar; a send span
        // between compute spans stays; a wide span keeps its label.
        let spans = vec![
            Span::new("a", 0e-6, 1e-6, "c0", "compute"),
            Span::new("a", 1e-6, 2e-6, "c1", "compute"),
            Span::new("a", 2e-6, 3e-6, "c2", "compute"),
            Span::new("a", 3e-6, 4e-6, "s", "send"),
            Span::new("a", 4e-6, 5e-6, "c3", "compute"),
            Span::new("b", 0e-6, 50e-6, "wide", "compute"),
        ];
        let t = timeline(&spans);
        let (bars, merged) = t.bars(1e6);
        assert_eq!(merged, 2);
        assert_eq!(bars.len(), 4);
        assert_eq!(
            (bars[0].start, bars[0].end, bars[0].span),
            (0.0, 3e-6, None)
        );
        assert_eq!(bars[1].category, 1);
        assert_eq!(bars[3].span, Some(5));
        // Zoomed in (100 px per µs) nothing merges.
        assert_eq!(t.bars(1e8).1, 0);
    }

    #[test]
    fn tracks_and_categories_in_order_of_appearance() {
        let spans = vec![
            Span::new("gpu1", 0.0, 1.0, "", "send"),
            Span::new("gpu0", 0.0, 1.0, "", "compute"),
            Span::new("gpu1", 1.0, 2.0, "", "compute"),
        ];
        let t = timeline(&spans);
        assert_eq!(t.tracks, ["gpu1", "gpu0"]);
        assert_eq!(t.categories, ["send", "compute"]);
        assert_eq!((t.lo, t.hi), (0.0, 2.0));
    }

    #[test]
    fn window_clips_spans() {
        let spans = vec![
            Span::new("a", 0.0, 10.0, "", "compute"),
            Span::new("a", 20.0, 30.0, "", "compute"),
        ];
        let options = TimelineOptions {
            window_s: Some((5.0, 15.0)),
            ..TimelineOptions::default()
        };
        let t = Timeline::new("t", &spans, &options).unwrap();
        let (bars, _) = t.bars(100.0);
        assert_eq!(bars.len(), 1);
        assert_eq!((bars[0].start, bars[0].end), (5.0, 10.0));
    }

    #[test]
    fn shorten_long_names() {
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(shorten("abcd", 3), "ab…");
    }
}
