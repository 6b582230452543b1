//! Contract types that do not implement `schemars::JsonSchema`, with keel's default features
//! (`openapi` on): `serde_bytes::ByteBuf`, `uuid::Uuid`, `chrono::DateTime<Utc>` and a type of
//! the user's own. The contract compiles, calls work, and the OpenAPI document gives each such
//! type an open schema (`{}`) whose description names it, beside the real schema of every type
//! that has one. The user's crate needs no dependency on schemars for any of it.
//!
//! Without the `openapi` feature the contract must compile too (the calls are still tested).

use chrono::{DateTime, TimeZone, Utc};
use keel::MessageStream;
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;
use uuid::Uuid;

/// A type of the user's own, not `JsonSchema`, holding types that are not either.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// Its id.
    pub id: Uuid,
    /// When it was made.
    pub at: DateTime<Utc>,
}

/// A fault that is not `JsonSchema`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Missing {
    /// The id asked for.
    pub id: Uuid,
}

/// Every place a type appears in a contract: parameters (plain, `Option`, `#[keel(default)]`),
/// a return value, a fault, a stream of messages; and types with schemas beside them.
#[keel::contract]
pub trait Files {
    /// Stores `data` under `id`.
    fn put(
        &self,
        id: Uuid,
        at: DateTime<Utc>,
        data: ByteBuf,
        item: Item,
        note: Option<Item>,
        #[keel(default)] extra: ByteBuf,
    ) -> Result<ByteBuf, Missing>;
    /// Counts the tags: every type here has a schema.
    fn count(&self, tags: Vec<String>, limit: Option<u32>) -> u64;
    /// The items made after `after`.
    async fn watch(&self, after: DateTime<Utc>) -> MessageStream<Item>;
}

struct F;

impl Files for F {
    fn put(
        &self,
        id: Uuid,
        at: DateTime<Utc>,
        data: ByteBuf,
        item: Item,
        note: Option<Item>,
        extra: ByteBuf,
    ) -> Result<ByteBuf, Missing> {
        if id.is_nil() {
            return Err(Missing { id });
        }
        assert_eq!(item.at, at);
        assert!(note.is_none() && extra.is_empty());
        let mut out = data.into_vec();
        out.extend_from_slice(item.id.as_bytes());
        Ok(ByteBuf::from(out))
    }
    fn count(&self, tags: Vec<String>, limit: Option<u32>) -> u64 {
        limit.map_or(tags.len(), |l| tags.len().min(l as usize)) as u64
    }
    async fn watch(&self, after: DateTime<Utc>) -> MessageStream<Item> {
        let item = Item {
            id: Uuid::from_u128(7),
            at: after,
        };
        MessageStream::from_iter(vec![item])
    }
}

fn item() -> Item {
    Item {
        id: Uuid::from_u128(0x1234),
        at: Utc.with_ymd_and_hms(2026, 11, 27, 12, 0, 0).unwrap(),
    }
}

/// The types travel as their serde forms, over keel's own binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_carry_the_types() {
    let host = keel::Host::builder()
        .service(FilesServer::new(F))
        .endpoint("tcp://127.0.0.1:0")
        .runtime(tokio::runtime::Handle::current())
        .start()
        .unwrap();
    let client = FilesClient::connect(host.url()).await.unwrap();
    let it = item();
    let put = |id| {
        client.put(
            id,
            it.at,
            ByteBuf::from(vec![1, 2]),
            it.clone(),
            None,
            ByteBuf::new(),
        )
    };
    let answer = put(Uuid::from_u128(1)).await.unwrap();
    assert_eq!(&answer[..2], &[1, 2]);
    assert_eq!(&answer[2..], it.id.as_bytes());
    assert_eq!(
        put(Uuid::nil()).await.unwrap_err().fault::<Missing>(),
        Some(Missing { id: Uuid::nil() })
    );
    assert_eq!(
        client
            .count(vec!["a".into(), "b".into()], Some(1))
            .await
            .unwrap(),
        1
    );
    host.shutdown_async().await;
}

#[cfg(feature = "openapi")]
mod document {
    use serde_json::{json, Value};

    use super::FilesClient;

    fn document() -> Value {
        serde_json::from_str(&keel::openapi::document(&[FilesClient::descriptor()])).unwrap()
    }

