// Types that travel in a contract must be serde `Serialize` and `Deserialize`. These derive
// only what the default `openapi` feature asks of them, so the errors are about serde alone.

#[derive(keel::schemars::JsonSchema)]
#[schemars(crate = "keel::schemars")]
pub struct Order {
    pub id: u64,
}

#[derive(keel::schemars::JsonSchema)]
#[schemars(crate = "keel::schemars")]
pub struct Receipt {
    pub total: u64,
}

#[derive(keel::schemars::JsonSchema)]
#[schemars(crate = "keel::schemars")]
pub struct OutOfStock {
    pub item: u64,
}

#[keel::contract]
pub trait Shop {
    fn place(&self, order: Order) -> u64;
    fn receipt(&self, id: u64) -> Receipt;
    fn reserve(&self, item: u64) -> Result<u64, OutOfStock>;
}

fn main() {}
