#[keel::contract]
pub struct Calculator {
    total: f64,
}

fn main() {}
