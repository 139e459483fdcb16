//! The HTML report of a capacity search (`bench --mode capacity --html FILE`): one
//! self-contained page (inline CSS and SVG, no scripts, nothing fetched) with latency against
//! the offered rate and the capacity interval on it, each step's TTFT/TPOT/ITL CDFs, and the
//! server's own gauges over the search's time.
use std::fmt::Write as _;

use crate::escape::html as esc;
use crate::latency::capacity::{curve, Saved, Step};

const CSS: &str = include_str!("html.css");
const W: f64 = 640.0;
const H: f64 = 320.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 48.0;
const BOTTOM: f64 = 44.0;
/// Line colours, in series order (colour-blind safe: Okabe–Ito).
const COLOURS: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
];

/// One line of a chart.
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
}

/// A vertical band or line marked on a chart's x axis.
struct Mark {
    from: f64,
    to: f64,
    label: String,
}

/// The whole page.
pub fn render(s: &Saved) -> String {
    let c = &s.capacity;
    let mut out = String::with_capacity(64 * 1024);
    let title = format!("chatgate capacity — {} — {}", s.suite, c.describe());
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>\n{CSS}\nsvg.chart{{max-width:100%;height:auto}}\nsvg.chart text{{font:11px sans-serif;fill:currentColor}}\nsvg.chart .grid{{stroke:#8884;stroke-width:1}}\nsvg.chart .band{{fill:#2a2;fill-opacity:.15}}\n</style>\n</head>\n<body>\n<main>\n<h1>Capacity: {}</h1>\n",
        esc(&title),
        esc(&c.describe())
    );
    let _ = writeln!(
        out,
        "<p>Target <code>{}</code>, suite <code>{}</code>: {:.0} % of requests must meet the SLOs. {} steps in {:.1} s, stopped: {}.</p>",
        esc(&s.target),
        esc(&s.suite),
        s.attainment * 100.0,
        c.steps.len(),
        c.elapsed_s,
        esc(&c.stopped)
    );
    if let Some(v) = &s.verdict {
        let _ = writeln!(
            out,
            "<p class=\"verdict\"><strong>server.capacity {}</strong>: {}{}</p>",
            v.decision,
            esc(&v.reason),
            v.to_decide
                .as_ref()
                .map(|d| format!(" — to decide: {}", esc(d)))
                .unwrap_or_default()
        );
    }
    let mut marks = Vec::new();
    if let (Some(l), Some(h)) = (c.low, c.high) {
        marks.push(Mark {
            from: l,
            to: h,
            label: "capacity".into(),
        });
    }
    if let Some(k) = c.knee {
        marks.push(Mark {
            from: k,
            to: k,
            label: "knee".into(),
        });
    }
    let vs_rate: Vec<Series> = [
        ("TTFT p50", "ttft", 0.5),
        ("TTFT p90", "ttft", 0.9),
        ("E2EL p50", "e2el", 0.5),
        ("E2EL p90", "e2el", 0.9),
    ]
    .into_iter()
    .map(|(name, metric, p)| Series {
        name: name.into(),
        points: curve(&c.steps, metric, |s| if p < 0.6 { s.p50 } else { s.p90 }),
    })
    .filter(|s| !s.points.is_empty())
    .collect();
    out.push_str("<h2>Latency against the offered rate</h2>\n");
    out.push_str(&chart(
        "Latency (ms) against the offered rate (requests/s)",
        "requests/s",
        "ms",
        &vs_rate,
        &marks,
    ));
    out.push_str("<h2>Distributions per step</h2>\n");
    for (metric, name) in [("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL")] {
        let series: Vec<Series> = first_runs(&c.steps)
            .filter_map(|st| {
                let q = st.measured.cdf.get(metric)?;
                let n = q.len().saturating_sub(1).max(1) as f64;
                Some(Series {
                    name: format!("{:.2}/s", st.rate),
                    points: q
                        .iter()
                        .enumerate()
                        .map(|(i, v)| (*v, i as f64 / n))
                        .collect(),
                })
            })
            .collect();
        if !series.is_empty() {
            out.push_str(&chart(
                &format!("{name} CDF per offered rate"),
                "ms",
                "share of requests",
                &series,
                &[],
            ));
        }
    }
    let timeline = server_timeline(&c.steps);
    if !timeline.is_empty() {
        out.push_str("<h2>The server's own view over time (/metrics)</h2>\n");
        out.push_str(&chart(
            "Requests running and waiting in the server",
            "seconds into the search",
            "requests",
            &timeline,
            &[],
        ));
    }
    out.push_str("<h2>Steps</h2>\n<table>\n<tr><th>rate/s</th><th>run</th><th>seed</th><th>ok</th><th>errors</th><th>met %</th><th>achieved/s</th><th>verdict</th></tr>\n");
    for st in &c.steps {
        let m = &st.measured;
        let _ = writeln!(
            out,
            "<tr><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.2}</td><td>{}</td></tr>",
            st.rate,
            st.repeat + 1,
            st.seed,
            m.requests,
            m.errors,
            m.attainment * 100.0,
            m.achieved_rate,
            if st.passed { "pass".to_string() } else { esc(&format!("fail: {}", st.why)).to_string() }
        );
    }
    out.push_str("</table>\n</main>\n</body>\n</html>\n");
    out
}

/// Each rate's first run, in rate order (the CDFs would crowd with every repeat).
fn first_runs(steps: &[Step]) -> impl Iterator<Item = &Step> {
    let mut v: Vec<&Step> = steps.iter().filter(|s| s.repeat == 0).collect();
    v.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    v.into_iter()
}

/// Running and waiting requests, every scrape of every step, on the search's clock.
fn server_timeline(steps: &[Step]) -> Vec<Series> {
    let mut running = Vec::new();
    let mut waiting = Vec::new();
    for st in steps {
        let Some(view) = &st.measured.server else {
            continue;
        };
        for r in &view.timeline {
            let t = st.at_s + r.at_s;
            running.extend(r.running.map(|v| (t, v)));
            waiting.extend(r.waiting.map(|v| (t, v)));
        }
    }
    [("running", running), ("waiting", waiting)]
        .into_iter()
        .filter(|(_, p)| !p.is_empty())
        .map(|(n, points)| Series {
            name: n.into(),
            points,
        })
        .collect()
}

/// A line chart with gridlines, a legend and marks, as inline SVG.
fn chart(title: &str, x_label: &str, y_label: &str, series: &[Series], marks: &[Mark]) -> String {
    let xs = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(marks.iter().flat_map(|m| [m.from, m.to]));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (x0, x1) = range(xs);
    let (_, y1) = range(ys);
    let y0 = 0.0;
    let px = |x: f64| LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT);
    let py = |y: f64| H - BOTTOM - (y - y0) / (y1 - y0) * (H - TOP - BOTTOM);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<figure><svg class=\"chart\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"{t}\"><title>{t}</title>",
        t = esc(title)
    );
    for i in 0..=4 {
        let (gx, gy) = (
            x0 + (x1 - x0) * i as f64 / 4.0,
            y0 + (y1 - y0) * i as f64 / 4.0,
        );
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{:.1}\" y1=\"{TOP}\" x2=\"{:.1}\" y2=\"{:.1}\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            px(gx),
            px(gx),
            H - BOTTOM,
            px(gx),
            H - BOTTOM + 14.0,
            short(gx)
        );
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{LEFT}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            py(gy),
            W - RIGHT,
            py(gy),
            LEFT - 4.0,
            py(gy) + 4.0,
            short(gy)
        );
    }
    for (row, m) in marks.iter().enumerate() {
        let (a, b) = (px(m.from), px(m.to));
        let _ = writeln!(
            s,
            "<rect class=\"band\" x=\"{:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{:.1}\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            a,
            (b - a).max(1.5),
            H - TOP - BOTTOM,
            a + 2.0,
            TOP + 12.0 + 12.0 * row as f64,
            esc(&m.label)
        );
    }
    for (i, se) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let d: Vec<String> = se
            .points
            .iter()
            .enumerate()
            .map(|(j, (x, y))| {
                format!(
                    "{}{:.1},{:.1}",
                    if j == 0 { "M" } else { "L" },
                    px(*x),
                    py(*y)
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "<path d=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.8\"/>",
            d.join(" ")
        );
        for (x, y) in &se.points {
            let _ = writeln!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.2\" fill=\"{colour}\"/>",
                px(*x),
                py(*y)
            );
        }
        let lx = LEFT + (i % 4) as f64 * 140.0;
        let ly = 14.0 + (i / 4) as f64 * 14.0;
        let _ = writeln!(
            s,
            "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{colour}\"/><text x=\"{:.1}\" y=\"{ly:.1}\">{}</text>",
            ly - 9.0,
            lx + 14.0,
            esc(&se.name)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text><text x=\"12\" y=\"{:.1}\" transform=\"rotate(-90 12 {:.1})\" text-anchor=\"middle\">{}</text></svg><figcaption>{}</figcaption></figure>",
        (LEFT + W - RIGHT) / 2.0,
        H - 8.0,
        esc(x_label),
        (TOP + H - BOTTOM) / 2.0,
        (TOP + H - BOTTOM) / 2.0,
        esc(y_label),
        esc(title)
    );
    s
}

/// The finite range of some values, never empty.
fn range(v: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = v
        .filter(|x| x.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| {
            (l.min(x), h.max(x))
        });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-9 {
        return (lo - 0.5, hi + 0.5);
    }
    (lo, hi)
}

fn short(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}
