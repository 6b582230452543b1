//! WCF's Calculator Duplex sample, ported: one-way operations on a running result kept per
//! session, and a callback contract the service calls on the client with each result and, on
//! `clear`, the whole equation.

use std::sync::Mutex;

/// The callback contract: what the service calls on the client (WCF's
/// `ICalculatorDuplexCallback`).
#[keel::contract]
pub trait CalculatorDuplexCallback {
    /// The running result after an operation.
    #[keel(one_way)]
    fn result(&self, value: f64);
    /// The equation so far, sent by `clear`.
    #[keel(one_way)]
    fn equation(&self, text: String);
}

/// The service contract (WCF's `ICalculatorDuplex`): one-way operations on a running result.
#[keel::contract(callback = CalculatorDuplexCallback)]
pub trait CalculatorDuplex {
    /// Sends the equation so far and starts again from 0.
    #[keel(one_way)]
    fn clear(&self, ctx: keel::Context);
    /// Adds `n`.
    #[keel(one_way)]
    fn add_to(&self, ctx: keel::Context, n: f64);
    /// Subtracts `n`.
    #[keel(one_way)]
    fn subtract_from(&self, ctx: keel::Context, n: f64);
    /// Multiplies by `n`.
    #[keel(one_way)]
    fn multiply_by(&self, ctx: keel::Context, n: f64);
    /// Divides by `n`.
    #[keel(one_way)]
    fn divide_by(&self, ctx: keel::Context, n: f64);
}

/// One session's calculator (WCF's `InstanceContextMode.PerSession`): its running result and
/// equation.
#[derive(Debug)]
pub struct Calculator {
    state: Mutex<(f64, String)>,
}

impl Default for Calculator {
    fn default() -> Self {
        Calculator {
            state: Mutex::new((0.0, "0".to_string())),
        }
    }
}

impl Calculator {
    /// Applies `op` with `n` and sends the result to the session's client.
    fn apply(&self, ctx: &keel::Context, symbol: &str, n: f64, op: fn(f64, f64) -> f64) {
        let result = {
            let mut state = self.state.lock().expect("not poisoned");
            state.0 = op(state.0, n);
            state.1 = format!("{} {symbol} {}", state.1, dotnet(n));
            state.0
        };
        if let Some(callback) = ctx.callback::<CalculatorDuplexCallbackBlockingClient>() {
            // A one-way callback: queued in order on the session, not awaited.
            let _ = callback.result(result);
        }
    }
}

impl CalculatorDuplex for Calculator {
    fn clear(&self, ctx: keel::Context) {
        let equation = {
            let mut state = self.state.lock().expect("not poisoned");
            let equation = format!("{} = {}", state.1, dotnet(state.0));
            *state = (0.0, "0".to_string());
            equation
        };
        if let Some(callback) = ctx.callback::<CalculatorDuplexCallbackBlockingClient>() {
            let _ = callback.equation(equation);
        }
    }
    fn add_to(&self, ctx: keel::Context, n: f64) {
        self.apply(&ctx, "+", n, |a, b| a + b);
    }
    fn subtract_from(&self, ctx: keel::Context, n: f64) {
        self.apply(&ctx, "-", n, |a, b| a - b);
    }
    fn multiply_by(&self, ctx: keel::Context, n: f64) {
        self.apply(&ctx, "*", n, |a, b| a * b);
    }
    fn divide_by(&self, ctx: keel::Context, n: f64) {
        self.apply(&ctx, "/", n, |a, b| a / b);
    }
}

/// `v` as .NET Framework's `double.ToString()` shows it (15 significant digits), so that the
/// port prints what the WCF sample prints: `882.5` where Rust's shortest round-trip form of
/// `50.0 * 17.65` is `882.4999999999999`.
pub fn dotnet(v: f64) -> String {
    let rounded: f64 = format!("{v:.14e}").parse().unwrap_or(v);
    format!("{rounded}")
}

/// The builder of a host serving a [`Calculator`] per session on `url`.
pub fn builder(url: &str) -> keel::host::HostBuilder {
    keel::Host::builder()
        .service(CalculatorDuplexServer::per_session(|_| {
            Calculator::default()
        }))
        .endpoint(url)
}
