//! The trend page: one self-contained HTML file (inline CSS, inline script, SVG drawn in the
//! page; nothing fetched) a CI job can keep as an artifact. The tables — runs, and the first
//! failing run of each check — are plain HTML and read without scripts; the latency charts are
//! drawn by the page's script from the trend JSON embedded in it, one chart per metric with a
//! line per percentile and a point per run whose title names the run's commit and time.
use super::trend::{self, Trend};
use crate::escape::html as esc;

/// The whole page.
pub fn render(trends: &[Trend]) -> String {
    let mut out = String::with_capacity(32 * 1024);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    let names: Vec<&str> = trends.iter().map(|t| t.suite.as_str()).collect();
    out.push_str(&format!(
        "<title>chatgate history — {}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n",
        esc(&names.join(", "))
    ));
    out.push_str("<h1>chatgate history</h1>\n");
    if trends.is_empty() {
        out.push_str("<p class=\"note\">No history records.</p>\n");
    }
    for (i, t) in trends.iter().enumerate() {
        suite(&mut out, i, t);
    }
    out.push_str("</main>\n<script type=\"application/json\" id=\"history-data\">");
    out.push_str(&script_safe_json(&trend::json(trends)));
    out.push_str("</script>\n<script>");
    out.push_str(SCRIPT);
    out.push_str("</script>\n</body>\n</html>\n");
    out
}

fn suite(out: &mut String, i: usize, t: &Trend) {
    let failing = t.checks.iter().filter(|c| c.still_failing).count();
    out.push_str(&format!(
        "<section class=\"suite\" data-suite=\"{}\">\n<h2>{} <span class=\"badge {}\">{}</span></h2>\n",
        esc(&t.suite),
        esc(&t.suite),
        if failing > 0 { "fail" } else { "pass" },
        if failing > 0 {
            format!("{failing} check{} failing", if failing == 1 { "" } else { "s" })
        } else {
            "no check failing".into()
        }
    ));
    out.push_str(&format!(
        "<p class=\"meta\">{} run{} from <code>{}</code>{}</p>\n",
        t.runs.len(),
        if t.runs.len() == 1 { "" } else { "s" },
        esc(&t.file),
        if t.skipped > 0 {
            format!(" (the {} before not shown)", t.skipped)
        } else {
            String::new()
        }
    ));
    out.push_str("<h3>Latency over runs</h3>\n");
    out.push_str(&format!(
        "<div class=\"charts\" id=\"charts-{i}\"><noscript><p class=\"note\">The charts are drawn by the page's script; the runs table below has the medians.</p></noscript></div>\n"
    ));
    runs_table(out, t);
    checks_table(out, t);
    out.push_str("</section>\n");
}

fn runs_table(out: &mut String, t: &Trend) {
    out.push_str("<h3>Runs</h3>\n<table class=\"runs\">\n<thead><tr><th class=\"num\">run</th><th>time (UTC)</th><th>command</th><th>commit</th><th>target</th><th>verdict</th><th>first broken boundary</th><th class=\"num\">ttft p50 ms</th><th class=\"num\">e2el p50 ms</th></tr></thead>\n<tbody>\n");
    for r in &t.runs {
        let cls = if r.verdict == "pass" { "ok" } else { "error" };
        out.push_str(&format!(
            "<tr class=\"{cls}\" data-run=\"{}\"><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td><span class=\"badge {}\">{}</span></td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
            r.run,
            r.run,
            esc(&r.time),
            esc(&r.command),
            commit(r.commit.as_deref()),
            esc(&r.target),
            if r.verdict == "pass" { "pass" } else { "fail" },
            esc(&r.verdict.to_string()),
            esc(r.first_broken.as_deref().unwrap_or("—")),
            r.p50.get("ttft").map_or("-".into(), |v| format!("{v:.2}")),
            r.p50.get("e2el").map_or("-".into(), |v| format!("{v:.2}")),
        ));
    }
    out.push_str("</tbody>\n</table>\n");
    if !t.latency.is_empty() {
        out.push_str("<table class=\"trend\">\n<thead><tr><th>metric</th><th class=\"num\">first p50 ms</th><th class=\"num\">last p50 ms</th><th class=\"num\">change</th><th class=\"num\">runs</th></tr></thead>\n<tbody>\n");
        for m in &t.latency {
            out.push_str(&format!(
                "<tr><td>{}</td><td class=\"num\">{:.2}</td><td class=\"num\">{:.2}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
                esc(&m.metric),
                m.first_p50,
                m.last_p50,
                m.change_pct.map_or("-".into(), |c| format!("{c:+.1}%")),
                m.runs
            ));
        }
        out.push_str("</tbody>\n</table>\n");
    }
}

