//! Tracing: every call has a span on each side (`keel.call`, targets `keel::server` and
//! `keel::client`) with its service, operation, binding, peer, call id (host) and the answer's
//! code. The handler runs inside it; the host's interceptors get it through `Context::span`
//! before it is entered, the client's run inside it. A subscriber here records every span keel
//! opens, over every binding.
#![cfg(feature = "http")]
#![allow(missing_docs)]

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::*;
use keel::client::{self, ClientCall};
use keel::host::Interceptor;
use keel::{Context, Status};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// A span as recorded: its target and its fields, as text.
#[derive(Debug, Clone, Default)]
struct Recorded {
    target: String,
    fields: BTreeMap<String, String>,
}

impl Visit for Recorded {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.fields
            .insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.fields
            .insert(field.name().to_owned(), value.to_owned());
    }
}

/// Records every `keel.call` span: its fields at creation and as recorded later.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Recorded>>>);

/// Where a span's record lives in `Spans`.
struct Index(usize);

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        if attrs.metadata().name() != "keel.call" {
            return;
        }
        let mut r = Recorded {
            target: attrs.metadata().target().to_owned(),
            ..Recorded::default()
        };
        attrs.record(&mut r);
        let mut all = self.0.lock().unwrap();
        all.push(r);
        let at = all.len() - 1;
        ctx.span(id).unwrap().extensions_mut().insert(Index(at));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: LayerContext<'_, S>) {
        let span = ctx.span(id).unwrap();
        let ext = span.extensions();
        let Some(Index(at)) = ext.get::<Index>() else {
            return;
        };
        values.record(&mut self.0.lock().unwrap()[*at]);
    }
}

/// Notes the names of the spans an interceptor sees: the current one, and on the host the
/// call's own (`Context::span`).
#[derive(Clone, Default)]
struct SeenSpan(Arc<Mutex<Vec<String>>>);

fn name(span: &tracing::Span) -> String {
    span.metadata().map_or("none", |m| m.name()).to_owned()
}

impl Interceptor for SeenSpan {
    fn before(&self, ctx: &Context) -> Result<(), Status> {
        // Not entered yet (an interceptor may still give it a parent), but handed over.
        let seen = format!("{} / {}", name(&tracing::Span::current()), name(ctx.span()));
        self.0.lock().unwrap().push(seen);
        Ok(())
    }
}

impl client::Interceptor for SeenSpan {
    fn before(&self, _: &mut ClientCall) -> Result<(), Status> {
        self.0.lock().unwrap().push(name(&tracing::Span::current()));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_has_a_span_on_each_side() {
    let spans = Spans::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(spans.clone()))
        .unwrap();

    for b in [Binding::Tcp, Binding::Http1, Binding::Http2] {
        spans.0.lock().unwrap().clear();
        let (host_seen, client_seen) = (SeenSpan::default(), SeenSpan::default());
        let host = b.host_with(|h| h.interceptor(host_seen.clone()));
        let url = host.url().to_string();
        let c = ProbeClient::new(b.channel_with(&url, |c| c.interceptor(client_seen.clone())));
        assert_eq!(c.echo("sync".into()).await.unwrap(), "sync");
        assert_eq!(c.echo_async("async".into()).await.unwrap(), "async");
        // A typed fault: answered, with the fault's code.
        assert!(c.check(-1).await.is_err());
        let fault = keel::StatusCode::Fault.as_str();
        host.shutdown_async().await;

        // The client's interceptors ran inside the call's span; the host's were handed it,
        // not yet entered.
        assert_eq!(*client_seen.0.lock().unwrap(), ["keel.call"; 3], "{b:?}");
        assert_eq!(
            *host_seen.0.lock().unwrap(),
            ["none / keel.call"; 3],
            "{b:?}"
        );
        let all = spans.0.lock().unwrap().clone();
        let side = |target: &str| -> Vec<Recorded> {
            all.iter().filter(|r| r.target == target).cloned().collect()
        };
        let (server, client) = (side("keel::server"), side("keel::client"));
        assert_eq!(server.len(), 3, "{b:?}: {all:#?}");
        assert_eq!(client.len(), 3, "{b:?}: {all:#?}");
        for (r, op, code) in [
            (&server[0], "echo", "ok"),
            (&server[1], "echo_async", "ok"),
            (&server[2], "check", fault),
            (&client[0], "echo", "ok"),
            (&client[1], "echo_async", "ok"),
            (&client[2], "check", fault),
        ] {
            let f = &r.fields;
            assert_eq!(f["rpc.system"], "keel", "{f:?}");
            assert_eq!(f["rpc.service"], "Probe", "{f:?}");
            assert_eq!(f["rpc.method"], op, "{f:?}");
            assert_eq!(f["otel.name"], format!("Probe/{op}"), "{f:?}");
            assert_eq!(f["rpc.code"], code, "{f:?}");
            assert_eq!(f["keel.binding"], b.listen_url().split(':').next().unwrap());
        }
        for r in &server {
            assert_eq!(r.fields["otel.kind"], "server");
            assert!(r.fields["client.address"].contains("127.0.0.1"), "{r:?}");
            assert!(r.fields["keel.call_id"].parse::<u64>().is_ok(), "{r:?}");
        }
        for r in &client {
            assert_eq!(r.fields["otel.kind"], "client");
            assert_eq!(r.fields["server.address"], url, "{r:?}");
        }
    }
}
