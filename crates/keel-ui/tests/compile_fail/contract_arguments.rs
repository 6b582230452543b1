#[keel::contract(x)]
pub trait Calculator {
    fn add(&self, a: f64, b: f64) -> f64;
}

fn main() {}
