//! Tests of [`super`] (curves).

use super::*;

#[test]
fn legend_text_wraps_at_spaces() {
    super::super::font::ensure_registered().unwrap();
    let lines = wrap("infeasible (out of memory or invalid)", 210, LEGEND_SIZE);
    assert!(lines.len() >= 2, "{lines:?}");
    assert_eq!(lines.join(" "), "infeasible (out of memory or invalid)");
    assert_eq!(wrap("metp", 210, LEGEND_SIZE), ["metp"]);
}

#[test]
fn infeasible_band_reserves_room_above_the_data() {
    let chart = Chart::new("t", "x", "y")
        .with_series(Series::new("tp", vec![(1.0, 10.0), (2.0, 20.0)]).with_infeasible(vec![4.0]));
    let p = Prepared::new(&chart).unwrap();
    assert_eq!(p.band_rows, [0]);
    // The y axis reaches well above the largest value (20 + 4% margin).
    assert!(p.y.hi > 20.0 * 1.1, "{}", p.y.hi);
    // The x axis covers the infeasible x.
    assert!(p.x.hi >= 4.0);
    let plain =
        Chart::new("t", "x", "y").with_series(Series::new("tp", vec![(1.0, 10.0), (2.0, 20.0)]));
    assert!(Prepared::new(&plain).unwrap().y.hi < 21.0);
}

#[test]
fn broken_lines_and_methods_keep_their_colours() {
    let chart = Chart::new("t", "x", "y")
        .with_series(Series::new("ulysses", vec![(1.0, 1.0)]))
        .with_series(Series::new("mine", vec![(1.0, 2.0)]));
    let p = Prepared::new(&chart).unwrap();
    assert_eq!(Some(p.styles[0].0), super::super::method_color("ulysses"));
    assert_ne!(p.styles[1].0, p.styles[0].0);
}
