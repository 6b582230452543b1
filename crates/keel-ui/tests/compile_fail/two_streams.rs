use keel::{ByteStream, MessageStream};

#[keel::contract]
pub trait Files {
    async fn merge(&self, a: ByteStream, b: ByteStream) -> u64;
    async fn mixed(&self, a: MessageStream<u32>, b: ByteStream) -> u64;
    #[keel(one_way)]
    fn drop_it(&self, data: ByteStream);
    #[keel(one_way)]
    fn drop_messages(&self, data: MessageStream<u32>);
}

fn main() {}
