//! SQL fragments the store's files share: below every one of them, so that
//! none has to import another for a piece of a statement.

use sqlx::{MySql, QueryBuilder};

use crate::job::JobId;

/// `(?, ?, …)`: `ids` bound, for an `IN`.
pub(super) fn push_id_list(query: &mut QueryBuilder<'_, MySql>, ids: &[JobId]) {
    query.push("(");
    let mut list = query.separated(", ");
    for id in ids {
        list.push_bind(*id);
    }
    query.push(")");
}
