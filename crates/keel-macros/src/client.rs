//! `{Trait}Client`, one async method per operation over a `keel::Channel`, and
//! `{Trait}BlockingClient`, the same methods for code without a runtime of its own.

use proc_macro2::TokenStream as TokenStream2;
use quote::{format_ident, quote, quote_spanned};
use syn::{Ident, ItemTrait};

use crate::descriptor::{args_ident, module_ident, static_ident};
use crate::parse::Operation;

/// The async and the blocking client, for the contract `item` whose operations are `ops`.
pub(crate) fn generate(
    item: &ItemTrait,
    ops: &[Operation],
    callback: Option<&syn::Path>,
) -> TokenStream2 {
    let vis = &item.vis;
    let trait_name = &item.ident;
    let service_name = trait_name.to_string();
    let client = format_ident!("{}Client", trait_name);
    let blocking = format_ident!("{}BlockingClient", trait_name);
    let k = quote!(::keel::__private);
    let descriptor_static = static_ident(trait_name);
    let client_doc = format!(
        "Async client for the `{service_name}` contract: one method per operation, each returning `Result<_, keel::Error>`."
    );
    let blocking_doc = format!(
        "Blocking client for the `{service_name}` contract, usable from plain `fn main` without a runtime of your own (do not call it from inside an async task)."
    );
    let client_methods = ops
        .iter()
        .enumerate()
        .map(|(i, op)| client_method(trait_name, i, op));
    let blocking_methods = ops.iter().map(blocking_method);
    let (open_session, blocking_open_session) = session_methods(callback);
    quote! {
        impl ::core::convert::From<::keel::Channel> for #client {
            fn from(channel: ::keel::Channel) -> Self {
                Self::new(channel)
            }
        }

        impl ::core::convert::From<::keel::Channel> for #blocking {
            fn from(channel: ::keel::Channel) -> Self {
                Self::new(channel)
            }
        }

        #[doc = #client_doc]
        #[derive(Clone, Debug)]
        #vis struct #client {
            channel: ::keel::Channel,
            options: #k::CallOptions,
        }

        impl #client {
            /// Connects to `url` (e.g. `tcp://127.0.0.1:7000`) and completes the handshake, so
            /// the first call pays for no setup.
            #vis async fn connect(url: &str) -> ::core::result::Result<Self, ::keel::Error> {
                ::core::result::Result::Ok(Self::new(::keel::Channel::connect(url).await?))
            }
            /// A client over an existing channel (which may be shared by several clients).
            #vis fn new(channel: ::keel::Channel) -> Self {
                Self { channel, options: ::core::default::Default::default() }
            }
            /// A copy of this client whose calls use `deadline` instead of the channel's default.
            #vis fn with_deadline(&self, deadline: ::core::time::Duration) -> Self {
                Self { channel: self.channel.clone(), options: self.options.clone().with_deadline(deadline) }
            }
            /// A copy of this client whose calls send `metadata` (over the channel's defaults).
            #vis fn with_metadata(&self, metadata: ::keel::Metadata) -> Self {
                Self { channel: self.channel.clone(), options: self.options.clone().with_metadata(metadata) }
            }
            /// A copy of this client that stores each call's reply metadata in `slot`.
            #vis fn with_reply_metadata(&self, slot: &::keel::client::ReplyMetadata) -> Self {
                Self { channel: self.channel.clone(), options: self.options.clone().with_reply_metadata(slot) }
            }
            /// A copy of this client whose calls are made for the incoming call `ctx` (a
            /// handler's context): they inherit its remaining deadline and chosen metadata, and
            /// end when it is cancelled (see `keel::client::CallOptions::with_context`).
            #vis fn with_context(&self, ctx: &::keel::Context) -> Self {
                Self { channel: self.channel.clone(), options: self.options.clone().with_context(ctx) }
            }
            /// A copy of this client whose calls of `#[keel(idempotent)]` operations are hedged
            /// with `policy`, over the channel's (`keel::client::HedgingPolicy::disabled()`
            /// turns hedging off for them).
            #vis fn with_hedging(&self, policy: ::keel::client::HedgingPolicy) -> Self {
                Self { channel: self.channel.clone(), options: self.options.clone().with_hedging(policy) }
            }
            /// The contract's description: its operations (and, with keel's `openapi`
            /// feature, their JSON Schema, for `keel::openapi::document`).
            #vis fn descriptor() -> &'static #k::ServiceDescriptor {
                &#descriptor_static
            }
            /// The channel this client calls over.
            #vis fn channel(&self) -> &::keel::Channel {
                &self.channel
            }
            /// Opens the connection now if it is not open (connect and handshake).
            #vis async fn open(&self) -> ::core::result::Result<(), ::keel::Error> {
                self.channel.open().await
            }
            /// Closes the connection; calls in flight fail. A later call reconnects.
            #vis async fn close(&self) {
                self.channel.close().await
            }
            #open_session
            #(#client_methods)*
        }

        #[doc = #blocking_doc]
        #[derive(Clone, Debug)]
        #vis struct #blocking {
            inner: #client,
        }

        impl #blocking {
            /// Connects to `url` and completes the handshake before returning.
            #vis fn connect(url: &str) -> ::core::result::Result<Self, ::keel::Error> {
                #k::block_on(#client::connect(url)).map(|inner| Self { inner })
            }
            /// A blocking client over an existing channel.
            #vis fn new(channel: ::keel::Channel) -> Self {
                Self { inner: #client::new(channel) }
            }
            /// A copy of this client whose calls use `deadline`.
            #vis fn with_deadline(&self, deadline: ::core::time::Duration) -> Self {
                Self { inner: self.inner.with_deadline(deadline) }
            }
            /// A copy of this client whose calls send `metadata` (over the channel's defaults).
            #vis fn with_metadata(&self, metadata: ::keel::Metadata) -> Self {
                Self { inner: self.inner.with_metadata(metadata) }
            }
            /// A copy of this client that stores each call's reply metadata in `slot`.
            #vis fn with_reply_metadata(&self, slot: &::keel::client::ReplyMetadata) -> Self {
                Self { inner: self.inner.with_reply_metadata(slot) }
            }
            /// A copy of this client whose calls are made for the incoming call `ctx` (a
            /// handler's context): they inherit its remaining deadline and chosen metadata, and
            /// end (a blocked call wakes) when it is cancelled.
            #vis fn with_context(&self, ctx: &::keel::Context) -> Self {
                Self { inner: self.inner.with_context(ctx) }
            }
            /// A copy of this client whose calls of `#[keel(idempotent)]` operations are hedged
            /// with `policy`, over the channel's.
            #vis fn with_hedging(&self, policy: ::keel::client::HedgingPolicy) -> Self {
                Self { inner: self.inner.with_hedging(policy) }
            }
            /// The channel this client calls over.
            #vis fn channel(&self) -> &::keel::Channel {
                self.inner.channel()
            }
            /// Opens the connection now if it is not open.
            #vis fn open(&self) -> ::core::result::Result<(), ::keel::Error> {
                #k::block_on(self.inner.open())
            }
            /// Closes the connection; a later call reconnects.
            #vis fn close(&self) {
                #k::block_on(self.inner.close())
            }
            #blocking_open_session
            #(#blocking_methods)*
        }
    }
}

