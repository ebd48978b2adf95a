//! A small SVG line chart of time to first rejection (p50 and p99) against the number of
//! agents, written by our own code so the benchmark draws its plot without a plotting stack.
//!
//! The chart is deterministic text (same points, same bytes), so a committed plot can be
//! regenerated and diffed. Axes start at zero; the y axis is rounded up to a "nice" bound.

use std::fmt::Write as _;

/// One point of the sweep.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Agents in the drill.
    pub agents: usize,
    /// Median over drills of the p50 time to first rejection, ms.
    pub p50_ms: f64,
    /// Median over drills of the p99 time to first rejection, ms.
    pub p99_ms: f64,
}

const W: f64 = 720.0;
const H: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 60.0;
const BOTTOM: f64 = 60.0;

/// The smallest of 1, 2, 2.5, 5 × 10^k that is at least `value`.
fn nice(value: f64) -> f64 {
    if value <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(value.log10().floor());
    for step in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if step * magnitude >= value {
            return step * magnitude;
        }
    }
    10.0 * magnitude
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The chart as SVG text; `goal_ms` draws a dashed goal line.
pub fn svg(title: &str, points: &[Point], goal_ms: Option<f64>) -> String {
    let max_x = points.iter().map(|p| p.agents).max().unwrap_or(1).max(1) as f64;
    let max_y = points
        .iter()
        .map(|p| p.p99_ms.max(p.p50_ms))
        .chain(goal_ms)
        .fold(0.0, f64::max);
    let (x_bound, y_bound) = (nice(max_x), nice(max_y * 1.05));
    let x = |agents: f64| LEFT + agents / x_bound * (W - LEFT - RIGHT);
    let y = |ms: f64| H - BOTTOM - ms / y_bound * (H - TOP - BOTTOM);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="13">{}</text>"#,
        W / 2.0,
        escape(title)
    );
    for i in 0..=5 {
        let value = y_bound * f64::from(i) / 5.0;
        let py = y(value);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            py + 4.0,
            format_number(value)
        );
    }
    for point in points {
        let px = x(point.agents as f64);
        let _ = writeln!(
            out,
            r##"<line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="#999"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            H - BOTTOM,
            H - BOTTOM + 5.0,
            H - BOTTOM + 20.0,
            point.agents
        );
    }
    let _ = writeln!(
        out,
        r##"<line x1="{LEFT}" y1="{0}" x2="{1}" y2="{0}" stroke="#333"/><line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{0}" stroke="#333"/>"##,
        H - BOTTOM,
        W - RIGHT
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">agents (each with its sub-agents)</text><text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">ms from the pull to the first rejected call</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        H - 18.0,
        H / 2.0,
        H / 2.0
    );
    if let Some(goal) = goal_ms {
        let gy = y(goal);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{gy:.1}" x2="{:.1}" y2="{gy:.1}" stroke="#2a2" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#2a2">goal {} ms</text>"##,
            W - RIGHT,
            W - RIGHT - 4.0,
            gy - 5.0,
            format_number(goal)
        );
    }
    for (series, color, pick) in [
        (
            "p50",
            "#1f77b4",
            (|p: &Point| p.p50_ms) as fn(&Point) -> f64,
        ),
        ("p99", "#d62728", |p: &Point| p.p99_ms),
    ] {
        let path: Vec<String> = points
            .iter()
            .map(|p| format!("{:.1},{:.1}", x(p.agents as f64), y(pick(p))))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        for p in points {
            let (px, py) = (x(p.agents as f64), y(pick(p)));
            let _ = writeln!(
                out,
                r#"<circle cx="{px:.1}" cy="{py:.1}" r="4" fill="{color}"/><text x="{:.1}" y="{:.1}" fill="{color}">{}</text>"#,
                px + 6.0,
                // p50 labels below their point, p99 above, so close values never overlap.
                if series == "p50" { py + 16.0 } else { py - 6.0 },
                format_number(pick(p))
            );
        }
        let ly = if series == "p50" { 44.0 } else { 60.0 };
        let _ = writeln!(
            out,
            r#"<rect x="{:.1}" y="{:.1}" width="14" height="4" fill="{color}"/><text x="{:.1}" y="{:.1}">{series}</text>"#,
            LEFT + 10.0,
            ly - 4.0,
            LEFT + 30.0,
            ly
        );
    }
    out.push_str("</svg>\n");
    out
}

fn format_number(value: f64) -> String {
    if value >= 100.0 || value == value.round() {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_both_series_and_the_goal() {
        let points = [
            Point {
                agents: 10,
                p50_ms: 1.5,
                p99_ms: 4.0,
            },
            Point {
                agents: 200,
                p50_ms: 12.0,
                p99_ms: 40.0,
            },
        ];
        let svg = svg("t <&>", &points, Some(10.0));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 4);
        assert!(svg.contains("goal 10 ms") && svg.contains("t &lt;&amp;&gt;"));
        assert_eq!(nice(37.0), 50.0);
        assert_eq!(nice(200.0), 200.0);
        assert_eq!(nice(0.0), 1.0);
    }
}
