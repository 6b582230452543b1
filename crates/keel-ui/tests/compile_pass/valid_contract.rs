//! A contract using every supported feature compiles, and its generated types are usable.

use serde::{Deserialize, Serialize};

/// Raised when dividing by zero. With the `openapi` feature, contract types describe their JSON
/// Schema too.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(keel::schemars::JsonSchema),
    schemars(crate = "keel::schemars")
)]
pub struct DivideByZero;

/// A calculator service.
#[keel::contract]
pub trait Calculator {
    /// Adds two numbers.
    fn add(&self, a: f64, b: f64) -> f64;
    /// Multiplies on the runtime.
    async fn multiply(&self, a: f64, b: f64) -> f64;
    /// Divides, failing with a typed fault.
    fn divide(&self, a: f64, b: f64) -> Result<f64, DivideByZero>;
    /// Async and fallible.
    async fn checked_sqrt(&self, x: f64) -> Result<f64, String>;
    /// Records a line; the caller gets no result.
    #[keel(one_way)]
    fn log(&self, line: String);
    /// One-way, async, and with an explicit unit return.
    #[keel(one_way)]
    async fn reset(&self) -> ();
    /// No parameters, owned collection result.
    fn history(&self) -> Vec<String>;
    /// Streamed upload next to plain parameters.
    async fn store(&self, name: String, data: keel::ByteStream, overwrite: bool) -> u64;
    /// Streamed, fallible download from a plain `fn`.
    fn fetch(&self, name: String) -> Result<keel::ByteStream, String>;
}

struct Calc;

impl Calculator for Calc {
    fn add(&self, a: f64, b: f64) -> f64 {
        a + b
    }
    async fn multiply(&self, a: f64, b: f64) -> f64 {
        a * b
    }
    fn divide(&self, a: f64, b: f64) -> Result<f64, DivideByZero> {
        if b == 0.0 {
            Err(DivideByZero)
        } else {
            Ok(a / b)
        }
    }
    async fn checked_sqrt(&self, x: f64) -> Result<f64, String> {
        if x < 0.0 {
            Err(format!("negative: {x}"))
        } else {
            Ok(x.sqrt())
        }
    }
    fn log(&self, line: String) {
        let _ = line;
    }
    async fn reset(&self) {}
    fn history(&self) -> Vec<String> {
        Vec::new()
    }
    async fn store(&self, name: String, data: keel::ByteStream, overwrite: bool) -> u64 {
        let _ = (name, overwrite);
        data.read_to_end(1024).await.map_or(0, |b| b.len() as u64)
    }
    fn fetch(&self, name: String) -> Result<keel::ByteStream, String> {
        Ok(keel::ByteStream::from(name.into_bytes()))
    }
}

fn assert_service<S: keel::service::Service>(_: &S) {}

#[allow(dead_code)]
async fn use_client(client: CalculatorClient) -> Result<(), keel::Error> {
    let _: f64 = client.add(1.0, 2.0).await?;
    let _: f64 = client.multiply(3.0, 4.0).await?;
    let _: f64 = client.divide(1.0, 2.0).await?;
    let _: f64 = client.checked_sqrt(4.0).await?;
    let _: () = client.log("hi".to_string()).await?;
    let _: () = client.reset().await?;
    let _: Vec<String> = client.history().await?;
    let _: u64 = client
        .store("a".into(), keel::ByteStream::from_bytes("x"), true)
        .await?;
    let _: keel::ByteStream = client.fetch("a".into()).await?;
    Ok(())
}

#[allow(dead_code)]
fn use_blocking_client(client: CalculatorBlockingClient) -> Result<(), keel::Error> {
    let _: f64 = client.add(1.0, 2.0)?;
    let _: f64 = client.divide(1.0, 2.0)?;
    let _: f64 = client.checked_sqrt(4.0)?;
    client.log("hi".to_string())?;
    client.reset()?;
    let _: Vec<String> = client.history()?;
    Ok(())
}

fn main() {
    let server = CalculatorServer::new(Calc);
    assert_service(&server);
    let ops = keel::service::Service::descriptor(&server).operations;
    assert_eq!(ops.len(), 9);
    assert!(ops.iter().any(|op| op.name == "log" && op.one_way));
    assert!(ops
        .iter()
        .any(|op| op.name == "divide" && op.fault.is_some()));
    let store = &ops[7];
    assert!(store.stream_request && !store.stream_response);
    // The stream is a parameter of the contract, in its place.
    let names: Vec<_> = store.params.iter().map(|p| p.name).collect();
    assert_eq!(names, ["name", "data", "overwrite"]);
    let fetch = &ops[8];
    assert!(!fetch.stream_request && fetch.stream_response && fetch.fault.is_some());
}
