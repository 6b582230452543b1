//! The OpenAPI document of a contract: each kind of operation as the HTTP convention carries it
//! (plain, typed fault, `Result<T, Status>`, one-way, streamed either way, `#[keel(default)]`
//! parameters, a `Context` parameter), and the document a host serves at `GET /openapi.json`.
#![cfg(feature = "openapi")]

use keel::{ByteStream, Context, Status};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A fault with a nested type, to see both land in `components/schemas`.
#[derive(Debug, Clone, Serialize, Deserialize, keel::schemars::JsonSchema)]
#[schemars(crate = "keel::schemars")]
pub struct Refused {
    /// Why.
    pub reason: Reason,
}

/// Why a call was refused.
#[derive(Debug, Clone, Serialize, Deserialize, keel::schemars::JsonSchema)]
#[schemars(crate = "keel::schemars")]
pub enum Reason {
    /// No room.
    Full,
    /// Not open.
    Closed,
}

/// A contract with every kind of operation.
#[keel::contract]
pub trait Store {
    /// Stores `value` under `key`.
    ///
    /// Second paragraph.
    fn put(&self, key: String, value: Vec<u8>, #[keel(default)] ttl_s: u32)
        -> Result<u64, Refused>;
    /// Looks `key` up.
    #[keel(idempotent)]
    async fn get(&self, key: String, ctx: Context) -> Result<Vec<u8>, Status>;
    /// Marks `key` used.
    #[keel(one_way)]
    fn touch(&self, key: String);
    /// Stores a stream.
    async fn upload(&self, name: String, data: ByteStream) -> u64;
    /// Sends a stream back.
    async fn download(&self, name: String) -> Result<ByteStream, Refused>;
}

// Hosted only by the test of the served document, which needs `http`.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
struct S;

impl Store for S {
    fn put(&self, _key: String, value: Vec<u8>, _ttl_s: u32) -> Result<u64, Refused> {
        Ok(value.len() as u64)
    }
    async fn get(&self, key: String, _ctx: Context) -> Result<Vec<u8>, Status> {
        Ok(key.into_bytes())
    }
    fn touch(&self, _key: String) {}
    async fn upload(&self, _name: String, _data: ByteStream) -> u64 {
        0
    }
    async fn download(&self, _name: String) -> Result<ByteStream, Refused> {
        Err(Refused {
            reason: Reason::Closed,
        })
    }
}

fn document() -> Value {
    serde_json::from_str(&keel::openapi::document(&[StoreClient::descriptor()])).unwrap()
}

fn post<'a>(doc: &'a Value, op: &str) -> &'a Value {
    &doc["paths"][format!("/Store/{op}")]["post"]
}

