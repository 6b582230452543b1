//! keel's client against a gRPC server keel did not write: tonic servers generated (by
//! tonic-prost-build, in `build.rs`) from the `.proto` files keel exports for the examples'
//! Calculator and RouteGuide (`examples/proto/`, which `examples/tests/proto.rs` keeps equal to
//! `keel::proto::file`), called over `grpc://` by keel's generated clients: unary calls, a
//! typed fault in `grpc-status-details-bin`, a status code, metadata both ways, the deadline
//! as `grpc-timeout`, and each kind of stream.

use std::pin::Pin;

use futures::{Stream, StreamExt as _};
use keel::{MessageStream, StatusCode};
use keel_examples::calculator::{CalculatorClient, DivideByZero};
use keel_examples::routeguide::{Point, Rectangle, RouteGuideClient, RouteNote};
use prost::Message as _;
use tokio::net::TcpListener;

/// What tonic-prost-build generated from keel's `.proto` files.
#[allow(
    missing_docs,
    unreachable_pub,
    missing_debug_implementations,
    clippy::all
)]
mod pb {
    tonic::include_proto!("keel_examples");
}

/// `google.rpc.Status` and `google.protobuf.Any`, as any gRPC server writes a fault's details.
#[allow(missing_docs, unreachable_pub, missing_debug_implementations)]
mod rpc {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Any {
        #[prost(string, tag = "1")]
        pub type_url: String,
        #[prost(bytes = "vec", tag = "2")]
        pub value: Vec<u8>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Status {
        #[prost(int32, tag = "1")]
        pub code: i32,
        #[prost(string, tag = "2")]
        pub message: String,
        #[prost(message, repeated, tag = "3")]
        pub details: Vec<Any>,
    }
}

#[derive(Debug, Default)]
struct Calc;

#[tonic::async_trait]
impl pb::calculator_server::Calculator for Calc {
    async fn add(
        &self,
        request: tonic::Request<pb::AddRequest>,
    ) -> Result<tonic::Response<pb::AddResponse>, tonic::Status> {
        // The caller's deadline and metadata arrived; the tenant goes back.
        let timeout = request.metadata().get("grpc-timeout").is_some();
        let tenant = request.metadata().get("x-tenant").cloned();
        let r = request.into_inner();
        let mut response = tonic::Response::new(pb::AddResponse {
            value: if timeout { r.a + r.b } else { f64::NAN },
        });
        if let Some(tenant) = tenant {
            response.metadata_mut().insert("x-tenant", tenant);
        }
        Ok(response)
    }

    async fn subtract(
        &self,
        _request: tonic::Request<pb::SubtractRequest>,
    ) -> Result<tonic::Response<pb::SubtractResponse>, tonic::Status> {
        Err(tonic::Status::permission_denied("no subtracting here"))
    }

    async fn multiply(
        &self,
        request: tonic::Request<pb::MultiplyRequest>,
    ) -> Result<tonic::Response<pb::MultiplyResponse>, tonic::Status> {
        let r = request.into_inner();
        Ok(tonic::Response::new(pb::MultiplyResponse {
            value: r.a * r.b,
        }))
    }

