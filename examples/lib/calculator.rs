//! Seed 000's Calculator service.

use serde::{Deserialize, Serialize};

/// The fault `divide` returns for a zero divisor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, keel::schemars::JsonSchema)]
#[schemars(crate = "keel::schemars")]
pub struct DivideByZero {
    /// The dividend that could not be divided.
    pub dividend: f64,
}

/// Seed 000's contract: four arithmetic operations, one with a typed fault.
#[keel::contract]
pub trait Calculator {
    /// `a + b`.
    fn add(&self, a: f64, b: f64) -> f64;
    /// `a - b`.
    fn subtract(&self, a: f64, b: f64) -> f64;
    /// `a * b` (an async operation: runs on the host's runtime, not the pool).
    async fn multiply(&self, a: f64, b: f64) -> f64;
    /// `a / b`, or the [`DivideByZero`] fault.
    fn divide(&self, a: f64, b: f64) -> Result<f64, DivideByZero>;
}

/// The Calculator implementation.
#[derive(Debug, Default, Clone, Copy)]
pub struct Calc;

impl Calculator for Calc {
    fn add(&self, a: f64, b: f64) -> f64 {
        a + b
    }
    fn subtract(&self, a: f64, b: f64) -> f64 {
        a - b
    }
    async fn multiply(&self, a: f64, b: f64) -> f64 {
        a * b
    }
    fn divide(&self, a: f64, b: f64) -> Result<f64, DivideByZero> {
        if b == 0.0 {
            Err(DivideByZero { dividend: a })
        } else {
            Ok(a / b)
        }
    }
}

/// A host serving [`Calc`] on `url` (any scheme: `tcp://`, `unix://`, `http://`, ...).
pub fn host(url: &str) -> Result<keel::Host, keel::Error> {
    builder(url).start()
}

/// The builder of [`host`], to add settings before it starts.
pub fn builder(url: &str) -> keel::host::HostBuilder {
    keel::Host::builder()
        .service(CalculatorServer::new(Calc))
        .endpoint(url)
}

/// A host serving [`Calc`] over HTTP on a free loopback port: HTTP/1.1 and HTTP/2 with JSON, for
/// curl and `clients/calculator.py` (see [`keel::http`]).
pub fn http_host() -> Result<keel::Host, keel::Error> {
    host("http://127.0.0.1:0")
}

/// The Calculator's OpenAPI 3.1 document, as a host serves it at `GET /openapi.json`
/// (committed as `examples/openapi/calculator.json`).
pub fn openapi() -> String {
    keel::openapi::document(&[CalculatorClient::descriptor()])
}

/// The contract's `.proto` file, as gRPC tools and code generators read it (committed as
/// `examples/proto/calculator.proto`).
pub fn proto() -> String {
    keel::proto::file(CalculatorClient::descriptor())
        .expect("every type of the contract has a protobuf type")
}
