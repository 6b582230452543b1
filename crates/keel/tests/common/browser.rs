//! A real browser for the tests that need one (`cors.rs`, `web_streams.rs`): headless Chromium
//! loads a page served from an origin of its own ([`new_origin`], [`serve`]), whose script
//! (starting with [`REPORT_JS`]) notes what it sees and reports it to the page's server when it
//! is done; [`browse`] returns that report.
//!
//! The page reports rather than the test reading the page's DOM once the browser calls it
//! loaded (`--dump-dom` with `--virtual-time-budget`): Chromium's virtual time does not wait
//! for the body of a `fetch` whose answer has started, so a page still reading a stream could
//! be dumped before it was done.
//!
//! The browser is Debian's `chromium` on PATH ([`chromium`]): without it the tests skip, unless
//! `KEEL_REQUIRE_CHROMIUM=1` (CI sets it), when a missing browser fails them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The script every page starts with: `note(line)` adds a line to what the page saw (sent to
/// its server as it goes, so that a test that gives up can say how far the page got), and
/// `report()` sends all of it as the page's result.
pub const REPORT_JS: &str = r#"
const seen = [];
function note(line) {
  seen.push(String(line));
  fetch("/note", {method: "POST", body: seen.join("\n")}).catch(() => {});
}
function report() {
  return fetch("/report", {method: "POST", body: seen.join("\n")});
}
"#;

/// A new origin (a port of its own) for a page; [`serve`] then serves it.
pub fn new_origin() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    (listener, origin)
}

/// A page being served, and what its script sends back.
pub struct Page {
    /// Its origin (and URL): `http://127.0.0.1:<port>`.
    pub origin: String,
    said: mpsc::Receiver<Said>,
}

/// What a page's script sent.
enum Said {
    /// What it has seen so far (`note`).
    Progress(String),
    /// Its result (`report`).
    Report(String),
}

/// Serves `html` at every path of `listener` on threads, for the rest of the test, and takes
/// what its script posts to `/note` and `/report`.
pub fn serve(listener: TcpListener, html: String) -> Page {
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let (tx, said) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(s) = stream else { break };
            let (html, tx) = (html.clone(), tx.clone());
            // A thread each: a browser may open a connection and send nothing on it yet.
            std::thread::spawn(move || answer(s, &html, &tx));
        }
    });
    Page { origin, said }
}

/// One request to a page's server: the page, or what its script posts.
fn answer(mut s: TcpStream, html: &str, tx: &mpsc::Sender<Said>) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut request = String::new();
    if r.read_line(&mut request).unwrap_or(0) == 0 {
        return;
    }
    let mut length = 0;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    if r.read_exact(&mut body).is_err() {
        return;
    }
    let body = String::from_utf8_lossy(&body).into_owned();
    let said = match request.split_whitespace().take(2).collect::<Vec<_>>()[..] {
        ["POST", "/note"] => Some(Said::Progress(body)),
        ["POST", "/report"] => Some(Said::Report(body)),
        _ => None,
    };
    let resp = match said {
        Some(said) => {
            let _ = tx.send(said);
            "HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n".to_string()
        }
        None => format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{html}",
            html.len()
        ),
    };
    let _ = s.write_all(resp.as_bytes());
}

/// The Chromium on PATH, if any; panics if there is none and `KEEL_REQUIRE_CHROMIUM=1`.
pub fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser"].into_iter().find(|b| {
        Command::new(b)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() && std::env::var_os("KEEL_REQUIRE_CHROMIUM").is_some_and(|v| v == "1") {
        panic!("KEEL_REQUIRE_CHROMIUM=1 but no chromium on PATH (apt-get install chromium)");
    }
    found
}

/// How long [`browse`] waits for a page's report, in real time: far beyond what a page of these
/// tests takes (a second or two), reached only when one hangs.
const BROWSE_LIMIT: Duration = Duration::from_secs(90);

/// Loads `page` in headless Chromium and returns what its script reported (the lines it
/// noted), then closes the browser. Each call has a profile of its own, so tests may browse at
/// the same time. A page that has not reported within 90 s fails the test, with what it had
/// noted by then.
pub fn browse(browser: &str, page: &Page) -> String {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("keel-chromium-{}-{run}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A file, not a pipe: the browser's helper processes may hold a pipe open after it exits.
    let stderr = dir.join("stderr");
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg(&page.origin)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let until = Instant::now() + BROWSE_LIMIT;
    let mut progress = String::new();
    let report = loop {
        let left = until.saturating_duration_since(Instant::now());
        match page.said.recv_timeout(left) {
            Ok(Said::Report(text)) => break Some(text),
            // Notes may arrive out of order: the longest is the latest.
            Ok(Said::Progress(text)) if text.len() > progress.len() => progress = text,
            Ok(Said::Progress(_)) => {}
            Err(_) => break None,
        }
    };
    // SIGTERM: Chromium closes and takes its helper processes with it (SIGKILL would leave
    // them to exit on their own); SIGKILL if it has not within 10 s.
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let closing = Instant::now();
    while child.try_wait().ok().flatten().is_none() {
        if closing.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let errors = std::fs::read_to_string(&stderr).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    match report {
        Some(text) => text,
        None => panic!(
            "the page did not report within {BROWSE_LIMIT:?}; it had noted:\n{progress}\n\
             chromium's stderr:\n{errors}"
        ),
    }
}
