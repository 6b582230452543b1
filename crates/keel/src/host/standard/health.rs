//! `grpc.health.v1.Health` (gRPC's `doc/health-checking.md`): `Check` answers at once,
//! `Watch` streams the status and each change. A host is `SERVING` until a shutdown begins,
//! then `NOT_SERVING` (during [`HostBuilder::drain_grace`](crate::host::HostBuilder::drain_grace),
//! as `/readyz` turns 503). The service `""` is the host; a hosted contract's full gRPC name
//! (`keel_examples.Calculator`) is that contract, which has the host's status; any other name
//! is `NOT_FOUND` for `Check` and `SERVICE_UNKNOWN` for `Watch`.

// The clients `#[keel::contract]` generates have `pub` methods, unreachable from outside
// this crate-private contract.
#![allow(unreachable_pub)]

use serde::{Deserialize, Serialize};

use super::Link;
use crate::core::messages::MessageStream;
use crate::core::status::{Status, StatusCode};

/// `grpc.health.v1.Health`. Its request message is `HealthCheckRequest`'s wire format
/// (`string service = 1`), its reply `HealthCheckResponse` (`ServingStatus status = 1`).
#[crate::contract(package = "grpc.health.v1")]
pub(crate) trait Health {
    /// The status of `service` now.
    async fn check(&self, service: String) -> Result<HealthCheckResponse, Status>;
    /// The status of `service` now, then each time it changes.
    async fn watch(&self, service: String) -> MessageStream<HealthCheckResponse>;
}

/// `HealthCheckResponse`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub(crate) struct HealthCheckResponse {
    status: ServingStatus,
}

/// `HealthCheckResponse.ServingStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub(crate) enum ServingStatus {
    Unknown,
    Serving,
    NotServing,
    ServiceUnknown,
}

/// The health service of one host.
#[derive(Debug)]
pub(crate) struct HostHealth {
    link: Link,
}

impl HostHealth {
    pub(crate) fn new(link: Link) -> Self {
        HostHealth { link }
    }

    /// `service`'s status given the host's readiness, or `None` if the host does not serve it.
    fn status(&self, service: &str, ready: bool) -> Option<ServingStatus> {
        let dispatcher = self.link.dispatcher()?;
        let known = service.is_empty()
            || dispatcher
                .all_services()
                .any(|(_, desc)| desc.grpc_name() == service);
        known.then_some(if ready {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        })
    }
}

impl Health for HostHealth {
    async fn check(&self, service: String) -> Result<HealthCheckResponse, Status> {
        let ready = self.link.dispatcher().is_some_and(|d| d.is_ready());
        match self.status(&service, ready) {
            Some(status) => Ok(HealthCheckResponse { status }),
            None => Err(Status::new(
                StatusCode::NotFound,
                format!("this host serves no service `{service}`"),
            )),
        }
    }

    async fn watch(&self, service: String) -> MessageStream<HealthCheckResponse> {
        let Some(mut ready) = self.link.dispatcher().map(|d| d.watch_ready()) else {
            return MessageStream::empty();
        };
        let (tx, stream) = MessageStream::channel(1);
        let first = *ready.borrow_and_update();
        let Some(status) = self.status(&service, first) else {
            let _ = tx
                .send(HealthCheckResponse {
                    status: ServingStatus::ServiceUnknown,
                })
                .await;
            // The spec keeps the stream open for a service that may appear; a host's services
            // never change, so the caller's stream ends only when it cancels.
            tokio::spawn(async move { tx.closed().await });
            return stream;
        };
        tokio::spawn(async move {
            let mut status = status;
            loop {
                if tx.send(HealthCheckResponse { status }).await.is_err() {
                    return;
                }
                tokio::select! {
                    changed = ready.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                    () = tx.closed() => return,
                }
                let now = if *ready.borrow_and_update() {
                    ServingStatus::Serving
                } else {
                    ServingStatus::NotServing
                };
                if now == status {
                    continue;
                }
                status = now;
            }
        });
        stream
    }
}
