//! The marks a chart is drawn with: dashed and solid lines through points, and a series' marker.

use plotters::coord::CoordTranslate;
use plotters::prelude::*;

use super::Marker;

/// A dashed line through `pts` (each segment cut into dashes of about 12 pixels' share).
pub(super) fn draw_dashed<DB: DrawingBackend, CT: CoordTranslate>(
    area: &DrawingArea<DB, CT>,
    pts: &[CT::From],
    color: RGBColor,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    CT::From: Copy + Lerp,
{
    for pair in pts.windows(2) {
        let dashes = 60;
        for k in 0..dashes {
            let a = pair[0].lerp(pair[1], k as f64 / dashes as f64);
            let b = pair[0].lerp(pair[1], (k as f64 + 0.55) / dashes as f64);
            area.draw(&PathElement::new(vec![a, b], color.stroke_width(2)))?;
        }
    }
    Ok(())
}

/// Points a dashed line can be cut between: plot coordinates and pixels.
pub(crate) trait Lerp {
    /// The point a fraction `t` of the way to `to`.
    fn lerp(self, to: Self, t: f64) -> Self;
}

impl Lerp for (f64, f64) {
    fn lerp(self, to: Self, t: f64) -> Self {
        (self.0 + t * (to.0 - self.0), self.1 + t * (to.1 - self.1))
    }
}

impl Lerp for (i32, i32) {
    fn lerp(self, to: Self, t: f64) -> Self {
        let f = |a: i32, b: i32| (f64::from(a) + t * f64::from(b - a)).round() as i32;
        (f(self.0, to.0), f(self.1, to.1))
    }
}

pub(super) fn draw_line<DB: DrawingBackend, CT: CoordTranslate<From = (f64, f64)>>(
    area: &DrawingArea<DB, CT>,
    pts: &[(f64, f64)],
    color: RGBColor,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    if pts.len() < 2 {
        return Ok(());
    }
    area.draw(&PathElement::new(pts.to_vec(), color.stroke_width(3)))
}

/// A filled marker of `size` pixels (about its radius) centred on `at`.
pub(crate) fn draw_marker<DB: DrawingBackend, CT: CoordTranslate>(
    area: &DrawingArea<DB, CT>,
    at: CT::From,
    marker: Marker,
    color: RGBColor,
    size: i32,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    CT::From: Clone,
{
    let style = color.filled();
    // Sizes chosen so that the shapes cover about the same area.
    let r = size;
    let s = size * 5 / 6;
    let t = size + 1;
    match marker {
        Marker::Circle => area.draw(&(EmptyElement::at(at) + Circle::new((0, 0), r, style))),
        Marker::Square => {
            area.draw(&(EmptyElement::at(at) + Rectangle::new([(-s, -s), (s, s)], style)))
        }
        Marker::TriangleUp => area.draw(
            &(EmptyElement::at(at) + Polygon::new(vec![(0, -t - 1), (t, s), (-t, s)], style)),
        ),
        Marker::TriangleDown => area.draw(
            &(EmptyElement::at(at) + Polygon::new(vec![(0, t + 1), (t, -s), (-t, -s)], style)),
        ),
        Marker::Diamond => area.draw(
            &(EmptyElement::at(at) + Polygon::new(vec![(0, -t), (t, 0), (0, t), (-t, 0)], style)),
        ),
    }
}
