//! The trait as users implement it: the `#[keel(...)]` attributes consumed, each `async fn`
//! turned into a fn returning a `Send` future, and the trait bound to `Send + Sync + 'static`
//! so a server can share it across tasks.

use proc_macro2::TokenStream as TokenStream2;
use quote::quote;
use syn::{FnArg, ItemTrait};

use crate::parse::Operation;

/// The service trait, for the contract `item` whose operations are `ops`.
pub(crate) fn generate(item: &ItemTrait, ops: &[Operation]) -> TokenStream2 {
    let vis = &item.vis;
    let trait_name = &item.ident;
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
    quote! {
        #(#trait_attrs)*
        #vis trait #trait_name: #supertraits #plus ::core::marker::Send + ::core::marker::Sync + 'static {
            #(#trait_methods)*
        }
    }
}