fn checks_table(out: &mut String, t: &Trend) {
    out.push_str("<h3>Checks that failed</h3>\n");
    if t.checks.is_empty() {
        out.push_str("<p class=\"note\">No check failed in the runs shown.</p>\n");
        return;
    }
    out.push_str("<table class=\"checks\">\n<thead><tr><th>check</th><th>first failed in</th><th>now</th><th class=\"num\">runs failed</th></tr></thead>\n<tbody>\n");
    for c in &t.checks {
        let at = |r: &trend::RunRef| {
            format!(
                "run {} · {} · {}",
                r.run,
                commit(r.commit.as_deref()),
                esc(&r.time)
            )
        };
        let (cls, now) = match &c.failing_since {
            Some(s) => ("error", format!("still failing, since {}", at(s))),
            None => (
                "ok",
                format!(
                    "not failing ({} in the last run that ran it)",
                    trend::word(c.last_outcome)
                ),
            ),
        };
        out.push_str(&format!(
            "<tr class=\"{cls}\" data-check=\"{}\"><td><code>{}</code></td><td>{}</td><td>{now}</td><td class=\"num\">{}</td></tr>\n",
            esc(&c.check),
            esc(&c.check),
            at(&c.first_failed),
            c.failed_runs
        ));
    }
    out.push_str("</tbody>\n</table>\n");
}

/// A commit as tables show it: short, the whole of it in the title (the tooltip).
fn commit(c: Option<&str>) -> String {
    match c {
        Some(c) => format!(
            "<code class=\"commit\" title=\"{}\">{}</code>",
            esc(c),
            esc(&c.chars().take(10).collect::<String>())
        ),
        None => "<code class=\"commit\">-</code>".into(),
    }
}

/// JSON that cannot end the `<script>` element it sits in, whatever strings it carries.
fn script_safe_json(v: &serde_json::Value) -> String {
    v.to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// Draws one SVG per metric: x = the runs shown (in order), y = ms from 0; a polyline and a
/// point per run for p50, p90 and p99. Every point's <title> is its run, commit, time and value.
const SCRIPT: &str = r##"
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var W = 520, H = 260, L = 56, R = 16, T = 34, B = 40;
  var METRICS = ["ttft", "tpot", "itl", "e2el"], QS = ["p50", "p90", "p99"];
  function el(name, attrs, text) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function niceStep(raw) {
    var p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }
  function chart(suite, metric) {
    var runs = suite.runs, n = runs.length, max = 0;
    runs.forEach(function (r) { QS.forEach(function (q) { if (r[q][metric] !== undefined) max = Math.max(max, r[q][metric]); }); });
    if (!runs.some(function (r) { return r.p50[metric] !== undefined; })) return null;
    var step = niceStep(Math.max(max, 1e-3) / 4), top = Math.ceil(max / step) * step || step;
    var x = function (i) { return n === 1 ? L + (W - L - R) / 2 : L + i * (W - L - R) / (n - 1); };
    var y = function (v) { return T + (H - T - B) * (1 - v / top); };
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, "class": "trend", role: "img", "data-metric": metric });
    svg.appendChild(el("text", { x: L, y: 18, "class": "title" }, metric + " (ms) over runs"));
    for (var v = 0; v <= top + step / 2; v += step) {
      svg.appendChild(el("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), "class": "grid" }));
      svg.appendChild(el("text", { x: L - 6, y: y(v) + 4, "class": "tick", "text-anchor": "end" }, +v.toPrecision(6) + ""));
    }
    runs.forEach(function (r, i) {
      svg.appendChild(el("text", { x: x(i), y: H - B + 16, "class": "tick", "text-anchor": "middle" }, "#" + r.run));
    });
    svg.appendChild(el("text", { x: (L + W - R) / 2, y: H - 6, "class": "label", "text-anchor": "middle" }, "run"));
    QS.slice().reverse().forEach(function (q) {
      var pts = [];
      runs.forEach(function (r, i) { if (r[q][metric] !== undefined) pts.push([i, r]); });
      var line = el("polyline", { "class": "line " + q, "data-q": q, "data-metric": metric,
        points: pts.map(function (p) { return x(p[0]).toFixed(1) + "," + y(p[1][q][metric]).toFixed(1); }).join(" ") });
      svg.appendChild(line);
      pts.forEach(function (p) {
        var r = p[1], val = r[q][metric];
        var c = el("circle", { cx: x(p[0]).toFixed(1), cy: y(val).toFixed(1), r: q === "p50" ? 4 : 3,
          "class": "pt " + q, "data-q": q, "data-metric": metric, "data-run": r.run, "data-commit": r.commit || "" });
        c.appendChild(el("title", {}, "run " + r.run + " · " + (r.commit || "no commit") + " · " + r.time + " · " + q + " " + val.toFixed(2) + " ms"));
        svg.appendChild(c);
      });
    });
    var lx = W - R - 150;
    QS.forEach(function (q, k) {
      svg.appendChild(el("line", { x1: lx + k * 50, x2: lx + k * 50 + 14, y1: 14, y2: 14, "class": "line " + q }));
      svg.appendChild(el("text", { x: lx + k * 50 + 18, y: 18, "class": "legend" }, q));
    });
    var fig = document.createElement("figure");
    fig.appendChild(svg);
    return fig;
  }
  var data = JSON.parse(document.getElementById("history-data").textContent);
  data.suites.forEach(function (s, i) {
    var box = document.getElementById("charts-" + i);
    if (!box) return;
    var drawn = 0;
    METRICS.forEach(function (m) { var f = chart(s, m); if (f) { box.appendChild(f); drawn++; } });
    if (!drawn) {
      var p = document.createElement("p");
      p.className = "note";
      p.textContent = "No run shown measured latency.";
      box.appendChild(p);
    }
  });
  document.documentElement.setAttribute("data-charts", "drawn");
})();
"##;