    /// An open schema: no keyword but the description, which names the Rust type.
    fn assert_open(schema: &Value, type_name: &str) {
        let object = schema.as_object().unwrap_or_else(|| panic!("{schema}"));
        let keys: Vec<&str> = object.keys().map(String::as_str).collect();
        assert!(
            keys == ["description"] || keys == ["default", "description"],
            "{schema}"
        );
        let description = object["description"].as_str().unwrap();
        assert!(description.starts_with("Any JSON value"), "{description}");
        assert!(description.contains(type_name), "{description}");
        assert!(
            description.contains("does not implement `schemars::JsonSchema`"),
            "{description}"
        );
    }

    #[test]
    fn types_without_a_schema_get_an_open_one_that_names_them() {
        let doc = document();
        let args = &doc["components"]["schemas"]["Files_put_args"];
        assert_eq!(args["type"], "object");
        let props = &args["properties"];
        assert_open(&props["id"], "uuid::Uuid");
        assert_open(&props["at"], "chrono::");
        assert_open(&props["at"], "DateTime<chrono::offset::utc::Utc>");
        assert_open(&props["data"], "serde_bytes::bytebuf::ByteBuf");
        assert_open(&props["item"], "openapi_open::Item");
        assert_open(&props["note"], "Option<openapi_open::Item>");
        assert_open(&props["extra"], "ByteBuf");
        // `#[keel(default)]` keeps its default, as for a type with a schema.
        assert_eq!(props["extra"]["default"], json!([]));
        // An `Option` and the `#[keel(default)]` parameters may be left out, schema or not.
        assert_eq!(args["required"], json!(["id", "at", "data", "item"]));

        let put = &doc["paths"]["/Files/put"]["post"];
        assert_open(
            &put["responses"]["200"]["content"]["application/json"]["schema"],
            "ByteBuf",
        );
        let fault = &doc["components"]["schemas"]["Files_put_fault"];
        assert_eq!(fault["properties"]["code"], json!({"const": "fault"}));
        assert_open(&fault["properties"]["fault"], "openapi_open::Missing");

        let watch = &doc["paths"]["/Files/watch"]["post"];
        assert_eq!(watch["x-keel-stream"], "server");
        assert_open(
            &watch["responses"]["200"]["content"]["application/x-ndjson"]["schema"],
            "openapi_open::Item",
        );
        assert_open(
            &doc["components"]["schemas"]["Files_watch_args"]["properties"]["after"],
            "DateTime",
        );
    }

    #[test]
    fn types_with_a_schema_keep_theirs() {
        let doc = document();
        let args = &doc["components"]["schemas"]["Files_count_args"];
        assert_eq!(
            args["properties"]["tags"],
            json!({"type": "array", "items": {"type": "string"}})
        );
        assert_eq!(
            args["properties"]["limit"]["type"],
            json!(["integer", "null"])
        );
        assert_eq!(args["required"], json!(["tags"]));
        let ok = &doc["paths"]["/Files/count"]["post"]["responses"]["200"];
        assert_eq!(
            ok["content"]["application/json"]["schema"]["format"],
            "uint64"
        );
        // No open schema leaked into `components/schemas` under a type's name.
        let names: Vec<&String> = doc["components"]["schemas"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert!(
            names
                .iter()
                .all(|n| n.starts_with("Files_") || *n == "KeelError"),
            "{names:?}"
        );
    }

    /// `openapi-spec-validator` (PyPI, installed by `.ci/run`) accepts the document: an open
    /// schema is valid OpenAPI 3.1. Skipped when the tool is not on `PATH`, unless
    /// `KEEL_REQUIRE_OPENAPI_TOOLS=1`.
    #[test]
    #[ignore = "external: runs openapi-spec-validator"]
    fn openapi_spec_validator_accepts_it() {
        use std::io::Write;
        use std::process::{Command, Stdio};

        let tool = "openapi-spec-validator";
        let spawned = Command::new(tool)
            .arg("-")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let required = std::env::var("KEEL_REQUIRE_OPENAPI_TOOLS").is_ok_and(|v| v == "1");
                assert!(!required, "KEEL_REQUIRE_OPENAPI_TOOLS=1 but `{tool}`: {e}");
                eprintln!("SKIPPED: `{tool}` is not on PATH ({e})");
                return;
            }
        };
        let text = keel::openapi::document(&[FilesClient::descriptor()]);
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("OK"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
