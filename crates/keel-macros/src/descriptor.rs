//! The contract's description: one args struct per operation (what travels as an operation's
//! arguments), in a hidden module, and the `ServiceDescriptor` static that lists the operations
//! (and, with keel's `openapi` feature, their JSON Schema). The server and the clients refer to
//! both by the names given here.

use proc_macro2::TokenStream as TokenStream2;
use quote::{format_ident, quote};
use syn::ext::IdentExt;
use syn::{Attribute, Ident, ItemTrait, Type};

use crate::parse::Operation;

/// Whether to generate the JSON Schema of each operation (keel's `openapi` feature).
const OPENAPI: bool = cfg!(feature = "openapi");

/// The hidden module that holds the contract's args structs.
pub(crate) fn module_ident(trait_name: &Ident) -> Ident {
    format_ident!("__keel_{}", trait_name.to_string().to_lowercase())
}

/// The static `ServiceDescriptor` of the contract.
pub(crate) fn static_ident(trait_name: &Ident) -> Ident {
    format_ident!("__KEEL_DESCRIPTOR_{}", trait_name)
}

/// The args struct of the operation `op`, inside the module named by `module_ident`.
pub(crate) fn args_ident(trait_name: &Ident, op: &Ident) -> Ident {
    format_ident!("__{}_{}_args", trait_name, op)
}

