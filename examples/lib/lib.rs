//! The services of the runnable examples, shared by the examples and by keel-lab.
//!
//! - [`accounts`]: the auth example's Accounts, behind a bearer-token interceptor.
//! - [`calculator`]: seed 000's Calculator (add, subtract, multiply, divide with a fault).
//! - [`otel`]: W3C trace context (`traceparent`, `tracestate`) in metadata, so an OpenTelemetry
//!   pipeline shows client and host spans in one trace (the trace example).
//! - [`service1`]: seed 002's Service1 (`get_data` sleeps, like the seed's 2 s operation).
//! - [`transfer`]: streamed upload and download of any size.
//! - [`wan`]: seed 004's echo and 277 KiB upload, buffered or streamed.

pub mod accounts;
pub mod calculator;
pub mod duplex;
pub mod otel;
pub mod routeguide;
pub mod service1;
pub mod ticker;
pub mod transfer;
pub mod wan;

/// What an example binary was asked to do, from its command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Host and call in one process.
    Both,
    /// `--serve URL`: host only, until interrupted.
    Serve(String),
    /// `--connect URL`: client only.
    Connect(String),
}

/// The `[--serve URL | --connect URL]` options of an example binary; flatten them into its
/// `clap` parser (`#[command(flatten)]`) and call [`ModeArgs::mode`].
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ModeArgs {
    /// Host only, on URL (e.g. tcp://127.0.0.1:7000), until interrupted
    #[arg(long, value_name = "URL", conflicts_with = "connect")]
    pub serve: Option<String>,
    /// Client only: call a host already listening on URL
    #[arg(long, value_name = "URL")]
    pub connect: Option<String>,
    /// With --serve: an admin endpoint on URL (e.g. http://127.0.0.1:9464) serving GET
    /// /metrics (Prometheus text), /healthz and /readyz
    #[arg(long, value_name = "URL", requires = "serve")]
    pub admin: Option<String>,
}

impl ModeArgs {
    /// The [`Mode`] these options ask for: [`Mode::Both`] when neither is given.
    pub fn mode(&self) -> Mode {
        match (self.serve.clone(), self.connect.clone()) {
            (Some(url), _) => Mode::Serve(url),
            (None, Some(url)) => Mode::Connect(url),
            (None, None) => Mode::Both,
        }
    }
}

/// `builder` with the admin endpoint `--admin URL` asked for, if it did.
pub fn with_admin(
    builder: keel::host::HostBuilder,
    admin: Option<&str>,
) -> keel::host::HostBuilder {
    match admin {
        Some(url) => builder.admin(url),
        None => builder,
    }
}

/// Serves until SIGINT (Ctrl-C) or SIGTERM, drains (calls in flight are answered), then exits
/// the process: `Host::serve_until_signal`, on a thread of its own so that async `main`s can
/// call it too.
pub fn serve_until_signal(host: keel::Host) -> ! {
    println!("listening on {}", host.url());
    if let Some(admin) = host.admin_url() {
        println!("admin endpoint on {admin} (/metrics, /healthz, /readyz)");
    }
    println!("press Ctrl-C (or send SIGTERM) to drain and stop");
    let served = std::thread::spawn(move || host.serve_until_signal())
        .join()
        .expect("the serving thread does not panic");
    match served {
        Ok(report) => {
            println!("drained; {} calls abandoned", report.abandoned_calls);
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        mode: ModeArgs,
    }

    fn parse(args: &[&str]) -> Result<Mode, clap::Error> {
        Cli::try_parse_from(std::iter::once("example").chain(args.iter().copied()))
            .map(|cli| cli.mode.mode())
    }

    #[test]
    fn modes() {
        assert_eq!(parse(&[]).unwrap(), Mode::Both);
        assert_eq!(
            parse(&["--serve", "tcp://0.0.0.0:7000"]).unwrap(),
            Mode::Serve("tcp://0.0.0.0:7000".into())
        );
        assert_eq!(
            parse(&["--connect", "tcp://h:1"]).unwrap(),
            Mode::Connect("tcp://h:1".into())
        );
        assert!(parse(&["--serve"]).is_err());
        assert!(
            parse(&["--admin", "http://h:1"]).is_err(),
            "--admin needs --serve"
        );
        assert!(parse(&["--serve", "tcp://h:1", "--admin", "http://h:2"]).is_ok());
        assert!(parse(&["--bogus"]).is_err());
        assert!(parse(&["--connect", "tcp://h:1", "x"]).is_err());
        assert!(parse(&["--serve", "tcp://h:1", "--connect", "tcp://h:1"]).is_err());
    }
}
