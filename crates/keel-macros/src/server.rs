//! `{Trait}Server`: the adapter a host serves. Its `invoke` decodes an operation's arguments,
//! calls the implementation (as a task or on the blocking pool) and encodes the reply; one match
//! arm per operation, by its index in the descriptor.

use proc_macro2::TokenStream as TokenStream2;
use quote::{format_ident, quote};
use syn::{Ident, ItemTrait};

use crate::descriptor::{args_ident, module_ident, static_ident};
use crate::parse::Operation;

/// The server type and its `keel::service::Service` impl, for the contract `item` whose operations are
/// `ops`.
pub(crate) fn generate(item: &ItemTrait, ops: &[Operation]) -> TokenStream2 {
    let vis = &item.vis;
    let trait_name = &item.ident;
    let server = format_ident!("{}Server", trait_name);
    let k = quote!(::keel::__private);
    let descriptor_static = static_ident(trait_name);
    let trait_doc_link = format!(
        "Server adapter for [`{trait_name}`]: give it to `keel::Host::builder().service(..)`."
    );
    let dispatch_arms = ops
        .iter()
        .enumerate()
        .map(|(i, op)| dispatch_arm(trait_name, i, op));
    quote! {
        #[doc = #trait_doc_link]
        #vis struct #server<S> {
            /// The instance every call runs on; `None` for a service with one per session.
            inner: ::core::option::Option<::std::sync::Arc<S>>,
            /// Makes a session's instance (`per_session`).
            factory: ::core::option::Option<
                ::std::sync::Arc<dyn Fn(&#k::Context) -> S + Send + Sync>,
            >,
        }

        impl<S: #trait_name> #server<S> {
            /// Wraps a service implementation: one instance serves every call (and every
            /// session's calls).
            #vis fn new(service: S) -> Self {
                Self { inner: ::core::option::Option::Some(::std::sync::Arc::new(service)), factory: ::core::option::Option::None }
            }
            /// Wraps a service implementation that is already shared.
            #vis fn from_arc(service: ::std::sync::Arc<S>) -> Self {
                Self { inner: ::core::option::Option::Some(service), factory: ::core::option::Option::None }
            }
            /// One instance per session (WCF's `InstanceContextMode.PerSession`): `factory`
            /// makes it when a client opens a session, given the session's context (its
            /// caller, metadata, and `Context::callback`); it is dropped when the session
            /// closes or its client disappears. Calls made outside a session are refused
            /// with `FailedPrecondition`.
            #vis fn per_session(factory: impl Fn(&#k::Context) -> S + Send + Sync + 'static) -> Self {
                Self { inner: ::core::option::Option::None, factory: ::core::option::Option::Some(::std::sync::Arc::new(factory)) }
            }
        }

        impl<S> ::core::fmt::Debug for #server<S> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.debug_struct(::core::stringify!(#server)).finish_non_exhaustive()
            }
        }

        impl<S: #trait_name> #k::Service for #server<S> {
            fn descriptor(&self) -> &'static #k::ServiceDescriptor {
                &#descriptor_static
            }
            fn invoke(
                &self,
                op: usize,
                format: #k::Format,
                body: &[u8],
                stream: ::keel::ByteStream,
                ctx: &#k::Context,
            ) -> ::core::result::Result<#k::Invocation, ::keel::Status> {
                let _ = ctx;
                let ::core::option::Option::Some(inner) = &self.inner else {
                    return ::core::result::Result::Err(#k::needs_session(&#descriptor_static));
                };
                match op {
                    #(#dispatch_arms)*
                    _ => ::core::result::Result::Err(#k::unknown_operation(&#descriptor_static, op)),
                }
            }
            fn open_session(
                &self,
                ctx: &#k::Context,
            ) -> ::core::result::Result<::std::sync::Arc<dyn #k::Service>, ::keel::Status> {
                let inner = match (&self.factory, &self.inner) {
                    (::core::option::Option::Some(factory), _) => ::std::sync::Arc::new(factory(ctx)),
                    (::core::option::Option::None, ::core::option::Option::Some(inner)) => ::std::sync::Arc::clone(inner),
                    (::core::option::Option::None, ::core::option::Option::None) => {
                        ::core::unreachable!("a server has an instance or a factory")
                    }
                };
                ::core::result::Result::Ok(::std::sync::Arc::new(Self {
                    inner: ::core::option::Option::Some(inner),
                    factory: ::core::option::Option::None,
                }))
            }
        }
    }
}

/// The `invoke` match arm of `op`, the operation at index `i`.
fn dispatch_arm(trait_name: &Ident, i: usize, op: &Operation) -> TokenStream2 {
    let k = quote!(::keel::__private);
    let descriptor_mod = module_ident(trait_name);
    let m = &op.name;
    let args_ident = args_ident(trait_name, &op.name);
    let call_args = op.params.iter().enumerate().map(|(i, (n, _))| {
        if Some(i) == op.stream_param {
            quote!(__stream)
        } else if Some(i) == op.context_param {
            quote!(__ctx)
        } else {
            quote!(args.#n)
        }
    });
    let call = quote!(<S as #trait_name>::#m(&*svc, #(#call_args),*));
    let encode = match (
        op.stream_reply,
        op.fallible.is_some(),
        op.status_result.is_some(),
    ) {
        _ if op.reply_message.is_some() => {
            if op.status_result.is_some() {
                quote!(__reply.or_status(__r))
            } else if op.fallible.is_some() {
                quote!(__reply.fallible(__r))
            } else {
                quote!(__reply.ok(__r))
            }
        }
        (true, _, true) => quote!(#k::stream_or_status(__r)),
        (false, _, true) => quote!(#k::encode_or_status(format, __r)),
        (true, true, _) => quote!(#k::stream_fallible(format, __r)),
        (true, false, _) => quote!(#k::stream_ok(__r)),
        (false, true, _) => quote!(#k::encode_fallible(format, &__r)),
        (false, false, _) => quote!(#k::encode_ok(format, &__r)),
    };
    let take_ctx = if op.context_param.is_some() {
        quote!(let __ctx = ::core::clone::Clone::clone(ctx);)
    } else {
        quote!()
    };
    let take_stream = if let Some(t) = &op.request_message {
        quote!(let __stream = #k::request_messages::<#t>(stream, format, ctx);)
    } else if op.stream_param.is_some() {
        quote!(let __stream = stream;)
    } else {
        // Not this operation's: dropping it tells the sender to stop.
        quote!(::core::mem::drop(stream);)
    };
    let body = if op.is_async {
        quote! {
            #k::Invocation::Async(::std::boxed::Box::pin(async move {
                let __r = #call.await;
                #encode
            }))
        }
    } else {
        quote! {
            #k::Invocation::Blocking(::std::boxed::Box::new(move || {
                let __r = #call;
                #encode
            }))
        }
    };
    let take_reply = if op.reply_message.is_some() {
        quote!(let __reply = #k::reply_messages(format, ctx);)
    } else {
        quote!()
    };
    quote! {
        #i => {
            let args: #descriptor_mod::#args_ident = #k::decode_args(format, body)?;
            #take_stream
            #take_reply
            #take_ctx
            let svc = ::std::sync::Arc::clone(inner);
            ::core::result::Result::Ok(#body)
        }
    }
}
