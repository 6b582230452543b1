//! gRPC's standard services, served by every host unless turned off
//! ([`HostBuilder::grpc_standard_services`](crate::host::HostBuilder::grpc_standard_services)):
//! `grpc.health.v1.Health` (`health.rs`), fed by the host's readiness as `/readyz` is, and
//! server reflection, `grpc.reflection.v1` and `v1alpha` (`reflection.rs`), which describes
//! every contract the host serves from its types. Each is a keel contract like any other,
//! hosted under its full gRPC name so that no contract's name can clash with it and the
//! OpenAPI document and `GET /{Service}` leave it out.

mod health;
mod reflection;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};

use crate::core::service::Service;
use crate::dispatch::Dispatcher;

/// The dispatcher the standard services report on, set once it exists (they are made before
/// it, as its services).
#[derive(Debug, Clone, Default)]
pub(crate) struct Link(Arc<OnceLock<Weak<Dispatcher>>>);

impl Link {
    /// Links the services to `dispatcher`.
    pub(crate) fn set(&self, dispatcher: &Arc<Dispatcher>) {
        let _ = self.0.set(Arc::downgrade(dispatcher));
    }

    fn dispatcher(&self) -> Option<Arc<Dispatcher>> {
        self.0.get().and_then(Weak::upgrade)
    }
}

/// Adds the standard services to `services` (keyed by their full gRPC names); the returned
/// link must be set to the dispatcher made of them.
pub(crate) fn add(services: &mut HashMap<String, Arc<dyn Service>>) -> Link {
    let link = Link::default();
    let files = Arc::new(reflection::Files::new(link.clone()));
    let standard: [Arc<dyn Service>; 3] = [
        Arc::new(health::HealthServer::new(health::HostHealth::new(
            link.clone(),
        ))),
        Arc::new(reflection::v1::ServerReflectionServer::new(
            reflection::Reflection::new(files.clone()),
        )),
        Arc::new(reflection::v1alpha::ServerReflectionServer::new(
            reflection::Reflection::new(files),
        )),
    ];
    for s in standard {
        services.insert(s.descriptor().grpc_name(), s);
    }
    link
}
