//! Line charts of named series: memory or step time vs sequence length, maximum sequence length
//! vs degree, and the like.
//!
//! Layout: title on top, the plot on the left, the legend in its own column on the right (so it
//! never covers data), notes under the plot. Each series is a line with a marker at every point;
//! a method's series (`metp`, `tp`, `tp-sp`, `ulysses`, `ring`, `rsa`) always has the same colour
//! and marker ([`super::method_color`]). Infeasible points (out of memory, invalid degree) are
//! drawn as × in the series colour in a shaded band at the top of the plot, one row per series,
//! and the line is broken where they fall.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axis::{Axis, AxisFormat, Scale};
use super::palette::{series_styles, Marker};
use super::{center_dy, plot_error, render, text, text_width, Drawing};
use crate::error::Result;
use marks::{draw_dashed, draw_line, draw_marker};

mod marks;

/// One named line: `(x, y)` points in data units, plus the x values where the configuration is
/// infeasible (drawn as × markers in a band at the top of the plot; the line is broken there).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// Legend text; a method id (optionally followed by a qualifier) picks the method's colour.
    pub name: String,
    /// Feasible points, in any order (they are drawn sorted by x).
    pub points: Vec<(f64, f64)>,
    /// x values with no feasible point (out of memory, invalid configuration).
    pub infeasible: Vec<f64>,
    /// How the series is drawn.
    pub style: SeriesStyle,
}

/// How a series is drawn. Reference lines are grey and take no colour from the palette; series
/// of the same name share one legend entry (a band drawn as two lines).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SeriesStyle {
    /// A line with a marker at every point.
    #[default]
    LineAndMarkers,
    /// Markers only (a scatter of separate results).
    Markers,
    /// A solid grey reference line (y = x).
    Reference,
    /// A dashed grey reference line (a band's edge).
    ReferenceDashed,
}

impl SeriesStyle {
    fn is_reference(self) -> bool {
        matches!(self, SeriesStyle::Reference | SeriesStyle::ReferenceDashed)
    }
}

impl Series {
    /// A series with the given points and no infeasible x.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            infeasible: Vec::new(),
            style: SeriesStyle::default(),
        }
    }

    /// The same series drawn in `style`.
    pub fn with_style(mut self, style: SeriesStyle) -> Series {
        self.style = style;
        self
    }

    /// The same series with these x values marked infeasible.
    pub fn with_infeasible(mut self, xs: Vec<f64>) -> Series {
        self.infeasible = xs;
        self
    }
}

/// A line chart. Build it with [`Chart::new`] and the `with_*` methods, or as a struct literal
/// with `..Default::default()`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chart {
    /// Title, on top.
    pub title: String,
    /// x-axis description (tick labels carry the unit: `4k`, `80 GiB`, `20 ms`).
    pub x_label: String,
    /// y-axis description.
    pub y_label: String,
    /// How x ticks are printed.
    pub x_format: AxisFormat,
    /// How y ticks are printed.
    pub y_format: AxisFormat,
    /// Log2 x axis (sequence lengths 4k..512k, degrees 1..64).
    pub x_log2: bool,
    /// Log10 x axis (seconds, throughputs: the same scale a `y_log` plain axis has); takes
    /// precedence over `x_log2`.
    pub x_log10: bool,
    /// Log y axis: powers of two for [`AxisFormat::Tokens`] and [`AxisFormat::Bytes`], powers of
    /// ten otherwise.
    pub y_log: bool,
    /// A horizontal line at this y with a label written above its left end (device capacity).
    pub reference: Option<(f64, String)>,
    /// The lines.
    pub series: Vec<Series>,
    /// Lines of text under the plot (workload, assumptions).
    pub notes: Vec<String>,
    /// Legend text for the × markers; default "infeasible (out of memory or invalid)".
    pub infeasible_label: Option<String>,
}

