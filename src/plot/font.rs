//! The embedded font. plotters' `ab_glyph` backend measures and rasterises text only with fonts
//! registered by name; without one, every text call fails with `FontUnavailable`.

use std::sync::OnceLock;

use plotters::style::{register_font, FontStyle};

/// DejaVu Sans, unmodified (Bitstream Vera licence: `assets/fonts/LICENSE-DejaVu.txt`).
static DEJAVU_SANS: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// Registers DejaVu Sans as "sans-serif" (normal style; bold falls back to it) once per process.
pub(crate) fn ensure_registered() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            register_font("sans-serif", FontStyle::Normal, DEJAVU_SANS)
                .map_err(|_| "the embedded font DejaVu Sans could not be parsed".to_string())
        })
        .clone()
}
