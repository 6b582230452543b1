//! Pinned protobuf field numbers (`#[keel::contract(proto_numbers(...))]`): a contract whose
//! struct fields and parameters were reordered, with its old numbers pinned, speaks the same
//! protobuf as before. A client of the old order calls a host of the new one over gRPC and the
//! other way round, the `.proto` files give each field its old number, and numbers that do not
//! fit the contract's types stop the host at start with an error that names them.

#![cfg(feature = "http")]

mod common;

use common::*;

/// The contract as first written: fields and parameters in their first order.
pub mod before {
    use serde::{Deserialize, Serialize};

    /// A point.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Point {
        /// Across.
        pub x: i32,
        /// Down.
        pub y: i32,
        /// Its name.
        pub label: String,
    }

    /// What the tests call.
    #[keel::contract(package = "pins_test.v1")]
    pub trait Shapes {
        /// Moves `at` by `dx`, naming it `name`.
        async fn shift(&self, name: String, at: Point, dx: i32) -> Point;
    }

    /// Moves the point.
    #[derive(Debug)]
    pub struct Impl;

    impl Shapes for Impl {
        async fn shift(&self, name: String, at: Point, dx: i32) -> Point {
            Point {
                x: at.x + dx,
                y: at.y,
                label: format!("{name}:{}", at.label),
            }
        }
    }
}

/// The same contract after a reorder of `Point`'s fields and of `shift`'s parameters, with the
/// first numbers pinned.
pub mod after {
    use serde::{Deserialize, Serialize};

    /// A point, its fields reordered.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Point {
        /// Its name.
        pub label: String,
        /// Down.
        pub y: i32,
        /// Across.
        pub x: i32,
    }

    /// What the tests call, its parameters reordered.
    #[keel::contract(
        package = "pins_test.v1",
        proto_numbers(Point(x = 1, y = 2, label = 3), ShiftRequest(name = 1, at = 2, dx = 3))
    )]
    pub trait Shapes {
        /// Moves `at` by `dx`, naming it `name`.
        async fn shift(&self, dx: i32, at: Point, name: String) -> Point;
    }

    /// A contract of the same package that uses `Point` without pinning it.
    #[keel::contract(package = "pins_test.v1")]
    pub trait Plotter {
        /// Plots `at`.
        async fn plot(&self, at: Point) -> u32;
    }

    impl Plotter for Impl {
        async fn plot(&self, _at: Point) -> u32 {
            1
        }
    }

    /// A struct with a field serde only deserializes (left out when serializing).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Tagged {
        /// Sent.
        pub a: i32,
        /// Never sent; read as its default.
        #[serde(skip_serializing, default)]
        pub b: i32,
        /// Sent after the skipped one.
        pub c: i32,
    }

    /// Echoes a pinned struct with a skipped field.
    #[keel::contract(package = "pins_skip.v1", proto_numbers(Tagged(a = 1, b = 2, c = 3)))]
    pub trait Tags {
        /// `t` as the host read it.
        async fn echo(&self, t: Tagged) -> Tagged;
    }

    impl Tags for Impl {
        async fn echo(&self, t: Tagged) -> Tagged {
            t
        }
    }

    /// Moves the point.
    #[derive(Debug)]
    pub struct Impl;

    impl Shapes for Impl {
        async fn shift(&self, dx: i32, at: Point, name: String) -> Point {
            Point {
                x: at.x + dx,
                y: at.y,
                label: format!("{name}:{}", at.label),
            }
        }
    }
}