impl Chart {
    /// An empty chart with a title and axis descriptions; plain linear axes.
    pub fn new(
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
    ) -> Chart {
        Chart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            ..Chart::default()
        }
    }

    /// Sets the tick formats.
    pub fn with_formats(mut self, x: AxisFormat, y: AxisFormat) -> Chart {
        self.x_format = x;
        self.y_format = y;
        self
    }

    /// Sets the log axes.
    pub fn with_log(mut self, x_log2: bool, y_log: bool) -> Chart {
        self.x_log2 = x_log2;
        self.y_log = y_log;
        self
    }

    /// Log10 on both axes (predicted against measured, where y = x must be a diagonal).
    pub fn with_log10(mut self) -> Chart {
        self.x_log10 = true;
        self.y_log = true;
        self
    }

    /// Adds a labelled horizontal reference line.
    pub fn with_reference(mut self, y: f64, label: impl Into<String>) -> Chart {
        self.reference = Some((y, label.into()));
        self
    }

    /// Adds a series.
    pub fn with_series(mut self, series: Series) -> Chart {
        self.series.push(series);
        self
    }

    /// Adds a note line under the plot.
    pub fn with_note(mut self, note: impl Into<String>) -> Chart {
        self.notes.push(note.into());
        self
    }
}

/// "Maximum sequence length vs degree": one line per method, x = degree p (log2), y = longest
/// sequence that fits (tokens, log2). Rows are `(method, p, max_seq)`; `None` or `Some(0)` means
/// nothing fits or the degree is invalid for that method (drawn as ×). Methods keep the order in
/// which they first appear.
pub fn max_seq_chart<S: AsRef<str>>(
    title: impl Into<String>,
    rows: impl IntoIterator<Item = (S, u64, Option<u64>)>,
) -> Chart {
    let mut series: Vec<Series> = Vec::new();
    for (method, p, max_seq) in rows {
        let method = method.as_ref();
        let i = match series.iter().position(|s| s.name == method) {
            Some(i) => i,
            None => {
                series.push(Series::new(method, Vec::new()));
                series.len() - 1
            }
        };
        match max_seq {
            Some(s) if s > 0 => series[i].points.push((p as f64, s as f64)),
            _ => series[i].infeasible.push(p as f64),
        }
    }
    Chart {
        title: title.into(),
        x_label: "degree p (devices)".into(),
        y_label: "maximum sequence length (tokens)".into(),
        x_format: AxisFormat::Plain,
        y_format: AxisFormat::Tokens,
        x_log2: true,
        y_log: true,
        infeasible_label: Some("nothing fits, or invalid degree".into()),
        series,
        ..Chart::default()
    }
}

/// Writes `chart` to `path` as SVG or PNG (by extension). Points that cannot be drawn (not
/// finite, or ≤ 0 on a log axis) are an error naming the series; an empty chart (no series or no
/// points) is drawn with its axes and a "no data" note.
pub fn write_chart(chart: &Chart, path: &Path) -> Result<()> {
    let drawing = Prepared::new(chart).map_err(|m| plot_error(path, m))?;
    render(&drawing, path)
}

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 750;
const TITLE_SIZE: f64 = 28.0;
const DESC_SIZE: f64 = 21.0;
const TICK_SIZE: f64 = 18.0;
const LEGEND_SIZE: f64 = 18.0;
const NOTE_SIZE: f64 = 16.0;
/// Legend entries wrap at this width.
const LEGEND_TEXT_MAX_PX: u32 = 210;
const TITLE_H: u32 = 56;
const NOTE_LINE_H: u32 = 22;
const X_LABEL_AREA: u32 = 70;
const MARGIN: u32 = 14;
/// Height of one row of × markers in the infeasible band, in pixels.
const BAND_ROW_PX: f64 = 18.0;
const GRID: RGBColor = RGBColor(225, 225, 225);
const DARK: RGBColor = RGBColor(40, 40, 40);
const GREY: RGBColor = RGBColor(110, 110, 110);
const BAND: RGBColor = RGBColor(245, 245, 245);

/// A chart with its axes computed and its data checked.
struct Prepared<'a> {
    chart: &'a Chart,
    x: Axis,
    y: Axis,
    styles: Vec<(RGBColor, Marker)>,
    /// Series indices that have infeasible points, in order (one band row each).
    band_rows: Vec<usize>,
    empty: bool,
}

