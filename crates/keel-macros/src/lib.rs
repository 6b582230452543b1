//! The `#[keel::contract]` attribute. Use it through the `keel` crate, which re-exports it and
//! documents what it generates; the generated code refers only to `keel::__private`.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{
    Attribute, FnArg, GenericArgument, Ident, ItemTrait, Pat, PathArguments, ReturnType, TraitItem,
    TraitItemFn, Type,
};

/// Turns a trait into a keel service contract. See `keel::contract` for the full documentation.
#[proc_macro_attribute]
pub fn contract(attr: TokenStream, item: TokenStream) -> TokenStream {
    let attr = TokenStream2::from(attr);
    if !attr.is_empty() {
        return syn::Error::new_spanned(
            attr,
            "#[keel::contract] takes no arguments; put #[keel(...)] on operations",
        )
        .to_compile_error()
        .into();
    }
    let item2 = TokenStream2::from(item.clone());
    let trait_item = match syn::parse2::<ItemTrait>(item2) {
        Ok(t) => t,
        Err(_) => {
            let item2 = TokenStream2::from(item);
            let err = not_a_trait(&item2).to_compile_error();
            return quote!(#err #item2).into();
        }
    };
    match expand(trait_item) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// One operation of the contract, as parsed from a trait method.
struct Operation {
    method: TraitItemFn,
    name: Ident,
    is_async: bool,
    one_way: bool,
    /// `#[keel(idempotent)]`: clients may send it again after a failure (see `RetryPolicy`).
    idempotent: bool,
    params: Vec<(Ident, Type)>,
    /// The index in `params` of the `ByteStream` parameter (the request stream), if any.
    stream_param: Option<usize>,
    /// The index in `params` of the `keel::Context` parameter, if any (not part of the
    /// contract: the host supplies it).
    context_param: Option<usize>,
    /// Parameters marked `#[keel(default)]`: a caller built from an older contract may leave
    /// them out.
    defaults: Vec<Ident>,
    /// The operation returns a `ByteStream` (or `Result<ByteStream, E>`): a response stream.
    stream_reply: bool,
    /// The declared return type (`()` when omitted).
    ret: Type,
    /// `Some((T, E))` when the return type is `Result<T, E>`: E is the typed fault.
    fallible: Option<(Type, Type)>,
    /// `Some(T)` when the return type is `Result<T, keel::Status>`.
    status_result: Option<Type>,
}

/// Accumulates errors so the user sees all of them at once, each at its span.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn add(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }
    fn push(&mut self, span: Span, msg: impl std::fmt::Display) {
        self.add(syn::Error::new(span, msg));
    }
    /// Like `push`, but spans all of `tokens` (a bare `Span` is only their first token on stable).
    fn push_spanned(&mut self, tokens: impl ToTokens, msg: impl std::fmt::Display) {
        self.add(syn::Error::new_spanned(tokens, msg));
    }
    fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

fn expand(mut item: ItemTrait) -> syn::Result<TokenStream2> {
    let mut errors = Errors::default();
    if let Some(generics) = generics_tokens(&item.generics) {
        errors.push_spanned(generics, "a keel contract cannot be generic");
    }
    let mut ops = Vec::new();
    for trait_item in &mut item.items {
        match trait_item {
            TraitItem::Fn(method) => {
                if let Some(op) = parse_operation(method, &mut errors) {
                    ops.push(op);
                }
            }
            other => errors.push_spanned(
                &*other,
                "a keel contract may contain only operations (methods)",
            ),
        }
    }
    errors.finish()?;

    let vis = &item.vis;
    let trait_name = &item.ident;
    let service_name = trait_name.to_string();
    let server = format_ident!("{}Server", trait_name);
    let client = format_ident!("{}Client", trait_name);
    let blocking = format_ident!("{}BlockingClient", trait_name);
    let k = quote!(::keel::__private);
    let descriptor_mod = format_ident!("__keel_{}", trait_name.to_string().to_lowercase());
    let descriptor_static = format_ident!("__KEEL_DESCRIPTOR_{}", trait_name);

    // The trait as users implement it: attributes consumed, async fns made Send.
    let trait_methods = ops.iter().map(|op| {
        let mut sig = op.method.sig.clone();
        for input in &mut sig.inputs {
            if let FnArg::Typed(pt) = input {
                pt.attrs.retain(|a| !a.path().is_ident("keel"));
            }
        }
        let attrs = op.method.attrs.iter().filter(|a| !a.path().is_ident("keel"));
        if op.is_async {
            sig.asyncness = None;
            let ret = &op.ret;
            sig.output = syn::parse_quote!(-> impl ::core::future::Future<Output = #ret> + ::core::marker::Send);
        }
        quote!(#(#attrs)* #sig;)
    });
    let trait_attrs = &item.attrs;
    let supertraits = &item.supertraits;
    let plus = if supertraits.is_empty() {
        quote!()
    } else {
        quote!(+)
    };
    let trait_doc_link = format!(
        "Server adapter for [`{trait_name}`]: give it to `keel::Host::builder().service(..)`."
    );
    let client_doc = format!(
        "Async client for the `{service_name}` contract: one method per operation, each returning `Result<_, keel::Error>`."
    );
    let blocking_doc = format!(
        "Blocking client for the `{service_name}` contract, usable from plain `fn main` without a runtime of your own (do not call it from inside an async task)."
    );

    let args_structs = ops.iter().map(|op| {
        let ident = args_ident(trait_name, &op.name);
        let fields = op.value_params().map(|(n, t)| {
            if op.defaults.contains(n) {
                quote!(#[serde(default)] pub(super) #n: #t)
            } else {
                quote!(pub(super) #n: #t)
            }
        });
        let doc = format!("Arguments of `{}.{}`.", service_name, op.name);
        let schema = if OPENAPI {
            quote! {
                #[derive(#k::schemars::JsonSchema)]
                #[schemars(crate = "::keel::__private::schemars")]
            }
        } else {
            quote!()
        };
        quote! {
            #[doc = #doc]
            #[doc(hidden)]
            #[derive(#k::serde::Serialize, #k::serde::Deserialize)]
            #schema
            #[serde(crate = "::keel::__private::serde")]
            #[allow(non_camel_case_types)]
            pub(super) struct #ident { #(#fields,)* }
        }
    });

    let op_infos = ops.iter().map(|op| {
        let name = op.name.to_string();
        let params = op.contract_params().map(|(n, t)| {
            let n = n.to_string();
            let t = type_string(t);
            quote!(#k::ParamInfo::new(#n, #t))
        });
        let stream_request = op.stream_param.is_some();
        let stream_response = op.stream_reply;
        let (returns, fault) = match (&op.fallible, &op.status_result) {
            (Some((t, e)), _) => (type_string(t), {
                let e = type_string(e);
                quote!(::core::option::Option::Some(#e))
            }),
            (None, Some(t)) => (type_string(t), quote!(::core::option::Option::None)),
            (None, None) => (type_string(&op.ret), quote!(::core::option::Option::None)),
        };
        let one_way = op.one_way;
        let blocking = !op.is_async;
        let idempotent = op.idempotent;
        let schemas = if OPENAPI {
            let args = args_ident(trait_name, &op.name);
            let success = match (&op.fallible, &op.status_result) {
                (Some((t, _)), _) | (None, Some(t)) => t,
                (None, None) => &op.ret,
            };
            let returns = if op.one_way || op.stream_reply {
                quote!(::core::option::Option::None)
            } else {
                quote!(::core::option::Option::Some(#k::schema_of::<#success>))
            };
            let fault = match &op.fallible {
                Some((_, e)) => quote!(::core::option::Option::Some(#k::schema_of::<#e>)),
                None => quote!(::core::option::Option::None),
            };
            let docs = doc_text(&op.method.attrs);
            quote! {
                .with_schemas(#k::OperationSchemas::new(
                    #k::schema_inline::<#descriptor_mod::#args>,
                    #returns,
                    #fault,
                    #docs,
                ))
            }
        } else {
            quote!()
        };
        quote! {
            #k::OperationInfo::new(
                #name,
                &[#(#params),*],
                #returns,
                #fault,
                #one_way,
                #blocking,
                #stream_request,
                #stream_response,
            )
            .with_idempotent(#idempotent)
            #schemas
        }
    });

    let dispatch_arms = ops.iter().enumerate().map(|(i, op)| {
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
        let take_stream = if op.stream_param.is_some() {
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
        quote! {
            #i => {
                let args: #descriptor_mod::#args_ident = #k::decode_args(format, body)?;
                #take_stream
                #take_ctx
                let svc = ::std::sync::Arc::clone(&self.inner);
                ::core::result::Result::Ok(#body)
            }
        }
    });

    let client_methods = ops.iter().enumerate().map(|(i, op)| {
        let m = &op.name;
        let args_ident = args_ident(trait_name, &op.name);
        let params = op.contract_params().map(|(n, t)| quote!(#n: #t));
        let names: Vec<_> = op.value_params().map(|(n, _)| n).collect();
        let docs = op.method.attrs.iter().filter(|a| a.path().is_ident("doc"));
        let upload = match op.stream_param {
            Some(i) => {
                let n = &op.params[i].0;
                quote!(::core::option::Option::Some(#n))
            }
            None => quote!(::core::option::Option::None),
        };
        let target =
            quote!(&self.channel, &self.options, &#descriptor_static, #i, &__args, #upload);
        let (ret, call) = if op.one_way {
            (quote!(()), quote!(#k::call_one_way(#target).await))
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
    });

    let blocking_methods = ops.iter().map(|op| {
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
    });

    Ok(quote! {
        #(#trait_attrs)*
        #vis trait #trait_name: #supertraits #plus ::core::marker::Send + ::core::marker::Sync + 'static {
            #(#trait_methods)*
        }

        #[doc(hidden)]
        #[allow(non_snake_case)]
        mod #descriptor_mod {
            #[allow(unused_imports)]
            use super::*;
            #(#args_structs)*
        }

        // Beside the trait rather than in the module above: the schemas of return and fault
        // types name them as the contract does, which a module's `use super::*` cannot do for
        // types declared in a function body.
        #[doc(hidden)]
        #[allow(non_upper_case_globals)]
        static #descriptor_static: #k::ServiceDescriptor =
            #k::ServiceDescriptor::new(#service_name, &[#(#op_infos),*]);

        #[doc = #trait_doc_link]
        #vis struct #server<S> {
            inner: ::std::sync::Arc<S>,
        }

        impl<S: #trait_name> #server<S> {
            /// Wraps a service implementation.
            #vis fn new(service: S) -> Self {
                Self { inner: ::std::sync::Arc::new(service) }
            }
            /// Wraps a service implementation that is already shared.
            #vis fn from_arc(service: ::std::sync::Arc<S>) -> Self {
                Self { inner: service }
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
                match op {
                    #(#dispatch_arms)*
                    _ => ::core::result::Result::Err(#k::unknown_operation(&#descriptor_static, op)),
                }
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
            #vis fn with_reply_metadata(&self, slot: &::keel::ReplyMetadata) -> Self {
                Self { channel: self.channel.clone(), options: self.options.clone().with_reply_metadata(slot) }
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
            #vis fn with_reply_metadata(&self, slot: &::keel::ReplyMetadata) -> Self {
                Self { inner: self.inner.with_reply_metadata(slot) }
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
            #(#blocking_methods)*
        }
    })
}

/// Whether to generate the JSON Schema of each operation (keel's `openapi` feature).
const OPENAPI: bool = cfg!(feature = "openapi");

/// The text of the `///` comments in `attrs`, one line each, without the space after `///`.
fn doc_text(attrs: &[Attribute]) -> String {
    let lines: Vec<String> = attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        })
        .map(|line| line.strip_prefix(' ').unwrap_or(&line).to_string())
        .collect();
    lines.join("\n").trim().to_string()
}

fn args_ident(trait_name: &Ident, op: &Ident) -> Ident {
    format_ident!("__{}_{}_args", trait_name, op)
}

fn type_string(t: &Type) -> String {
    quote!(#t).to_string().replace(' ', "")
}

/// Parses `#[keel(...)]` attributes on an operation; returns whether `one_way` and
/// `idempotent` were given.
fn parse_keel_attrs(attrs: &[Attribute], errors: &mut Errors) -> (bool, bool) {
    let (mut one_way, mut idempotent) = (false, false);
    for attr in attrs.iter().filter(|a| a.path().is_ident("keel")) {
        let res = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("one_way") {
                one_way = true;
                Ok(())
            } else if meta.path.is_ident("idempotent") {
                idempotent = true;
                Ok(())
            } else {
                Err(meta.error("unknown keel attribute; expected `one_way` or `idempotent`"))
            }
        });
        if let Err(e) = res {
            errors.add(e);
        }
    }
    (one_way, idempotent)
}

fn parse_operation(method: &TraitItemFn, errors: &mut Errors) -> Option<Operation> {
    let sig = &method.sig;
    let mut local = Errors::default();
    let (one_way, idempotent) = parse_keel_attrs(&method.attrs, &mut local);
    if method.default.is_some() {
        local.push(
            method.default.span(),
            "operations cannot have a default body: the service implements them",
        );
    }
    if let Some(generics) = generics_tokens(&sig.generics) {
        local.push_spanned(generics, "operations cannot be generic");
    }
    if let Some(c) = &sig.constness {
        local.push(c.span(), "operations cannot be const");
    }
    if let Some(u) = &sig.unsafety {
        local.push(u.span(), "operations cannot be unsafe");
    }
    if let Some(v) = &sig.variadic {
        local.push_spanned(v, "operations cannot be variadic");
    }
    let mut inputs = sig.inputs.iter();
    match inputs.next() {
        Some(FnArg::Receiver(r)) if r.reference.is_some() && r.mutability.is_none() => {}
        Some(FnArg::Receiver(r)) => local.push_spanned(
            r,
            "operations take `&self`: a service is shared by concurrent calls",
        ),
        _ => local.push(
            sig.ident.span(),
            "operations take `&self` as their first parameter",
        ),
    }
    let mut params = Vec::new();
    let mut stream_param = None;
    let mut context_param = None;
    let mut defaults = Vec::new();
    for input in inputs {
        let FnArg::Typed(pt) = input else { continue };
        let default = parse_param_attrs(&pt.attrs, &mut local);
        let name = match &*pt.pat {
            Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => pi.ident.clone(),
            other => {
                local.push_spanned(
                    other,
                    "operation parameters must be plain names (`name: Type`): the name is part of the contract",
                );
                continue;
            }
        };
        if contains_impl_trait_or_ref(&pt.ty) {
            local.push_spanned(
                &pt.ty,
                "operation parameters must be owned serde types (no `impl Trait`, no references)",
            );
            continue;
        }
        if is_context(&pt.ty) {
            if default {
                local.push_spanned(
                    &pt.ty,
                    "a `keel::Context` parameter cannot have a default: the host supplies it",
                );
                continue;
            }
            if context_param.is_some() {
                local.push_spanned(
                    &pt.ty,
                    "an operation takes at most one `keel::Context` parameter",
                );
                continue;
            }
            context_param = Some(params.len());
            params.push((name, (*pt.ty).clone()));
            continue;
        }
        if default {
            if is_byte_stream(&pt.ty) {
                local.push_spanned(&pt.ty, "a `ByteStream` parameter cannot have a default");
                continue;
            }
            defaults.push(name.clone());
        }
        if is_byte_stream(&pt.ty) {
            if stream_param.is_some() {
                local.push_spanned(
                    &pt.ty,
                    "an operation takes at most one `ByteStream` parameter (its request stream)",
                );
                continue;
            }
            stream_param = Some(params.len());
        }
        params.push((name, (*pt.ty).clone()));
    }
    let ret: Type = match &sig.output {
        ReturnType::Default => syn::parse_quote!(()),
        ReturnType::Type(_, t) => (**t).clone(),
    };
    if contains_impl_trait_or_ref(&ret) {
        local.push_spanned(
            &ret,
            "operations must return an owned serde type (no `impl Trait`, no references)",
        );
    }
    if one_way && !is_unit(&ret) {
        local.push_spanned(
            &ret,
            "a #[keel(one_way)] operation must return `()`: the caller gets no reply",
        );
    }
    // `Result<T, keel::Status>`: the handler answers with a status of its choice; not a typed
    // fault.
    let (fallible, status_result) = match result_parts(&ret) {
        Some((t, e)) if is_status(&e) => (None, Some(t)),
        other => (other, None),
    };
    let stream_reply = match (&fallible, &status_result) {
        (Some((t, _)), _) | (None, Some(t)) => is_byte_stream(t),
        (None, None) => is_byte_stream(&ret),
    };
    if one_way && stream_param.is_some() {
        local.push(
            sig.ident.span(),
            "a #[keel(one_way)] operation cannot take a `ByteStream`: it is acknowledged on receipt",
        );
    }
    let ok = local.0.is_none();
    if let Some(e) = local.0 {
        errors.add(e);
    }
    ok.then(|| Operation {
        method: method.clone(),
        name: sig.ident.clone(),
        is_async: sig.asyncness.is_some(),
        one_way,
        idempotent,
        params,
        stream_param,
        context_param,
        defaults,
        stream_reply,
        ret,
        fallible,
        status_result,
    })
}

impl Operation {
    /// The parameters that travel in the encoded arguments (all but the request stream and
    /// the context).
    fn value_params(&self) -> impl Iterator<Item = &(Ident, Type)> {
        let skip = [self.stream_param, self.context_param];
        self.params
            .iter()
            .enumerate()
            .filter(move |(i, _)| !skip.contains(&Some(*i)))
            .map(|(_, p)| p)
    }

    /// The parameters a caller passes (all but the context).
    fn contract_params(&self) -> impl Iterator<Item = &(Ident, Type)> {
        let skip = self.context_param;
        self.params
            .iter()
            .enumerate()
            .filter(move |(i, _)| Some(*i) != skip)
            .map(|(_, p)| p)
    }
}

/// Parses `#[keel(...)]` on a parameter; returns whether `default` was given.
fn parse_param_attrs(attrs: &[Attribute], errors: &mut Errors) -> bool {
    let mut default = false;
    for attr in attrs.iter().filter(|a| a.path().is_ident("keel")) {
        let res = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("default") {
                default = true;
                Ok(())
            } else {
                Err(meta.error(
                    "unknown keel parameter attribute; expected `default` (a caller built \
                     from an older contract may leave the parameter out)",
                ))
            }
        });
        if let Err(e) = res {
            errors.add(e);
        }
    }
    for attr in attrs.iter().filter(|a| !a.path().is_ident("keel")) {
        errors.push_spanned(
            attr,
            "only #[keel(default)] is allowed on operation parameters",
        );
    }
    default
}

/// `Status` (by its last path segment, as written): `keel::Status` as an operation's error.
fn is_status(t: &Type) -> bool {
    match t {
        Type::Path(p) => p
            .path
            .segments
            .last()
            .is_some_and(|s| s.ident == "Status" && matches!(s.arguments, PathArguments::None)),
        Type::Paren(p) => is_status(&p.elem),
        Type::Group(g) => is_status(&g.elem),
        _ => false,
    }
}

/// `Context` (by its last path segment, as written): the call's context, supplied by the host.
fn is_context(t: &Type) -> bool {
    match t {
        Type::Path(p) => p
            .path
            .segments
            .last()
            .is_some_and(|s| s.ident == "Context" && matches!(s.arguments, PathArguments::None)),
        Type::Paren(p) => is_context(&p.elem),
        Type::Group(g) => is_context(&g.elem),
        _ => false,
    }
}

/// `ByteStream` (by its last path segment, as written): a streamed body.
fn is_byte_stream(t: &Type) -> bool {
    match t {
        Type::Path(p) => {
            p.path.segments.last().is_some_and(|s| {
                s.ident == "ByteStream" && matches!(s.arguments, PathArguments::None)
            })
        }
        Type::Paren(p) => is_byte_stream(&p.elem),
        Type::Group(g) => is_byte_stream(&g.elem),
        _ => false,
    }
}

/// The tokens of `<...>` and/or the `where` clause, if there are any (for error spans).
fn generics_tokens(g: &syn::Generics) -> Option<TokenStream2> {
    if g.params.is_empty() && g.where_clause.is_none() {
        return None;
    }
    let where_clause = &g.where_clause;
    Some(if g.params.is_empty() {
        quote!(#where_clause)
    } else {
        quote!(#g #where_clause)
    })
}

/// The error for `#[keel::contract]` on something other than a trait: at the item's keyword
/// (`struct`, `fn`, ...) when it parses as an item, else at its first token.
fn not_a_trait(item: &TokenStream2) -> syn::Error {
    let kind: Option<(Span, &str)> = match syn::parse2::<syn::Item>(item.clone()) {
        Ok(syn::Item::Struct(i)) => Some((i.struct_token.span, "a struct")),
        Ok(syn::Item::Enum(i)) => Some((i.enum_token.span, "an enum")),
        Ok(syn::Item::Union(i)) => Some((i.union_token.span, "a union")),
        Ok(syn::Item::Fn(i)) => Some((i.sig.fn_token.span, "a function")),
        Ok(syn::Item::Impl(i)) => Some((i.impl_token.span, "an impl block")),
        Ok(syn::Item::Mod(i)) => Some((i.mod_token.span, "a module")),
        Ok(syn::Item::Type(i)) => Some((i.type_token.span, "a type alias")),
        _ => None,
    };
    match kind {
        Some((span, what)) => syn::Error::new(
            span,
            format!("#[keel::contract] goes on a trait, not on {what}"),
        ),
        None => {
            let span = item
                .clone()
                .into_iter()
                .next()
                .map_or(Span::call_site(), |t| t.span());
            syn::Error::new(span, "#[keel::contract] goes on a trait")
        }
    }
}

fn is_unit(t: &Type) -> bool {
    matches!(t, Type::Tuple(tt) if tt.elems.is_empty())
}

fn contains_impl_trait_or_ref(t: &Type) -> bool {
    match t {
        Type::ImplTrait(_) | Type::Reference(_) | Type::Ptr(_) | Type::BareFn(_) => true,
        Type::Paren(p) => contains_impl_trait_or_ref(&p.elem),
        Type::Group(g) => contains_impl_trait_or_ref(&g.elem),
        Type::Tuple(tt) => tt.elems.iter().any(contains_impl_trait_or_ref),
        Type::Array(a) => contains_impl_trait_or_ref(&a.elem),
        Type::Slice(s) => contains_impl_trait_or_ref(&s.elem),
        Type::Path(p) => p.path.segments.iter().any(|seg| match &seg.arguments {
            PathArguments::AngleBracketed(ab) => ab.args.iter().any(|a| match a {
                GenericArgument::Type(t) => contains_impl_trait_or_ref(t),
                GenericArgument::Lifetime(_) => true,
                _ => false,
            }),
            _ => false,
        }),
        _ => false,
    }
}

/// `Result<T, E>` → `Some((T, E))`. Recognised by the last path segment, as written.
fn result_parts(t: &Type) -> Option<(Type, Type)> {
    let Type::Path(p) = t else { return None };
    let seg = p.path.segments.last()?;
    if seg.ident != "Result" {
        return None;
    }
    let PathArguments::AngleBracketed(ab) = &seg.arguments else {
        return None;
    };
    let mut types = ab.args.iter().filter_map(|a| match a {
        GenericArgument::Type(t) => Some(t.clone()),
        _ => None,
    });
    let ok = types.next()?;
    let err = types.next()?;
    Some((ok, err))
}
