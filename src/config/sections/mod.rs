//! The sections of the configuration, one struct each (`LoaderSettings` is
//! `[loader]`), with its defaults in its `Default` and its own checks in its
//! `validate` beside them; a file per group of sections. The checks that
//! span sections are `super::validate`'s. Everything here is re-exported as
//! `crate::config::X`.

mod api;
mod at_rest;
mod jobs;
mod observe;
mod roles;
mod stores;

pub use api::*;
pub use at_rest::*;
pub use jobs::*;
pub use observe::*;
pub use roles::*;
pub use stores::*;