impl<'a> Prepared<'a> {
    fn new(chart: &'a Chart) -> Result<Prepared<'a>, String> {
        let xs = if chart.x_log10 {
            Scale::Log10
        } else if chart.x_log2 {
            Scale::Log2
        } else {
            Scale::Linear
        };
        let ys = if chart.y_log {
            chart.y_format.log_scale()
        } else {
            Scale::Linear
        };
        let axis_name = |log: bool, a: &str| {
            if log {
                format!("log {a}")
            } else {
                a.to_string()
            }
        };
        let (mut xv, mut yv) = (Vec::new(), Vec::new());
        for s in &chart.series {
            for &(x, y) in &s.points {
                if !xs.accepts(x) || !ys.accepts(y) {
                    let which = if xs.accepts(x) {
                        axis_name(chart.y_log, "y")
                    } else {
                        axis_name(chart.x_log2 || chart.x_log10, "x")
                    };
                    return Err(format!(
                        "series '{}': point ({x}, {y}) cannot be drawn on a {which} axis",
                        s.name
                    ));
                }
                xv.push(x);
                yv.push(y);
            }
            for &x in &s.infeasible {
                if !xs.accepts(x) {
                    return Err(format!(
                        "series '{}': infeasible x = {x} cannot be drawn on a {} axis",
                        s.name,
                        axis_name(chart.x_log2 || chart.x_log10, "x")
                    ));
                }
                xv.push(x);
            }
        }
        let empty = xv.is_empty();
        if let Some((y, label)) = &chart.reference {
            if !ys.accepts(*y) {
                return Err(format!(
                    "reference line '{label}' at y = {y} cannot be drawn on a {} axis",
                    axis_name(chart.y_log, "y")
                ));
            }
            yv.push(*y);
        }
        let band_rows: Vec<usize> = (0..chart.series.len())
            .filter(|&i| !chart.series[i].infeasible.is_empty())
            .collect();
        let range = |v: &[f64]| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if lo.is_finite() {
                (lo, hi)
            } else {
                (1.0, 2.0)
            }
        };
        let (x_lo, x_hi) = range(&xv);
        let (y_lo, y_hi) = range(&yv);
        // Room at the top for the infeasible band: its share of the plot height, generously
        // estimated, as a fraction of the data span (which is about 1.08 of the axis span).
        let top_pad = if band_rows.is_empty() {
            0.0
        } else {
            let plot_h = f64::from(HEIGHT - TITLE_H - X_LABEL_AREA - 2 * MARGIN)
                - f64::from(NOTE_LINE_H) * (chart.notes.len() + 1) as f64;
            let band = ((band_rows.len() as f64 + 0.6) * BAND_ROW_PX * 1.15 / plot_h).min(0.5);
            band * 1.08 / (1.0 - band)
        };
        let x = Axis::new(chart.x_format, xs, x_lo, x_hi, false, 0.0);
        let y = Axis::new(chart.y_format, ys, y_lo, y_hi, true, top_pad);
        Ok(Prepared {
            chart,
            x,
            y,
            styles: styles(&chart.series),
            band_rows,
            empty,
        })
    }

    fn infeasible_label(&self) -> &str {
        self.chart
            .infeasible_label
            .as_deref()
            .unwrap_or("infeasible (out of memory or invalid)")
    }

    fn notes(&self) -> Vec<String> {
        let mut notes = self.chart.notes.clone();
        if self.empty {
            notes.insert(0, "no data".to_string());
        }
        notes
    }
}

