//! The client half of generated code: encode arguments, call, decode the reply or the fault.

use std::any::Any;
use std::fmt::Debug;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::client::{CallOptions, Channel};
use crate::error::{Error, Kind, Status, StatusCode};
use crate::service::{self, Format, ServiceDescriptor};

async fn raw<A: Serialize>(
    ch: &Channel,
    opts: &CallOptions,
    desc: &'static ServiceDescriptor,
    op: usize,
    args: &A,
) -> Result<Result<bytes::Bytes, Status>, Error> {
    let info = &desc.operations[op];
    let body = service::encode(Format::Postcard, args).map_err(|e| {
        Error::new(
            Kind::Codec,
            format!(
                "cannot encode arguments of {}.{}: {e}",
                desc.name, info.name
            ),
        )
    })?;
    ch.call(desc.name, info.name, info.one_way, body, opts)
        .await
}

fn decode_reply<T: DeserializeOwned>(
    desc: &ServiceDescriptor,
    op: usize,
    body: &[u8],
) -> Result<T, Error> {
    service::decode(Format::Postcard, body).map_err(|e| {
        let name = desc.operations[op].name;
        Error::new(
            Kind::Codec,
            format!("cannot decode the reply of {}.{name}: {e}", desc.name),
        )
    })
}

/// Calls a request-reply operation.
pub async fn call<A: Serialize, T: DeserializeOwned>(
    ch: &Channel,
    opts: &CallOptions,
    desc: &'static ServiceDescriptor,
    op: usize,
    args: &A,
) -> Result<T, Error> {
    match raw(ch, opts, desc, op, args).await? {
        Ok(body) => decode_reply(desc, op, &body),
        Err(status) => Err(Error::from_status(status)),
    }
}

/// Calls an operation that returns `Result<T, E>`: a fault arrives as the error's [`Error::fault`].
pub async fn call_fallible<A, T, E>(
    ch: &Channel,
    opts: &CallOptions,
    desc: &'static ServiceDescriptor,
    op: usize,
    args: &A,
) -> Result<T, Error>
where
    A: Serialize,
    T: DeserializeOwned,
    E: DeserializeOwned + Any + Send + Sync + Debug,
{
    match raw(ch, opts, desc, op, args).await? {
        Ok(body) => decode_reply(desc, op, &body),
        Err(status) if status.code() == StatusCode::Fault => Err(Error::from_fault(
            decode_reply::<E>(desc, op, status.details())?,
        )),
        Err(status) => Err(Error::from_status(status)),
    }
}

/// Calls a one-way operation: returns once the host acknowledged receipt.
pub async fn call_one_way<A: Serialize>(
    ch: &Channel,
    opts: &CallOptions,
    desc: &'static ServiceDescriptor,
    op: usize,
    args: &A,
) -> Result<(), Error> {
    match raw(ch, opts, desc, op, args).await? {
        Ok(_) => Ok(()),
        Err(status) => Err(Error::from_status(status)),
    }
}
