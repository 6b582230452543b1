//! `Host::serve_until_signal`, in a child process (this test binary run again with only its
//! `child` test): SIGTERM drains the host, so a call in flight is answered and the process
//! exits 0; a second signal during the drain ends the process at once with status 130.

use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

/// Set in the child's environment.
const CHILD_ENV: &str = "KEEL_TEST_SIGNAL_CHILD";

/// A handler that takes its time.
#[keel::contract]
pub trait Slow {
    /// Sleeps `ms` milliseconds and returns them.
    fn sleep_ms(&self, ms: u64) -> u64;
}

struct Sleeper;

impl Slow for Sleeper {
    fn sleep_ms(&self, ms: u64) -> u64 {
        // The parent waits for this line before it sends a signal: the call is in flight.
        println!("keel-signal-started {ms}");
        std::thread::sleep(Duration::from_millis(ms));
        ms
    }
}

/// The child: a host that serves until a signal, then prints its shutdown report.
#[test]
fn child() {
    if std::env::var(CHILD_ENV).is_err() {
        return;
    }
    let host = keel::Host::builder()
        .service(SlowServer::new(Sleeper))
        .endpoint("tcp://127.0.0.1:0")
        .close_timeout(Duration::from_secs(30))
        .start()
        .unwrap();
    println!("keel-signal-url {}", host.url());
    let report = host.serve_until_signal().unwrap();
    println!("keel-signal-abandoned {}", report.abandoned_calls);
}

struct ChildProcess {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl ChildProcess {
    fn start() -> ChildProcess {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, "1")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        ChildProcess { child, lines }
    }

    /// What follows `prefix` on the child's first line that has it (libtest may have begun
    /// the line: `test child ... `).
    fn wait_for(&mut self, prefix: &str) -> String {
        for line in self.lines.by_ref() {
            let line = line.unwrap();
            if let Some(at) = line.find(prefix) {
                return line[at + prefix.len()..].trim().to_string();
            }
        }
        panic!("the child's output ended before a line starting {prefix:?}");
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name}");
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn sigterm_drains_a_call_in_flight_then_the_process_exits_0() {
    let mut child = ChildProcess::start();
    let url = child.wait_for("keel-signal-url ");
    let client = SlowBlockingClient::connect(&url).unwrap();
    let call = std::thread::spawn(move || client.sleep_ms(700));
    assert_eq!(child.wait_for("keel-signal-started "), "700");

    child.signal("TERM");

    assert_eq!(
        call.join().unwrap().unwrap(),
        700,
        "the call in flight is answered"
    );
    assert_eq!(child.wait_for("keel-signal-abandoned "), "0");
    let status = child.child.wait().unwrap();
    assert!(
        status.success(),
        "the child exits 0 after the drain: {status:?}"
    );
    // The host is gone: a new connection is refused.
    assert!(SlowBlockingClient::connect(&url).is_err());
}

#[test]
fn a_second_signal_during_the_drain_exits_at_once_with_130() {
    let mut child = ChildProcess::start();
    let url = child.wait_for("keel-signal-url ");
    let client = SlowBlockingClient::connect(&url).unwrap();
    // A call the drain would wait 20 s for.
    let call = std::thread::spawn(move || client.sleep_ms(20_000));
    assert_eq!(child.wait_for("keel-signal-started "), "20000");

    // Sent back to back: the handlers are installed once, so the second is seen whenever it
    // arrives (the first starts the drain, the second ends the process).
    child.signal("TERM");
    child.signal("INT");

    let status = child.child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(call.join().unwrap().is_err(), "the abandoned call fails");
}