/// The `grpc://` URL of `host`'s http:// endpoint.
fn grpc_url(host: &keel::Host) -> String {
    format!(
        "grpc://{}",
        host.url().strip_prefix("http://").expect("an http URL")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_the_first_order_calls_a_host_of_the_pinned_reorder() {
    let host =
        Binding::Http2.start(keel::Host::builder().service(after::ShapesServer::new(after::Impl)));
    let client =
        before::ShapesClient::new(keel::Channel::builder(grpc_url(&host)).build().unwrap());
    let moved = client
        .shift(
            "a".into(),
            before::Point {
                x: 10,
                y: 20,
                label: "p".into(),
            },
            5,
        )
        .await
        .unwrap();
    assert_eq!(
        moved,
        before::Point {
            x: 15,
            y: 20,
            label: "a:p".into()
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_the_pinned_reorder_calls_a_host_of_the_first_order() {
    let host = Binding::Http2
        .start(keel::Host::builder().service(before::ShapesServer::new(before::Impl)));
    let client = after::ShapesClient::new(keel::Channel::builder(grpc_url(&host)).build().unwrap());
    let moved = client
        .shift(
            -1,
            after::Point {
                label: "q".into(),
                y: 7,
                x: 3,
            },
            "b".into(),
        )
        .await
        .unwrap();
    assert_eq!(
        moved,
        after::Point {
            label: "b:q".into(),
            y: 7,
            x: 2
        }
    );
}

#[test]
fn the_proto_file_gives_each_field_its_pinned_number() {
    let first = keel::proto::file(before::ShapesClient::descriptor()).unwrap();
    let pinned = keel::proto::file(after::ShapesClient::descriptor()).unwrap();
    for field in [
        "int32 x = 1;",
        "int32 y = 2;",
        "string label = 3;",
        "string name = 1;",
        "Point at = 2;",
        "int32 dx = 3;",
    ] {
        assert!(first.contains(field), "{field} in\n{first}");
        assert!(pinned.contains(field), "{field} in\n{pinned}");
    }
    // The fields are listed in the order the Rust declares them, with their pinned numbers.
    let label = pinned.find("string label = 3;").unwrap();
    let x = pinned.find("int32 x = 1;").unwrap();
    assert!(label < x, "{pinned}");
}

/// Contracts whose pins do not fit their types.
pub mod wrong {
    use serde::{Deserialize, Serialize};

    /// A point.
    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub struct Point {
        /// Across.
        pub x: i32,
        /// Down.
        pub y: i32,
    }

    /// Pins a field `Point` does not have.
    #[keel::contract(proto_numbers(Point(x = 1, y = 2, z = 3)))]
    pub trait UnknownField {
        /// Echoes.
        async fn echo(&self, p: Point) -> Point;
    }

    /// Pins `x` and leaves `y` out.
    #[keel::contract(proto_numbers(Point(x = 2)))]
    pub trait MissingField {
        /// Echoes.
        async fn echo(&self, p: Point) -> Point;
    }

    /// Pins a message the contract does not use.
    #[keel::contract(proto_numbers(Circle(r = 1)))]
    pub trait UnknownMessage {
        /// Echoes.
        async fn echo(&self, p: Point) -> Point;
    }

    /// Pins the parameters of an operation it does not have.
    #[keel::contract(proto_numbers(EchoRequest(p = 1), MoveRequest(p = 1)))]
    pub trait UnknownOperation {
        /// Echoes.
        async fn echo(&self, p: Point) -> Point;
    }

    /// Answers for every contract above.
    #[derive(Debug)]
    pub struct Impl;

    impl UnknownField for Impl {
        async fn echo(&self, p: Point) -> Point {
            p
        }
    }
    impl MissingField for Impl {
        async fn echo(&self, p: Point) -> Point {
            p
        }
    }
    impl UnknownMessage for Impl {
        async fn echo(&self, p: Point) -> Point {
            p
        }
    }
    impl UnknownOperation for Impl {
        async fn echo(&self, p: Point) -> Point {
            p
        }
    }
}

/// The error starting a host that serves `builder`'s services.
fn start_error(builder: keel::host::HostBuilder) -> String {
    match builder.endpoint("http://127.0.0.1:0").start() {
        Ok(_) => panic!("the host started"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn numbers_that_do_not_fit_the_types_stop_the_host_at_start() {
    let cases = [
        (
            start_error(keel::Host::builder().service(wrong::UnknownFieldServer::new(wrong::Impl))),
            "it has no field `z` (its fields: x, y)",
        ),
        (
            start_error(keel::Host::builder().service(wrong::MissingFieldServer::new(wrong::Impl))),
            "field `y` has no number",
        ),
        (
            start_error(
                keel::Host::builder().service(wrong::UnknownMessageServer::new(wrong::Impl)),
            ),
            "Circle: no message of this contract has this name",
        ),
        (
            start_error(
                keel::Host::builder().service(wrong::UnknownOperationServer::new(wrong::Impl)),
            ),
            "MoveRequest: no message of this contract has this name",
        ),
    ];
    for (error, expected) in cases {
        assert!(
            error.contains(expected),
            "{error:?} should say {expected:?}"
        );
        assert!(error.contains("proto_numbers"), "{error}");
    }
    // The `.proto` export refuses them too.
    let e = keel::proto::file(wrong::MissingFieldClient::descriptor()).unwrap_err();
    assert!(e.to_string().contains("field `y` has no number"), "{e}");
}

#[test]
fn contracts_of_one_package_must_number_a_shared_message_alike() {
    let e = start_error(
        keel::Host::builder()
            .service(after::ShapesServer::new(after::Impl))
            .service(after::PlotterServer::new(after::Impl)),
    );
    assert!(
        e.contains("share the protobuf package and its message `Point`"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_field_after_one_serde_skips_keeps_its_number() {
    let host =
        Binding::Http2.start(keel::Host::builder().service(after::TagsServer::new(after::Impl)));
    let client = after::TagsClient::new(keel::Channel::builder(grpc_url(&host)).build().unwrap());
    let back = client
        .echo(after::Tagged { a: 1, b: 5, c: 7 })
        .await
        .unwrap();
    // `b` is never sent; `c` keeps its pinned number 3. Numbered by place it went as 2, was read
    // as `b`, and `c` came back 0.
    assert_eq!(back, after::Tagged { a: 1, b: 0, c: 7 });
}
