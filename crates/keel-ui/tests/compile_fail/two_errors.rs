#[keel::contract]
pub trait Calculator {
    fn add(&mut self, a: f64, b: f64) -> f64;
    fn name(&self, prefix: &str) -> String;
}

fn main() {}
