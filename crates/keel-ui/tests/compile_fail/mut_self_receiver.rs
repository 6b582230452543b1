#[keel::contract]
pub trait Counter {
    fn increment(&mut self, by: f64) -> f64;
}

fn main() {}
