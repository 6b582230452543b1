//! A context anywhere in the parameters, defaulted parameters, and `Result<T, Status>`.
use keel::{ByteStream, Context, Status};

#[keel::contract]
pub trait Calls {
    async fn first(&self, ctx: Context, x: u32) -> u32;
    fn last(&self, x: u32, #[keel(default)] y: u32, ctx: Context) -> Result<u32, Status>;
    async fn download(&self, ctx: Context) -> Result<ByteStream, Status>;
    fn only(&self, ctx: Context);
}

struct Impl;

impl Calls for Impl {
    async fn first(&self, ctx: Context, x: u32) -> u32 {
        x + ctx.metadata().len() as u32
    }
    fn last(&self, x: u32, y: u32, _ctx: Context) -> Result<u32, Status> {
        if y == 0 {
            Err(Status::invalid_argument("y is 0"))
        } else {
            Ok(x / y)
        }
    }
    async fn download(&self, _ctx: Context) -> Result<ByteStream, Status> {
        Ok(ByteStream::empty())
    }
    fn only(&self, _ctx: Context) {}
}

async fn clients_leave_the_context_out(client: CallsClient) -> Result<(), keel::Error> {
    client.first(1).await?;
    client.last(4, 2).await?;
    client.download().await?;
    client.only().await?;
    Ok(())
}

fn main() {
    let _ = CallsServer::new(Impl);
    let _ = clients_leave_the_context_out;
}
