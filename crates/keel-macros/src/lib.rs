//! The `#[keel::contract]` attribute. Use it through the `keel` crate, which re-exports it and
//! documents what it generates; the generated code refers only to `keel::__private`.
//!
//! Laid out like tonic-build: `parse` reads the trait into `Operation`s, and one module per
//! generated piece turns them into code: `service` (the trait as users implement it),
//! `descriptor` (the args structs and the `ServiceDescriptor`), `server` (`{Trait}Server`) and
//! `client` (`{Trait}Client`, `{Trait}BlockingClient`). The generators depend on `parse`, the
//! server and the clients on `descriptor` for its names, and nothing on them.

mod checks;
mod client;
mod descriptor;
mod parse;
mod server;
mod service;

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::quote;
use syn::{ItemTrait, TraitItem};

use crate::parse::{generics_tokens, parse_operation, Errors};

/// Turns a trait into a keel service contract. See `keel::contract` for the full documentation.
#[proc_macro_attribute]
pub fn contract(attr: TokenStream, item: TokenStream) -> TokenStream {
    let args = match parse_contract_args(TokenStream2::from(attr)) {
        Ok(args) => args,
        Err(e) => return e.to_compile_error().into(),
    };
    let item2 = TokenStream2::from(item.clone());
    let trait_item = match syn::parse2::<ItemTrait>(item2) {
        Ok(t) => t,
        Err(_) => {
            let item2 = TokenStream2::from(item);
            let err = not_a_trait(&item2).to_compile_error();
            return quote!(#err #item2).into();
        }
    };
    match expand(trait_item, &args) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// The code for the contract `item`: the service trait, its descriptor, its server and its
/// clients; or every mistake in the contract, each at its span.
fn expand(item: ItemTrait, args: &ContractArgs) -> syn::Result<TokenStream2> {
    let mut errors = Errors::default();
    if let Some(generics) = generics_tokens(&item.generics) {
        errors.push_spanned(generics, "a keel contract cannot be generic");
    }
    let mut ops = Vec::new();
    for trait_item in &item.items {
        match trait_item {
            TraitItem::Fn(method) => {
                if let Some(op) = parse_operation(method, &mut errors) {
                    ops.push(op);
                }
            }
            other => errors.push_spanned(
                other,
                "a keel contract may contain only operations (methods)",
            ),
        }
    }
    errors.finish()?;

    // First, so that a type without serde's traits is the first error, at its own span.
    let checks = checks::generate(&ops);
    let service = service::generate(&item, &ops);
    let descriptor = descriptor::generate(&item, &ops, args.package.as_ref(), &args.proto_numbers);
    let server = server::generate(&item, &ops);
    let client = client::generate(&item, &ops, args.callback.as_ref());
    Ok(quote! {
        #checks
        #service
        #descriptor
        #server
        #client
    })
}

/// The contract's arguments (`#[keel::contract(...)]`).
#[derive(Default)]
struct ContractArgs {
    /// `callback = Path`: the callback contract of a duplex contract, whose `{Path}Server` a
    /// client's `open_session` serves.
    callback: Option<syn::Path>,
    /// `package = "name.v1"`: the protobuf package of the contract's gRPC service and `.proto`
    /// file (the crate's name when not given).
    package: Option<syn::LitStr>,
    /// `proto_numbers(Message(field = N, ...), ...)`: field numbers pinned per message.
    proto_numbers: Vec<PinnedMessage>,
}

/// One message of `proto_numbers(...)`: its `.proto` name and each field's pinned number.
pub(crate) struct PinnedMessage {
    pub(crate) name: syn::Ident,
    pub(crate) fields: Vec<(syn::Ident, syn::LitInt)>,
}

/// The largest field number protobuf allows (2^29 - 1).
const MAX_FIELD_NUMBER: u32 = 536_870_911;

/// Parses one `Message(field = N, ...)` of `proto_numbers(...)`, checking what can be checked
/// without the types: numbers in protobuf's range, no field or number twice.
fn parse_pinned_message(meta: syn::meta::ParseNestedMeta<'_>) -> syn::Result<PinnedMessage> {
    let Some(name) = meta.path.get_ident().cloned() else {
        return Err(meta.error("expected a message name, e.g. `Point(x = 1, y = 2)`"));
    };
    let mut fields: Vec<(syn::Ident, syn::LitInt)> = Vec::new();
    meta.parse_nested_meta(|field| {
        let Some(ident) = field.path.get_ident().cloned() else {
            return Err(field.error("expected a field name, e.g. `x = 1`"));
        };
        let lit = field.value()?.parse::<syn::LitInt>()?;
        let n: u32 = lit.base10_parse()?;
        if n == 0 || n > MAX_FIELD_NUMBER || (19_000..=19_999).contains(&n) {
            return Err(syn::Error::new(
                lit.span(),
                "a protobuf field number is 1 to 536870911, not 19000 to 19999 (reserved by \
                 protobuf)",
            ));
        }
        if fields.iter().any(|(f, _)| *f == ident) {
            return Err(syn::Error::new(ident.span(), "this field is pinned twice"));
        }
        if let Some((other, _)) = fields
            .iter()
            .find(|(_, l)| l.base10_parse::<u32>().ok() == Some(n))
        {
            return Err(syn::Error::new(
                lit.span(),
                format!("field number {n} is already `{other}`'s"),
            ));
        }
        fields.push((ident, lit));
        Ok(())
    })?;
    if fields.is_empty() {
        return Err(meta.error("pin at least one field, e.g. `Point(x = 1, y = 2)`"));
    }
    Ok(PinnedMessage { name, fields })
}

/// The contract's arguments: nothing, or any of `callback = Path`, `package = "..."` and
/// `proto_numbers(...)`.
fn parse_contract_args(attr: TokenStream2) -> syn::Result<ContractArgs> {
    let mut args = ContractArgs::default();
    if attr.is_empty() {
        return Ok(args);
    }
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("callback") {
            args.callback = Some(meta.value()?.parse::<syn::Path>()?);
            Ok(())
        } else if meta.path.is_ident("package") {
            let lit = meta.value()?.parse::<syn::LitStr>()?;
            if !valid_package(&lit.value()) {
                return Err(syn::Error::new(
                    lit.span(),
                    "a protobuf package is dot-separated identifiers (letters, digits and `_`, \
                     not starting with a digit), e.g. `package = \"calculator.v1\"`",
                ));
            }
            args.package = Some(lit);
            Ok(())
        } else if meta.path.is_ident("proto_numbers") {
            meta.parse_nested_meta(|message| {
                let pinned = parse_pinned_message(message)?;
                if args.proto_numbers.iter().any(|m| m.name == pinned.name) {
                    return Err(syn::Error::new(
                        pinned.name.span(),
                        "this message is listed twice in `proto_numbers`",
                    ));
                }
                args.proto_numbers.push(pinned);
                Ok(())
            })
        } else {
            Err(meta.error(
                "unknown contract argument; expected `callback = CallbackContract`, \
                 `package = \"name.v1\"` or `proto_numbers(Message(field = 1, ...))` (put \
                 #[keel(...)] on operations)",
            ))
        }
    });
    syn::parse::Parser::parse2(parser, attr)?;
    Ok(args)
}

/// Whether `package` is a protobuf package name: identifiers joined by dots.
fn valid_package(package: &str) -> bool {
    package.split('.').all(|part| {
        let mut chars = part.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
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
