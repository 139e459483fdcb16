//! Reading `--format json` reports of `chatgate check` / `gate`.
use serde_json::Value;

/// The error findings, one line each: `boundary/check: message`.
pub fn errors(report: &Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|f| f["severity"] == "error")
        .map(|f| {
            format!(
                "{}/{}: {}",
                f["boundary"].as_str().unwrap_or(""),
                f["check"].as_str().unwrap_or(""),
                f["message"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// The first finding of `check` in a report; panics with the report when there is none.
/// Every finding of `check` (a check may say several things: `server.tool-choice` one per choice).
pub fn findings_of<'a>(report: &'a Value, check: &str) -> Vec<&'a Value> {
    report["findings"]
        .as_array()
        .map(|a| a.iter().filter(|f| f["check"] == check).collect())
        .unwrap_or_default()
}

/// Whether some finding of `check` has `severity` and a message that contains `says`.
pub fn says(report: &Value, check: &str, severity: &str, says: &str) -> bool {
    findings_of(report, check).iter().any(|f| {
        f["severity"] == severity && f["message"].as_str().is_some_and(|m| m.contains(says))
    })
}

pub fn finding<'a>(report: &'a Value, check: &str) -> &'a Value {
    report["findings"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .find(|f| f["check"] == check)
        .unwrap_or_else(|| panic!("no {check} finding in {report:#}"))
}