/// The args structs' module and the descriptor static, for the contract `item` whose
/// operations are `ops`.
pub(crate) fn generate(
    item: &ItemTrait,
    ops: &[Operation],
    package: Option<&syn::LitStr>,
    proto_numbers: &[crate::PinnedMessage],
) -> TokenStream2 {
    let trait_name = &item.ident;
    let service_name = trait_name.to_string();
    let k = quote!(::keel::__private);
    let descriptor_mod = module_ident(trait_name);
    let descriptor_static = static_ident(trait_name);
    let args_structs = ops
        .iter()
        .map(|op| args_struct(trait_name, &service_name, op));
    let op_infos = ops.iter().map(|op| operation_info(trait_name, op));
    // The crate's name (with `_` for `-`) as the user's crate is compiled.
    let package = match package {
        Some(p) => quote!(#p),
        None => quote!(::core::env!("CARGO_CRATE_NAME")),
    };
    let pinned = proto_numbers.iter().map(|m| {
        let name = m.name.unraw().to_string();
        let fields = m.fields.iter().map(|(f, n)| {
            let f = f.unraw().to_string();
            quote!((#f, #n))
        });
        quote!(#k::ProtoNumbers::new(#name, &[#(#fields),*]))
    });
    quote! {
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
            #k::ServiceDescriptor::new(#service_name, &[#(#op_infos),*])
                .with_package(#package)
                .with_proto_numbers(&[#(#pinned),*]);
    }
}

/// The struct of `op`'s encoded arguments: its value parameters, those marked
/// `#[keel(default)]` with `#[serde(default)]`.
fn args_struct(trait_name: &Ident, service_name: &str, op: &Operation) -> TokenStream2 {
    let k = quote!(::keel::__private);
    let ident = args_ident(trait_name, &op.name);
    let fields = op.value_params().map(|(n, t)| {
        if op.defaults.contains(n) {
            quote!(#[serde(default)] pub(super) #n: #t)
        } else {
            quote!(pub(super) #n: #t)
        }
    });
    let doc = format!("Arguments of `{}.{}`.", service_name, op.name);
    quote! {
        #[doc = #doc]
        #[doc(hidden)]
        #[derive(#k::serde::Serialize, #k::serde::Deserialize)]
        #[serde(crate = "::keel::__private::serde")]
        #[allow(non_camel_case_types)]
        pub(super) struct #ident { #(#fields,)* }
    }
}

/// The `OperationInfo` of `op`: its name, parameters, return and fault types as written, its
/// call model, and (with the `openapi` feature) its schemas.
fn operation_info(trait_name: &Ident, op: &Operation) -> TokenStream2 {
    let k = quote!(::keel::__private);
    let name = op.name.to_string();
    let params = op.contract_params().map(|(n, t)| {
        let n = n.to_string();
        let t = type_string(t);
        quote!(#k::ParamInfo::new(#n, #t))
    });
    let stream_request = op.stream_param.is_some();
    let stream_response = op.stream_reply;
    let message_request = op.request_message.is_some();
    let message_response = op.reply_message.is_some();
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
        let success = match (&op.fallible, &op.status_result) {
            (Some((t, _)), _) | (None, Some(t)) => t,
            (None, None) => &op.ret,
        };
        let returns = if let Some(m) = &op.reply_message {
            // A stream of messages: the schema of one message.
            let f = schema_fn(m);
            quote!(::core::option::Option::Some(#f))
        } else if op.one_way || op.stream_reply {
            quote!(::core::option::Option::None)
        } else {
            let f = schema_fn(success);
            quote!(::core::option::Option::Some(#f))
        };
        let request_message = match &op.request_message {
            Some(m) => {
                let f = schema_fn(m);
                quote!(::core::option::Option::Some(#f))
            }
            None => quote!(::core::option::Option::None),
        };
        let fault = match &op.fallible {
            Some((_, e)) => {
                let f = schema_fn(e);
                quote!(::core::option::Option::Some(#f))
            }
            None => quote!(::core::option::Option::None),
        };
        let args = op.value_params().map(|(n, t)| {
            let name = n.to_string();
            let default = if op.defaults.contains(n) {
                quote!(.with_default::<#t>())
            } else {
                quote!()
            };
            quote! {
                #k::ArgSchema::new(
                    #name,
                    (&#k::SchemaProbe::<#t>::new()).schema(&mut *g),
                    #k::SchemaProbe::<#t>::new().is_option(),
                )
                #default
            }
        });
        let docs = doc_text(&op.method.attrs);
        quote! {
            .with_schemas(#k::OperationSchemas::new(
                |g| {
                    #[allow(unused_imports)]
                    use #k::{HasSchema as _, NotOption as _, OpenSchema as _};
                    #k::args_schema(::std::vec![#(#args),*])
                },
                #returns,
                #fault,
                #docs,
            ).with_request_message(#request_message))
        }
    } else {
        quote!()
    };
    let proto = {
        let descriptor_mod = module_ident(trait_name);
        let args = args_ident(trait_name, &op.name);
        let success = match (&op.fallible, &op.status_result) {
            (Some((t, _)), _) | (None, Some(t)) => t,
            (None, None) => &op.ret,
        };
        let some = |t: &Type| quote!(::core::option::Option::Some(#k::proto_trace::<#t>));
        let none = quote!(::core::option::Option::None);
        let returns = if let Some(m) = &op.reply_message {
            some(m)
        } else if op.one_way || op.stream_reply {
            none.clone()
        } else {
            some(success)
        };
        let request_message = op.request_message.as_ref().map_or(none.clone(), some);
        let fault = op.fallible.as_ref().map_or(none, |(_, e)| some(e));
        quote! {
            .with_proto(#k::ProtoTypes::new(
                #k::proto_trace::<#descriptor_mod::#args>,
                #returns,
                #request_message,
                #fault,
            ))
        }
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
        .with_messages(#message_request, #message_response)
        #schemas
        #proto
    }
}

/// A `SchemaFn` of `t`: its JSON Schema if it implements `schemars::JsonSchema`, else an open
/// schema that says so (keel's `openapi::probe`). A closure without captures, which a static
/// may hold as a function pointer; `t` is concrete (contracts have no generics), which the
/// choice between the two methods needs.
fn schema_fn(t: &Type) -> TokenStream2 {
    let k = quote!(::keel::__private);
    quote! {
        |g| {
            #[allow(unused_imports)]
            use #k::{HasSchema as _, OpenSchema as _};
            (&#k::SchemaProbe::<#t>::new()).schema(g)
        }
    }
}

/// `t` as written, without spaces (`Vec<u8>`, `keel::ByteStream`).
fn type_string(t: &Type) -> String {
    quote!(#t).to_string().replace(' ', "")
}

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
