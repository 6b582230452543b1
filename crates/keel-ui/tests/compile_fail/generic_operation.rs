#[keel::contract]
pub trait Echo {
    fn echo<T>(&self, value: String) -> String;
}

fn main() {}
