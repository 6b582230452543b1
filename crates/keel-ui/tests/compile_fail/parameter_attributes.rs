use keel::{ByteStream, Context};

#[keel::contract]
pub trait Parameters {
    async fn two_contexts(&self, a: Context, b: Context) -> u32;
    async fn default_context(&self, #[keel(default)] ctx: Context) -> u32;
    async fn default_stream(&self, #[keel(default)] data: ByteStream) -> u32;
    async fn unknown(&self, #[keel(optional)] x: u32) -> u32;
    async fn foreign(&self, #[serde(default)] x: u32) -> u32;
}

fn main() {}