impl Drawing for Prepared<'_> {
    fn size(&self) -> (u32, u32) {
        (WIDTH, HEIGHT)
    }

    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        raster: bool,
    ) -> Result<(), String> {
        let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
        let chart = self.chart;
        let title_style = text(TITLE_SIZE, DARK).pos(Pos::new(HPos::Center, VPos::Center));
        root.draw(&Text::new(
            chart.title.clone(),
            (
                WIDTH as i32 / 2,
                TITLE_H as i32 / 2 + 2 + center_dy(raster, TITLE_SIZE),
            ),
            title_style,
        ))
        .map_err(e)?;

        let notes = self.notes();
        let notes_h = if notes.is_empty() {
            0
        } else {
            NOTE_LINE_H * notes.len() as u32 + 10
        };
        let (_, body) = root.split_vertically(TITLE_H);
        let (main, notes_area) = body.split_vertically(HEIGHT - TITLE_H - notes_h);

        // Legend column: as wide as its longest line; long entries wrap.
        let legend_style = text(LEGEND_SIZE, DARK).pos(Pos::new(HPos::Left, VPos::Center));
        // One entry per distinct name (series index, wrapped lines).
        let mut entries: Vec<(Option<usize>, Vec<String>)> = Vec::new();
        for (i, s) in chart.series.iter().enumerate() {
            if chart.series[..i].iter().all(|o| o.name != s.name) {
                entries.push((Some(i), wrap(&s.name, LEGEND_TEXT_MAX_PX, LEGEND_SIZE)));
            }
        }
        if !self.band_rows.is_empty() {
            entries.push((
                None,
                wrap(self.infeasible_label(), LEGEND_TEXT_MAX_PX, LEGEND_SIZE),
            ));
        }
        let legend_text_w = entries
            .iter()
            .flat_map(|(_, lines)| lines)
            .map(|l| text_width(l, LEGEND_SIZE))
            .max()
            .unwrap_or(0);
        let legend_w = if entries.is_empty() {
            MARGIN
        } else {
            (legend_text_w + 70).min(WIDTH * 2 / 5)
        };
        let (plot_area, legend_area) = main.split_horizontally(WIDTH - legend_w);

        let tick_style = text(TICK_SIZE, DARK);
        let y_tick_w = text_width(self.y.longest_label(), TICK_SIZE);
        let mut builder = ChartBuilder::on(&plot_area);
        builder
            .margin_top(MARGIN)
            .margin_bottom(MARGIN)
            .margin_left(MARGIN)
            .margin_right(MARGIN)
            .x_label_area_size(X_LABEL_AREA)
            .y_label_area_size(y_tick_w + 52);
        let mut cc = builder
            .build_cartesian_2d(self.x.coord(), self.y.coord())
            .map_err(e)?;
        let x_fmt = |v: &f64| self.x.label(*v);
        let y_fmt = |v: &f64| self.y.label(*v);
        cc.configure_mesh()
            .x_desc(chart.x_label.as_str())
            .y_desc(chart.y_label.as_str())
            .axis_desc_style(text(DESC_SIZE, DARK))
            .label_style(tick_style.clone())
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .bold_line_style(GRID.stroke_width(1))
            .light_line_style(TRANSPARENT)
            .max_light_lines(0)
            .axis_style(GREY.stroke_width(1))
            .set_all_tick_mark_size(5)
            .y_label_offset(center_dy(raster, TICK_SIZE))
            .draw()
            .map_err(e)?;

        let area = cc.plotting_area();
        let plot_h = f64::from(area.dim_in_pixel().1.max(1));
        let per_px = (self.y.hi - self.y.lo) / plot_h;
        let (sx, sy) = (self.x.scale, self.y.scale);

        // Infeasible band, shaded, above the data.
        if !self.band_rows.is_empty() {
            let band_h = (self.band_rows.len() as f64 + 0.6) * BAND_ROW_PX * per_px;
            area.draw(&Rectangle::new(
                [(self.x.lo, self.y.hi - band_h), (self.x.hi, self.y.hi)],
                BAND.filled(),
            ))
            .map_err(e)?;
        }

        // Reference line, dashed, with its label above the left end.
        if let Some((ry, label)) = &chart.reference {
            let py = sy.to_plot(*ry);
            let span = self.x.hi - self.x.lo;
            let dashes = 80;
            for k in 0..dashes {
                let a = self.x.lo + span * k as f64 / dashes as f64;
                let b = a + span * 0.6 / dashes as f64;
                area.draw(&PathElement::new(
                    vec![(a, py), (b, py)],
                    GREY.stroke_width(2),
                ))
                .map_err(e)?;
            }
            area.draw(
                &(EmptyElement::at((self.x.lo, py))
                    + Text::new(
                        label.clone(),
                        (8, -6),
                        text(TICK_SIZE, GREY).pos(Pos::new(HPos::Left, VPos::Bottom)),
                    )),
            )
            .map_err(e)?;
        }

        // Lines, broken at infeasible x, then markers on top.
        for (s, &(color, marker)) in chart.series.iter().zip(&self.styles) {
            let mut pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .map(|&(x, y)| (sx.to_plot(x), sy.to_plot(y)))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
            if s.style == SeriesStyle::ReferenceDashed {
                draw_dashed(area, &pts, color).map_err(e)?;
                continue;
            }
            let gaps: Vec<f64> = s.infeasible.iter().map(|&x| sx.to_plot(x)).collect();
            let mut run: Vec<(f64, f64)> = Vec::new();
            let line = s.style != SeriesStyle::Markers;
            for &p in &pts {
                if let Some(&last) = run.last() {
                    let gap = gaps.iter().any(|&g| g > last.0 && g < p.0);
                    if gap {
                        if line {
                            draw_line(area, &run, color).map_err(e)?;
                        }
                        run.clear();
                    }
                }
                run.push(p);
            }
            if line {
                draw_line(area, &run, color).map_err(e)?;
            }
            if !s.style.is_reference() {
                for &p in &pts {
                    draw_marker(area, p, marker, color, 6).map_err(e)?;
                }
            }
        }

        // × markers, one band row per series that has them.
        for (row, &i) in self.band_rows.iter().enumerate() {
            let color = self.styles[i].0;
            let py = self.y.hi - (row as f64 + 0.8) * BAND_ROW_PX * per_px;
            for &x in &chart.series[i].infeasible {
                area.draw(&Cross::new((sx.to_plot(x), py), 6, color.stroke_width(3)))
                    .map_err(e)?;
            }
        }

        // Legend column: a line and marker per series, then the × entry, a little apart.
        let line_h = 22;
        let mut cy = (MARGIN + 10) as i32;
        for (series, lines) in &entries {
            if let Some(k) = *series {
                let (color, marker) = self.styles[k];
                let style = chart.series[k].style;
                if style == SeriesStyle::ReferenceDashed {
                    draw_dashed(&legend_area, &[(6, cy), (40, cy)], color).map_err(e)?;
                } else if style != SeriesStyle::Markers {
                    legend_area
                        .draw(&PathElement::new(
                            vec![(6, cy), (40, cy)],
                            color.stroke_width(3),
                        ))
                        .map_err(e)?;
                }
                if !style.is_reference() {
                    draw_marker(&legend_area, (23, cy), marker, color, 6).map_err(e)?;
                }
            } else {
                cy += 10;
                legend_area
                    .draw(&Cross::new((23, cy), 6, GREY.stroke_width(3)))
                    .map_err(e)?;
            }
            for (j, line) in lines.iter().enumerate() {
                legend_area
                    .draw(&Text::new(
                        line.clone(),
                        (50, cy + j as i32 * line_h + center_dy(raster, LEGEND_SIZE)),
                        legend_style.clone(),
                    ))
                    .map_err(e)?;
            }
            cy += lines.len() as i32 * line_h + 8;
        }

        // Notes.
        let note_style = text(NOTE_SIZE, GREY).pos(Pos::new(HPos::Left, VPos::Center));
        for (k, note) in notes.iter().enumerate() {
            notes_area
                .draw(&Text::new(
                    note.clone(),
                    (
                        MARGIN as i32 + 6,
                        (NOTE_LINE_H / 2) as i32
                            + k as i32 * NOTE_LINE_H as i32
                            + center_dy(raster, NOTE_SIZE),
                    ),
                    note_style.clone(),
                ))
                .map_err(e)?;
        }
        Ok(())
    }
}

