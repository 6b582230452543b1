use keel::ByteStream;

#[keel::contract]
pub trait Files {
    async fn merge(&self, a: ByteStream, b: ByteStream) -> u64;
    #[keel(one_way)]
    fn drop_it(&self, data: ByteStream);
}

fn main() {}
