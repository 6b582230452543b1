#[keel::contract]
pub trait Logger {
    #[keel(one_way)]
    fn log(&self, line: String) -> bool;
}

fn main() {}
