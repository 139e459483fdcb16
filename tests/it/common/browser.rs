//! A real headless browser (Chromium's headless shell) for the HTML pages chatgate writes: the
//! browser is `$CHATGATE_BROWSER`, else `chromium-headless-shell` on PATH (Debian's package of
//! that name; .ci/run installs it).
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The headless browser, or None after saying SKIPPED (a failure in CI).
pub fn browser() -> Option<PathBuf> {
    tool(
        "CHATGATE_BROWSER",
        "chromium-headless-shell",
        "no headless browser at {} (set CHATGATE_BROWSER; Debian: apt-get install chromium-headless-shell; .ci/run installs it)",
    )
}

/// An external program the tests read a report with: `$env`, else `default` on PATH, if it
/// answers `--version`; None after saying SKIPPED (`missing`, with `{}` for the path tried; a
/// failure under CI).
pub fn tool(env: &str, default: &str, missing: &str) -> Option<PathBuf> {
    let p = std::env::var_os(env)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    let ok = Command::new(&p)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(p);
    }
    crate::common::skip::skip(&missing.replace("{}", &p.display().to_string()));
    None
}

/// The page's DOM after its scripts ran, as the browser serialises it.
pub fn rendered_dom(browser: &Path, page: &Path, profile: &Path) -> String {
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            &format!("--user-data-dir={}", profile.display()),
            "--dump-dom",
            &format!("file://{}", page.display()),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the browser starts");
    let mut stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut text).map(|_| text)
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(status.success(), "the browser failed: {status}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the browser did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().expect("reader").expect("the DOM is UTF-8")
}
