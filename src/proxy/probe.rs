//! The client probe: a user's own client command, run through the proxy once on the plain
//! stream and once per hostile SSE variant, so a client that breaks is told *which* legal
//! framing it cannot read — not just handed a stack trace.
//!
//! A run breaks the client when the command exits non-zero, outlives its timeout, or prints
//! something else than it printed on the plain stream (a client that silently drops or mangles
//! a chunk is as broken as one that crashes; the proxy changes no payload, so a client that
//! prints the same on two plain runs prints it again unless its reader is wrong; one whose own
//! output varies is judged by its exit status only). When all at once break the client, the
//! variants that pass alone are tried together, and if they break it too, a minimal
//! combination of them that still does (dropping any one makes it pass) is found by delta
//! debugging and named.
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::AsyncReadExt;

use super::hostile::{HostileSse, Variant};
use super::{read_recording, ProxyOptions};
use crate::error::{Error, Result};

/// What `chatgate client-probe` (and the gate's `[client] command`) was asked to do.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// The server the proxy forwards to.
    pub upstream: String,
    /// The client command and its arguments.
    pub command: Vec<String>,
    /// The variants to run one at a time.
    pub variants: Vec<Variant>,
    /// Also run all of `variants` at once (and, when that alone breaks the client, name the
    /// smallest combination that does).
    pub combined: bool,
    /// How long one run of the client may take.
    pub timeout: Duration,
    /// A run whose output differs from the plain run's breaks the client.
    pub compare_output: bool,
    /// Keep each run's recording (`RUN.jsonl`) here; otherwise in a temporary folder.
    pub record_dir: Option<PathBuf>,
    /// Run the command from this folder (a relative program path too); else the current one.
    pub cwd: Option<PathBuf>,
    /// The variants a break on matters most (the suite's `sse_variants`): a combination is
    /// looked for among them first.
    pub focus: Vec<Variant>,
    /// The API key the client gets as OPENAI_API_KEY (the target's), instead of the
    /// environment's.
    pub api_key: Option<String>,
}

/// How much of a client's stdout and stderr is kept.
const KEEP_BYTES: usize = 64 * 1024;
/// How many of the client's last stderr lines a report shows.
const STDERR_LINES: usize = 6;
/// The API key the client gets when the environment has none (SDKs refuse to start without
/// one; the proxy forwards it, the server ignores it).
const PLACEHOLDER_KEY: &str = "chatgate-client-probe";

/// One run of the client.
#[derive(Debug, Clone, Serialize)]
pub struct ClientRun {
    /// `plain`, a variant's name, or a combination (`ids + keep-alive`).
    pub label: String,
    pub variants: Vec<&'static str>,
    /// The exit status; `None` when it was killed (timeout) or ended by a signal.
    pub exit: Option<i32>,
    pub timed_out: bool,
    /// The client printed something else than on the plain stream.
    pub output_differs: bool,
    /// The client's last stderr lines.
    pub stderr_tail: Vec<String>,
    /// Its stdout (the last 64 KB).
    pub stdout: String,
    /// Requests that went through the proxy, and how many of them streamed.
    pub exchanges: usize,
    pub streamed: usize,
    /// The recording of this run's exchanges, when kept.
    pub recording: Option<PathBuf>,
    pub elapsed_ms: u64,
}

impl ClientRun {
    pub fn broke(&self) -> bool {
        self.exit != Some(0) || self.timed_out || self.output_differs
    }

    /// Why this run broke the client, in one line.
    pub fn why(&self) -> String {
        if self.timed_out {
            return "did not finish in time (killed)".to_string();
        }
        let last = self
            .stderr_tail
            .last()
            .map(|l| format!(": {l}"))
            .unwrap_or_default();
        match self.exit {
            Some(0) if self.output_differs => {
                "exited 0 but printed something else than on the plain stream".to_string()
            }
            Some(0) => "passed".to_string(),
            Some(code) => format!("exit {code}{last}"),
            None => format!("ended by a signal{last}"),
        }
    }
}

/// Everything the probe saw.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    pub command: Vec<String>,
    /// Whether a run that printed something else than the plain run broke the client (off
    /// with --ignore-output, or when two plain runs already differ).
    pub output_compared: bool,
    /// Why output was not compared, when it was asked for.
    pub output_note: Option<String>,
    pub plain: ClientRun,
    /// Each variant alone.
    pub runs: Vec<ClientRun>,
    /// All of them at once.
    pub combined: Option<ClientRun>,
    /// The smallest combination of variants that each pass alone but break the client
    /// together (looked for when all at once break it).
    pub culprit: Option<Vec<&'static str>>,
}

