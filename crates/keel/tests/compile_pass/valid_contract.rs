//! A contract using every supported feature compiles, and its generated types are usable.

use serde::{Deserialize, Serialize};

/// Raised when dividing by zero.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
}

fn assert_service<S: keel::Service>(_: &S) {}

#[allow(dead_code)]
async fn use_client(client: CalculatorClient) -> Result<(), keel::Error> {
    let _: f64 = client.add(1.0, 2.0).await?;
    let _: f64 = client.multiply(3.0, 4.0).await?;
    let _: f64 = client.divide(1.0, 2.0).await?;
    let _: f64 = client.checked_sqrt(4.0).await?;
    let _: () = client.log("hi".to_string()).await?;
    let _: () = client.reset().await?;
    let _: Vec<String> = client.history().await?;
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
    let ops = keel::Service::descriptor(&server).operations;
    assert_eq!(ops.len(), 7);
    assert!(ops.iter().any(|op| op.name == "log" && op.one_way));
    assert!(ops
        .iter()
        .any(|op| op.name == "divide" && op.fault.is_some()));
}
