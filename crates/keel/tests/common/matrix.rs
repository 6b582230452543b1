//! The binding matrix, written once: [`binding_matrix!`] expands a test file's cases into one
//! module per binding (`tcp::`, `unix::`, `tcps::`, `http1::`, `http2::`, `https::`, `quic::`), each test
//! calling the file's `async fn case(b: Binding)` (or plain `fn`) with that binding, and gated
//! by the binding's features.
//!
//! A new binding is one line in `binding_matrix!` below (after its [`Binding`] variant in
//! `common`): its module name, its variant, its `cfg` and its tags; every matrix test of every
//! file then runs on it too, each group of cases whose tags it has.
//!
//! [`Binding`]: super::Binding

/// One module per binding; in each, one test per case of every group whose tags the binding
/// has. A group is `[tags] { cases }`: `[]` is every binding, `[wire plain]` every binding
/// tagged both `wire` and `plain`. A case is `async fn name;` (a test on a 2-thread runtime
/// calling `name(b).await`) or `fn name;` (a plain test calling `name(b)`). Attributes before a
/// case go on each binding's test: `#[ignore = "slow: ..."]` puts it in a test group
/// (`docs/testing.md`).
///
/// ```ignore
/// common::binding_matrix! {
///     [] {
///         async fn every_operation_kind;
///         fn the_blocking_client_needs_no_runtime;
///     }
///     [wire] {
///         async fn unknown_frame_types_are_skipped;
///     }
/// }
/// ```
///
/// The tags (a new one also needs its arms in `__matrix_tag!` and `__matrix_if!`):
/// - `wire`: keel-wire frames (`tcp://`, `unix://`, `tcps://`);
/// - `http`: HTTP; `http1`: HTTP/1.1 spoken; `http2`: HTTP/2 spoken;
/// - `multiplexed`: concurrent calls share one connection;
/// - `tls`: TLS; `plain`: no TLS;
/// - `over_tcp`: a TCP connection underneath (what a TCP proxy can carry);
/// - `quic`: keel-wire's calls on QUIC streams (`quic://`, feature `quic`);
/// - `stream_socket`: a TCP or Unix stream socket, what a raw test peer writes bytes to and a
///   TCP forwarder carries (not UDP).
///
/// The modules take the bindings' names at the root of the test file: an item of the same name
/// there (`use hyper::client::conn::http2`, say) has to be renamed.
macro_rules! binding_matrix {
    ($($groups:tt)*) => {
        $crate::common::matrix::__matrix_module! {
            tcp = $crate::common::Binding::Tcp; [wire multiplexed plain over_tcp stream_socket]; $($groups)*
        }
        $crate::common::matrix::__matrix_module! {
            unix = $crate::common::Binding::Unix; [wire multiplexed plain stream_socket]; $($groups)*
        }
        #[cfg(feature = "tls")]
        $crate::common::matrix::__matrix_module! {
            tcps = $crate::common::Binding::Tcps; [wire multiplexed tls over_tcp stream_socket]; $($groups)*
        }
        #[cfg(feature = "http")]
        $crate::common::matrix::__matrix_module! {
            http1 = $crate::common::Binding::Http1; [http http1 plain over_tcp stream_socket]; $($groups)*
        }
        #[cfg(feature = "http")]
        $crate::common::matrix::__matrix_module! {
            http2 = $crate::common::Binding::Http2; [http http2 multiplexed plain over_tcp stream_socket];
            $($groups)*
        }
        #[cfg(all(feature = "http", feature = "tls"))]
        $crate::common::matrix::__matrix_module! {
            https = $crate::common::Binding::Https; [http http1 http2 multiplexed tls over_tcp stream_socket];
            $($groups)*
        }
        #[cfg(feature = "quic")]
        $crate::common::matrix::__matrix_module! {
            quic = $crate::common::Binding::Quic; [quic multiplexed tls]; $($groups)*
        }
    };
}

/// One binding's module.
macro_rules! __matrix_module {
    ($name:ident = $b:expr; $tags:tt; $($groups:tt)*) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $crate::common::matrix::__matrix_groups! { $b; $tags; $($groups)* }
        }
    };
}