impl ProbeReport {
    /// The runs with hostile framing that broke the client.
    pub fn broken(&self) -> Vec<&ClientRun> {
        self.runs
            .iter()
            .chain(self.combined.as_ref())
            .filter(|r| r.broke())
            .collect()
    }
}

/// Run the probe. An error when the client cannot be started or already fails on the plain
/// stream (nothing to attribute to a variant then); an unreachable upstream is exit 3.
pub async fn probe(opts: &ProbeOptions) -> Result<ProbeReport> {
    if opts.command.is_empty() {
        return Err(Error::input("no client command given")
            .hint("e.g. chatgate client-probe --upstream URL -- python app.py"));
    }
    // The key the client sends never shows in what the probe prints.
    if let Ok(key) = std::env::var("OPENAI_API_KEY") {
        crate::secrets::register(&key);
    }
    if let Some(key) = &opts.api_key {
        crate::secrets::register(key);
    }
    let mut opts = opts.clone();
    opts.upstream = server_root(&opts.upstream);
    let tmp = tempfile::tempdir()
        .map_err(|e| Error::input(format!("cannot make a temporary folder: {e}")))?;
    let dir = opts.record_dir.clone().unwrap_or(tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::in_file(&dir, format!("cannot create the folder: {e}")))?;
    // The search's runs are recorded apart, so they never replace a kept recording.
    let search_dir = tmp.path().join("search");
    std::fs::create_dir_all(&search_dir)
        .map_err(|e| Error::in_file(&search_dir, format!("cannot create the folder: {e}")))?;
    let keep = opts.record_dir.is_some();

    let plain = run_once(&opts, None, &dir, keep).await?;
    check_plain(&opts, &plain, &dir)?;
    // Output is compared only when it is stable: a client that prints response ids, times or
    // sampled text prints something else on every run, whatever the framing.
    let mut output_note = None;
    if opts.compare_output {
        let again = run_once(&opts, None, &search_dir, false).await?;
        if again.broke() || again.stdout != plain.stdout {
            output_note = Some(format!(
                "a second plain run {}: only exit status and time are judged",
                if again.broke() {
                    format!("broke the client too ({})", again.why())
                } else {
                    "printed something else than the first (the output is not deterministic)"
                        .to_string()
                }
            ));
            opts.compare_output = false;
        }
    }
    let mut runs = Vec::new();
    for v in &opts.variants {
        let run = run_once(&opts, Some(&[*v]), &dir, keep).await?;
        runs.push(compare(run, &plain, &opts));
    }
    let mut combined = None;
    let mut culprit = None;
    if opts.combined && opts.variants.len() > 1 {
        let all = run_once(&opts, Some(&opts.variants), &dir, keep).await?;
        let all = compare(all, &plain, &opts);
        if all.broke() {
            let passing: Vec<Variant> = opts
                .variants
                .iter()
                .zip(&runs)
                .filter(|(_, r)| !r.broke())
                .map(|(v, _)| *v)
                .collect();
            let mut search = Search {
                opts: &opts,
                plain: &plain,
                dir: &search_dir,
                seen: HashMap::new(),
                runs_left: SEARCH_RUNS,
            };
            search.seen.insert(opts.variants.clone(), true);
            if passing.len() == opts.variants.len() {
                search.seen.insert(passing.clone(), true);
            }
            culprit = search.together(&passing).await?;
        }
        combined = Some(all);
    }
    Ok(ProbeReport {
        command: opts.command.clone(),
        output_compared: opts.compare_output,
        output_note,
        plain,
        runs,
        combined,
        culprit,
    })
}

/// The server's root: a base URL given with its `/v1` (as SDKs take it) loses it, since the
/// client's own paths (`/v1/chat/completions`) are appended to it.
fn server_root(url: &str) -> String {
    let trimmed = url.trim_end_matches('/');
    trimmed.strip_suffix("/v1").unwrap_or(trimmed).to_string()
}

/// At most this many client runs go into looking for a combination (each one is a whole run
/// of the client, up to its timeout).
const SEARCH_RUNS: usize = 40;

/// The search for variants that pass alone but break the client together.
struct Search<'a> {
    opts: &'a ProbeOptions,
    plain: &'a ClientRun,
    dir: &'a Path,
    /// What each set already did (a set is tried once).
    seen: HashMap<Vec<Variant>, bool>,
    runs_left: usize,
}