const CSS: &str = r#"
:root { --fg:#1f2328; --muted:#59636e; --bg:#ffffff; --panel:#f6f8fa; --border:#d1d9e0;
  --ok:#1a7f37; --ok-bg:#dafbe1; --err:#cf222e; --err-bg:#ffebe9; --p50:#0969da; --p90:#8250df; --p99:#bc4c00; }
@media (prefers-color-scheme: dark) {
  :root { --fg:#e6edf3; --muted:#9198a1; --bg:#0d1117; --panel:#151b23; --border:#3d444d;
    --ok:#3fb950; --ok-bg:#12261e; --err:#f85149; --err-bg:#2d1214; --p50:#4493f8; --p90:#ab7df8; --p99:#f0883e; }
}
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
  font:14px/1.5 -apple-system, BlinkMacSystemFont, "Segoe UI", Helvetica, Arial, sans-serif; }
main { max-width:1120px; margin:0 auto; padding:24px; }
h1 { font-size:22px; margin:0 0 6px; } h2 { font-size:18px; margin:28px 0 6px;
  border-bottom:1px solid var(--border); padding-bottom:4px; } h3 { font-size:15px; margin:18px 0 6px; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size:12.5px;
  background:var(--panel); padding:1px 4px; border-radius:4px; overflow-wrap:anywhere; }
.meta, .note { color:var(--muted); } .note { font-style:italic; }
table { border-collapse:collapse; margin:8px 0; }
th, td { border:1px solid var(--border); padding:4px 8px; text-align:left; vertical-align:top; }
th { background:var(--panel); } td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
tr.error td:first-child { border-left:4px solid var(--err); } tr.ok td:first-child { border-left:4px solid var(--ok); }
.badge { display:inline-block; padding:0 8px; border-radius:10px; font-size:12px; font-weight:600; white-space:nowrap; }
.badge.pass { background:var(--ok-bg); color:var(--ok); } .badge.fail { background:var(--err-bg); color:var(--err); }
.charts { display:flex; flex-wrap:wrap; gap:12px; }
figure { margin:0; border:1px solid var(--border); border-radius:6px; padding:4px; flex:1 1 440px; max-width:540px; }
svg.trend { width:100%; height:auto; font-family:inherit; }
svg .grid { stroke:var(--border); stroke-width:1; }
svg .tick, svg .legend, svg .label { fill:var(--muted); font-size:11px; } svg .title { fill:var(--fg); font-size:13px; font-weight:600; }
svg .line { fill:none; stroke-width:2; } svg .line.p50 { stroke:var(--p50); }
svg .line.p90 { stroke:var(--p90); stroke-dasharray:5 3; } svg .line.p99 { stroke:var(--p99); stroke-dasharray:2 3; }
svg .pt.p50 { fill:var(--p50); } svg .pt.p90 { fill:var(--p90); } svg .pt.p99 { fill:var(--p99); }
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_json_cannot_close_its_script() {
        let v = serde_json::json!({"suite": "</script><script>alert(1)</script>"});
        let s = script_safe_json(&v);
        assert!(!s.contains("</script"), "{s}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&s).unwrap(), v);
    }
}
