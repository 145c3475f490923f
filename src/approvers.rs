//! Who may decide a browser approval: the caller, named principals, a role, or anyone but the
//! caller (four eyes), and how many of them must approve. A rule is data: the approval record
//! carries the one it was made under, so every instance and every store applies the same rule
//! to the same record, atomically, with the decision.

use serde::{Deserialize, Serialize};

/// The most approvals a rule may require: more is an organisation chart, not a confirmation.
pub const MAX_REQUIRED_APPROVALS: u8 = 5;

/// The most principals a rule may name.
pub const MAX_NAMED_APPROVERS: usize = 100;

/// Who may decide an approval on the approval page (`ApprovalPage`, feature `pages`), and how many must
/// approve. Give it with [`ToolPolicy::approved_by`](crate::ToolPolicy::approved_by).
///
/// ```
/// use mcp_confirm::approval::Approvers;
///
/// // Four eyes: two people, neither of them the one who asked, each with a registered passkey.
/// let rule = Approvers::role("notes-admin").except_caller().required(2).with_passkey();
/// # let _ = rule;
/// ```
///
/// The roles are the ones the deployment's authenticator puts on the approver's
/// [`Principal`](crate::Principal::with_roles) when they open the page. A decline by anyone the
/// rule admits ends the approval (a veto); approvals are counted per subject, so the same person
/// in a second session counts once; under [`except_caller`](Self::except_caller) the caller is
/// refused in every session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Approvers {
    who: Who,
    #[serde(default, skip_serializing_if = "is_false")]
    except_caller: bool,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    required: u8,
    #[serde(default, skip_serializing_if = "is_false")]
    passkey: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    share_candidate_labels: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    share_argument_values: bool,
}