/// `s` broken at spaces into lines no wider than `max_px` (a longer word stays whole).
fn wrap(s: &str, max_px: u32, size: f64) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in s.split(' ') {
        match lines.last_mut() {
            Some(line) if text_width(&format!("{line} {word}"), size) <= max_px => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// Colour and marker of each series: reference lines grey, series of a name already seen the
/// same as it, the rest from the palette ([`series_styles`]).
fn styles(series: &[Series]) -> Vec<(RGBColor, Marker)> {
    let palette = series_styles(
        series
            .iter()
            .enumerate()
            .filter(|&(i, s)| {
                !s.style.is_reference() && series[..i].iter().all(|o| o.name != s.name)
            })
            .map(|(_, s)| s.name.as_str()),
    );
    let mut next = palette.into_iter();
    let mut dashed = 0;
    let mut out: Vec<(RGBColor, Marker)> = Vec::with_capacity(series.len());
    for (i, s) in series.iter().enumerate() {
        let style = match series[..i].iter().position(|o| o.name == s.name) {
            Some(j) => out[j],
            None if s.style == SeriesStyle::Reference => (DARK, Marker::Circle),
            None if s.style == SeriesStyle::ReferenceDashed => {
                // Each further band a lighter grey.
                dashed += 1;
                let g = (GREY.0 as u32 + 45 * (dashed - 1)).min(200) as u8;
                (RGBColor(g, g, g), Marker::Circle)
            }
            None => {
                let (color, marker) = next.next().unwrap_or((DARK, Marker::Circle));
                // A scatter next to grey reference lines takes a colour, never grey.
                if s.style == SeriesStyle::Markers && color == series_styles(["x"])[0].0 {
                    (SCATTER_FIRST, marker)
                } else {
                    (color, marker)
                }
            }
        };
        out.push(style);
    }
    out
}

/// The colour a scatter series takes where the palette would give it dark grey.
const SCATTER_FIRST: RGBColor = RGBColor(0, 114, 178);

#[cfg(test)]
mod tests;