#[test]
fn an_operation_with_a_typed_fault() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["title"], "Store");
    let put = post(&doc, "put");
    assert_eq!(put["operationId"], "Store_put");
    assert_eq!(put["tags"], json!(["Store"]));
    assert_eq!(put["summary"], "Stores `value` under `key`.");
    assert_eq!(
        put["description"],
        "Stores `value` under `key`.\n\nSecond paragraph."
    );
    assert_eq!(
        put["parameters"],
        json!([{"$ref": "#/components/parameters/Deadline"}])
    );
    assert_eq!(
        put["requestBody"]["content"]["application/json"]["schema"],
        json!({"$ref": "#/components/schemas/Store_put_args"})
    );
    let args = &doc["components"]["schemas"]["Store_put_args"];
    // `#[keel(default)]`: a caller may leave it out.
    assert_eq!(args["required"], json!(["key", "value"]));
    assert_eq!(args["properties"]["key"], json!({"type": "string"}));
    assert_eq!(args["properties"]["value"]["type"], "array");
    let ok = &put["responses"]["200"];
    assert_eq!(
        ok["content"]["application/json"]["schema"]["format"],
        "uint64"
    );
    assert_eq!(
        ok["headers"]["keel-status"],
        json!({"$ref": "#/components/headers/Status"})
    );
    assert_eq!(
        put["responses"]["422"]["content"]["application/json"]["schema"],
        json!({"$ref": "#/components/schemas/Store_put_fault"})
    );
    let fault = &doc["components"]["schemas"]["Store_put_fault"];
    assert_eq!(fault["required"], json!(["code", "fault"]));
    assert_eq!(fault["properties"]["code"], json!({"const": "fault"}));
    assert_eq!(
        fault["properties"]["fault"],
        json!({"$ref": "#/components/schemas/Refused"})
    );
    assert_eq!(
        doc["components"]["schemas"]["Refused"]["properties"]["reason"],
        json!({"$ref": "#/components/schemas/Reason", "description": "Why."})
    );
    // Variants with doc comments: one `const` each, with its description.
    let variants: Vec<&Value> = doc["components"]["schemas"]["Reason"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["const"])
        .collect();
    assert_eq!(variants, [&json!("Full"), &json!("Closed")]);
    // The convention's other answers, shared.
    for (status, name) in [
        ("400", "BadRequest"),
        ("404", "NotFound"),
        ("413", "TooLarge"),
        ("500", "Internal"),
        ("503", "Unavailable"),
        ("504", "DeadlineExceeded"),
    ] {
        assert_eq!(
            put["responses"][status],
            json!({"$ref": format!("#/components/responses/{name}")})
        );
    }
    assert_eq!(
        doc["components"]["parameters"]["Deadline"]["name"],
        "keel-deadline-ms"
    );
    assert!(put.get("x-keel-streamed").is_none());
}

#[test]
fn status_results_one_way_and_context() {
    let doc = document();
    let get = post(&doc, "get");
    // The `Context` is not a parameter; a `Status` is not a typed fault.
    let args = &doc["components"]["schemas"]["Store_get_args"];
    assert_eq!(args["required"], json!(["key"]));
    assert!(get["responses"].get("422").is_none());
    assert!(get["responses"].get("404").is_some());
    assert_eq!(get["x-keel-idempotent"], true);
    let touch = post(&doc, "touch");
    assert_eq!(touch["x-keel-one-way"], true);
    assert!(touch.get("x-keel-idempotent").is_none());
    assert!(touch["responses"].get("200").is_none());
    assert!(touch["responses"]["202"].get("content").is_none());
}

#[test]
fn streamed_operations_are_marked() {
    let doc = document();
    let binary = json!({"type": "string", "format": "binary"});
    let upload = post(&doc, "upload");
    assert_eq!(upload["x-keel-streamed"], true);
    assert_eq!(
        upload["requestBody"]["content"]["application/octet-stream"]["schema"],
        binary
    );
    let args_header = &upload["parameters"][1];
    assert_eq!(args_header["name"], "keel-args");
    assert_eq!(args_header["in"], "header");
    assert_eq!(args_header["required"], true);
    assert_eq!(
        args_header["content"]["application/json"]["schema"],
        json!({"$ref": "#/components/schemas/Store_upload_args"})
    );
    assert_eq!(
        doc["components"]["schemas"]["Store_upload_args"]["required"],
        json!(["name"])
    );
    let download = post(&doc, "download");
    assert_eq!(download["x-keel-streamed"], true);
    assert_eq!(
        download["responses"]["200"]["content"]["application/octet-stream"]["schema"],
        binary
    );
    assert!(download["responses"].get("422").is_some());
}

/// One message of a stream.
#[derive(Debug, Clone, Serialize, Deserialize, keel::schemars::JsonSchema)]
#[schemars(crate = "keel::schemars")]
pub struct Entry {
    /// Its key.
    pub key: String,
}

/// Every kind of stream of messages.
#[keel::contract]
pub trait Feed {
    /// Entries as they change (server streaming).
    #[keel(idempotent)]
    async fn watch(&self, prefix: String) -> keel::MessageStream<Entry>;
    /// Loads entries (client streaming).
    async fn load(&self, entries: keel::MessageStream<Entry>) -> u64;
    /// Each entry back (bidirectional).
    async fn sync(&self, entries: keel::MessageStream<Entry>) -> keel::MessageStream<Entry>;
}

