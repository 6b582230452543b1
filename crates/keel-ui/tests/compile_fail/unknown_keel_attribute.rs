#[keel::contract]
pub trait Logger {
    #[keel(bogus)]
    fn log(&self, line: String);
}

fn main() {}
