//! A host in a child process, to kill for real (SIGKILL: no GoAway, no FIN from a drain; the
//! kernel resets its connections), and ports for hosts that must come back at the same one.
//!
//! The child is the test binary itself, run again with only its `child_host` test, which calls
//! [`serve_child_host`]: every test file that starts a [`ChildHost`] has
//!
//! ```ignore
//! #[test]
//! fn child_host() {
//!     serve_child_host(|url| /* a host listening at url */, |line| /* an answer */);
//! }
//! ```

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// Set in the child's environment: the URL its host listens at.
const CHILD_ENV: &str = "KEEL_TEST_CHILD_HOST";

/// A port free a moment ago (another process could take it before it is bound again).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The body of a test binary's `child_host` test. Run by `cargo test`, it returns at once. In
/// a child process started by [`ChildHost::start`]: starts the host (`start(url)`), prints its
/// URLs for the parent, then answers each line on its stdin with `answer(line)`, until stdin
/// closes (the parent is gone), when it shuts the host down.
pub fn serve_child_host(
    start: impl FnOnce(&str) -> keel::Host,
    mut answer: impl FnMut(&str) -> String,
) {
    let Ok(url) = std::env::var(CHILD_ENV) else {
        return;
    };
    let host = start(&url);
    println!(
        "keel-child-host {} {}",
        host.url(),
        host.admin_url().unwrap_or("-")
    );
    for line in std::io::stdin().lines() {
        let Ok(line) = line else { break };
        println!("keel-child-answer {}", answer(line.trim()));
    }
    host.shutdown();
}

/// A keel host in a child process (see [`serve_child_host`]); killed on drop. Its methods
/// block: from a multi-threaded runtime, call them in `tokio::task::block_in_place`.
#[derive(Debug)]
pub struct ChildHost {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    url: String,
    admin: Option<String>,
    killed: bool,
}

impl ChildHost {
    /// Starts a host listening at `url` (port 0, or a port of [`free_port`]) in a child
    /// process; returns once it listens.
    pub fn start(url: &str) -> ChildHost {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["child_host", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the child host's process starts");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let words = read(&mut stdout, "keel-child-host ");
        let (url, admin) = words.split_once(' ').expect("url and admin url");
        ChildHost {
            url: url.to_string(),
            admin: (admin != "-").then(|| admin.to_string()),
            child,
            stdin,
            stdout,
            killed: false,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn port(&self) -> u16 {
        self.url.rsplit_once(':').unwrap().1.parse().unwrap()
    }

    /// The admin endpoint's URL, if the host has one.
    pub fn admin_url(&self) -> Option<&str> {
        self.admin.as_deref()
    }

    /// The child's answer to `line`.
    pub fn ask(&mut self, line: &str) -> String {
        writeln!(self.stdin, "{line}").unwrap();
        read(&mut self.stdout, "keel-child-answer ")
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends the child `signal` (a name `kill` takes: `STOP`, `CONT`, ...), with the shell's
    /// `kill` (Unix: `/bin/sh` has it built in, so no `kill` program is needed).
    #[cfg(unix)]
    pub fn signal(&self, signal: &str) {
        let status = Command::new("sh")
            .args(["-c", "kill -s \"$0\" \"$1\""])
            .arg(signal)
            .arg(self.pid().to_string())
            .status()
            .expect("sh runs");
        assert!(status.success(), "kill -{signal} failed: {status}");
    }

    /// SIGKILL: the process ends at once, in the middle of whatever calls it runs; returns
    /// once it is gone.
    pub fn kill(&mut self) {
        if !self.killed {
            self.child.kill().unwrap();
            self.child.wait().unwrap();
            self.killed = true;
        }
    }
}

impl Drop for ChildHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The rest of the first line of the child's stdout containing `marker` (the test harness
/// prints its own lines around the host's).
fn read(stdout: &mut BufReader<ChildStdout>, marker: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the child host exited"
        );
        if let Some(at) = line.find(marker) {
            return line[at + marker.len()..].trim().to_string();
        }
    }
}