#[test]
fn message_streams_are_marked_with_their_kind_and_message_schema() {
    let doc: Value =
        serde_json::from_str(&keel::openapi::document(&[FeedClient::descriptor()])).unwrap();
    let op = |name: &str| &doc["paths"][format!("/Feed/{name}")]["post"];
    let entry = json!({"$ref": "#/components/schemas/Entry"});
    let watch = op("watch");
    assert_eq!(watch["x-keel-stream"], "server");
    assert_eq!(watch["x-keel-streamed"], true);
    let reply = &watch["responses"]["200"]["content"];
    assert_eq!(reply["application/x-ndjson"]["schema"], entry);
    assert!(reply.get("text/event-stream").is_some());
    assert_eq!(
        watch["requestBody"]["content"]["application/json"]["schema"],
        json!({"$ref": "#/components/schemas/Feed_watch_args"})
    );
    let load = op("load");
    assert_eq!(load["x-keel-stream"], "client");
    assert_eq!(
        load["requestBody"]["content"]["application/x-ndjson"]["schema"],
        entry
    );
    assert_eq!(
        load["responses"]["200"]["content"]["application/json"]["schema"]["type"],
        "integer"
    );
    let sync = op("sync");
    assert_eq!(sync["x-keel-stream"], "bidirectional");
    assert_eq!(
        sync["requestBody"]["content"]["application/x-ndjson"]["schema"],
        entry
    );
    assert_eq!(
        sync["responses"]["200"]["content"]["application/x-ndjson"]["schema"],
        entry
    );
    assert!(post(&document(), "upload").get("x-keel-stream").is_none());
}

#[test]
fn the_document_is_stable_text() {
    let a = keel::openapi::document(&[StoreClient::descriptor()]);
    let b = keel::openapi::document(&[StoreClient::descriptor()]);
    assert_eq!(a, b);
    assert!(a.ends_with("}\n"));
}

/// A contract declared in a function body: its return and fault types are named where the
/// contract is (parameter types must still be visible from the enclosing module, as the
/// arguments' struct lives in a module of its own).
#[test]
// The generated client's methods are `pub` whatever the trait's visibility.
#[allow(unreachable_pub)]
fn a_contract_in_a_function_body() {
    #[derive(Debug, Serialize, Deserialize, keel::schemars::JsonSchema)]
    #[schemars(crate = "keel::schemars")]
    struct Local {
        n: i32,
    }
    /// Declared here.
    #[keel::contract]
    trait Inner {
        /// An operation.
        fn f(&self, n: i32) -> Result<Local, Local>;
    }
    let doc: Value =
        serde_json::from_str(&keel::openapi::document(&[InnerClient::descriptor()])).unwrap();
    assert_eq!(
        doc["components"]["schemas"]["Local"]["required"],
        json!(["n"])
    );
}

#[cfg(feature = "http")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_serves_it_at_openapi_json() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let host = keel::Host::builder()
        .service(StoreServer::new(S))
        .endpoint("http://127.0.0.1:0")
        .runtime(tokio::runtime::Handle::current())
        .start()
        .unwrap();
    assert_eq!(
        host.openapi(),
        keel::openapi::document(&[StoreClient::descriptor()])
    );
    let addr = host.url().strip_prefix("http://").unwrap().to_string();
    for (request, expect) in [
        ("GET /openapi.json", "HTTP/1.1 200"),
        ("POST /openapi.json", "HTTP/1.1 405"),
    ] {
        let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "{request} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
        sock.write_all(head.as_bytes()).await.unwrap();
        let mut answer = String::new();
        sock.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with(expect), "{answer}");
        if expect.ends_with("200") {
            let lower = answer.to_ascii_lowercase();
            assert!(lower.contains("content-type: application/json"), "{answer}");
            assert!(lower.contains("keel-status: ok"), "{answer}");
            let body = answer.split_once("\r\n\r\n").unwrap().1;
            assert_eq!(body, host.openapi());
        } else {
            assert!(
                answer.to_ascii_lowercase().contains("allow: get"),
                "{answer}"
            );
        }
    }
    host.shutdown_async().await;
}

