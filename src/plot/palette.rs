//! Fixed colours and marker shapes, so a method or a task category looks the same in every plot.

use plotters::style::RGBColor;

/// Method ids and their colours (Okabe–Ito based: distinguishable with common colour-vision
/// deficiencies), longest id first so that `tp-sp` is matched before `tp`.
const METHODS: [(&str, RGBColor, Marker); 6] = [
    ("ulysses", RGBColor(0, 158, 115), Marker::Diamond),
    ("tp-sp", RGBColor(86, 180, 233), Marker::TriangleUp),
    ("metp", RGBColor(213, 94, 0), Marker::Circle),
    ("ring", RGBColor(204, 121, 167), Marker::TriangleDown),
    ("rsa", RGBColor(230, 159, 0), Marker::Square),
    ("tp", RGBColor(0, 114, 178), Marker::Square),
];

/// Colours for series that are not one of the six methods, in order of appearance.
const OTHERS: [RGBColor; 6] = [
    RGBColor(64, 64, 64),
    RGBColor(140, 86, 75),
    RGBColor(148, 103, 189),
    RGBColor(128, 128, 0),
    RGBColor(23, 190, 207),
    RGBColor(150, 150, 150),
];

/// The shape drawn at each data point of a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Marker {
    Circle,
    Square,
    TriangleUp,
    TriangleDown,
    Diamond,
}

const OTHER_MARKERS: [Marker; 5] = [
    Marker::Circle,
    Marker::Square,
    Marker::TriangleUp,
    Marker::Diamond,
    Marker::TriangleDown,
];

/// The fixed colour of a method, if `name` is one of `metp`, `tp`, `tp-sp`, `ulysses`, `ring`,
/// `rsa` (case-insensitive), alone or followed by a qualifier (`"metp (no flash)"`,
/// `"ring zig-zag"`).
pub fn method_color(name: &str) -> Option<RGBColor> {
    method_style(name).map(|(c, _)| c)
}

fn method_style(name: &str) -> Option<(RGBColor, Marker)> {
    let lower = name.trim().to_ascii_lowercase();
    METHODS.iter().find_map(|&(id, color, marker)| {
        let rest = lower.strip_prefix(id)?;
        let qualifier_follows = rest
            .chars()
            .next()
            .is_none_or(|c| !c.is_ascii_alphanumeric() && c != '-');
        qualifier_follows.then_some((color, marker))
    })
}

/// Colour and marker for each series name, in order: methods get their fixed style, other names
/// the next unused colour from a fixed list.
pub(crate) fn series_styles<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Vec<(RGBColor, Marker)> {
    let mut next_other = 0;
    names
        .into_iter()
        .map(|name| {
            method_style(name).unwrap_or_else(|| {
                let style = (
                    OTHERS[next_other % OTHERS.len()],
                    OTHER_MARKERS[next_other % OTHER_MARKERS.len()],
                );
                next_other += 1;
                style
            })
        })
        .collect()
}

/// Known task categories of a simulated timeline and their colours.
const CATEGORIES: [(&str, RGBColor); 9] = [
    ("compute", RGBColor(76, 114, 176)),
    ("gemm", RGBColor(76, 114, 176)),
    ("attention", RGBColor(129, 114, 179)),
    ("send", RGBColor(221, 132, 82)),
    ("recv", RGBColor(85, 168, 104)),
    ("collective", RGBColor(196, 78, 82)),
    ("memory", RGBColor(147, 120, 96)),
    ("idle", RGBColor(190, 190, 190)),
    ("wait", RGBColor(190, 190, 190)),
];

const OTHER_CATEGORIES: [RGBColor; 6] = [
    RGBColor(218, 139, 195),
    RGBColor(140, 140, 140),
    RGBColor(204, 185, 116),
    RGBColor(100, 181, 205),
    RGBColor(64, 64, 64),
    RGBColor(160, 200, 80),
];

/// The fixed colour of a known timeline category (`compute`, `gemm`, `attention`, `send`, `recv`,
/// `collective`, `memory`, `idle`, `wait`; case-insensitive).
pub fn category_color(category: &str) -> Option<RGBColor> {
    let lower = category.trim().to_ascii_lowercase();
    CATEGORIES
        .iter()
        .find(|(name, _)| *name == lower)
        .map(|&(_, c)| c)
}

/// Colours for categories in order of appearance: fixed ones for known names, then a fixed list.
pub(crate) fn category_colors<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<RGBColor> {
    let mut next_other = 0;
    names
        .into_iter()
        .map(|name| {
            category_color(name).unwrap_or_else(|| {
                let c = OTHER_CATEGORIES[next_other % OTHER_CATEGORIES.len()];
                next_other += 1;
                c
            })
        })
        .collect()
}

/// Black or white, whichever reads better on `bg` (relative luminance, ITU-R BT.709 weights).
pub(crate) fn text_on(bg: RGBColor) -> RGBColor {
    let l = 0.2126 * f64::from(bg.0) + 0.7152 * f64::from(bg.1) + 0.0722 * f64::from(bg.2);
    if l > 140.0 {
        RGBColor(0, 0, 0)
    } else {
        RGBColor(255, 255, 255)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_have_fixed_distinct_colours() {
        let ids = ["metp", "tp", "tp-sp", "ulysses", "ring", "rsa"];
        let colours: Vec<_> = ids.iter().map(|id| method_color(id).unwrap()).collect();
        for i in 0..colours.len() {
            for j in i + 1..colours.len() {
                assert_ne!(colours[i], colours[j], "{} vs {}", ids[i], ids[j]);
            }
        }
        assert_eq!(method_color("TP-SP"), method_color("tp-sp"));
        assert_eq!(method_color("tp-sp (zero-1)"), method_color("tp-sp"));
        assert_eq!(method_color("metp, no flash"), method_color("metp"));
        assert_eq!(method_color("tp"), Some(RGBColor(0, 114, 178)));
        assert_eq!(method_color("tpx"), None);
        assert_eq!(method_color("ringo"), None);
        assert_eq!(method_color("usp"), None);
    }

    #[test]
    fn other_series_take_the_next_unused_colour() {
        let styles = series_styles(["a", "metp", "b"]);
        assert_eq!(styles[0].0, OTHERS[0]);
        assert_eq!(styles[1].0, method_color("metp").unwrap());
        assert_eq!(styles[2].0, OTHERS[1]);
    }

    #[test]
    fn categories() {
        assert_eq!(category_color("Send"), category_color("send"));
        let c = category_colors(["compute", "x", "y"]);
        assert_eq!(c[0], category_color("compute").unwrap());
        assert_eq!(c[1], OTHER_CATEGORIES[0]);
        assert_eq!(c[2], OTHER_CATEGORIES[1]);
        assert_eq!(text_on(RGBColor(255, 255, 255)), RGBColor(0, 0, 0));
        assert_eq!(text_on(RGBColor(0, 0, 90)), RGBColor(255, 255, 255));
    }
}
