//! Empirical CDF plots of latency metrics, as inline SVG (no scripts, no external resources):
//! this run against the baseline, because a shifted median alone hides whether the whole
//! distribution moved or only its tail. The HTML report draws one per metric with samples.
use std::fmt::Write as _;

use crate::escape::html as esc;
use crate::verdict::LatencyRow;

use super::summary::fmt_ms;

/// Above this many samples a CDF is drawn through evenly spaced quantiles (the shape is the
/// same; the file stays small).
const MAX_PLOT_POINTS: usize = 1000;
// ---------------------------------------------------------------------------------------------
// CDF plots

/// Plot geometry (SVG user units).
const W: f64 = 520.0;
const H: f64 = 300.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 16.0;
/// Room above the plot: the title and legend row, then one row per marker label, so no text
/// ever sits on a curve.
const TOP: f64 = 54.0;
const BOTTOM: f64 = 44.0;

/// Maps data to SVG coordinates over a tick-aligned x range.
struct Axes {
    lo: f64,
    hi: f64,
    step: f64,
}

impl Axes {
    /// Covers every finite sample of both sets, widened to whole ticks.
    fn new(a: &[f64], b: &[f64]) -> Axes {
        let finite = a.iter().chain(b).copied().filter(|v| v.is_finite());
        let (mut lo, mut hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
        if !lo.is_finite() {
            (lo, hi) = (0.0, 1.0);
        }
        if hi - lo < 1e-9 {
            let pad = (lo.abs() * 0.05).max(0.5);
            (lo, hi) = (lo - pad, hi + pad);
        }
        let step = nice_step((hi - lo) / 5.0);
        Axes {
            lo: (lo / step).floor() * step,
            hi: (hi / step).ceil() * step,
            step,
        }
    }
    fn x(&self, v: f64) -> f64 {
        LEFT + (v - self.lo) / (self.hi - self.lo) * (W - LEFT - RIGHT)
    }
    fn y(&self, f: f64) -> f64 {
        H - BOTTOM - f * (H - TOP - BOTTOM)
    }
    fn ticks(&self) -> Vec<f64> {
        let n = ((self.hi - self.lo) / self.step).round() as usize;
        (0..=n).map(|i| self.lo + i as f64 * self.step).collect()
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let raw = if raw.is_finite() && raw > 0.0 {
        raw
    } else {
        1.0
    };
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// A tick label with as many decimals as the step needs.
fn tick_label(v: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    format!("{v:.decimals$}")
}

/// The empirical CDF of this run's samples against the baseline's, with p50/p99 markers.
pub fn cdf_svg(r: &LatencyRow) -> String {
    let axes = Axes::new(&r.samples, &r.baseline_samples);
    let name = r.metric.to_uppercase();
    let mut s = String::with_capacity(16 * 1024);
    let _ = write!(
        s,
        "<svg class=\"cdf\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"{} empirical CDF\">\n<title>{} — empirical CDF, this run vs baseline</title>\n",
        esc(&name),
        esc(&name)
    );
    grid(&mut s, &axes);
    if r.baseline_samples.len() >= 2 {
        let _ = writeln!(
            s,
            "<path class=\"base\" d=\"{}\"/>",
            step_path(&r.baseline_samples, &axes)
        );
    }
    let _ = writeln!(
        s,
        "<path class=\"run\" d=\"{}\"/>",
        step_path(&r.samples, &axes)
    );
    marker(&mut s, &axes, r.p50, "p50", 0);
    marker(&mut s, &axes, r.p99, "p99", 1);
    legend(&mut s, r);
    let _ = writeln!(
        s,
        "<text class=\"title\" x=\"{LEFT}\" y=\"16\">{}</text>",
        esc(&name)
    );
    s.push_str("</svg>");
    s
}

/// Gridlines, ticks and axis labels.
fn grid(s: &mut String, axes: &Axes) {
    let (x0, x1) = (LEFT, W - RIGHT);
    let (y0, y1) = (axes.y(0.0), axes.y(1.0));
    for f in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let y = axes.y(f);
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{x0}\" y1=\"{y:.1}\" x2=\"{x1}\" y2=\"{y:.1}\"/><text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{f}</text>",
            x0 - 6.0,
            y + 4.0
        );
    }
    for t in axes.ticks() {
        let x = axes.x(t);
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{x:.1}\" y1=\"{y0:.1}\" x2=\"{x:.1}\" y2=\"{y1:.1}\"/><text class=\"tick\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            y0 + 16.0,
            tick_label(t, axes.step)
        );
    }
    let _ = writeln!(
        s,
        "<line class=\"axis\" x1=\"{x0}\" y1=\"{y0:.1}\" x2=\"{x1}\" y2=\"{y0:.1}\"/><line class=\"axis\" x1=\"{x0}\" y1=\"{y0:.1}\" x2=\"{x0}\" y2=\"{y1:.1}\"/>"
    );
    let _ = writeln!(
        s,
        "<text class=\"label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">latency (ms)</text>",
        (x0 + x1) / 2.0,
        H - 6.0
    );
}

