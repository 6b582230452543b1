//! The auth example's `Accounts` service: a bearer-token interceptor establishes who calls, and
//! handlers answer with status codes (`not_found`, `unauthenticated`) rather than faults.

use std::collections::HashMap;
use std::sync::Arc;

use keel::host::Interceptor;
use keel::{Context, Status};
use serde::{Deserialize, Serialize};

/// The token `--serve` accepts unless told otherwise (`--token T`); it authenticates the user
/// [`DEMO_USER`].
pub const DEFAULT_TOKEN: &str = "s3cret";

/// Whom [`DEFAULT_TOKEN`] (or `--token`) authenticates.
pub const DEMO_USER: &str = "demo";

/// An account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, keel::schemars::JsonSchema)]
#[schemars(crate = "keel::schemars")]
pub struct Account {
    /// Its id (never 0).
    pub id: u64,
    /// Who owns it.
    pub owner: String,
    /// Balance in cents.
    pub balance: i64,
}

/// Accounts, for authenticated callers only.
#[keel::contract]
pub trait Accounts {
    /// The caller's identity, as the host's interceptor established it from
    /// `Authorization: Bearer <token>`.
    async fn whoami(&self, ctx: Context) -> String;
    /// The account `id`; `not_found` for an id this host does not know, and for 0.
    async fn get(&self, id: u64) -> Result<Account, Status>;
}

/// Who the caller is, as [`BearerAuth`] found out (a [`Context`] extension).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller(pub String);

/// Lets in only calls with `Authorization: Bearer <token>` for a known token; every other call
/// is answered `unauthenticated` (401 over HTTP) before its arguments are even decoded. The
/// host's descriptions of its contracts (`GET /openapi.json`, `GET /{Service}`, which pass the
/// interceptors as operation [`keel::host::DESCRIBE`]) stay open: the contract is public, its
/// calls are not.
#[derive(Debug, Clone)]
pub struct BearerAuth {
    users: Arc<HashMap<String, String>>,
}

impl BearerAuth {
    /// Accepts `token` as `user`.
    pub fn new(token: &str, user: &str) -> BearerAuth {
        BearerAuth {
            users: Arc::new(HashMap::from([(token.to_string(), user.to_string())])),
        }
    }
}

impl Interceptor for BearerAuth {
    fn before(&self, ctx: &Context) -> Result<(), Status> {
        if ctx.operation() == keel::host::DESCRIBE {
            return Ok(());
        }
        let token = ctx
            .metadata()
            .get("authorization")
            .and_then(|v| v.strip_prefix("Bearer "));
        match token.and_then(|t| self.users.get(t.trim())) {
            Some(user) => {
                ctx.insert_extension(Caller(user.clone()));
                Ok(())
            }
            // The same answer for a missing and a wrong token: nothing to learn by guessing.
            None => Err(Status::unauthenticated(
                "send `authorization: Bearer <token>` with a valid token",
            )),
        }
    }
}

/// The accounts a host knows: 1 and 2.
#[derive(Debug, Default, Clone, Copy)]
pub struct Bank;

impl Accounts for Bank {
    async fn whoami(&self, ctx: Context) -> String {
        // The interceptor ran before every call that reaches here.
        ctx.extension::<Caller>()
            .map_or_else(|| "nobody".to_string(), |c| c.0)
    }

    async fn get(&self, id: u64) -> Result<Account, Status> {
        let (owner, balance) = match id {
            1 => (DEMO_USER, 10_000),
            2 => ("someone-else", 25_000),
            _ => return Err(Status::not_found(format!("no account {id}"))),
        };
        Ok(Account {
            id,
            owner: owner.to_string(),
            balance,
        })
    }
}

/// A host serving [`Bank`] on `url` behind [`BearerAuth`] with `token`.
pub fn host(url: &str, token: &str) -> Result<keel::Host, keel::Error> {
    builder(url, token).start()
}

/// The builder of [`host`], to add settings before it starts.
pub fn builder(url: &str, token: &str) -> keel::host::HostBuilder {
    keel::Host::builder()
        .service(AccountsServer::new(Bank))
        .interceptor(BearerAuth::new(token, DEMO_USER))
        .endpoint(url)
}

/// A client interceptor that sends `Authorization: Bearer <token>` with every call.
#[derive(Debug, Clone)]
pub struct SendToken(pub String);

impl keel::client::Interceptor for SendToken {
    fn before(&self, call: &mut keel::client::ClientCall) -> Result<(), Status> {
        call.metadata_mut()
            .insert("authorization", &format!("Bearer {}", self.0))
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        Ok(())
    }
}

/// The Accounts contract's OpenAPI 3.1 document, as a host serves it at `GET /openapi.json`
/// (committed as `examples/openapi/accounts.json`).
pub fn openapi() -> String {
    keel::openapi::document(&[AccountsClient::descriptor()])
}

/// The contract's `.proto` file, as gRPC tools and code generators read it (committed as
/// `examples/proto/accounts.proto`).
pub fn proto() -> String {
    keel::proto::file(AccountsClient::descriptor())
        .expect("every type of the contract has a protobuf type")
}
