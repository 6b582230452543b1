//! Checks the compiler makes first, at the user's own spans: every type that travels in the
//! contract (parameters, return values, faults, stream messages) is serde `Serialize` and
//! `Deserialize`. Without them, the first error would point into generated code.

use proc_macro2::TokenStream as TokenStream2;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::Type;

use crate::parse::Operation;

/// A function that asks, for every type of `ops` that travels, that it implements
/// `keel::__private::ContractType` (and a fault type `FaultType`), each at its type's span: a
/// type without serde's traits is reported there, first, with keel's message
/// (`#[diagnostic::on_unimplemented]`).
pub(crate) fn generate(ops: &[Operation]) -> TokenStream2 {
    let checks = ops.iter().flat_map(|op| {
        let values = traveling_types(op)
            .into_iter()
            .map(|ty| quote_spanned!(ty.span()=> ::keel::__private::travels::<#ty>();));
        let fault = op
            .fallible
            .as_ref()
            .map(|(_, ty)| quote_spanned!(ty.span()=> ::keel::__private::is_fault::<#ty>();));
        values.chain(fault).collect::<Vec<_>>()
    });
    quote! {
        const _: () = {
            // `impl Sized`: the compiler checks the body as early as the clients' (which it
            // must to know their futures), so these errors come before theirs.
            #[allow(dead_code)]
            fn __keel_contract_types() -> impl ::core::marker::Sized {
                #(#checks)*
            }
        };
    }
}

/// The types of `op` that are encoded: its value parameters, its return value (or a reply
/// stream's message) and a request stream's message. Its fault: see [`generate`].
fn traveling_types(op: &Operation) -> Vec<&Type> {
    let mut types: Vec<&Type> = op.value_params().map(|(_, t)| t).collect();
    types.extend(&op.request_message);
    if op.stream_reply {
        types.extend(&op.reply_message);
    } else if !op.one_way {
        types.push(match (&op.fallible, &op.status_result) {
            (Some((t, _)), _) | (None, Some(t)) => t,
            (None, None) => &op.ret,
        });
    }
    types
}
