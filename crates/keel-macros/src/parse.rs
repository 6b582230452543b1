//! The contract as written: each trait method parsed into an `Operation`, its `#[keel(...)]`
//! attributes read, and every mistake collected at its span. The generators (`service`,
//! `descriptor`, `server`, `client`) read only what this module parsed.

use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, ToTokens};
use syn::spanned::Spanned;
use syn::{
    Attribute, FnArg, GenericArgument, Ident, Pat, PathArguments, ReturnType, TraitItemFn, Type,
};

/// One operation of the contract, as parsed from a trait method.
pub(crate) struct Operation {
    /// The method as written, attributes included.
    pub(crate) method: TraitItemFn,
    /// The method's name, which is also the operation's name on the wire.
    pub(crate) name: Ident,
    /// An `async fn` (run as a task); otherwise a blocking fn (run on the blocking pool).
    pub(crate) is_async: bool,
    /// `#[keel(one_way)]`: acknowledged on receipt, the caller gets no reply.
    pub(crate) one_way: bool,
    /// `#[keel(idempotent)]`: clients may send it again after a failure (see `RetryPolicy`).
    pub(crate) idempotent: bool,
    /// The parameters after `&self`, in order, as (name, type).
    pub(crate) params: Vec<(Ident, Type)>,
    /// The index in `params` of the `ByteStream` or `MessageStream<T>` parameter (the request
    /// stream), if any.
    pub(crate) stream_param: Option<usize>,
    /// `T` when the request stream is a `MessageStream<T>` (typed messages, not bytes).
    pub(crate) request_message: Option<Type>,
    /// The index in `params` of the `keel::Context` parameter, if any (not part of the
    /// contract: the host supplies it).
    pub(crate) context_param: Option<usize>,
    /// Parameters marked `#[keel(default)]`: a caller built from an older contract may leave
    /// them out.
    pub(crate) defaults: Vec<Ident>,
    /// The operation returns a `ByteStream` or `MessageStream<T>` (or either in a `Result`): a
    /// response stream.
    pub(crate) stream_reply: bool,
    /// `T` when the response stream is a `MessageStream<T>`.
    pub(crate) reply_message: Option<Type>,
    /// The declared return type (`()` when omitted).
    pub(crate) ret: Type,
    /// `Some((T, E))` when the return type is `Result<T, E>`: E is the typed fault.
    pub(crate) fallible: Option<(Type, Type)>,
    /// `Some(T)` when the return type is `Result<T, keel::Status>`.
    pub(crate) status_result: Option<Type>,
}

impl Operation {
    /// The parameters that travel in the encoded arguments (all but the request stream and
    /// the context).
    pub(crate) fn value_params(&self) -> impl Iterator<Item = &(Ident, Type)> {
        let skip = [self.stream_param, self.context_param];
        self.params
            .iter()
            .enumerate()
            .filter(move |(i, _)| !skip.contains(&Some(*i)))
            .map(|(_, p)| p)
    }

    /// The parameters a caller passes (all but the context).
    pub(crate) fn contract_params(&self) -> impl Iterator<Item = &(Ident, Type)> {
        let skip = self.context_param;
        self.params
            .iter()
            .enumerate()
            .filter(move |(i, _)| Some(*i) != skip)
            .map(|(_, p)| p)
    }
}

/// Accumulates errors so the user sees all of them at once, each at its span.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    /// Adds `e` to the errors collected so far.
    pub(crate) fn add(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }
    /// Adds the error `msg` at `span`.
    pub(crate) fn push(&mut self, span: Span, msg: impl std::fmt::Display) {
        self.add(syn::Error::new(span, msg));
    }
    /// Like `push`, but spans all of `tokens` (a bare `Span` is only their first token on stable).
    pub(crate) fn push_spanned(&mut self, tokens: impl ToTokens, msg: impl std::fmt::Display) {
        self.add(syn::Error::new_spanned(tokens, msg));
    }
    /// `Err` with every error collected, or `Ok` if there was none.
    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
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

/// Parses one trait method into an `Operation`; on any mistake adds every one of them to
/// `errors` (each at its span) and returns `None`.
pub(crate) fn parse_operation(method: &TraitItemFn, errors: &mut Errors) -> Option<Operation> {
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
    let mut request_message = None;
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
        let message = message_type(&pt.ty);
        let streamed = is_byte_stream(&pt.ty) || message.is_some();
        if default {
            if streamed {
                local.push_spanned(&pt.ty, "a stream parameter cannot have a default");
                continue;
            }
            defaults.push(name.clone());
        }
        if streamed {
            if stream_param.is_some() {
                local.push_spanned(
                    &pt.ty,
                    "an operation takes at most one stream parameter (`ByteStream` or \
                     `MessageStream<T>`: its request stream)",
                );
                continue;
            }
            stream_param = Some(params.len());
            request_message = message;
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
    let success = match (&fallible, &status_result) {
        (Some((t, _)), _) | (None, Some(t)) => t,
        (None, None) => &ret,
    };
    let reply_message = message_type(success);
    let stream_reply = is_byte_stream(success) || reply_message.is_some();
    if one_way && stream_param.is_some() {
        local.push(
            sig.ident.span(),
            "a #[keel(one_way)] operation cannot take a stream: it is acknowledged on receipt",
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
        request_message,
        context_param,
        defaults,
        stream_reply,
        reply_message,
        ret,
        fallible,
        status_result,
    })
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

/// `T` of `MessageStream<T>` (by its last path segment, as written): a stream of messages.
fn message_type(t: &Type) -> Option<Type> {
    match t {
        Type::Paren(p) => message_type(&p.elem),
        Type::Group(g) => message_type(&g.elem),
        _ => match type_args(t, "MessageStream")?.as_slice() {
            [t] => Some(t.clone()),
            _ => None,
        },
    }
}

/// The type arguments of `t` when it is a path whose last segment is `name<...>` (as written).
fn type_args(t: &Type, name: &str) -> Option<Vec<Type>> {
    let Type::Path(p) = t else { return None };
    let seg = p.path.segments.last()?;
    if seg.ident != name {
        return None;
    }
    let PathArguments::AngleBracketed(ab) = &seg.arguments else {
        return None;
    };
    Some(
        ab.args
            .iter()
            .filter_map(|a| match a {
                GenericArgument::Type(t) => Some(t.clone()),
                _ => None,
            })
            .collect(),
    )
}

/// The tokens of `<...>` and/or the `where` clause, if there are any (for error spans).
pub(crate) fn generics_tokens(g: &syn::Generics) -> Option<TokenStream2> {
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

/// `()`.
fn is_unit(t: &Type) -> bool {
    matches!(t, Type::Tuple(tt) if tt.elems.is_empty())
}

/// Whether `t` is or contains a reference, a lifetime, a raw pointer, a fn pointer or
/// `impl Trait`: not an owned serde type.
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
    let mut types = type_args(t, "Result")?.into_iter();
    let ok = types.next()?;
    let err = types.next()?;
    Some((ok, err))
}
