//! The server's `tools/list` answers, on their way out: each confirmed tool is marked (the server
//! asks the user itself, and how), and each tool the server shows as needing a confirmation the
//! layer was not given is remembered and refused. An answer the layer cannot read closes the
//! door on every tool it has no policy or exemption for.
//!
//! - `rewrite`: the pure rewriting of one JSON answer or SSE event, member by member;
//! - `marker`: the streaming body that holds, rewrites and lets out an answer up to its cap;
//! - here: [`ToolListing`], what the layer knows and learns of the list.

mod marker;
mod rewrite;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};

use dashmap::DashSet;
use serde_json::Value;

pub(crate) use marker::{Marked, Marker};
pub(crate) use rewrite::{Listed, annotate};

use crate::policy::ToolPolicy;

/// What happens to a call of a tool the layer has no policy for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unconfirmed {
    /// Let it through with a [`Waived`](crate::Waived): exempt by configuration.
    Exempt,
    /// Refuse it: the server lists it as needing a confirmation the layer was not given.
    Undeclared,
    /// Refuse it: the layer was built with the server's tool list and this name is not in it.
    Unlisted,
}

/// What the layer knows of the server's tool list: the marks of its confirmed tools, the tools
/// exempt on purpose, the names of the list it was built with, and what `tools/list` answers
/// taught it since.
#[derive(Debug)]
pub(crate) struct ToolListing {
    /// Tool name → the `_meta` mark answers carry for it ([`mark_of`]).
    marks: HashMap<String, Value>,
    /// Tools let through unconfirmed on purpose ([`exempt`](crate::ConfirmLayerBuilder::exempt)):
    /// their calls carry a [`Waived`](crate::Waived) so a guarded handler runs them.
    exempt: HashSet<String>,
    /// The names in the tool list the layer was built with; `None` when it was built
    /// [`without_tool_list_unchecked`](crate::ConfirmLayerBuilder::without_tool_list_unchecked). A call of any other
    /// name is refused ([`Unconfirmed::Unlisted`]).
    known: Option<HashSet<String>>,
    /// The tools of that list that declare an `outputSchema`; `None` without a list.
    structured: Option<HashSet<String>>,
    /// Tools an answer showed as destructive (or declared with `#[confirm]`) that the layer has
    /// neither a policy nor an exemption for: their calls are refused from then on.
    undeclared: Undeclared,
}

/// What `tools/list` answers say of a tool confirmed by `policy`: the server asks the user
/// itself, and how.
pub(crate) fn mark_of(policy: &ToolPolicy) -> Value {
    let kind = if policy.resolver.is_some() {
        "pick_one"
    } else {
        "confirm"
    };
    serde_json::json!({ "kind": kind })
}

impl ToolListing {
    pub(crate) fn new(
        marks: HashMap<String, Value>,
        exempt: HashSet<String>,
        known: Option<HashSet<String>>,
        structured: Option<HashSet<String>>,
    ) -> Self {
        Self {
            marks,
            exempt,
            known,
            structured,
            undeclared: Undeclared::default(),
        }
    }

    /// What happens to a call of `name`, a tool the layer has no policy for; `None`: it is not
    /// the layer's business.
    pub(crate) fn route(&self, name: &str) -> Option<Unconfirmed> {
        if self.exempt.contains(name) {
            return Some(Unconfirmed::Exempt);
        }
        if !self.undeclared.is_empty() && self.undeclared.contains(name) {
            return Some(Unconfirmed::Undeclared);
        }
        if let Some(known) = &self.known
            && !known.contains(name)
        {
            return Some(Unconfirmed::Unlisted);
        }
        None
    }

    /// Whether the layer's own result for a call of `name` must be an error result: the tool
    /// declares an `outputSchema` (its results must carry structured content the layer cannot
    /// make up), or the layer was built without the list and cannot tell.
    pub(crate) fn structured(&self, name: &str) -> bool {
        self.structured
            .as_ref()
            .is_none_or(|structured| structured.contains(name))
    }

    /// What an answer shows of one tool: records it when it needs a confirmation the layer was
    /// not given, and returns the mark it carries out (`None`: no mark).
    pub(crate) fn observe(&self, listed: &Listed<'_>) -> Option<Value> {
        if let Some(mark) = self.marks.get(listed.name) {
            return Some(mark.clone());
        }
        let needs = listed.declared.is_some() || listed.destructive;
        if needs && !self.exempt.contains(listed.name) && self.undeclared.insert(listed.name) {
            crate::audit::event::DecisionEvent::Undeclared {
                tool: listed.name,
                declared: listed.declared,
            }
            .trace();
        }
        None
    }

    /// An answer went out (or was replaced) unread: the layer does not know which tools it
    /// showed, so it refuses every tool it has no policy or exemption for.
    pub(crate) fn unread(&self, why: &'static str) {
        self.undeclared.close();
        crate::audit::event::DecisionEvent::ListingUnread { why }.trace();
    }
}

/// The names of listed tools that need a confirmation the layer does not have, learnt from the
/// `tools/list` answers it marks. Bounded: the names come from the server, but a server that
/// lists more than this many undeclared destructive tools is refused on the rest as well.
#[derive(Debug, Default)]
struct Undeclared {
    names: DashSet<String>,
    /// Set once the set is full: every tool without a policy or exemption is then refused.
    overflowed: AtomicBool,
}

impl Undeclared {
    /// The most names kept.
    const MAX: usize = 1024;

    /// Records `name`; `true` the first time.
    fn insert(&self, name: &str) -> bool {
        if self.names.contains(name) {
            return false;
        }
        if self.names.len() >= Self::MAX {
            self.overflowed.store(true, Ordering::Relaxed);
            return false;
        }
        self.names.insert(name.to_owned())
    }

    fn contains(&self, name: &str) -> bool {
        self.overflowed.load(Ordering::Relaxed) || self.names.contains(name)
    }

    /// Refuses every tool without a policy or exemption from now on: a listing the layer could
    /// not read may have shown any tool.
    fn close(&self) {
        self.overflowed.store(true, Ordering::Relaxed);
    }

    fn is_empty(&self) -> bool {
        !self.overflowed.load(Ordering::Relaxed) && self.names.is_empty()
    }
}
