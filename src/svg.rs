//! SVG, written with maud: the charts' one writer, for the session timeline's chart (inline
//! in its page) and `cachet replay --chart` (a file of its own). maud escapes every text and
//! attribute value; this module adds what charts share: coordinates written as SVG numbers,
//! a standalone document, and the points of a polyline.

use maud::{html, Markup};

/// A coordinate in user units, to a tenth.
pub fn px(x: f64) -> String {
    format!("{x:.1}")
}

/// A coordinate in percent of the drawing's width (or height), precise enough for a
/// thousand columns.
pub fn pct(x: f64) -> String {
    format!("{x:.4}%")
}

/// A polyline's `points`: `x,y` pairs separated by spaces.
pub fn points(xy: impl IntoIterator<Item = (f64, f64)>) -> String {
    let mut out = String::new();
    for (x, y) in xy {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&px(x));
        out.push(',');
        out.push_str(&px(y));
    }
    out
}

/// A standalone SVG document of `width` × `height` holding `body`, on a white ground, with
/// its namespace (a file opened on its own needs it; SVG inline in HTML does not).
pub fn document(width: f64, height: f64, font_family: &str, body: Markup) -> String {
    let mut doc = html! {
        svg xmlns="http://www.w3.org/2000/svg" width=(width) height=(height) font-family=(font_family) {
            rect width="100%" height="100%" fill="white" {}
            (body)
        }
    }
    .into_string();
    doc.push('\n');
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_points_are_svg_numbers() {
        assert_eq!(px(12.345), "12.3");
        assert_eq!(pct(50.0), "50.0000%");
        assert_eq!(points([(1.0, 2.0), (3.26, 4.0)]), "1.0,2.0 3.3,4.0");
        assert_eq!(points([]), "");
    }

    #[test]
    fn a_document_escapes_what_it_holds() {
        let doc = document(760.0, 100.0, "sans-serif", html! { text { "a<b & c" } });
        assert!(
            doc.starts_with(r#"<svg xmlns="http://www.w3.org/2000/svg" width="760" height="100""#),
            "{doc}"
        );
        assert!(doc.contains("a&lt;b &amp; c"), "{doc}");
        assert!(doc.trim_end().ends_with("</svg>"));
    }
}
