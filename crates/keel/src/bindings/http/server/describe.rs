//! `GET /{Service}` (the contract as JSON) and `GET /openapi.json`.

use ::http::Response;
use bytes::Bytes;
#[cfg(not(feature = "openapi"))]
use serde::Serialize;

use super::super::body::{self, Body};
use super::super::JSON_CONTENT_TYPE;
use super::responses::{error, set_content_type, set_status_header};
use crate::core::format::Format;
#[cfg(not(feature = "openapi"))]
use crate::core::service::ServiceDescriptor;
use crate::core::status::{Status, StatusCode};
use crate::dispatch::HostConn;

/// `GET /{Service}`: the contract as JSON.
pub(super) fn describe(conn: &HostConn, service: &str) -> Response<Body> {
    let Some(s) = conn.dispatcher.service(service) else {
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

/// `GET /openapi.json`: the OpenAPI document of every contract the host serves.
#[cfg(feature = "openapi")]
pub(super) fn openapi(conn: &HostConn) -> Response<Body> {
    let json = crate::openapi::document(&conn.dispatcher.descriptors());
    let mut response = Response::new(body::full(Bytes::from(json)));
    set_content_type(&mut response, JSON_CONTENT_TYPE);
    set_status_header(&mut response, StatusCode::Ok);
    response
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
