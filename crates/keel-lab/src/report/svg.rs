//! What every chart of the report shares: escaping, the `<svg>` element, axis steps and ticks.

/// Escapes text for HTML and SVG.
pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The opening `<svg>` tag of a chart `w` × `h` pixels (its view box, size and font): every
/// chart starts with it and ends with `</svg>`.
pub(super) fn svg_open(w: f64, h: f64) -> String {
    format!(
        r#"<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="12">"#
    )
}

/// A "nice" axis step (1, 2 or 5 × 10^k) giving about `ticks` ticks up to `max`.
/// A chart's two axes: the y axis at `l` from `t` down to the plot's bottom, the x axis along
/// the bottom, for a plot area `pw` wide and `ph` high.
pub(super) fn axes(s: &mut String, l: f64, t: f64, pw: f64, ph: f64) {
    use std::fmt::Write as _;
    let _ = write!(
        s,
        r##"<line x1="{l}" x2="{l}" y1="{t}" y2="{:.1}" stroke="#374151"/><line x1="{l}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#374151"/>"##,
        t + ph,
        l + pw,
        t + ph,
        t + ph
    );
}

pub(super) fn nice_step(max: f64, ticks: usize) -> f64 {
    if max.is_nan() || max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / ticks.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let m = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// An axis tick: whole numbers plain, fractions with as few decimals as they need.
pub(super) fn fmt_tick(v: f64) -> String {
    let t = format!("{v:.3}");
    let t = t.trim_end_matches('0').trim_end_matches('.');
    t.to_string()
}