impl Oracle<Variant> for Search<'_> {
    async fn fails(&mut self, set: Vec<Variant>) -> Result<bool> {
        self.breaks(set).await
    }
}

impl Search<'_> {
    /// Among the variants that pass alone, the smallest set that breaks the client: first
    /// among the ones the caller must survive (`focus`: a finding there is an error, so it must
    /// not be hidden behind one that is only a warning), then among all of them.
    async fn together(&mut self, passing: &[Variant]) -> Result<Option<Vec<&'static str>>> {
        let focus: Vec<Variant> = passing
            .iter()
            .copied()
            .filter(|v| self.opts.focus.contains(v))
            .collect();
        for set in [focus, passing.to_vec()] {
            if set.len() < 2 || !self.breaks(set.clone()).await? {
                continue;
            }
            let found = ddmin(set, self).await?;
            return Ok(Some(found.iter().map(|v| v.name()).collect()));
        }
        Ok(None)
    }

    /// Whether the client breaks on this set (run once per set, within the search's budget;
    /// past it, a set counts as not breaking, so the search stops narrowing).
    async fn breaks(&mut self, mut set: Vec<Variant>) -> Result<bool> {
        set.sort_unstable();
        if let Some(&b) = self.seen.get(&set) {
            return Ok(b);
        }
        if self.runs_left == 0 {
            return Ok(false);
        }
        self.runs_left -= 1;
        let run = run_once(self.opts, Some(&set), self.dir, false).await?;
        let b = compare(run, self.plain, self.opts).broke();
        self.seen.insert(set, b);
        Ok(b)
    }
}

/// The plain run must pass: a client that fails without hostile framing (or a server it cannot
/// reach) is not an SSE question.
fn check_plain(opts: &ProbeOptions, plain: &ClientRun, dir: &Path) -> Result<()> {
    let unreachable = read_recording(&dir.join("plain.jsonl"))
        .ok()
        .and_then(|ex| {
            ex.into_iter()
                .find(|e| e.exchange.status == 502 && e.exchange.error.is_some())
        });
    if let Some(e) = unreachable {
        return Err(Error::unreachable(format!(
            "the client's requests could not reach {}: {}",
            crate::secrets::redact(&opts.upstream),
            e.exchange.error.unwrap_or_default()
        ))
        .hint("start the server, or point --upstream at it"));
    }
    if plain.broke() {
        return Err(Error::input(format!(
            "the client command fails on the plain stream, before any hostile framing ({}){}",
            plain.why(),
            tail(&plain.stderr_tail)
        ))
        .hint("run it against the server by hand first: OPENAI_BASE_URL=<upstream>/v1 <command>"));
    }
    if plain.exchanges == 0 {
        return Err(Error::input(
            "the client made no request through the probe's proxy: it does not read OPENAI_BASE_URL or OPENAI_API_BASE",
        )
        .hint("make the client take its base URL from OPENAI_BASE_URL (the OpenAI SDKs do), or from CHATGATE_PROBE_URL"));
    }
    if plain.streamed == 0 {
        return Err(Error::input(format!(
            "the client made {} request(s) and none streamed: SSE framing cannot break it",
            plain.exchanges
        ))
        .hint("probe a client that streams (stream=True), or drop the probe"));
    }
    Ok(())
}

fn tail(lines: &[String]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!("; its last stderr lines:\n  {}", lines.join("\n  "))
    }
}

/// Mark a run whose output differs from the plain run's.
fn compare(mut run: ClientRun, plain: &ClientRun, opts: &ProbeOptions) -> ClientRun {
    run.output_differs = opts.compare_output && run.exit == Some(0) && run.stdout != plain.stdout;
    run
}

/// What delta debugging asks: does this subset still fail?
trait Oracle<T> {
    async fn fails(&mut self, set: Vec<T>) -> Result<bool>;
}

/// A 1-minimal subset of `set` (which fails the oracle) that still fails it: dropping any one
/// element makes it pass (ddmin, Zeller and Hildebrandt's delta debugging). One minimal set,
/// not necessarily the smallest of all.
async fn ddmin<T: Clone>(mut set: Vec<T>, oracle: &mut impl Oracle<T>) -> Result<Vec<T>> {
    let mut n = 2usize;
    while set.len() >= 2 {
        let size = set.len().div_ceil(n);
        let chunks: Vec<Vec<T>> = set.chunks(size).map(<[T]>::to_vec).collect();
        let mut reduced = false;
        for (i, chunk) in chunks.iter().enumerate() {
            if oracle.fails(chunk.clone()).await? {
                set = chunk.clone();
                n = 2;
                reduced = true;
                break;
            }
            if chunks.len() > 2 {
                let rest: Vec<T> = chunks
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .flat_map(|(_, c)| c.iter().cloned())
                    .collect();
                if oracle.fails(rest.clone()).await? {
                    set = rest;
                    n = (n - 1).max(2);
                    reduced = true;
                    break;
                }
            }
        }
        if !reduced {
            if n >= set.len() {
                break;
            }
            n = (2 * n).min(set.len());
        }
    }
    Ok(set)
}

