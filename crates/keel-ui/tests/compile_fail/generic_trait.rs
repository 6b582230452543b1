#[keel::contract]
pub trait Store<T> {
    fn get(&self, key: String) -> String;
}

fn main() {}
