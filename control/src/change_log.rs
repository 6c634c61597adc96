//! Reading the change log (issue 47): a scope's entries as its owners read them, or every
//! entry as operators do, narrowed to one actor when asked. The actor is inside the entry, not a column, so a page is filled
//! by reading on until it is full or a bounded number of pages were read; the caller pages on
//! from where the reading stopped.

use switchboard_model::change_log::{ChangeEntry, Sealed};
use switchboard_store::{ChangeQuery, OwnerScope, Store};

/// Pages read for one answer when an actor narrows it.
const MAX_PAGES: usize = 20;

/// Up to `query.limit` entries of `scope` (every entry without one; made by `actor`, when
/// given), and the seq to page on from when more may match.
pub async fn read(
    store: &Store,
    scope: Option<&OwnerScope>,
    query: ChangeQuery<'_>,
    actor: Option<&str>,
) -> crate::Result<(Vec<Sealed>, Option<u64>)> {
    let mut found = Vec::new();
    let mut after = query.after;
    for _ in 0..MAX_PAGES {
        let page = store
            .scope_changes(scope, &ChangeQuery { after, ..query })
            .await?;
        let full = page.len() == query.limit as usize;
        for sealed in page {
            after = sealed.seq;
            let wanted = actor.is_none_or(|a| {
                serde_json::from_str::<ChangeEntry>(&sealed.text).is_ok_and(|e| e.made_by(a))
            });
            if wanted {
                found.push(sealed);
                if found.len() == query.limit as usize {
                    return Ok((found, Some(after)));
                }
            }
        }
        if !full {
            return Ok((found, None));
        }
    }
    Ok((found, Some(after)))
}
