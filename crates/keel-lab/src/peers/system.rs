//! The systems `keel-lab peers` compares, and what each needs to be started and reached.

use serde::Serialize;

/// One system under test: a server and its own client, both serving "add two f64".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum System {
    /// Length-prefixed frames over TCP, answered by a bare tokio loop: the limit.
    Raw,
    /// tonic (gRPC over HTTP/2, prost messages).
    Tonic,
    /// tarpc over TCP with its bincode serde transport.
    Tarpc,
    /// keel-wire over TCP, the async operation (runs on the host's runtime).
    KeelTcpAsync,
    /// keel-wire over TCP, the sync operation (runs on a keel-pool thread).
    KeelTcpSync,
    /// keel over HTTP/2 (h2c), the async operation.
    KeelH2,
    /// keel's host speaking gRPC (protobuf, h2c) to tonic's client, the async operation: the
    /// same client, on the same `.proto` (the one keel exports, `proto/adder.proto`), as the
    /// `tonic` row's.
    KeelGrpc,
    /// keel over HTTP/1.1, the async operation.
    KeelH1,
    /// keel's host speaking gRPC to keel's own client over `grpc://` (protobuf, h2c), the async
    /// operation: `keel-grpc`'s server with keel's client instead of tonic's.
    KeelGrpcKeel,
}

impl System {
    /// Every system, in the order of the tables.
    pub(crate) const ALL: [System; 9] = [
        System::Raw,
        System::Tonic,
        System::Tarpc,
        System::KeelTcpAsync,
        System::KeelTcpSync,
        System::KeelH2,
        System::KeelGrpc,
        System::KeelH1,
        System::KeelGrpcKeel,
    ];

    /// The name in tables and JSON.
    pub(crate) fn name(self) -> &'static str {
        match self {
            System::Raw => "raw",
            System::Tonic => "tonic",
            System::Tarpc => "tarpc",
            System::KeelTcpAsync => "keel-tcp-async",
            System::KeelTcpSync => "keel-tcp-sync",
            System::KeelH2 => "keel-h2",
            System::KeelGrpc => "keel-grpc",
            System::KeelH1 => "keel-h1",
            System::KeelGrpcKeel => "keel-grpc-keel",
        }
    }

    /// Whether this is one of keel's variants (the numerators of the ratios): keel's host,
    /// whichever client calls it.
    pub(crate) fn is_keel(self) -> bool {
        matches!(
            self,
            System::KeelTcpAsync
                | System::KeelTcpSync
                | System::KeelH2
                | System::KeelGrpc
                | System::KeelH1
                | System::KeelGrpcKeel
        )
    }

    /// Whether the client is tonic's (generated from the `.proto` keel exports): the `tonic`
    /// and `keel-grpc` rows.
    pub(crate) fn tonic_client(self) -> bool {
        matches!(self, System::Tonic | System::KeelGrpc)
    }

    /// Whether the streaming workload runs on this system: raw (the limit), tonic (gRPC server
    /// streaming), keel over keel-wire (keel-tcp-async's row; keel-tcp-sync's server is the
    /// same host) and keel's host over gRPC (tonic's client). tarpc has no streaming; keel's
    /// own HTTP convention is not in this workload.
    pub(crate) fn streams(self) -> bool {
        matches!(
            self,
            System::Raw | System::Tonic | System::KeelTcpAsync | System::KeelGrpc
        )
    }

    /// Whether the stalled-consumer check runs on this system (keel-wire's, whose bound it
    /// checks).
    pub(crate) fn stalls(self) -> bool {
        self == System::KeelTcpAsync
    }

    /// The systems sharing a server: the two keel-wire variants are one host with both
    /// operations, so both run against the same kind of child.
    pub(crate) fn listen_url(self) -> &'static str {
        match self {
            System::KeelTcpAsync | System::KeelTcpSync => "tcp://127.0.0.1:0",
            System::KeelH2 | System::KeelGrpc | System::KeelH1 | System::KeelGrpcKeel => {
                "http://127.0.0.1:0"
            }
            System::Raw | System::Tonic | System::Tarpc => "127.0.0.1:0",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_keel_is_marked() {
        let names: std::collections::BTreeSet<_> = System::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(names.len(), System::ALL.len());
        let keel: Vec<_> = System::ALL.iter().filter(|s| s.is_keel()).collect();
        assert_eq!(keel.len(), 6);
        assert!(keel.iter().all(|s| s.name().starts_with("keel-")));
        let streams: Vec<_> = System::ALL.iter().filter(|s| s.streams()).collect();
        assert_eq!(
            streams,
            [
                &System::Raw,
                &System::Tonic,
                &System::KeelTcpAsync,
                &System::KeelGrpc
            ]
        );
        let tonic: Vec<_> = System::ALL.iter().filter(|s| s.tonic_client()).collect();
        assert_eq!(tonic, [&System::Tonic, &System::KeelGrpc]);
        assert!(!System::Tarpc.streams());
        assert!(System::ALL.iter().all(|s| !s.stalls() || s.streams()));
        assert_eq!(
            serde_json::to_string(&System::KeelTcpAsync).unwrap(),
            "\"keel-tcp-async\""
        );
    }
}