/// The empirical CDF as a step line: flat between samples, a jump of 1/n at each.
fn step_path(samples: &[f64], axes: &Axes) -> String {
    let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 {
        return String::new();
    }
    let mut d = format!("M{:.1} {:.1}", axes.x(axes.lo), axes.y(0.0));
    for i in plot_indices(n) {
        let _ = write!(
            d,
            "H{:.1}V{:.1}",
            axes.x(sorted[i]),
            axes.y((i + 1) as f64 / n as f64)
        );
    }
    let _ = write!(d, "H{:.1}", axes.x(axes.hi));
    d
}

/// Which sorted samples to draw: all of them, or evenly spaced ranks ending at the maximum.
fn plot_indices(n: usize) -> Vec<usize> {
    if n <= MAX_PLOT_POINTS {
        return (0..n).collect();
    }
    let m = MAX_PLOT_POINTS;
    let mut idx: Vec<usize> = (0..m).map(|k| k * (n - 1) / (m - 1)).collect();
    idx.dedup();
    idx
}

/// A dashed vertical line at one of this run's percentiles, labelled with its value.
fn marker(s: &mut String, axes: &Axes, v: f64, label: &str, row: usize) {
    if !v.is_finite() || v < axes.lo || v > axes.hi {
        return;
    }
    let x = axes.x(v);
    let (y0, y1) = (axes.y(0.0), axes.y(1.0));
    let ty = y1 - 20.0 + 13.0 * row as f64;
    // Labels near the right edge read leftwards so they stay inside the plot.
    let (anchor, tx) = if x > W - RIGHT - 90.0 {
        ("end", x - 4.0)
    } else {
        ("start", x + 4.0)
    };
    let _ = writeln!(
        s,
        "<line class=\"marker\" x1=\"{x:.1}\" y1=\"{y0:.1}\" x2=\"{x:.1}\" y2=\"{y1:.1}\"/><text class=\"mark\" x=\"{tx:.1}\" y=\"{ty:.1}\" text-anchor=\"{anchor}\">{label} {} ms</text>",
        fmt_ms(v)
    );
}

/// Which line is which, in the title row (inside the plot it would cover a curve).
fn legend(s: &mut String, r: &LatencyRow) {
    let y = 16.0;
    let mut x = LEFT + 70.0;
    let mut entry = |class: &str, text: String| {
        let _ = writeln!(
            s,
            "<line class=\"{class}\" x1=\"{x}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\"/><text class=\"legend\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            y - 4.0,
            x + 22.0,
            y - 4.0,
            x + 28.0,
            y,
            esc(&text)
        );
        // Roughly 6 units per character at 11px, plus the sample line and a gap.
        x += 28.0 + 6.0 * text.chars().count() as f64 + 18.0;
    };
    entry("run", format!("this run (n={})", r.samples.len()));
    if r.baseline_samples.len() >= 2 {
        entry("base", format!("baseline (n={})", r.baseline_samples.len()));
    } else {
        entry("none", "no baseline samples".to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps_are_one_two_five() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.5), 2.0);
        assert_eq!(nice_step(30.0), 50.0);
        assert_eq!(nice_step(0.03), 0.05);
    }

    #[test]
    fn axes_cover_the_samples_on_whole_ticks() {
        let a = Axes::new(&[12.0, 47.0], &[8.0]);
        assert!(a.lo <= 8.0 && a.hi >= 47.0);
        assert_eq!(a.ticks().first(), Some(&a.lo));
        assert_eq!(a.ticks().last(), Some(&a.hi));
        let flat = Axes::new(&[5.0, 5.0], &[]);
        assert!(flat.lo < 5.0 && flat.hi > 5.0);
    }

    #[test]
    fn step_path_climbs_to_one_at_the_maximum() {
        let a = Axes::new(&[1.0, 2.0, 3.0, 4.0], &[]);
        let d = step_path(&[4.0, 1.0, 3.0, 2.0], &a);
        // Four jumps, the last to F = 1 (the top of the plot area).
        assert_eq!(d.matches('V').count(), 4);
        assert!(d.contains(&format!("V{:.1}", a.y(1.0))));
    }

    #[test]
    fn many_samples_are_drawn_through_quantiles_ending_at_the_max() {
        let idx = plot_indices(10_000);
        assert!(idx.len() <= MAX_PLOT_POINTS);
        assert_eq!(idx.first(), Some(&0));
        assert_eq!(idx.last(), Some(&9_999));
    }
}
