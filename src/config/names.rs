//! Names that point at other tables: a check's limit, a route's policy, a key's
//! registered extractor, a cost's registered estimate.
//!
//! serde reads a file without knowing what a name will point at, and JSON and YAML
//! keep no positions once read. So a file is read twice when (and only when) a name
//! points nowhere: the second reading knows every name (a thread-local, set for that
//! reading alone), refuses the first that is unknown where it is read, and so reports
//! it at its own line and column, with its field, as any other mistake.

use std::cell::RefCell;
use std::collections::BTreeSet;

/// The kinds of names, as `Name`'s const parameter.
pub(crate) struct Known;

impl Known {
    /// A limit's name (`limits.NAME`).
    pub(crate) const LIMIT: u8 = 0;
    /// A policy's name (`policies.NAME`).
    pub(crate) const POLICY: u8 = 1;
    /// An extractor the program registered.
    pub(crate) const EXTRACTOR: u8 = 2;
    /// An estimate of a request's cost the program registered.
    pub(crate) const ESTIMATE: u8 = 3;
}

/// The names the program registered ([`Extractors`](super::Extractors)).
#[derive(Clone, Debug, Default)]
pub(crate) struct Registered {
    pub(crate) extractors: BTreeSet<String>,
    pub(crate) estimates: BTreeSet<String>,
}

/// Every name a file may point at.
#[derive(Clone, Debug, Default)]
pub(crate) struct KnownNames {
    limits: BTreeSet<String>,
    policies: BTreeSet<String>,
    /// `None`: not known yet (a file read before the program's extractors are).
    registered: Option<Registered>,
    /// A policy to refuse where it is read, and why: a mistake found across the whole
    /// file (a limit in two modes), located by a second reading as a name is.
    refused: Option<(String, String)>,
}

thread_local! {
    static KNOWN: RefCell<Option<KnownNames>> = const { RefCell::new(None) };
}

impl KnownNames {
    /// The names of limits and policies a file defines, and the extractors and
    /// estimates registered (`None`: not known yet).
    pub(crate) fn new(
        limits: BTreeSet<String>,
        policies: BTreeSet<String>,
        registered: Option<Registered>,
    ) -> Self {
        Self {
            limits,
            policies,
            registered,
            refused: None,
        }
    }

    /// These names, and the policy `name` refused with `message` where it is read.
    pub(crate) fn refusing(mut self, name: String, message: String) -> Self {
        self.refused = Some((name, message));
        self
    }

    /// Whether `name`, of `kind`, is known (or its kind not known yet).
    pub(crate) fn check(&self, kind: u8, name: &str) -> Result<(), String> {
        let registered = self.registered.as_ref();
        let (known, what, table) = match kind {
            Known::LIMIT => (Some(&self.limits), "limit", "under [limits]"),
            Known::POLICY => (Some(&self.policies), "policy", "under [policies]"),
            Known::EXTRACTOR => (
                registered.map(|names| &names.extractors),
                "extractor",
                "registered by the program (Extractors::register)",
            ),
            _ => (
                registered.map(|names| &names.estimates),
                "estimate",
                "registered by the program (Extractors::estimate)",
            ),
        };
        match known {
            Some(known) if !known.contains(name) => {
                let names: Vec<&str> = known.iter().map(String::as_str).collect();
                Err(format!(
                    "unknown {what} {name:?}: expected one of the names {table}: {}",
                    if names.is_empty() {
                        "(none)".to_owned()
                    } else {
                        names.join(", ")
                    }
                ))
            }
            _ => Ok(()),
        }
    }

    /// Runs `read` with these names known to [`check_name`] on this thread.
    pub(crate) fn while_known<T>(self, read: impl FnOnce() -> T) -> T {
        /// Forgets the names however `read` ends.
        struct Forget;
        impl Drop for Forget {
            fn drop(&mut self) {
                KNOWN.with(|known| known.borrow_mut().take());
            }
        }
        KNOWN.with(|known| *known.borrow_mut() = Some(self));
        let _forget = Forget;
        read()
    }
}

/// Whether `name`, of `kind`, points somewhere: always, outside
/// [`KnownNames::while_known`].
pub(crate) fn check_name(kind: u8, name: &str) -> Result<(), String> {
    KNOWN.with(|known| match &*known.borrow() {
        Some(known) => known.check(kind, name),
        None => Ok(()),
    })
}

/// Why the policy `name`, just read, is refused: only inside
/// [`KnownNames::while_known`] for names [`refusing`](KnownNames::refusing) it.
pub(crate) fn policy_refusal(name: &str) -> Option<String> {
    KNOWN.with(|known| match &*known.borrow() {
        Some(KnownNames {
            refused: Some((refused, message)),
            ..
        }) if refused == name => Some(message.clone()),
        _ => None,
    })
}