/// One run of the client through a fresh proxy with these variants (`None`: the plain stream).
async fn run_once(
    opts: &ProbeOptions,
    variants: Option<&[Variant]>,
    dir: &Path,
    keep: bool,
) -> Result<ClientRun> {
    let label = match variants {
        None => "plain".to_string(),
        Some(vs) if vs == Variant::all() => "all".to_string(),
        Some(vs) => Variant::join(vs),
    };
    let file = label.replace(" + ", "+");
    let recording = dir.join(format!("{file}.jsonl"));
    let _ = std::fs::remove_file(&recording);
    let proxy_opts = ProxyOptions {
        upstream: opts.upstream.clone(),
        record: Some(recording.clone()),
        hostile: variants.map(HostileSse::only),
    };
    let proxy = super::start(&proxy_opts, "127.0.0.1:0").await?;
    let started = Instant::now();
    let outcome = run_client(opts, &proxy.url(), &label).await;
    let _ = proxy.stop().await;
    let (exit, timed_out, stdout, stderr) = outcome?;
    let exchanges = read_recording(&recording).unwrap_or_default();
    Ok(ClientRun {
        variants: variants
            .unwrap_or_default()
            .iter()
            .map(|v| v.name())
            .collect(),
        label,
        exit,
        timed_out,
        output_differs: false,
        stderr_tail: last_lines(&stderr, STDERR_LINES),
        stdout,
        exchanges: exchanges.len(),
        streamed: exchanges.iter().filter(|e| e.exchange.stream).count(),
        recording: keep.then_some(recording),
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// Start the client with the proxy's URL in the variables the common SDKs read, wait for it
/// (killing its whole process group past the timeout), and keep the tails of its output.
async fn run_client(
    opts: &ProbeOptions,
    url: &str,
    label: &str,
) -> Result<(Option<i32>, bool, String, String)> {
    let command = &opts.command;
    let mut program = PathBuf::from(&command[0]);
    // The folder made absolute: the child changes into it before the program is looked up.
    let dir = opts
        .cwd
        .as_deref()
        .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.to_path_buf()));
    if let Some(dir) = &dir {
        // A relative path with a slash (`./client.sh`) is the folder's, not ours.
        if program.is_relative() && program.components().count() > 1 {
            program = dir.join(program);
        }
    }
    let mut cmd = tokio::process::Command::new(&program);
    if let Some(dir) = &dir {
        cmd.current_dir(dir);
    }
    cmd.args(&command[1..])
        .env("OPENAI_BASE_URL", format!("{url}/v1"))
        .env("OPENAI_API_BASE", format!("{url}/v1"))
        .env("CHATGATE_PROBE_URL", url)
        .env("CHATGATE_PROBE_VARIANT", label)
        .env("NO_PROXY", no_proxy())
        .env("no_proxy", no_proxy())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    match &opts.api_key {
        Some(key) => {
            cmd.env("OPENAI_API_KEY", key);
        }
        None if std::env::var_os("OPENAI_API_KEY").is_none() => {
            cmd.env("OPENAI_API_KEY", PLACEHOLDER_KEY);
        }
        None => {}
    }
    let mut child = cmd.spawn().map_err(|e| {
        let from = dir
            .as_ref()
            .map(|d| format!(" (run from {})", d.display()))
            .unwrap_or_default();
        Error::input(format!(
            "cannot start the client command {:?}{from}: {e}",
            program.display().to_string()
        ))
        .hint("check that the program exists and is executable (a relative path is taken from the folder it runs in)")
    })?;
    // The whole group goes when the run ends, however it ends (a timeout, a child the client
    // left behind holding its output open, chatgate itself interrupted).
    let group = child
        .id()
        .map(|pid| crate::files::ProcessGroup::track(pid as i32));
    let out = tokio::spawn(read_tail(child.stdout.take()));
    let err = tokio::spawn(read_tail(child.stderr.take()));
    let (exit, timed_out) = match tokio::time::timeout(opts.timeout, child.wait()).await {
        Ok(status) => (status.ok().and_then(|s| s.code()), false),
        Err(_) => (None, true),
    };
    drop(group);
    let _ = child.wait().await;
    let stdout = finish_read(out).await;
    let stderr = finish_read(err).await;
    Ok((exit, timed_out, stdout, stderr))
}

/// A reader's text, or what it had when the pipe stays open past a grace period (a process
/// outside the group still holding it).
async fn finish_read(reader: tokio::task::JoinHandle<String>) -> String {
    match tokio::time::timeout(Duration::from_secs(5), reader).await {
        Ok(Ok(text)) => text,
        _ => String::new(),
    }
}

/// Loopback never goes through a proxy the environment names.
fn no_proxy() -> String {
    let mut hosts = std::env::var("NO_PROXY").unwrap_or_default();
    if !hosts.is_empty() {
        hosts.push(',');
    }
    hosts.push_str("127.0.0.1,localhost");
    hosts
}

/// The last `KEEP_BYTES` of a stream, as text.
async fn read_tail(pipe: Option<impl tokio::io::AsyncRead + Unpin>) -> String {
    let Some(mut pipe) = pipe else {
        return String::new();
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = pipe.read(&mut buf).await {
        if n == 0 {
            break;
        }
        kept.extend_from_slice(&buf[..n]);
        if kept.len() > 2 * KEEP_BYTES {
            kept.drain(..kept.len() - KEEP_BYTES);
        }
    }
    if kept.len() > KEEP_BYTES {
        kept.drain(..kept.len() - KEEP_BYTES);
    }
    crate::secrets::redact(&String::from_utf8_lossy(&kept)).into_owned()
}

/// The last `n` non-blank lines of `text`.
fn last_lines(text: &str, n: usize) -> Vec<String> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| l.chars().take(300).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A planted interaction: the set fails exactly when it holds both 3 and 11.
    struct Planted {
        runs: usize,
    }

    impl Oracle<u32> for Planted {
        async fn fails(&mut self, set: Vec<u32>) -> Result<bool> {
            self.runs += 1;
            Ok(set.contains(&3) && set.contains(&11))
        }
    }

    #[tokio::test]
    async fn ddmin_finds_a_planted_pair_and_nothing_more() {
        let mut o = Planted { runs: 0 };
        let found = ddmin((0..18).collect(), &mut o).await.unwrap();
        assert_eq!(found, vec![3, 11]);
        // Without the probe's memo of sets already run (Search::breaks), a few repeats.
        assert!(o.runs <= 60, "{} runs", o.runs);
        // A single culprit comes back alone.
        struct One;
        impl Oracle<u32> for One {
            async fn fails(&mut self, set: Vec<u32>) -> Result<bool> {
                Ok(set.contains(&7))
            }
        }
        assert_eq!(ddmin((0..18).collect(), &mut One).await.unwrap(), vec![7]);
    }

    #[test]
    fn an_sdk_style_base_url_loses_its_v1() {
        assert_eq!(server_root("http://h:8000/v1"), "http://h:8000");
        assert_eq!(server_root("http://h:8000/v1/"), "http://h:8000");
        assert_eq!(server_root("http://h:8000/"), "http://h:8000");
        assert_eq!(server_root("http://h:8000/api"), "http://h:8000/api");
    }

    #[test]
    fn the_last_lines_skip_blanks_and_are_bounded() {
        let t = "a\n\nb\n  \nc\n".to_string() + &"x".repeat(500);
        let l = last_lines(&t, 2);
        assert_eq!(l[0], "c");
        assert_eq!(l[1].len(), 300);
    }

    #[test]
    fn why_names_the_exit_and_the_last_stderr_line() {
        let mut r = ClientRun {
            label: "ids".into(),
            variants: vec!["ids"],
            exit: Some(1),
            timed_out: false,
            output_differs: false,
            stderr_tail: vec![
                "Traceback".into(),
                "JSONDecodeError: Expecting value".into(),
            ],
            stdout: String::new(),
            exchanges: 1,
            streamed: 1,
            recording: None,
            elapsed_ms: 5,
        };
        assert!(r.broke());
        assert_eq!(r.why(), "exit 1: JSONDecodeError: Expecting value");
        r.exit = Some(0);
        assert!(!r.broke());
        r.output_differs = true;
        assert!(r.broke() && r.why().contains("printed something else"));
        r.timed_out = true;
        assert!(r.why().contains("in time"));
    }
}
