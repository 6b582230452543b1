#[keel::contract]
pub trait Calculator {
    fn add(&self, a: f64, b: f64) -> f64 {
        a + b
    }
}

fn main() {}