/// Whom a rule admits, before `except_caller`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "of")]
enum Who {
    /// The principal the confirmation is bound to (the default: the page as before approvers).
    Caller,
    /// Any of these subjects.
    AnyOf(Vec<String>),
    /// Any principal holding this role.
    Role(String),
    /// Any signed-in principal.
    Anyone,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
fn is_false(b: &bool) -> bool {
    !*b
}

const fn one() -> u8 {
    1
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_one(n: &u8) -> bool {
    *n == 1
}

impl Default for Approvers {
    fn default() -> Self {
        Self::caller()
    }
}

impl Approvers {
    fn with(who: Who) -> Self {
        Self {
            who,
            except_caller: false,
            required: 1,
            passkey: false,
            share_candidate_labels: false,
            share_argument_values: false,
        }
    }

    /// Only the caller decides (the default).
    pub fn caller() -> Self {
        Self::with(Who::Caller)
    }

    /// Any of these subjects decides (compared exactly with [`Principal::subject`](crate::Principal::subject)).
    pub fn any_of<S: Into<String>>(subjects: impl IntoIterator<Item = S>) -> Self {
        Self::with(Who::AnyOf(subjects.into_iter().map(Into::into).collect()))
    }

    /// Any principal the authenticator gives `role` decides.
    pub fn role(role: impl Into<String>) -> Self {
        Self::with(Who::Role(role.into()))
    }

    /// Four eyes: any signed-in principal except the caller decides. Narrow it with a role or
    /// names instead where "anyone" is too wide: `Approvers::role("x").except_caller()`.
    pub fn anyone_but_caller() -> Self {
        Self::with(Who::Anyone).except_caller()
    }

    /// The caller may not decide, whatever else admits them (four eyes).
    #[must_use]
    pub fn except_caller(mut self) -> Self {
        self.except_caller = true;
        self
    }

    /// `n` distinct approvers must approve (1 to [`MAX_REQUIRED_APPROVALS`]); the first chooses
    /// the record and the others approve that same choice.
    #[must_use]
    pub fn required(mut self, n: u8) -> Self {
        self.required = n;
        self
    }

    /// Every approval must be made with a passkey registered to the approver, with user
    /// verification, over this approval's id, argument digest and the chosen record's version.
    #[must_use]
    pub fn with_passkey(mut self) -> Self {
        self.passkey = true;
        self
    }

    /// Notifications about these approvals carry the records' labels, exactly as the page
    /// shows them: text the resolver made from the records (titles, excerpts), so it says what
    /// the records hold. With it comes the policy's message. By default a notification carries
    /// no text taken from the call or its records: the tool, who asks, the rule, the expiry and
    /// the page's link.
    #[must_use]
    pub fn share_candidate_labels(mut self) -> Self {
        self.share_candidate_labels = true;
        self
    }

    /// Notifications about these approvals carry the call's argument values, one `name: value`
    /// line each, cleaned and cut as the form's summary of a call is (at most 8 of them, 60
    /// characters a value). With it comes the policy's message. Not the records' labels: those
    /// are [`share_candidate_labels`](Self::share_candidate_labels).
    #[must_use]
    pub fn share_argument_values(mut self) -> Self {
        self.share_argument_values = true;
        self
    }

    /// How many distinct approvers must approve.
    pub fn required_approvals(&self) -> u8 {
        self.required
    }

    /// Whether approving needs a passkey.
    pub fn needs_passkey(&self) -> bool {
        self.passkey
    }

    /// Whether notifications carry the records' labels.
    pub fn shares_candidate_labels(&self) -> bool {
        self.share_candidate_labels
    }

    /// Whether notifications carry the call's argument values.
    pub fn shares_argument_values(&self) -> bool {
        self.share_argument_values
    }

    /// Whether only the caller decides, once: the page as it was before approvers.
    pub fn is_caller_only(&self) -> bool {
        self.who == Who::Caller && !self.except_caller && self.required == 1
    }

    /// Whether the caller may decide under this rule at all.
    pub fn admits_caller(&self) -> bool {
        !self.except_caller
    }

    /// Whether a principal with `subject` and `roles` may decide; `caller`: they are the
    /// principal the confirmation is bound to.
    pub fn admits<'r>(
        &self,
        subject: &str,
        mut roles: impl Iterator<Item = &'r str>,
        caller: bool,
    ) -> bool {
        if caller && self.except_caller {
            return false;
        }
        match &self.who {
            Who::Caller => caller,
            Who::AnyOf(subjects) => subjects.iter().any(|s| s == subject),
            Who::Role(role) => roles.any(|r| r == role),
            Who::Anyone => true,
        }
    }

    /// The rule in words, for notifications: "any of bob, carol", "role notes-admin",
    /// "anyone", each "except the caller" where it says so, and the count where above one.
    pub fn describe(&self) -> String {
        let mut words = match &self.who {
            Who::Caller => "the caller".to_owned(),
            Who::AnyOf(subjects) => format!("any of {}", subjects.join(", ")),
            Who::Role(role) => format!("role {role}"),
            Who::Anyone => "anyone".to_owned(),
        };
        if self.except_caller {
            words.push_str(" but the caller");
        }
        if self.required > 1 {
            words.push_str(&format!(" ({} approvals)", self.required));
        }
        words
    }

    /// Whether `subject` is still named by this rule, where the rule names subjects; `None`
    /// where it cannot tell from the subject alone (a role, the caller, anyone).
    pub(crate) fn still_names(&self, subject: &str) -> Option<bool> {
        match &self.who {
            Who::AnyOf(subjects) => Some(subjects.iter().any(|s| s == subject)),
            Who::Caller | Who::Role(_) | Who::Anyone => None,
        }
    }

    /// The rule's mistakes, in words: refused when the layer is built.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.required == 0 || self.required > MAX_REQUIRED_APPROVALS {
            return Err(format!(
                "approvers: between 1 and {MAX_REQUIRED_APPROVALS} approvals may be required, not {}",
                self.required
            ));
        }
        match &self.who {
            Who::Caller if self.except_caller => {
                return Err("approvers: `caller` with `except_caller` admits no one".into());
            }
            Who::Caller if self.required > 1 => {
                return Err(
                    "approvers: the caller alone cannot give more than one approval".into(),
                );
            }
            Who::AnyOf(subjects) => {
                if subjects.is_empty() || subjects.len() > MAX_NAMED_APPROVERS {
                    return Err(format!(
                        "approvers: name between 1 and {MAX_NAMED_APPROVERS} principals"
                    ));
                }
                if subjects.iter().any(|s| s.trim().is_empty()) {
                    return Err("approvers: an empty subject names no one".into());
                }
                let mut distinct: Vec<&String> = subjects.iter().collect();
                distinct.sort();
                distinct.dedup();
                if distinct.len() < usize::from(self.required) {
                    return Err(format!(
                        "approvers: {} approvals required of {} named principals",
                        self.required,
                        distinct.len()
                    ));
                }
            }
            Who::Role(role) if role.trim().is_empty() => {
                return Err("approvers: an empty role names no one".into());
            }
            _ => {}
        }
        Ok(())
    }

    /// The inbox routes an approval under this rule is filed under: the caller's for `Caller`,
    /// each named subject's, the role's, or everyone's.
    pub(crate) fn routes(&self, caller: &str) -> Vec<String> {
        match &self.who {
            Who::Caller => vec![route("subject", caller)],
            Who::AnyOf(subjects) => subjects.iter().map(|s| route("subject", s)).collect(),
            Who::Role(role) => vec![route("role", role)],
            Who::Anyone => vec![ANYONE.to_owned()],
        }
    }
}