/// `open_session` of the async and the blocking client: with a callback implementation for a
/// duplex contract (`callback = Path`), else without.
fn session_methods(callback: Option<&syn::Path>) -> (TokenStream2, TokenStream2) {
    let k = quote!(::keel::__private);
    let doc = "Opens a session (WCF's sessions): a client whose calls go over one stream to one \
               instance of the service (one per session if the host built it with \
               `per_session`), run one at a time in the order they were made. `close()` ends the \
               session; so does dropping every copy of the returned client.";
    match callback {
        None => (
            quote! {
                #[doc = #doc]
                pub async fn open_session(&self) -> ::core::result::Result<Self, ::keel::Error> {
                    let channel = #k::open_session(&self.channel, &self.options, Self::descriptor(), ::core::option::Option::None).await?;
                    ::core::result::Result::Ok(Self { channel, options: self.options.clone() })
                }
            },
            quote! {
                #[doc = #doc]
                pub fn open_session(&self) -> ::core::result::Result<Self, ::keel::Error> {
                    #k::block_on(self.inner.open_session()).map(|inner| Self { inner })
                }
            },
        ),
        Some(path) => {
            let mut server = path.clone();
            let last = server.segments.last_mut().expect("a path has a segment");
            last.ident = format_ident!("{}Server", last.ident);
            let doc = format!(
                "{doc} `callback` serves the host's calls of the callback contract (its \
                 handlers reach them with `ctx.callback()`), in order, on this client."
            );
            (
                quote! {
                    #[doc = #doc]
                    pub async fn open_session<C: #path>(&self, callback: C) -> ::core::result::Result<Self, ::keel::Error> {
                        let callback: ::std::sync::Arc<dyn #k::Service> = ::std::sync::Arc::new(#server::new(callback));
                        let channel = #k::open_session(&self.channel, &self.options, Self::descriptor(), ::core::option::Option::Some(callback)).await?;
                        ::core::result::Result::Ok(Self { channel, options: self.options.clone() })
                    }
                },
                quote! {
                    #[doc = #doc]
                    pub fn open_session<C: #path>(&self, callback: C) -> ::core::result::Result<Self, ::keel::Error> {
                        #k::block_on(self.inner.open_session(callback)).map(|inner| Self { inner })
                    }
                },
            )
        }
    }
}

