//! A server's own Prometheus `/metrics`, read the way `bench --mode capacity` reads it: one
//! capacity step at 1 request/s, with the server scraped before, during and after it. The
//! real-server tests (vLLM's in `vllm_parsers`, llama-server's opt-in one in `family_matrix`)
//! share it, so both read the same JSON the same way.
use std::path::Path;

use serde_json::Value;

use crate::common::cli::chatgate_in;

/// Runs one capacity step of `requests` requests against `url` with the suite `dir/suite.toml`
/// (an SLO no reply can miss is added to `[latency]` for the run and taken out again) and
/// returns the step's JSON: the client's counts, `notes` (client and server disagreeing, the
/// queue explaining latency) and `server` (the stack it recognised and its figures).
pub fn one_capacity_step(dir: &Path, url: &str, requests: usize) -> Value {
    let path = dir.join("suite.toml");
    let text = std::fs::read_to_string(&path).expect("suite.toml");
    let slo = "slo = { e2el = 600000 }\n";
    let with_slo = if text.contains("\n[latency]\n") {
        text.replace("\n[latency]\n", &format!("\n[latency]\n{slo}"))
    } else {
        format!("{text}\n[latency]\n{slo}")
    };
    std::fs::write(&path, with_slo).expect("write suite.toml");
    let requests = requests.to_string();
    let (code, out, err) = chatgate_in(
        &[
            "bench",
            "suite.toml",
            "--target",
            url,
            "--mode",
            "capacity",
            "--rate",
            "1",
            "--max-rate",
            "1",
            "--requests",
            &requests,
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--format",
            "json",
        ],
        dir,
    );
    std::fs::write(&path, text).expect("restore suite.toml");
    assert_eq!(code, 0, "{out}\n{err}");
    let doc: Value = serde_json::from_str(&out).expect("bench --format json");
    doc["capacity"]["steps"][0].clone()
}
