#[keel::contract]
pub trait Calculator {
    fn add(a: f64, b: f64) -> f64;
}

fn main() {}
