#[keel::contract]
pub trait Calculator {
    fn add(&self, (a, b): (f64, f64)) -> f64;
}

fn main() {}