/// Refuses callers without a bearer token; lets descriptions through when `open_descriptions`.
#[cfg(feature = "http")]
struct Bearer {
    open_descriptions: bool,
}

#[cfg(feature = "http")]
impl keel::host::Interceptor for Bearer {
    fn before(&self, ctx: &Context) -> Result<(), Status> {
        if self.open_descriptions && ctx.operation() == keel::host::DESCRIBE {
            return Ok(());
        }
        match ctx.metadata().get("authorization") {
            Some("Bearer t") => Ok(()),
            _ => Err(Status::unauthenticated("a bearer token is required")),
        }
    }
}

/// `request` (method and path) to `addr` over HTTP/1.1 with `headers`; the whole answer.
#[cfg(feature = "http")]
async fn http1(addr: &str, request: &str, headers: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{request} HTTP/1.1\r\nhost: {addr}\r\n{headers}content-length: 0\r\nconnection: close\r\n\r\n"
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    let mut answer = String::new();
    sock.read_to_string(&mut answer).await.unwrap();
    answer
}

/// `GET /openapi.json` and `GET /{Service}` pass the host's interceptors as calls do (an
/// unknown service is refused like a known one, so refusals tell nothing of what the host
/// serves), and can be switched off and on at run time.
#[cfg(feature = "http")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptions_pass_the_interceptors_and_can_be_switched_off() {
    let host = keel::Host::builder()
        .service(StoreServer::new(S))
        .endpoint("http://127.0.0.1:0")
        .interceptor(Bearer {
            open_descriptions: false,
        })
        .runtime(tokio::runtime::Handle::current())
        .start()
        .unwrap();
    let addr = host.url().strip_prefix("http://").unwrap().to_string();
    let token = "authorization: Bearer t\r\n";
    for path in ["/openapi.json", "/Store", "/Nope"] {
        let answer = http1(&addr, &format!("GET {path}"), "").await;
        assert!(answer.starts_with("HTTP/1.1 401"), "{path}: {answer}");
        assert!(answer.contains("bearer token"), "{path}: {answer}");
    }
    let answer = http1(&addr, "GET /openapi.json", token).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with(&host.openapi()), "{answer}");
    let answer = http1(&addr, "GET /Store", token).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"put\""), "{answer}");
    let answer = http1(&addr, "GET /Nope", token).await;
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");

    host.set_descriptions(false);
    for path in ["/openapi.json", "/Store"] {
        let answer = http1(&addr, &format!("GET {path}"), token).await;
        assert!(answer.starts_with("HTTP/1.1 404"), "{path}: {answer}");
        assert!(answer.contains("switched off"), "{path}: {answer}");
    }
    // Calls are not descriptions: they go on.
    let answer = http1(&addr, "POST /Store/touch", token).await;
    assert!(!answer.contains("switched off"), "{answer}");
    host.set_descriptions(true);
    let answer = http1(&addr, "GET /Store", token).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    host.shutdown_async().await;

    // An interceptor may leave descriptions open; a host may start with them off.
    let host = keel::Host::builder()
        .service(StoreServer::new(S))
        .endpoint("http://127.0.0.1:0")
        .interceptor(Bearer {
            open_descriptions: true,
        })
        .runtime(tokio::runtime::Handle::current())
        .start()
        .unwrap();
    let addr = host.url().strip_prefix("http://").unwrap().to_string();
    let answer = http1(&addr, "GET /openapi.json", "").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let answer = http1(&addr, "POST /Store/touch", "").await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    host.shutdown_async().await;
    let host = keel::Host::builder()
        .service(StoreServer::new(S))
        .endpoint("http://127.0.0.1:0")
        .descriptions(false)
        .runtime(tokio::runtime::Handle::current())
        .start()
        .unwrap();
    let addr = host.url().strip_prefix("http://").unwrap().to_string();
    let answer = http1(&addr, "GET /openapi.json", "").await;
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    host.shutdown_async().await;
}
