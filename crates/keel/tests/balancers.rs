//! keel behind real load balancers, started as child processes with configs in a temp dir:
//!
//! - nginx as an HTTP/1.1 reverse proxy with upstream keep-alive in front of three `http://`
//!   hosts: calls spread, upstream connections are reused, and a host drained or killed
//!   (SIGKILL, a host in a child process) in the middle of a run costs no failed idempotent call
//!   (nginx re-sends it to another host: `proxy_next_upstream ... non_idempotent` on the
//!   locations of idempotent operations only).
//! - HAProxy in TCP mode in front of three keel-wire (`tcp://`) hosts with a maximum connection
//!   age: one channel's calls spread over all three as its connection is replaced; HAProxy's
//!   `option httpchk GET /readyz` on each host's admin endpoint marks a draining host down
//!   before it closes, and no call fails.
//!
//! The configs here are the ones the guide's deployment chapter (`book/src/deployment.md`)
//! shows. The balancers are Debian's binaries (`apt-get install nginx haproxy`); a test whose balancer is missing is skipped with
//! a note, unless `KEEL_REQUIRE_NGINX=1` / `KEEL_REQUIRE_HAPROXY=1` (CI sets both), where it
//! fails. Run with `--nocapture` to see calls, failures and connections per host.
//!
//! Every test here but `child_host` is in the `external` test group (`#[ignore]`):
//! `cargo test --workspace` leaves them out, CI runs them, and
//! `cargo test -p keel --test balancers -- --ignored` runs them (`docs/testing.md`).
#![cfg(feature = "http")]
#![allow(missing_docs)]

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

/// The probe's counted sleep as an idempotent operation: keel's client sends a call of it
/// again after a lost connection (the killed-host test). The other keel-wire tests call the
/// probe's own `counted_sleep_ms`, which is never sent twice: no call of theirs may fail even
/// without retries.
#[keel::contract]
pub trait Retried {
    #[keel(idempotent)]
    async fn counted_sleep_ms(&self, ms: u64) -> u64;
}

impl Retried for ProbeImpl {
    async fn counted_sleep_ms(&self, ms: u64) -> u64 {
        Probe::counted_sleep_ms(self, ms).await
    }
}

// ---------------------------------------------------------------------------------------------
// Balancer processes
// ---------------------------------------------------------------------------------------------

