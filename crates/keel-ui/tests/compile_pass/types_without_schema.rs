//! A contract whose types do not implement `schemars::JsonSchema` compiles whatever keel's
//! features (with `openapi`, its document describes them as open schemas): types from crates
//! without schemars support, a type of the user's own, and each wrapped in `Option`, `Vec`, a
//! type alias and a path, as parameters, `#[keel(default)]` parameters, return values, faults
//! and streams of messages; beside types that do have a schema.

use chrono::{DateTime, Utc};
use keel::{MessageStream, Status};
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;

/// No `JsonSchema`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Mine {
    /// An id.
    pub id: uuid::Uuid,
}

/// A fault without `JsonSchema`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Refused(pub DateTime<Utc>);

/// An alias of an `Option` of a type without a schema.
pub type MaybeMine = Option<Mine>;

mod nested {
    /// Reached by a path.
    #[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
    pub struct Deep(pub serde_bytes::ByteBuf);
}

/// Every place a type can take.
#[keel::contract]
pub trait Store {
    /// Parameters of each kind.
    fn put(
        &self,
        data: ByteBuf,
        id: uuid::Uuid,
        maybe: MaybeMine,
        many: Vec<Mine>,
        #[keel(default)] extra: Mine,
        n: u32,
    ) -> Result<nested::Deep, Refused>;
    /// A `Result<T, Status>` whose `T` has no schema.
    async fn at(&self, deep: nested::Deep) -> Result<DateTime<Utc>, Status>;
    /// Streams of messages without schemas, both ways.
    async fn sync(&self, items: MessageStream<Mine>) -> MessageStream<Option<ByteBuf>>;
    /// One-way.
    #[keel(one_way)]
    fn note(&self, mine: Mine);
}

struct S;

impl Store for S {
    fn put(
        &self,
        data: ByteBuf,
        _id: uuid::Uuid,
        _maybe: MaybeMine,
        _many: Vec<Mine>,
        _extra: Mine,
        _n: u32,
    ) -> Result<nested::Deep, Refused> {
        Ok(nested::Deep(data))
    }
    async fn at(&self, _deep: nested::Deep) -> Result<DateTime<Utc>, Status> {
        Ok(DateTime::<Utc>::MIN_UTC)
    }
    async fn sync(&self, _items: MessageStream<Mine>) -> MessageStream<Option<ByteBuf>> {
        MessageStream::from_iter(vec![None])
    }
    fn note(&self, _mine: Mine) {}
}

fn main() {
    let _server = StoreServer::new(S);
    #[cfg(feature = "openapi")]
    {
        let doc = keel::openapi::document(&[StoreClient::descriptor()]);
        assert!(doc.contains("serde_bytes::bytebuf::ByteBuf"));
    }
}