/// The route every signed-in principal reads.
const ANYONE: &str = "anyone";

/// The inbox routes a principal with `subject` and `roles` reads: their own, each role's, and
/// everyone's. Routes are digests, so a store's keys name no one.
pub(crate) fn routes_of<'r>(subject: &str, roles: impl Iterator<Item = &'r str>) -> Vec<String> {
    let mut routes = vec![route("subject", subject), ANYONE.to_owned()];
    routes.extend(roles.map(|r| route("role", r)));
    routes
}

fn route(kind: &str, name: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(b"mcp-confirm/inbox-route/v1\0");
    hash.update(kind.as_bytes());
    hash.update([0]);
    hash.update(name.as_bytes());
    crate::kernel::hex(&hash.finalize()[..16])
}

/// What verifies approvers' passkeys where a rule requires them
/// ([`Approvers::with_passkey`]). The layer holds it so that a rule nothing could meet is
/// refused when the layer is built
/// ([`ConfigError::MissingPasskeys`](crate::ConfigError::MissingPasskeys)); the pages read it
/// back through [`ApprovalDesk::passkeys`](crate::approval::ApprovalDesk::passkeys) and
/// downcast it (`mcp-confirm-pages`'s `Passkeys`, over WebAuthn, is one). The core itself
/// verifies nothing with it: every store refuses an approval under such a rule whose decider
/// carries no passkey.
pub trait PasskeyVerifier: std::any::Any + Send + Sync + std::fmt::Debug {}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> std::iter::Empty<&'static str> {
        std::iter::empty()
    }

    #[test]
    fn each_rule_admits_whom_it_names_and_four_eyes_never_the_caller() {
        let caller = Approvers::caller();
        assert!(caller.admits("alice", none(), true));
        assert!(!caller.admits("bob", none(), false));
        assert!(caller.is_caller_only());

        let named = Approvers::any_of(["bob", "carol"]);
        assert!(named.admits("bob", none(), false));
        assert!(!named.admits("dave", none(), false));
        // Named and the caller: admitted unless four eyes.
        assert!(named.admits("bob", none(), true));
        assert!(!named.clone().except_caller().admits("bob", none(), true));

        let role = Approvers::role("admin");
        assert!(role.admits("x", ["reader", "admin"].into_iter(), false));
        assert!(!role.admits("x", ["reader"].into_iter(), false));

        let four_eyes = Approvers::anyone_but_caller();
        assert!(four_eyes.admits("bob", none(), false));
        assert!(!four_eyes.admits("alice", none(), true));
        assert!(!four_eyes.admits_caller());
        assert!(!four_eyes.is_caller_only());
    }

    #[test]
    fn rules_that_admit_no_one_or_cannot_be_met_are_refused() {
        assert!(Approvers::caller().validate().is_ok());
        assert!(
            Approvers::anyone_but_caller()
                .required(2)
                .validate()
                .is_ok()
        );
        for bad in [
            Approvers::caller().except_caller(),
            Approvers::caller().required(2),
            Approvers::anyone_but_caller().required(0),
            Approvers::anyone_but_caller().required(MAX_REQUIRED_APPROVALS + 1),
            Approvers::any_of(Vec::<String>::new()),
            Approvers::any_of(["bob", "bob"]).required(2),
            Approvers::any_of(["bob", " "]),
            Approvers::role(""),
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn routes_meet_where_a_principal_is_admitted() {
        let reads = routes_of("bob", ["admin"].into_iter());
        let meets = |rule: &Approvers| rule.routes("alice").iter().any(|r| reads.contains(r));
        assert!(meets(&Approvers::any_of(["bob"])));
        assert!(meets(&Approvers::role("admin")));
        assert!(meets(&Approvers::anyone_but_caller()));
        assert!(!meets(&Approvers::role("ops")));
        assert!(!meets(&Approvers::caller()));
        assert!(routes_of("alice", none()).contains(&Approvers::caller().routes("alice")[0]));
        // Nothing readable in a route.
        assert!(
            reads
                .iter()
                .all(|r| !r.contains("bob") && !r.contains("admin"))
        );
    }

    #[test]
    fn rules_round_trip_and_older_records_read_as_the_caller() {
        let rule = Approvers::role("admin")
            .except_caller()
            .required(2)
            .with_passkey();
        let text = serde_json::to_string(&rule).unwrap_or_default();
        assert_eq!(serde_json::from_str::<Approvers>(&text).ok(), Some(rule));
        let caller: Approvers = serde_json::from_str(r#"{"who":{"kind":"caller"}}"#)
            .unwrap_or_else(|_| Approvers::anyone_but_caller());
        assert_eq!(caller, Approvers::caller());
    }
}