/// The balancer's binary, or `None` (the caller skips) when it is missing and `require_env` is
/// not `1`; with it, a missing binary fails the test.
fn balancer_binary(name: &str, require_env: &str, package: &str) -> Option<PathBuf> {
    // /usr/sbin is not on every user's PATH; Debian installs both balancers there.
    let found = [
        PathBuf::from(name),
        Path::new("/usr/sbin").join(name),
        Path::new("/sbin").join(name),
    ]
    .into_iter()
    .find(|bin| {
        Command::new(bin)
            .arg("-v")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if found.is_none() {
        let required = std::env::var(require_env).is_ok_and(|v| v == "1");
        assert!(
            !required,
            "{require_env}=1 but {name} is not installed (Debian: apt-get install {package})"
        );
        println!(
            "SKIPPED: {name} is not installed (Debian: apt-get install {package}; \
             {require_env}=1 makes this a failure)"
        );
    }
    found
}

/// A fresh directory for one balancer's config, pid file and logs.
fn scratch_dir(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "keel-{name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A balancer running in the foreground as a child process; stopped (and its directory removed,
/// unless the test failed) on drop.
struct Balancer {
    name: &'static str,
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Balancer {
    /// Runs `command(port)` (which writes its config into `dir`) on a free port and waits until
    /// `started` says it serves. Should the port be taken between [`free_port`] and the
    /// balancer binding it, the balancer exits and another port is tried.
    async fn start(
        name: &'static str,
        dir: &Path,
        mut command: impl FnMut(u16) -> Command,
        started: impl Fn(&Balancer) -> bool,
    ) -> Balancer {
        for _ in 0..5 {
            let port = free_port();
            let out = std::fs::File::create(dir.join("stdout.log")).unwrap();
            let err = std::fs::File::create(dir.join("stderr.log")).unwrap();
            let child = command(port)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {name}: {e}"));
            let mut balancer = Balancer {
                name,
                child,
                dir: dir.to_path_buf(),
                port,
            };
            let until = Instant::now() + Duration::from_secs(30);
            loop {
                if balancer.child.try_wait().unwrap().is_some() {
                    eprintln!("{name} exited at start:\n{}", balancer.logs());
                    break;
                }
                if started(&balancer) {
                    return balancer;
                }
                assert!(
                    Instant::now() < until,
                    "{name} did not start within 30 s:\n{}",
                    balancer.logs()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        panic!("{name} did not start (see the logs above)");
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Every log file in the balancer's directory, for failure messages.
    fn logs(&self) -> String {
        let mut all = String::new();
        let mut names: Vec<_> = std::fs::read_dir(&self.dir)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default();
        names.sort();
        for path in names {
            if path.extension().is_some_and(|e| e == "log") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                all += &format!("--- {}\n{text}\n", path.display());
            }
        }
        all
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        // SIGTERM, not SIGKILL: nginx's master then stops its workers (killed, it would leave
        // them running, holding the port). SIGKILL only if it has not exited within 10 s.
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!("kill -TERM {}", self.child.id()))
            .status();
        let until = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "{}'s config and logs are kept in {}",
                self.name,
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `ip:port` of a host's first endpoint or admin URL.
fn authority(url: &str) -> &str {
    url.split_once("://").map_or(url, |(_, rest)| rest)
}

fn port_of(url: &str) -> u16 {
    authority(url).rsplit_once(':').unwrap().1.parse().unwrap()
}

// ---------------------------------------------------------------------------------------------
// nginx
// ---------------------------------------------------------------------------------------------

/// The nginx config: an upstream of `hosts` (`ip:port`) with a keep-alive cache, HTTP/1.1 to
/// them, and two locations: the idempotent operations (nginx may send them again to another
/// host after any failure), and every other operation (sent again only when it cannot have
/// reached a host).
fn nginx_conf(dir: &Path, port: u16, hosts: &[String]) -> String {
    let dir = dir.display();
    let servers: String = hosts
        .iter()
        .map(|h| format!("        server {h} max_fails=1 fail_timeout=10s;\n"))
        .collect();
    format!(
        r#"daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{
    worker_connections 1024;
}}
http {{
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    # Which host answered each call, and what each host tried answered (a retried call lists
    # them all, comma-separated).
    log_format upstreams '$status $request_uri "$upstream_addr" "$upstream_status"';
    access_log {dir}/access.log upstreams;
    keepalive_requests 1000000;

    upstream keel {{
{servers}        keepalive 16;
        keepalive_requests 1000000;
        keepalive_timeout 60s;
    }}

    server {{
        listen 127.0.0.1:{port};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_connect_timeout 2s;
        proxy_next_upstream_tries 3;

        # Idempotent operations: safe to run twice, so nginx may send them to another host
        # after any failure, even one after the request was sent.
        location ~ ^/Probe/(counted_sleep_ms|echo)$ {{
            proxy_pass http://keel;
            proxy_next_upstream error timeout http_503 non_idempotent;
        }}

        # Every other operation: sent again only when it cannot have reached a host (the
        # connection failed). keel's own clients send a 503 `keel-unprocessed: 1` again.
        location / {{
            proxy_pass http://keel;
            proxy_next_upstream error timeout;
        }}
    }}
}}
"#
    )
}

/// nginx in front of `hosts` (`ip:port`), or `None` when it is not installed (and not required).
async fn nginx(hosts: &[String]) -> Option<Balancer> {
    let bin = balancer_binary("nginx", "KEEL_REQUIRE_NGINX", "nginx")?;
    let dir = scratch_dir("nginx");
    let balancer = Balancer::start(
        "nginx",
        &dir,
        |port| {
            let conf = dir.join("nginx.conf");
            std::fs::write(&conf, nginx_conf(&dir, port, hosts)).unwrap();
            let mut cmd = Command::new(&bin);
            // -e: the error log before the config is read (else nginx tries /var/log/nginx).
            cmd.arg("-p")
                .arg(&dir)
                .arg("-e")
                .arg(dir.join("error.log"))
                .arg("-c")
                .arg(&conf);
            cmd
        },
        |nginx| std::net::TcpStream::connect(nginx.addr()).is_ok(),
    )
    .await;
    Some(balancer)
}

/// What nginx's access log says about the calls it answered 200: how many it sent to more
/// than one host before one answered, and the statuses those attempts got.
#[derive(Debug, Default)]
struct Retries {
    answered: usize,
    not_200: Vec<String>,
    retried: usize,
    /// `$upstream_status` of each retried call ("502, 200": the first host failed, e.g. its
    /// connection; "503, 200": it answered 503).
    attempts: Vec<String>,
}

fn nginx_retries(nginx: &Balancer) -> Retries {
    let log = std::fs::read_to_string(nginx.dir.join("access.log")).unwrap_or_default();
    let mut r = Retries::default();
    for line in log.lines() {
        let mut quoted = line.split('"');
        let head = quoted.next().unwrap_or("");
        let addrs = quoted.next().unwrap_or("");
        let statuses = quoted.nth(1).unwrap_or("");
        if !head.starts_with("200 ") {
            r.not_200.push(line.to_string());
            continue;
        }
        r.answered += 1;
        if addrs.contains(',') {
            r.retried += 1;
            r.attempts.push(statuses.to_string());
        }
    }
    r
}

/// An HTTP/1.1 client on one keep-alive connection that never sends a request twice: whatever
/// goes wrong with a call (an error status, a broken connection) is a failed call. keel's own
/// HTTP client sends a call answered `keel-unprocessed: 1` again; this one shows what nginx
/// does on its own.
struct RawHttp {
    addr: String,
    conn: Option<tokio::io::BufReader<tokio::net::TcpStream>>,
    opened: u64,
}

impl RawHttp {
    fn new(addr: &str) -> RawHttp {
        RawHttp {
            addr: addr.to_string(),
            conn: None,
            opened: 0,
        }
    }

    /// `POST path` with a JSON body: the answer's body if it is 200, else the failure.
    async fn post(&mut self, path: &str, json: &str) -> Result<String, String> {
        let answer = tokio::time::timeout(Duration::from_secs(30), self.exchange(path, json)).await;
        match answer {
            Ok(Ok((200, body, close))) => {
                if close {
                    self.conn = None;
                }
                Ok(body)
            }
            Ok(Ok((status, body, _))) => {
                self.conn = None;
                Err(format!("HTTP {status}: {body}"))
            }
            Ok(Err(e)) => {
                self.conn = None;
                Err(format!("connection: {e}"))
            }
            Err(_) => {
                self.conn = None;
                Err("no answer within 30 s".into())
            }
        }
    }

    /// One request and its answer: status, body, and whether the connection closes after it.
    async fn exchange(&mut self, path: &str, json: &str) -> std::io::Result<(u16, String, bool)> {
        if self.conn.is_none() {
            let s = tokio::net::TcpStream::connect(&self.addr).await?;
            s.set_nodelay(true)?;
            self.conn = Some(tokio::io::BufReader::new(s));
            self.opened += 1;
        }
        let conn = self.conn.as_mut().unwrap();
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: keel\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{json}",
            json.len()
        );
        conn.get_mut().write_all(request.as_bytes()).await?;
        let bad =
            |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        let mut line = String::new();
        if conn.read_line(&mut line).await? == 0 {
            return Err(bad("closed before an answer"));
        }
        let status: u16 = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(&format!("status line {line:?}")))?;
        let (mut length, mut chunked, mut close) = (None, false, false);
        loop {
            line.clear();
            if conn.read_line(&mut line).await? == 0 {
                return Err(bad("closed in the answer's head"));
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').ok_or_else(|| bad(header))?;
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            match name.as_str() {
                "content-length" => length = value.parse::<usize>().ok(),
                "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
                "connection" => close = value.eq_ignore_ascii_case("close"),
                _ => {}
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                conn.read_line(&mut line).await?;
                let size = usize::from_str_radix(line.trim(), 16).map_err(|_| bad("chunk size"))?;
                let mut chunk = vec![0; size + 2];
                conn.read_exact(&mut chunk).await?;
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        } else {
            body.resize(length.ok_or_else(|| bad("no content-length"))?, 0);
            conn.read_exact(&mut body).await?;
        }
        Ok((status, String::from_utf8_lossy(&body).into_owned(), close))
    }
}

// ---------------------------------------------------------------------------------------------
// HAProxy
// ---------------------------------------------------------------------------------------------

/// The HAProxy config: TCP mode (keel-wire passes through untouched), round robin over
/// `hosts` (`(name, ip:port of the keel-wire endpoint, admin port)`), each checked with
/// `GET /readyz` on its admin endpoint every 100 ms (production: 1–2 s); one failed check marks
/// a host down, one passed check up again.
fn haproxy_conf(dir: &Path, port: u16, hosts: &[(String, String, u16)]) -> String {
    let dir = dir.display();
    let servers: String = hosts
        .iter()
        .map(|(name, addr, admin)| format!("    server {name} {addr} check port {admin}\n"))
        .collect();
    format!(
        r#"global
    maxconn 1024
    stats socket {dir}/haproxy.sock mode 600 level admin
    log stderr format raw local0 notice

defaults
    mode tcp
    log global
    timeout connect 2s
    # Longer than keel's keepalive pings (20 s from its clients), so a quiet keel-wire
    # connection is never cut by HAProxy.
    timeout client 1m
    timeout server 1m
    timeout check 2s
    # A host that refuses the connection (killed, not yet marked down): try again, each time
    # on another host. Nothing was forwarded yet, so this is always safe.
    retries 3
    option redispatch 1

frontend keel
    bind 127.0.0.1:{port}
    default_backend keel_hosts

backend keel_hosts
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 100ms fastinter 100ms downinter 100ms fall 1 rise 1
{servers}"#
    )
}

/// HAProxy in front of `hosts` (see [`haproxy_conf`]), or `None` when it is not installed (and
/// not required). Returns once every host is up.
async fn haproxy(hosts: &[(String, String, u16)]) -> Option<Balancer> {
    let bin = balancer_binary("haproxy", "KEEL_REQUIRE_HAPROXY", "haproxy")?;
    let dir = scratch_dir("haproxy");
    let balancer = Balancer::start(
        "haproxy",
        &dir,
        |port| {
            let conf = dir.join("haproxy.cfg");
            std::fs::write(&conf, haproxy_conf(&dir, port, hosts)).unwrap();
            let mut cmd = Command::new(&bin);
            // -db: foreground, no daemon.
            cmd.arg("-db").arg("-f").arg(&conf);
            cmd
        },
        |haproxy| {
            // Its stats socket, not its port: a connection to the port would be one more session
            // to a host.
            !haproxy_stats(haproxy).is_empty()
        },
    )
    .await;
    let names: Vec<&str> = hosts.iter().map(|(n, _, _)| n.as_str()).collect();
    assert!(
        eventually_within(Duration::from_secs(30), || {
            let stats = haproxy_stats(&balancer);
            names
                .iter()
                .all(|n| stats.iter().any(|s| s.name == *n && s.status == "UP"))
        })
        .await,
        "timed out waiting until HAProxy sees every host up"
    );
    Some(balancer)
}

/// One server's line of HAProxy's `show stat`.
#[derive(Debug, Clone)]
struct ServerStat {
    name: String,
    /// `UP`, `DOWN`, ...
    status: String,
    /// Connections HAProxy sent to it so far (its sessions; health checks not included).
    sessions: u64,
}

/// `show stat` on HAProxy's stats socket: the backend's servers.
fn haproxy_stats(haproxy: &Balancer) -> Vec<ServerStat> {
    use std::io::Read;
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(haproxy.dir.join("haproxy.sock"))
    else {
        return Vec::new();
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"show stat\n").unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let columns: Vec<&str> = header.trim_start_matches("# ").split(',').collect();
    let col = |name: &str| columns.iter().position(|c| *c == name).unwrap();
    let (px, sv, status, stot) = (col("pxname"), col("svname"), col("status"), col("stot"));
    lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| f.len() > stot && f[px] == "keel_hosts" && f[sv] != "BACKEND")
        .map(|f| ServerStat {
            name: f[sv].to_string(),
            status: f[status].to_string(),
            sessions: f[stot].parse().unwrap_or(0),
        })
        .collect()
}

fn server_stat(haproxy: &Balancer, name: &str) -> ServerStat {
    haproxy_stats(haproxy)
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no server {name} in HAProxy's stats"))
}

// ---------------------------------------------------------------------------------------------
// Hosts, load and polling
// ---------------------------------------------------------------------------------------------

/// `GET path` on an admin endpoint: the status.
async fn admin_get(admin: &str, path: &str) -> Option<u16> {
    let mut s = tokio::net::TcpStream::connect(authority(admin))
        .await
        .ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.ok()?;
    String::from_utf8_lossy(&raw)
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

/// Calls that succeeded and failed, over every client of a run.
#[derive(Debug, Default)]
struct Tally {
    ok: AtomicU64,
    failed: Mutex<Vec<String>>,
}

impl Tally {
    fn record(&self, outcome: Result<(), String>) {
        match outcome {
            Ok(()) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => self.failed.lock().unwrap().push(e),
        }
    }

    fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    fn failed(&self) -> Vec<String> {
        self.failed.lock().unwrap().clone()
    }
}

/// Clients calling in a loop until stopped.
struct Load {
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<u64>>,
}

impl Load {
    /// `clients` raw HTTP/1.1 clients on connections of their own to `addr`, each calling
    /// `Probe.counted_sleep_ms(ms)` (idempotent) in a loop.
    fn http(addr: &str, clients: usize, ms: u64) -> Load {
        let (tally, stop) = (Arc::new(Tally::default()), Arc::new(AtomicBool::new(false)));
        let tasks = (0..clients)
            .map(|_| {
                let (tally, stop) = (tally.clone(), stop.clone());
                let mut client = RawHttp::new(addr);
                tokio::spawn(async move {
                    let body = format!(r#"{{"ms": {ms}}}"#);
                    while !stop.load(Ordering::Relaxed) {
                        let outcome = match client.post("/Probe/counted_sleep_ms", &body).await {
                            Ok(answer) if answer.trim() == ms.to_string() => Ok(()),
                            Ok(answer) => Err(format!("wrong answer {answer:?}")),
                            Err(e) => Err(e),
                        };
                        tally.record(outcome);
                    }
                    client.opened
                })
            })
            .collect();
        Load { tally, stop, tasks }
    }

    /// `tasks` tasks each making `call(ms)` in a loop (calls of one keel client: one channel),
    /// `ms` the answer it expects.
    fn keel<F, Fut>(tasks: usize, ms: u64, call: F) -> Load
    where
        F: Fn(u64) -> Fut + Clone + Send + 'static,
        Fut: std::future::Future<Output = Result<u64, keel::Error>> + Send,
    {
        let (tally, stop) = (Arc::new(Tally::default()), Arc::new(AtomicBool::new(false)));
        let tasks = (0..tasks)
            .map(|_| {
                let (tally, stop, call) = (tally.clone(), stop.clone(), call.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let outcome = match call(ms).await {
                            Ok(got) if got == ms => Ok(()),
                            Ok(got) => Err(format!("wrong answer {got}")),
                            Err(e) => Err(format!("{e} ({:?})", e.status_code())),
                        };
                        tally.record(outcome);
                    }
                    0
                })
            })
            .collect();
        Load { tally, stop, tasks }
    }

    /// [`Load::keel`] calling the probe's `counted_sleep_ms` (not idempotent: never retried).
    fn probe(client: &ProbeClient, tasks: usize, ms: u64) -> Load {
        let client = client.clone();
        Load::keel(tasks, ms, move |ms| {
            let client = client.clone();
            async move { client.counted_sleep_ms(ms).await }
        })
    }

    /// Stops the clients: the connections each opened (raw HTTP clients; 0 for keel tasks).
    async fn stop(self) -> (Arc<Tally>, Vec<u64>) {
        self.stop.store(true, Ordering::Relaxed);
        let mut opened = Vec::new();
        for t in self.tasks {
            opened.push(t.await.unwrap());
        }
        (self.tally, opened)
    }
}

/// Calls whose handler started, over all `probes`.
fn started(probes: &[ProbeImpl]) -> u64 {
    probes
        .iter()
        .map(|p| p.started.load(Ordering::SeqCst))
        .sum()
}

/// Three hosts' handlers' counters: calls each ran to the end.
fn completed(probes: &[ProbeImpl]) -> Vec<u64> {
    probes
        .iter()
        .map(|p| p.completed.load(Ordering::SeqCst))
        .collect()
}

/// Whether every probe has served at least `calls` calls within a minute.
async fn every_host_served(probes: &[ProbeImpl], calls: u64) -> bool {
    eventually_within(Duration::from_secs(60), || {
        completed(probes).iter().all(|&c| c >= calls)
    })
    .await
}

/// `n` `http://` hosts serving the probe, and their handlers (whose counters the test reads).
fn http_hosts(n: usize) -> (Vec<keel::Host>, Vec<ProbeImpl>) {
    (0..n)
        .map(|_| {
            let probe = ProbeImpl::default();
            let host = Binding::Http1.host_serving(probe.clone(), |h| h, "http://127.0.0.1:0");
            (host, probe)
        })
        .unzip()
}

/// `n` keel-wire hosts with an admin endpoint, `settings(i, builder)` on top.
fn wire_hosts(
    n: usize,
    settings: impl Fn(usize, keel::host::HostBuilder) -> keel::host::HostBuilder,
) -> (Vec<keel::Host>, Vec<ProbeImpl>) {
    (0..n)
        .map(|i| {
            let probe = ProbeImpl::default();
            let host = Binding::Tcp.host_serving(
                probe.clone(),
                |h| {
                    let h = h.service(RetriedServer::new(probe.clone()));
                    settings(i, h.admin("http://127.0.0.1:0"))
                },
                "tcp://127.0.0.1:0",
            );
            (host, probe)
        })
        .unzip()
}

/// HAProxy's view of keel-wire hosts: `(h<i>, ip:port, admin port)`.
fn haproxy_servers(hosts: &[keel::Host]) -> Vec<(String, String, u16)> {
    hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            (
                format!("h{i}"),
                authority(h.url()).to_string(),
                port_of(h.admin_url().unwrap()),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// A host in a child process, to kill with SIGKILL
// ---------------------------------------------------------------------------------------------

/// Not a test of its own: the body of a host in a child process (see [`ChildHost`]), which
/// the tests below kill with SIGKILL. It answers `completed` with the calls its handler ran to
/// the end. Run by `cargo test`, it returns at once.
#[test]
fn child_host() {
    let probe = ProbeImpl::default();
    serve_child_host(
        |url| {
            keel::Host::builder()
                .service(ProbeServer::new(probe.clone()))
                .service(RetriedServer::new(probe.clone()))
                .endpoint(url)
                .admin("http://127.0.0.1:0")
                .start()
                .expect("child host starts")
        },
        |line| {
            assert_eq!(line, "completed");
            probe.completed.load(Ordering::SeqCst).to_string()
        },
    );
}

/// A keel host in a child process ([`child_host`]) listening at `url` (port 0).
fn child_host_at(url: &str) -> ChildHost {
    tokio::task::block_in_place(|| ChildHost::start(url))
}

/// Calls the handler of the host in `child` ran to the end so far.
fn completed_in(child: &mut ChildHost) -> u64 {
    tokio::task::block_in_place(|| child.ask("completed").parse().unwrap())
}

// ---------------------------------------------------------------------------------------------
// nginx tests
// ---------------------------------------------------------------------------------------------

/// Calls through nginx go to all three hosts (round robin), over a few upstream connections
/// per host that nginx keeps and reuses, not one per call. keel's own HTTP/1.1 client works
/// through it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "external: runs nginx"]
async fn nginx_spreads_calls_over_reused_upstream_connections() {
    let (hosts, probes) = http_hosts(3);
    let upstreams: Vec<String> = hosts
        .iter()
        .map(|h| authority(h.url()).to_string())
        .collect();
    let Some(nginx) = nginx(&upstreams).await else {
        return;
    };

    const CALLS: u64 = 3_000;
    let load = Load::http(&nginx.addr(), 8, 0);
    assert!(
        eventually_within(Duration::from_secs(120), || load.tally.ok() >= CALLS
            || !load.tally.failed().is_empty())
        .await,
        "timed out waiting until 3,000 calls through nginx"
    );
    let (tally, client_conns) = load.stop().await;

    // keel's own client through nginx (HTTP/1.1).
    let keel_client = ProbeClient::new(Binding::Http1.channel(&format!("http://{}", nginx.addr())));
    for i in 0..100 {
        let s = format!("call {i}");
        assert_eq!(keel_client.echo(s.clone()).await.unwrap(), s);
    }

    let per_host = completed(&probes);
    let stats: Vec<keel::host::HostStats> = hosts.iter().map(|h| h.stats()).collect();
    println!("nginx, 8 raw HTTP/1.1 clients, {} calls:", tally.ok());
    for (i, (calls, s)) in per_host.iter().zip(&stats).enumerate() {
        println!(
            "  host {i}: {calls} calls, {} connections opened by nginx",
            s.connections_opened
        );
    }
    println!(
        "  failed calls: {}; client connections to nginx: {client_conns:?}",
        tally.failed().len()
    );
    assert!(tally.failed().is_empty(), "{:?}", tally.failed());
    let total: u64 = per_host.iter().sum();
    assert!(total >= CALLS, "{per_host:?}");
    for (i, (calls, s)) in per_host.iter().zip(&stats).enumerate() {
        // Round robin: a third each; a tenth each is spread, one host taking all is not.
        assert!(*calls >= total / 10, "host {i}: {per_host:?}");
        // Reused: at most one upstream connection per 20 calls (it is about one per 100+).
        assert!(
            s.connections_opened >= 1 && s.connections_opened * 20 <= *calls,
            "host {i}: {calls} calls over {} connections",
            s.connections_opened
        );
    }
    assert!(client_conns.iter().all(|&c| c == 1), "{client_conns:?}");
    let log = nginx_retries(&nginx);
    assert_eq!(log.retried, 0, "nothing failed, nothing retried: {log:?}");
    for h in hosts {
        h.shutdown_async().await;
    }
}

/// A host shut down (drained) in the middle of a run: nginx has no active health checks, so it
/// goes on sending calls there until one fails. The calls the host took before the drain are
/// answered; one that reaches it while it drains is answered 503 `keel-unprocessed: 1` (it did
/// not run), and once it stopped its port refuses connections: nginx sends both to another
/// host, so no call fails, and the drained host gets no more calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "external: runs nginx"]
async fn nginx_a_drained_host_costs_no_failed_call() {
    let (mut hosts, probes) = http_hosts(3);
    let upstreams: Vec<String> = hosts
        .iter()
        .map(|h| authority(h.url()).to_string())
        .collect();
    let Some(nginx) = nginx(&upstreams).await else {
        return;
    };
    let load = Load::http(&nginx.addr(), 8, 2);
    assert!(
        every_host_served(&probes, 100).await,
        "timed out waiting until every host served 100 calls"
    );

    let drained = hosts.remove(0);
    let report = drained.shutdown_async().await;
    assert_eq!(report.abandoned_calls, 0);
    let at_drain = completed(&probes);
    assert!(
        eventually_within(Duration::from_secs(60), || {
            let now = completed(&probes);
            now[1] >= at_drain[1] + 300 && now[2] >= at_drain[2] + 300
        })
        .await,
        "timed out waiting until the other hosts served 300 more calls each"
    );
    let (tally, _) = load.stop().await;

    let per_host = completed(&probes);
    let log = nginx_retries(&nginx);
    println!(
        "nginx, host 0 drained mid-run: {} calls, failed calls: {}",
        tally.ok(),
        tally.failed().len()
    );
    println!("  calls per host at the drain: {at_drain:?}; at the end: {per_host:?}");
    for (i, h) in hosts.iter().enumerate() {
        println!(
            "  host {}: {} connections opened by nginx",
            i + 1,
            h.stats().connections_opened
        );
    }
    println!(
        "  nginx sent {} calls to another host ($upstream_status: {:?})",
        log.retried, log.attempts
    );
    assert!(tally.failed().is_empty(), "{:?}", tally.failed());
    assert!(log.not_200.is_empty(), "{:?}", log.not_200);
    // The drained host ran nothing more once its shutdown returned.
    assert_eq!(per_host[0], at_drain[0]);
    // nginx found out by failing over: at least the first call it sent to the stopped host
    // (a 503 `keel-unprocessed` during the drain, or a refused connection after it) went to
    // another host.
    assert!(log.retried >= 1, "{log:?}");
    // And sending those again was safe: every call ran exactly once, and no handler was cut
    // short by the drain.
    assert_eq!(per_host.iter().sum::<u64>(), tally.ok());
    assert_eq!(started(&probes), tally.ok());
    for h in hosts {
        h.shutdown_async().await;
    }
}

/// A host killed (SIGKILL, a host in a child process) in the middle of a run: calls it was
/// running are lost with it; nginx sees their connections break and sends them to another host
/// (`non_idempotent` on the idempotent operations' location), so no idempotent call fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "external: runs nginx"]
async fn nginx_a_killed_host_costs_no_failed_idempotent_call() {
    let mut victim = child_host_at("http://127.0.0.1:0");
    let (hosts, probes) = http_hosts(2);
    let mut upstreams = vec![authority(victim.url()).to_string()];
    upstreams.extend(hosts.iter().map(|h| authority(h.url()).to_string()));
    let Some(nginx) = nginx(&upstreams).await else {
        return;
    };
    // 5 ms calls: some are running on the victim when it dies.
    let load = Load::http(&nginx.addr(), 8, 5);
    assert!(
        eventually_within(Duration::from_secs(60), || completed_in(&mut victim) >= 100).await,
        "timed out waiting until the victim served 100 calls"
    );
    let victim_calls = completed_in(&mut victim);
    victim.kill();
    let at_kill = completed(&probes);
    assert!(
        eventually_within(Duration::from_secs(60), || {
            let now = completed(&probes);
            now[0] >= at_kill[0] + 300 && now[1] >= at_kill[1] + 300
        })
        .await,
        "timed out waiting until the other hosts served 300 more calls each"
    );
    let (tally, _) = load.stop().await;

    let per_host = completed(&probes);
    let log = nginx_retries(&nginx);
    println!(
        "nginx, host 0 killed (SIGKILL) mid-run: {} calls, failed calls: {}",
        tally.ok(),
        tally.failed().len()
    );
    println!(
        "  host 0 (killed): at least {victim_calls} calls; hosts 1, 2 at the kill: {at_kill:?}; \
         at the end: {per_host:?}"
    );
    println!(
        "  nginx sent {} calls to another host ($upstream_status: {:?})",
        log.retried, log.attempts
    );
    for (i, h) in hosts.iter().enumerate() {
        println!(
            "  host {}: {} connections opened by nginx",
            i + 1,
            h.stats().connections_opened
        );
    }
    assert!(tally.failed().is_empty(), "{:?}", tally.failed());
    assert!(log.not_200.is_empty(), "{:?}", log.not_200);
    assert!(log.retried >= 1, "{log:?}");
    for h in hosts {
        h.shutdown_async().await;
    }
}

// ---------------------------------------------------------------------------------------------
// HAProxy tests
// ---------------------------------------------------------------------------------------------

/// One channel through HAProxy in TCP mode keeps one keel-wire connection; with the hosts'
/// maximum connection age, each host says GoAway to it after about a second, the channel opens
/// a new one, and HAProxy sends that to the next host: over a few seconds the channel's calls
/// spread over all three, each connection carrying many calls, and no call fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "external: runs HAProxy"]
async fn haproxy_spreads_one_channel_with_connection_age() {
    let (hosts, probes) = wire_hosts(3, |_, h| {
        h.max_connection_age(Duration::from_secs(1), Duration::from_secs(10))
    });
    let Some(haproxy) = haproxy(&haproxy_servers(&hosts)).await else {
        return;
    };
    let client =
        ProbeClient::new(keel::Channel::new(&format!("tcp://{}", haproxy.addr())).unwrap());
    let load = Load::probe(&client, 4, 1);
    assert!(
        every_host_served(&probes, 100).await,
        "timed out waiting until every host served 100 calls"
    );
    let (tally, _) = load.stop().await;

    let per_host = completed(&probes);
    let stats: Vec<keel::host::HostStats> = hosts.iter().map(|h| h.stats()).collect();
    let sessions = haproxy_stats(&haproxy);
    let channel = client.channel().stats();
    println!(
        "HAProxy (TCP), one channel, connection age 1 s: {} calls, failed calls: {}",
        tally.ok(),
        tally.failed().len()
    );
    for (i, (calls, s)) in per_host.iter().zip(&stats).enumerate() {
        println!(
            "  host {i}: {calls} calls, {} connections opened",
            s.connections_opened
        );
    }
    println!(
        "  channel: {} connections opened; HAProxy sessions per server: {:?}",
        channel.connections_opened,
        sessions
            .iter()
            .map(|s| (s.name.as_str(), s.sessions))
            .collect::<Vec<_>>()
    );
    assert!(tally.failed().is_empty(), "{:?}", tally.failed());
    // The one channel's connection was replaced (GoAway for its age) and HAProxy sent the new
    // ones to every host.
    assert!(channel.connections_opened >= 3, "{channel:?}");
    for (i, (calls, s)) in per_host.iter().zip(&stats).enumerate() {
        assert!(*calls >= 100, "host {i}: {per_host:?}");
        // Each connection carries many calls (here about a second's worth; under a starved
        // CPU, 40 or so): at least 5 on average, far from one per call.
        assert!(
            s.connections_opened >= 1 && s.connections_opened * 5 <= *calls,
            "host {i}: {calls} calls over {} connections",
            s.connections_opened
        );
    }
    for h in hosts {
        h.shutdown_async().await;
    }
}

/// Readiness: host 0 begins a shutdown with a drain grace. Its `/readyz` answers 503 at once,
/// HAProxy's check marks it down while it still serves (the grace has not run out: the
/// shutdown has not returned and `/healthz` answers 200), HAProxy sends it no new connection
/// from then on, and the channel's connection there moves on at the drain's GoAway: no call
/// fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "external: runs HAProxy"]
async fn haproxy_marks_a_draining_host_down_before_it_closes() {
    let (mut hosts, probes) = wire_hosts(3, |i, h| {
        let h = h.max_connection_age(Duration::from_secs(1), Duration::from_secs(10));
        // Host 0 is drained mid-run: 5 s for HAProxy (checking every 100 ms) to notice.
        if i == 0 {
            h.drain_grace(Duration::from_secs(5))
        } else {
            h
        }
    });
    let Some(haproxy) = haproxy(&haproxy_servers(&hosts)).await else {
        return;
    };
    let client =
        ProbeClient::new(keel::Channel::new(&format!("tcp://{}", haproxy.addr())).unwrap());
    let load = Load::probe(&client, 4, 1);
    assert!(
        eventually_within(Duration::from_secs(60), || completed(&probes)
            .iter()
            .all(|&c| c >= 50))
        .await,
        "timed out waiting until every host served 50 calls"
    );

    let draining = hosts.remove(0);
    let admin = draining.admin_url().unwrap().to_string();
    let shutdown = tokio::spawn(draining.shutdown_async());
    assert!(
        eventually_within(Duration::from_secs(30), || {
            server_stat(&haproxy, "h0").status.starts_with("DOWN")
        })
        .await,
        "timed out waiting until HAProxy marks host 0 down"
    );
    // Down while the host still serves: its shutdown is in the grace.
    let down = server_stat(&haproxy, "h0");
    assert!(
        !shutdown.is_finished(),
        "host 0 stopped before HAProxy marked it down"
    );
    assert_eq!(admin_get(&admin, "/readyz").await, Some(503));
    assert_eq!(admin_get(&admin, "/healthz").await, Some(200));
    let at_down = completed(&probes);

    let report = shutdown.await.unwrap();
    assert_eq!(report.abandoned_calls, 0);
    let at_drain = completed(&probes);
    assert!(
        eventually_within(Duration::from_secs(60), || {
            let now = completed(&probes);
            now[1] >= at_drain[1] + 100 && now[2] >= at_drain[2] + 100
        })
        .await,
        "timed out waiting until the other hosts served 100 more calls each"
    );
    let (tally, _) = load.stop().await;

    let per_host = completed(&probes);
    let after = server_stat(&haproxy, "h0");
    println!(
        "HAProxy (TCP), host 0 drained with a 5 s grace: {} calls, failed calls: {}",
        tally.ok(),
        tally.failed().len()
    );
    println!(
        "  calls per host when HAProxy marked host 0 down: {at_down:?}; when its shutdown \
         returned: {at_drain:?}; at the end: {per_host:?}"
    );
    println!(
        "  HAProxy sessions to host 0: {} when marked down, {} at the end; channel: {} \
         connections opened",
        down.sessions,
        after.sessions,
        client.channel().stats().connections_opened
    );
    for (i, h) in hosts.iter().enumerate() {
        println!(
            "  host {}: {} connections opened",
            i + 1,
            h.stats().connections_opened
        );
    }
    assert!(tally.failed().is_empty(), "{:?}", tally.failed());
    // Not one new connection to the host once marked down, and nothing ran there after its
    // drain.
    assert_eq!(after.sessions, down.sessions);
    assert!(after.status.starts_with("DOWN"), "{after:?}");
    assert_eq!(per_host[0], at_drain[0]);
    // Every call ran exactly once (none is retried: the operation is not idempotent), and no
    // handler was cut short by the drain.
    assert_eq!(per_host.iter().sum::<u64>(), tally.ok());
    assert_eq!(started(&probes), tally.ok());
    for h in hosts {
        h.shutdown_async().await;
    }
}

/// A keel-wire host killed (SIGKILL) in the middle of a run behind HAProxy: the channel's
/// connection through HAProxy to it breaks with calls in flight. Those calls may have run, so
/// neither HAProxy (in TCP mode it sees no calls) nor keel may send them again unless the
/// operation is idempotent: keel's client retries these (`#[keel(idempotent)]`) on a new
/// connection, which HAProxy sends to a live host, and no call fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "external: runs HAProxy"]
async fn haproxy_a_killed_host_costs_no_failed_idempotent_call() {
    let mut victim = child_host_at("tcp://127.0.0.1:0");
    let (hosts, probes) = wire_hosts(2, |_, h| {
        h.max_connection_age(Duration::from_secs(1), Duration::from_secs(10))
    });
    let mut servers = vec![(
        "h0".to_string(),
        authority(victim.url()).to_string(),
        port_of(victim.admin_url().unwrap()),
    )];
    servers.extend(
        haproxy_servers(&hosts)
            .into_iter()
            .enumerate()
            .map(|(i, (_, addr, admin))| (format!("h{}", i + 1), addr, admin)),
    );
    let Some(haproxy) = haproxy(&servers).await else {
        return;
    };
    let client =
        RetriedClient::new(keel::Channel::new(&format!("tcp://{}", haproxy.addr())).unwrap());
    // 5 ms calls, 8 at a time: some are running on the victim when it dies (the victim has no
    // connection age: once the channel's connection lands there, it stays until the kill).
    let load = Load::keel(8, 5, {
        let client = client.clone();
        move |ms| {
            let client = client.clone();
            async move { client.counted_sleep_ms(ms).await }
        }
    });
    assert!(
        eventually_within(Duration::from_secs(60), || completed_in(&mut victim) >= 100).await,
        "timed out waiting until the victim served 100 calls"
    );
    let victim_calls = completed_in(&mut victim);
    victim.kill();
    let at_kill = completed(&probes);
    assert!(
        eventually_within(Duration::from_secs(60), || {
            let now = completed(&probes);
            now[0] >= at_kill[0] + 300 && now[1] >= at_kill[1] + 300
        })
        .await,
        "timed out waiting until the other hosts served 300 more calls each"
    );
    let (tally, _) = load.stop().await;
    let per_host = completed(&probes);
    println!(
        "HAProxy (TCP), host 0 killed (SIGKILL) mid-run: {} calls, failed calls: {}",
        tally.ok(),
        tally.failed().len()
    );
    println!(
        "  host 0 (killed): at least {victim_calls} calls; hosts 1, 2 at the kill: {at_kill:?}; \
         at the end: {per_host:?}"
    );
    let channel = client.channel().stats();
    println!(
        "  channel: {} connections opened, {} retries, {} refused by the budget",
        channel.connections_opened, channel.retries, channel.retries_refused_by_budget
    );
    for (i, h) in hosts.iter().enumerate() {
        println!(
            "  host {}: {} connections opened",
            i + 1,
            h.stats().connections_opened
        );
    }
    assert!(tally.failed().is_empty(), "{:?}", tally.failed());
    // The calls running on the victim when it died were sent again.
    assert!(channel.retries >= 1, "{channel:?}");
    assert!(
        eventually_within(Duration::from_secs(30), || server_stat(&haproxy, "h0")
            .status
            .starts_with("DOWN"))
        .await,
        "timed out waiting until HAProxy marks the killed host down"
    );
    for h in hosts {
        h.shutdown_async().await;
    }
}
