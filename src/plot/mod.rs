//! Plots: line charts of sweep results and Gantt timelines of simulated spans, as SVG or PNG.
//!
//! Plain data in, files out. Depends on `atomic` (its writes) and `error` only; never on
//! `config`, `sweep` or `report`. DESIGN §3 and style §8 would let `plot` use more, but taking
//! plain data keeps it usable from `report`, `sweep` and `cli` alike and testable on its own.
//!
//! - [`curves`]: [`Chart`] of named [`Series`] (memory vs sequence, step time vs sequence,
//!   maximum sequence vs degree, …) with human tick labels ([`AxisFormat`]), optional log axes,
//!   a reference line (device capacity), and markers for infeasible points.
//! - [`timeline`]: [`write_timeline`] draws [`Span`]s as a Gantt chart, one row per track,
//!   coloured by category.
//!
//! The output format follows the file extension (`.svg` or `.png`, any case); anything else is an
//! [`Error::Plot`]. Text is laid out with DejaVu Sans, embedded in the binary
//! (`assets/fonts/`, Bitstream Vera licence), so no system font is needed. SVG keeps text as
//! `<text>` elements (font-family `sans-serif`); PNG rasterises it. Files are rendered in memory and
//! written to a temporary file in the target folder, then renamed, so a failure never leaves a
//! half-written plot. The same data gives byte-identical files.

mod axis;
pub mod curves;
mod font;
mod palette;
pub mod timeline;

pub use axis::AxisFormat;
pub use curves::{max_seq_chart, write_chart, Chart, Series, SeriesStyle};
pub use palette::{category_color, method_color};
pub use timeline::{write_timeline, write_timeline_with, Span, TimelineOptions};

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::error::{Error, Result};

/// The file formats a plot can be written in, chosen by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Svg,
    Png,
}

fn format_of(path: &Path) -> Result<Format> {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    match ext.as_deref() {
        Some("svg") => Ok(Format::Svg),
        Some("png") => Ok(Format::Png),
        Some(other) => Err(plot_error(
            path,
            format!("unsupported plot format '.{other}'; use .svg or .png"),
        )),
        None => Err(plot_error(
            path,
            "plot file has no extension; use .svg or .png",
        )),
    }
}

pub(crate) fn plot_error(path: &Path, message: impl Into<String>) -> Error {
    Error::Plot {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Something that can draw itself on any plotters backend at a fixed pixel size.
pub(crate) trait Drawing {
    /// Width and height in pixels.
    fn size(&self) -> (u32, u32);
    /// Draws on `root`, which has been filled white; `raster` is set for PNG (see
    /// [`center_dy`]). Errors are messages (the path is added by the caller).
    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        raster: bool,
    ) -> Result<(), String>;
}

/// Renders `drawing` in the format the extension of `path` names and writes it atomically.
pub(crate) fn render(drawing: &impl Drawing, path: &Path) -> Result<()> {
    let format = format_of(path)?;
    font::ensure_registered().map_err(|m| plot_error(path, m))?;
    let (w, h) = drawing.size();
    let bytes = match format {
        Format::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
                draw_on(drawing, &root, false).map_err(|m| plot_error(path, m))?;
            }
            svg.into_bytes()
        }
        Format::Png => {
            let mut rgb = vec![0u8; w as usize * h as usize * 3];
            {
                let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
                draw_on(drawing, &root, true).map_err(|m| plot_error(path, m))?;
            }
            encode_png(&rgb, w, h).map_err(|m| plot_error(path, m))?
        }
    };
    crate::atomic::write_atomic(path, &bytes)
}

fn draw_on<DB: DrawingBackend>(
    drawing: &impl Drawing,
    root: &DrawingArea<DB, Shift>,
    raster: bool,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    drawing.draw(root, raster)?;
    root.present().map_err(|e| e.to_string())
}

/// PNG from a packed RGB8 buffer. The `png` crate's output depends only on the pixels and the
/// settings, so it is deterministic.
fn encode_png(rgb: &[u8], w: u32, h: u32) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, w, h);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
        writer.write_image_data(rgb).map_err(|e| e.to_string())?;
        writer.finish().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// Text style in the embedded font.
pub(crate) fn text(size: f64, color: RGBColor) -> TextStyle<'static> {
    ("sans-serif", size).into_font().color(&color)
}

/// Width in pixels of `s` at font size `size` (0 if it cannot be measured).
pub(crate) fn text_width(s: &str, size: f64) -> u32 {
    ("sans-serif", size)
        .into_font()
        .box_size(s)
        .map(|(w, _)| w)
        .unwrap_or(0)
}

/// Pixels to move vertically centred text down so that it looks centred.
///
/// plotters' `ab_glyph` rasteriser puts the baseline of `VPos::Center` text about 0.1 × size
/// below the anchor, which leaves capitals and digits about 0.2 × size too high; SVG viewers
/// centre text by the `dy="0.5ex"` plotters writes, which is close enough.
pub(crate) fn center_dy(raster: bool, size: f64) -> i32 {
    if raster {
        (0.2 * size).round() as i32
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_by_extension() {
        assert_eq!(format_of(Path::new("a/b.svg")).unwrap(), Format::Svg);
        assert_eq!(format_of(Path::new("b.PNG")).unwrap(), Format::Png);
        let e = format_of(Path::new("b.jpg")).unwrap_err().to_string();
        assert!(e.contains("b.jpg") && e.contains("'.jpg'"), "{e}");
        assert!(format_of(Path::new("noext")).is_err());
    }

    #[test]
    fn png_encoder_writes_signature() {
        let png = encode_png(&[255; 2 * 3 * 3], 2, 3).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    }
}
