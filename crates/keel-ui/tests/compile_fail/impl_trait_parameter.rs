#[keel::contract]
pub trait Greeter {
    fn greet(&self, name: impl Into<String>) -> String;
}

fn main() {}