/// The async client's method for `op`, the operation at index `i`.
fn client_method(trait_name: &Ident, i: usize, op: &Operation) -> TokenStream2 {
    let k = quote!(::keel::__private);
    let descriptor_mod = module_ident(trait_name);
    let descriptor_static = static_ident(trait_name);
    let m = &op.name;
    let args_ident = args_ident(trait_name, &op.name);
    let params = op.contract_params().map(|(n, t)| quote!(#n: #t));
    let names: Vec<_> = op.value_params().map(|(n, _)| n).collect();
    let docs = op.method.attrs.iter().filter(|a| a.path().is_ident("doc"));
    let upload = match op.stream_param {
        Some(p) if op.request_message.is_some() => {
            let n = &op.params[p].0;
            quote!(::core::option::Option::Some(#k::upload_messages(&self.channel, &#descriptor_static, #i, #n)))
        }
        Some(p) => {
            let n = &op.params[p].0;
            quote!(::core::option::Option::Some(#n))
        }
        None => quote!(::core::option::Option::None),
    };
    let target = quote!(&self.channel, &self.options, &#descriptor_static, #i, &__args, #upload);
    let (ret, call) = if op.one_way {
        (quote!(()), quote!(#k::call_one_way(#target).await))
    } else if let Some(m) = &op.reply_message {
        let ret = match (&op.fallible, &op.status_result) {
            (Some((t, _)), _) | (None, Some(t)) => t,
            (None, None) => &op.ret,
        };
        let call = match &op.fallible {
            Some((_, e)) => quote!(#k::call_messages_fallible::<_, #m, #e>(#target).await),
            None => quote!(#k::call_messages::<_, #m>(#target).await),
        };
        (quote!(#ret), call)
    } else if let Some((t, e)) = &op.fallible {
        if op.stream_reply {
            (
                quote!(#t),
                quote!(#k::call_stream_fallible::<_, #e>(#target).await),
            )
        } else {
            (
                quote!(#t),
                quote!(#k::call_fallible::<_, #t, #e>(#target).await),
            )
        }
    } else if let Some(t) = &op.status_result {
        if op.stream_reply {
            (quote!(#t), quote!(#k::call_stream(#target).await))
        } else {
            (quote!(#t), quote!(#k::call::<_, #t>(#target).await))
        }
    } else if op.stream_reply {
        let r = &op.ret;
        (quote!(#r), quote!(#k::call_stream(#target).await))
    } else {
        let r = &op.ret;
        (quote!(#r), quote!(#k::call::<_, #r>(#target).await))
    };
    let method_span = op.method.sig.ident.span();
    quote_spanned! {method_span=>
        #(#docs)*
        pub async fn #m(&self, #(#params),*) -> ::core::result::Result<#ret, ::keel::Error> {
            let __args = #descriptor_mod::#args_ident { #(#names),* };
            #call
        }
    }
}

/// The blocking client's method for `op`: the async client's, run to completion.
fn blocking_method(op: &Operation) -> TokenStream2 {
    let k = quote!(::keel::__private);
    let m = &op.name;
    let params = op.contract_params().map(|(n, t)| quote!(#n: #t));
    let names = op.contract_params().map(|(n, _)| n);
    let docs = op.method.attrs.iter().filter(|a| a.path().is_ident("doc"));
    let ret = if op.one_way {
        quote!(())
    } else if let Some((t, _)) = &op.fallible {
        quote!(#t)
    } else if let Some(t) = &op.status_result {
        quote!(#t)
    } else {
        let r = &op.ret;
        quote!(#r)
    };
    quote! {
        #(#docs)*
        pub fn #m(&self, #(#params),*) -> ::core::result::Result<#ret, ::keel::Error> {
            #k::block_on(self.inner.#m(#(#names),*))
        }
    }
}