/// The groups whose tags the binding has.
macro_rules! __matrix_groups {
    ($b:expr; $tags:tt;) => {};
    ($b:expr; $tags:tt; [$($need:ident)*] { $($cases:tt)* } $($rest:tt)*) => {
        $($crate::common::matrix::__matrix_tag!($need);)*
        $crate::common::matrix::__matrix_if! {
            [$($need)*] $tags $tags { $crate::common::matrix::__matrix_cases! { $b; $($cases)* } }
        }
        $crate::common::matrix::__matrix_groups! { $b; $tags; $($rest)* }
    };
}

/// Nothing for a tag of [`binding_matrix!`]; an error for a misspelt one (which would
/// otherwise select no binding, quietly).
macro_rules! __matrix_tag {
    (wire) => {};
    (http) => {};
    (http1) => {};
    (http2) => {};
    (multiplexed) => {};
    (tls) => {};
    (plain) => {};
    (over_tcp) => {};
    (quic) => {};
    (stream_socket) => {};
    ($other:ident) => {
        compile_error!(concat!("no binding has the tag `", stringify!($other), "`"));
    };
}

/// `{ body }` if every tag in the first list is in the second (the third is the whole second
/// list again, to look for the next needed tag from its start).
macro_rules! __matrix_if {
    ([] $have:tt $all:tt { $($body:tt)* }) => { $($body)* };
    ([$need:ident $($more:ident)*] [] $all:tt $body:tt) => {};
    ([wire $($more:ident)*] [wire $($h:ident)*] $all:tt $body:tt) => {
        $crate::common::matrix::__matrix_if! { [$($more)*] $all $all $body }
    };
    ([http $($more:ident)*] [http $($h:ident)*] $all:tt $body:tt) => {
        $crate::common::matrix::__matrix_if! { [$($more)*] $all $all $body }
    };
    ([http1 $($more:ident)*] [http1 $($h:ident)*] $all:tt $body:tt) => {
        $crate::common::matrix::__matrix_if! { [$($more)*] $all $all $body }
    };
    ([http2 $($more:ident)*] [http2 $($h:ident)*] $all:tt $body:tt) => {
        $crate::common::matrix::__matrix_if! { [$($more)*] $all $all $body }
    };
    ([multiplexed $($more:ident)*] [multiplexed $($h:ident)*] $all:tt $body:tt) => {
        $crate::common::matrix::__matrix_if! { [$($more)*] $all $all $body }
    };
    ([tls $($more:ident)*] [tls $($h:ident)*] $all:tt $body:tt) => {
        $crate::common::matrix::__matrix_if! { [$($more)*] $all $all $body }
    };
    ([plain $($more:ident)*] [plain $($h:ident)*] $all:tt $body:tt) => {
        $crate::common::matrix::__matrix_if! { [$($more)*] $all $all $body }
    };
    ([over_tcp $($more:ident)*] [over_tcp $($h:ident)*] $all:tt $body:tt) => {
        $crate::common::matrix::__matrix_if! { [$($more)*] $all $all $body }
    };
    ([stream_socket $($more:ident)*] [stream_socket $($h:ident)*] $all:tt $body:tt) => {
        $crate::common::matrix::__matrix_if! { [$($more)*] $all $all $body }
    };
    ([quic $($more:ident)*] [quic $($h:ident)*] $all:tt $body:tt) => {
        $crate::common::matrix::__matrix_if! { [$($more)*] $all $all $body }
    };
    ([$need:ident $($more:ident)*] [$other:ident $($h:ident)*] $all:tt $body:tt) => {
        $crate::common::matrix::__matrix_if! { [$need $($more)*] [$($h)*] $all $body }
    };
}

/// One test per case.
macro_rules! __matrix_cases {
    ($b:expr;) => {};
    ($b:expr; $(#[$attr:meta])* async fn $case:ident; $($rest:tt)*) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $(#[$attr])*
        async fn $case() {
            super::$case($b).await
        }
        $crate::common::matrix::__matrix_cases! { $b; $($rest)* }
    };
    ($b:expr; $(#[$attr:meta])* fn $case:ident; $($rest:tt)*) => {
        #[test]
        $(#[$attr])*
        fn $case() {
            super::$case($b)
        }
        $crate::common::matrix::__matrix_cases! { $b; $($rest)* }
    };
}

pub(crate) use {
    __matrix_cases, __matrix_groups, __matrix_if, __matrix_module, __matrix_tag, binding_matrix,
};
