#[keel::contract]
pub trait Store {
    type Value;
    const LIMIT: usize;
    fn get(&self, key: String) -> String;
}

fn main() {}
