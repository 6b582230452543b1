//! `GET /{Service}` (the contract as JSON) and `GET /openapi.json`.

use ::http::{HeaderMap, Response};
use bytes::Bytes;
#[cfg(not(feature = "openapi"))]
use serde::Serialize;

use super::super::body::{self, Body};
use super::super::{metadata_from_headers, JSON_CONTENT_TYPE};
use super::responses::{error, set_content_type, set_status_header};
use crate::core::format::Format;
#[cfg(not(feature = "openapi"))]
use crate::core::service::ServiceDescriptor;
use crate::core::status::{Status, StatusCode};
use crate::dispatch::{HostConn, ALL_SERVICES};

/// `GET /{Service}`: the contract as JSON, for a caller the host's interceptors admit.
pub(super) async fn describe(
    conn: &HostConn,
    service: &str,
    headers: &HeaderMap,
) -> Response<Body> {
    let found = conn.dispatcher.service(service);
    let named = found.map_or(ALL_SERVICES, |s| s.descriptor().name);
    if let Err(status) = admit(conn, named, headers).await {
        return error(status, Format::Json);
    }
    let Some(s) = found else {
        let msg = format!("no service `{service}` on this host");
        return error(Status::new(StatusCode::UnknownService, msg), Format::Json);
    };
    #[cfg(feature = "openapi")]
    let json = serde_json::to_vec(&crate::openapi::Description::of(s.descriptor()));
    #[cfg(not(feature = "openapi"))]
    let json = serde_json::to_vec(&Description::of(s.descriptor()));
    let json = json.expect("a description always serializes");
    let mut response = Response::new(body::full(Bytes::from(json)));
    set_content_type(&mut response, JSON_CONTENT_TYPE);
    set_status_header(&mut response, StatusCode::Ok);
    response
}

/// `GET /openapi.json`: the OpenAPI document of every contract the host serves, for a caller
/// the host's interceptors admit.
#[cfg(feature = "openapi")]
pub(super) async fn openapi(conn: &HostConn, headers: &HeaderMap) -> Response<Body> {
    if let Err(status) = admit(conn, ALL_SERVICES, headers).await {
        return error(status, Format::Json);
    }
    let json = crate::openapi::document(&conn.dispatcher.descriptors());
    let mut response = Response::new(body::full(Bytes::from(json)));
    set_content_type(&mut response, JSON_CONTENT_TYPE);
    set_status_header(&mut response, StatusCode::Ok);
    response
}

/// Whether the host describes its contracts to this caller (`Dispatcher::admit_description`).
async fn admit(conn: &HostConn, service: &'static str, headers: &HeaderMap) -> Result<(), Status> {
    conn.dispatcher
        .admit_description(&conn.info, service, metadata_from_headers(headers))
        .await
}

/// The description without JSON Schema (without the `openapi` feature): types as written in
/// the Rust contract.
#[cfg(not(feature = "openapi"))]
#[derive(Serialize)]
struct Description {
    service: &'static str,
    operations: Vec<OperationDescription>,
}

#[cfg(not(feature = "openapi"))]
#[derive(Serialize)]
struct OperationDescription {
    name: &'static str,
    params: Vec<ParamDescription>,
    returns: &'static str,
    fault: Option<&'static str>,
    one_way: bool,
    streamed: bool,
}

#[cfg(not(feature = "openapi"))]
#[derive(Serialize)]
struct ParamDescription {
    name: &'static str,
    #[serde(rename = "type")]
    ty: &'static str,
}

#[cfg(not(feature = "openapi"))]
impl Description {
    fn of(desc: &'static ServiceDescriptor) -> Description {
        Description {
            service: desc.name,
            operations: desc
                .operations
                .iter()
                .map(|op| OperationDescription {
                    name: op.name,
                    params: op
                        .params
                        .iter()
                        .map(|p| ParamDescription {
                            name: p.name,
                            ty: p.ty,
                        })
                        .collect(),
                    returns: op.returns,
                    fault: op.fault,
                    one_way: op.one_way,
                    streamed: op.streamed(),
                })
                .collect(),
        }
    }
}
