//! The services of the runnable examples, shared by the examples and by keel-lab.
//!
//! - [`calculator`]: seed 000's Calculator (add, subtract, multiply, divide with a fault).
//! - [`service1`]: seed 002's Service1 (`get_data` sleeps, like the seed's 2 s operation).
//! - [`transfer`]: streamed upload and download of any size.

pub mod calculator;
pub mod service1;
pub mod transfer;

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

impl Mode {
    /// Parses `[--serve URL | --connect URL]` from the process arguments.
    pub fn from_args() -> Result<Mode, String> {
        Mode::parse(std::env::args().skip(1))
    }

    /// Parses `[--serve URL | --connect URL]`.
    pub fn parse(mut args: impl Iterator<Item = String>) -> Result<Mode, String> {
        let mode = match args.next().as_deref() {
            None => Mode::Both,
            Some("--serve") => Mode::Serve(args.next().ok_or("--serve needs a URL")?),
            Some("--connect") => Mode::Connect(args.next().ok_or("--connect needs a URL")?),
            Some(other) => {
                return Err(format!(
                    "unknown argument `{other}`; usage: [--serve URL | --connect URL]"
                ))
            }
        };
        if let Some(extra) = args.next() {
            return Err(format!("unexpected argument `{extra}`"));
        }
        Ok(mode)
    }
}

/// Serves until the process is interrupted (Ctrl-C), then exits.
pub fn serve_forever(host: keel::Host) -> ! {
    println!("listening on {}", host.url());
    println!("press Ctrl-C to stop");
    loop {
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Mode, String> {
        Mode::parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn modes() {
        assert_eq!(parse(&[]), Ok(Mode::Both));
        assert_eq!(
            parse(&["--serve", "tcp://0.0.0.0:7000"]),
            Ok(Mode::Serve("tcp://0.0.0.0:7000".into()))
        );
        assert_eq!(
            parse(&["--connect", "tcp://h:1"]),
            Ok(Mode::Connect("tcp://h:1".into()))
        );
        assert!(parse(&["--serve"]).is_err());
        assert!(parse(&["--bogus"]).is_err());
        assert!(parse(&["--connect", "tcp://h:1", "x"]).is_err());
    }
}