    async fn divide(
        &self,
        request: tonic::Request<pb::DivideRequest>,
    ) -> Result<tonic::Response<pb::DivideResponse>, tonic::Status> {
        let r = request.into_inner();
        if r.b != 0.0 {
            return Ok(tonic::Response::new(pb::DivideResponse {
                value: r.a / r.b,
            }));
        }
        let fault = pb::DivideByZero { dividend: r.a };
        let details = rpc::Status {
            code: tonic::Code::Unknown as i32,
            message: "division by zero".into(),
            details: vec![rpc::Any {
                type_url: "type.googleapis.com/keel_examples.DivideByZero".into(),
                value: fault.encode_to_vec(),
            }],
        };
        Err(tonic::Status::with_details(
            tonic::Code::Unknown,
            "division by zero",
            details.encode_to_vec().into(),
        ))
    }
}

#[derive(Debug, Default)]
struct Guide;

type Replies<T> = Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl pb::route_guide_server::RouteGuide for Guide {
    async fn get_feature(
        &self,
        request: tonic::Request<pb::GetFeatureRequest>,
    ) -> Result<tonic::Response<pb::Feature>, tonic::Status> {
        let point = request.into_inner().point;
        Ok(tonic::Response::new(pb::Feature {
            name: "tonic's".into(),
            location: point,
        }))
    }

    type ListFeaturesStream = Replies<pb::Feature>;

    async fn list_features(
        &self,
        request: tonic::Request<pb::ListFeaturesRequest>,
    ) -> Result<tonic::Response<Self::ListFeaturesStream>, tonic::Status> {
        let rect = request.into_inner().rect.unwrap_or_default();
        let lo = rect.lo.unwrap_or_default().latitude;
        let hi = rect.hi.unwrap_or_default().latitude;
        let features = (lo..hi).map(|latitude| {
            Ok(pb::Feature {
                name: format!("at {latitude}"),
                location: Some(pb::Point {
                    latitude,
                    longitude: 0,
                }),
            })
        });
        Ok(tonic::Response::new(Box::pin(futures::stream::iter(
            features.collect::<Vec<_>>(),
        ))))
    }

    async fn record_route(
        &self,
        request: tonic::Request<tonic::Streaming<pb::Point>>,
    ) -> Result<tonic::Response<pb::RouteSummary>, tonic::Status> {
        let mut points = request.into_inner();
        let mut count = 0;
        while let Some(point) = points.next().await {
            point?;
            count += 1;
        }
        Ok(tonic::Response::new(pb::RouteSummary {
            point_count: count,
            ..Default::default()
        }))
    }

    type RouteChatStream = Replies<pb::RouteNote>;

    async fn route_chat(
        &self,
        request: tonic::Request<tonic::Streaming<pb::RouteNote>>,
    ) -> Result<tonic::Response<Self::RouteChatStream>, tonic::Status> {
        // Each note back as it arrives, its message shouted.
        let notes = request.into_inner().map(|note| {
            note.map(|mut n| {
                n.message = n.message.to_uppercase();
                n
            })
        });
        Ok(tonic::Response::new(Box::pin(notes)))
    }
}

/// A tonic server of both services on a port of its own; its `grpc://` URL.
async fn tonic_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("grpc://{}", listener.local_addr().unwrap());
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(pb::calculator_server::CalculatorServer::new(Calc))
            .add_service(pb::route_guide_server::RouteGuideServer::new(Guide))
            .serve_with_incoming(incoming),
    );
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keel_calls_a_tonic_server_generated_from_keels_proto() {
    // Opened before the first call: the connection is settled with a request tonic does not
    // route (any answer will do).
    let channel = keel::Channel::connect(&tonic_server().await).await.unwrap();
    let calc = CalculatorClient::new(channel.clone());
    assert_eq!(calc.multiply(6.0, 7.0).await.unwrap(), 42.0);
    // Metadata both ways, and a deadline tonic saw (as `grpc-timeout`).
    let mut md = keel::Metadata::new();
    md.insert("x-tenant", "acme").unwrap();
    let reply = keel::client::ReplyMetadata::new();
    let sum = calc
        .with_metadata(md)
        .with_reply_metadata(&reply)
        .add(1.5, 2.0)
        .await
        .unwrap();
    assert_eq!(sum, 3.5);
    assert_eq!(reply.get().get("x-tenant"), Some("acme"));
    // tonic's status, and the typed fault from its google.rpc.Status details.
    let e = calc.subtract(1.0, 1.0).await.unwrap_err();
    assert_eq!(e.status_code(), Some(StatusCode::PermissionDenied), "{e:?}");
    assert!(e.message().contains("no subtracting here"), "{e:?}");
    let e = calc.divide(3.0, 0.0).await.unwrap_err();
    assert_eq!(
        e.fault::<DivideByZero>(),
        Some(DivideByZero { dividend: 3.0 }),
        "{e:?}"
    );
    assert_eq!(calc.divide(3.0, 2.0).await.unwrap(), 1.5);

    let guide = RouteGuideClient::new(channel.clone());
    let here = Point {
        latitude: 4,
        longitude: 2,
    };
    let feature = guide.get_feature(here).await.unwrap();
    assert_eq!((feature.name.as_str(), feature.location), ("tonic's", here));
    // Server streaming.
    let rect = Rectangle {
        lo: Point {
            latitude: 10,
            longitude: 0,
        },
        hi: Point {
            latitude: 15,
            longitude: 0,
        },
    };
    let mut features = guide.list_features(rect).await.unwrap();
    let mut latitudes = Vec::new();
    while let Some(f) = features.next().await {
        latitudes.push(f.unwrap().location.latitude);
    }
    assert_eq!(latitudes, [10, 11, 12, 13, 14]);
    // Client streaming.
    let points = MessageStream::from_iter((0..7).map(|i| Point {
        latitude: i,
        longitude: i,
    }));
    assert_eq!(guide.record_route(points).await.unwrap().point_count, 7);
    // Bidirectional: each reply while the request stream is still open.
    let (tx, notes) = MessageStream::channel(4);
    let mut replies = guide.route_chat(notes).await.unwrap();
    for word in ["ahoy", "there"] {
        tx.send(RouteNote {
            location: here,
            message: word.into(),
        })
        .await
        .unwrap();
        let back = replies.next().await.unwrap().unwrap();
        assert_eq!(back.message, word.to_uppercase());
    }
    drop(tx);
    assert!(replies.next().await.is_none());
    // Every call on one HTTP/2 connection.
    assert_eq!(channel.stats().connections_opened, 1);
}
