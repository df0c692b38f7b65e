//! The running configuration: built once, then replaced whole by each reload, one
//! pointer swap, with every limiter whose limit did not change carried over.

use super::Config;
use super::build::{self, BuiltLimit, Checks, Extractors, Make, OnClock};
use super::error::ConfigError;
use super::schema::{Document, LimitSpec};
use crate::http::{RateLimitLayer, Table};
use crate::policy::{Policy, Verdict};
use crate::sync::{AtomicUsize, Ordering};
use crate::{Clock, QuantaClock};
use arc_swap::ArcSwap;
use http::request::Parts;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

/// Limits built from a [`Config`] and reloaded while they run: an HTTP layer
/// ([`layer`](Self::layer)) and the policies by name ([`policy`](Self::policy)),
/// each request reading the configuration of the moment with one lock-free pointer
/// load (arc-swap's `ArcSwap`).
///
/// A [`reload`](Self::reload) builds the new configuration beside the running one and
/// swaps it in only when all of it was built: a configuration that fails leaves the
/// running one untouched. Then:
/// - a limit whose algorithm, quota and key are unchanged keeps its limiter, so every
///   key's state;
/// - a limit whose quota changed keeps its limiter too, and each key moves to the new
///   quota at its first request under the new configuration, by the reconfiguration
///   rules of [`crate::per_key`]: a key keeps what it had left, capped at the new
///   quota, so a throttled key is never given a fresh allowance. The moves are lazy:
///   the reload only publishes the new quota (the token bucket, fixed window and
///   sliding log can move keys; a change of a GCRA's or sliding window counter's
///   quota is refused, as their keys cannot move — give the limit a new name to start
///   it afresh);
/// - a limit whose algorithm, key, store or memory settings (`max_keys`, `overflow`,
///   `eviction_margin`) changed is a new limit: a new limiter, the old one's state
///   dropped, as a removed limit's is once no request holds it;
/// - a shared (Redis) limit's state is Redis's: its quota cannot change while it runs
///   (refused, as a GCRA's);
/// - policies and routes are rebuilt on the limiters above; a request in flight
///   finishes under the routes and policies it started with.
///
/// # What a request can see of a reload
/// A request reads the configuration once, at its start (the layer's routes, or a
/// policy), and every check it makes carries that configuration's quota into the
/// limiter. The routes and policies are swapped in one pointer store each, so:
/// - a request that starts after the swap is decided by the new file alone: its
///   routes, costs, `RateLimit` fields and quotas, every key it meets moved to the new
///   quota at that request;
/// - a request in flight finishes under the old file, its checks and settles under
///   the old quotas — except on a key that a request of the new file has moved
///   already: a key's state is under one quota at a time and moves forward only, so
///   the old request is decided under the new quota there (never a fresh allowance:
///   the key kept what it had left). A moved key that was forgotten since (full and
///   idle past the eviction margin) is a new key again, made under the old quota by
///   such a request.
///
/// Nothing waits: the swap does not wait for the old requests, and no request waits
/// for a reload.
///
/// Clones share one configuration. The guide's page
/// [Limits from a file](crate::guide::limits_from_a_file) has a whole example.
#[derive(Clone)]
pub struct LiveLimits {
    shared: Arc<Shared>,
}

struct Shared {
    current: ArcSwap<Generation>,
    /// The layer's routes, swapped with `current`, read by every service of
    /// [`LiveLimits::layer`].
    routes: Arc<ArcSwap<crate::http::Routes>>,
    /// One reload at a time (requests never take it).
    reloading: Mutex<()>,
    extractors: Extractors,
    make: Box<dyn Make>,
}

/// One configuration, built.
struct Generation {
    version: u64,
    config: Config,
    limits: BTreeMap<String, BuiltLimit>,
    /// By name, in name order (a [`PolicyHandle`] remembers an index into it).
    policies: Vec<(String, Arc<Policy<Parts>>)>,
}

impl Generation {
    fn new(
        version: u64,
        config: Config,
        limits: BTreeMap<String, BuiltLimit>,
        policies: BTreeMap<String, Arc<Policy<Parts>>>,
    ) -> Self {
        Self {
            version,
            config,
            limits,
            policies: policies.into_iter().collect(),
        }
    }

    /// The index of the policy `name`.
    fn index_of(&self, name: &str) -> Option<usize> {
        self.policies
            .binary_search_by(|(policy, _)| policy.as_str().cmp(name))
            .ok()
    }
}

/// A configuration built beside the running one, not yet swapped in.
struct Planned {
    limits: BTreeMap<String, BuiltLimit>,
    policies: BTreeMap<String, Arc<Policy<Parts>>>,
    layer: RateLimitLayer,
    changes: Vec<Change>,
}

impl LiveLimits {
    /// Limits built from `config` on the default clock, keys found by `extractors`:
    /// version 1.
    ///
    /// A shared (Redis) limit connects lazily, on the tokio runtime it is built in:
    /// build and reload such a configuration inside one.
    ///
    /// # Errors
    /// A limit that names an extractor `extractors` does not have (located in the
    /// file), a policy the checks' rules refuse (a cost above its limit's capacity, a
    /// dry-run check sharing a limiter with an enforced one), a shared limit built
    /// outside a tokio runtime or with a Redis URL its client refuses.
    pub fn new(config: Config, extractors: Extractors) -> Result<Self, ConfigError> {
        Self::with_clock(config, extractors, QuantaClock::new())
    }

    /// [`LiveLimits::new`] with every limiter on `clock` (a
    /// [`ManualClock`](crate::ManualClock) in tests).
    ///
    /// # Errors
    /// As [`LiveLimits::new`].
    pub fn with_clock<C: Clock + Clone + 'static>(
        config: Config,
        extractors: Extractors,
        clock: C,
    ) -> Result<Self, ConfigError> {
        let make: Box<dyn Make> = Box::new(OnClock(clock));
        let planned = plan(None, &config, &extractors, &*make)?;
        let routes = Arc::new(ArcSwap::new(planned.layer.table.current()));
        let generation = Generation::new(1, config, planned.limits, planned.policies);
        report_version(1);
        Ok(Self {
            shared: Arc::new(Shared {
                current: ArcSwap::from_pointee(generation),
                routes,
                reloading: Mutex::new(()),
                extractors,
                make,
            }),
        })
    }

    /// A layer whose services read the routes of the configuration running at each
    /// request: put it in front of the service once; reloads reach it.
    pub fn layer(&self) -> RateLimitLayer {
        RateLimitLayer {
            table: Table::Live(Arc::clone(&self.shared.routes)),
        }
    }

    /// The policy `name` of the configuration running now, for a request that is not
    /// served through the layer. Keep it for the request (it stays valid across a
    /// reload: a request finishes under the policy it started with), and ask again
    /// for the next one. Each call looks the name up and counts a reference (an atomic
    /// increment on a line every thread shares): on a hot path, resolve the name once
    /// with [`policy_handle`](Self::policy_handle).
    pub fn policy(&self, name: &str) -> Option<Arc<Policy<Parts>>> {
        let current = self.shared.current.load();
        let index = current.index_of(name)?;
        Some(Arc::clone(&current.policies[index].1))
    }

    /// A handle on the policy `name` that follows reloads: the name is resolved once,
    /// and each request reads the running policy with one `ArcSwap` load, no lookup
    /// and no reference count (see [`PolicyHandle`]). `None` when the running
    /// configuration has no policy `name`.
    pub fn policy_handle(&self, name: &str) -> Option<PolicyHandle> {
        let index = self.shared.current.load().index_of(name)?;
        Some(PolicyHandle {
            shared: Arc::clone(&self.shared),
            name: name.into(),
            index: AtomicUsize::new(index),
        })
    }

    /// The running configuration's version: 1 when built, one more at each
    /// successful reload (a failed one leaves it). A reload that changes nothing is
    /// still applied and counted: the version counts the files swapped in, not the
    /// changes, and the reload's [`Changes`] says there were none
    /// ([`is_empty`](Changes::is_empty); displayed as `version N: no change`).
    pub fn version(&self) -> u64 {
        self.shared.current.load().version
    }

    /// Where the running configuration came from.
    pub fn origin(&self) -> String {
        self.shared.current.load().config.origin().to_owned()
    }

    /// Swaps `config` in, as the [type's documentation](Self) says, and tells what
    /// changed. Reloads run one at a time; requests never wait for one, and a reload
    /// waits for no request. It builds the new configuration's limiters, policies and
    /// routes (connecting a new shared limit lazily), so it takes the time of that
    /// building and of taking the reload lock: call it off an async runtime's workers
    /// (`spawn_blocking`) when the table is large. With the `metrics` feature each
    /// outcome sets the gauge `turnstile_config_last_reload_successful` (1 or 0).
    ///
    /// # Errors
    /// What [`LiveLimits::new`] refuses, a change of quota for a limit whose keys
    /// cannot move (GCRA, sliding window counter, a shared limit), and a file without
    /// a `[layer]` when the running one has one (a file cut short; `unlimited = true`
    /// says it on purpose). The running configuration is then untouched.
    pub fn reload(&self, config: Config) -> Result<Changes, ConfigError> {
        let reloaded = self.apply(config);
        report_reload(reloaded.is_ok());
        reloaded
    }

    fn apply(&self, config: Config) -> Result<Changes, ConfigError> {
        let _reloading = self
            .shared
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let running = self.shared.current.load_full();
        refuse_dropped_layer(&running.config, &config)?;
        let planned = plan(
            Some(&running),
            &config,
            &self.shared.extractors,
            &*self.shared.make,
        )?;
        // Nothing running has changed until here: a new quota is published on its
        // limiter by the plan, but only the new checks carry it. The new routes and
        // policies go in, each one pointer swap; the old ones are dropped once the
        // last request holding them has finished.
        let version = running.version + 1;
        drop(running);
        self.shared.routes.store(planned.layer.table.current());
        self.shared.current.store(Arc::new(Generation::new(
            version,
            config,
            planned.limits,
            planned.policies,
        )));
        report_version(version);
        Ok(Changes {
            version,
            changes: planned.changes,
        })
    }

    /// Reads the file at `path` ([`Config::load`]) and [`reload`](Self::reload)s it.
    ///
    /// # Errors
    /// As [`Config::load`] and [`LiveLimits::reload`].
    pub fn reload_file(&self, path: impl AsRef<Path>) -> Result<Changes, ConfigError> {
        match Config::load(path) {
            Ok(config) => self.reload(config),
            Err(error) => {
                report_reload(false);
                Err(error)
            }
        }
    }
}

/// The version, origin and limits' names.
impl fmt::Debug for LiveLimits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let current = self.shared.current.load();
        f.debug_struct("LiveLimits")
            .field("version", &current.version)
            .field("origin", &current.config.origin())
            .field("limits", &current.limits.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// A policy of [`LiveLimits`] by name, resolved once
/// ([`LiveLimits::policy_handle`]): each request runs under the policy of the
/// configuration running at its start, read with one lock-free `ArcSwap` load (a
/// thread-local slot, no reference count, no allocation). The handle remembers where
/// its policy is in the running configuration and checks that place's name (a short
/// comparison); after a reload that moved it, the first request looks it up again.
pub struct PolicyHandle {
    shared: Arc<Shared>,
    name: Box<str>,
    /// Where the policy was in the last configuration a request read.
    index: AtomicUsize,
}

impl PolicyHandle {
    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `with` on the policy running now, and answers what it does; `None` when a
    /// reload removed the policy. The configuration stays loaded while `with` runs
    /// (an `ArcSwap` guard: keep it short, as a thread holds few at a time).
    pub fn with<T>(&self, with: impl FnOnce(&Policy<Parts>) -> T) -> Option<T> {
        let current = self.shared.current.load();
        // Relaxed: a hint, checked by the name at that place before it is used.
        let remembered = self.index.load(Ordering::Relaxed);
        let index = match current.policies.get(remembered) {
            Some((name, _)) if **name == *self.name => remembered,
            _ => {
                let index = current.index_of(&self.name)?;
                // Relaxed: a hint, as above.
                self.index.store(index, Ordering::Relaxed);
                index
            }
        };
        Some(with(&current.policies[index].1))
    }

    /// The running policy's [`acquire`](Policy::acquire) of `request`; `None` when a
    /// reload removed the policy.
    pub fn acquire(&self, request: &Parts) -> Option<Verdict> {
        self.with(|policy| policy.acquire(request))
    }
}

/// The same policy, its own remembered place.
impl Clone for PolicyHandle {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            name: self.name.clone(),
            // Relaxed: a hint.
            index: AtomicUsize::new(self.index.load(Ordering::Relaxed)),
        }
    }
}

/// The policy's name.
impl fmt::Debug for PolicyHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyHandle")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A reload that would drop the running `[layer]` without saying so (a file cut short
/// before it): refused, since the layer handed out would then limit nothing.
fn refuse_dropped_layer(running: &Config, new: &Config) -> Result<(), ConfigError> {
    if running.document.layer.is_some() && new.document.layer.is_none() && !new.document.unlimited {
        return Err(ConfigError::new(
            new.origin(),
            "layer",
            "the running configuration has a [layer] and this one has none, so its routes \
             would limit nothing: keep the [layer] (a file cut short?), or write \
             `unlimited = true` alone to limit nothing on purpose",
        ));
    }
    Ok(())
}

/// The `turnstile_config_last_reload_successful` gauge (1 or 0), with the `metrics`
/// feature: a failed reload is visible where the version is.
fn report_reload(successful: bool) {
    #[cfg(feature = "metrics")]
    {
        metrics::describe_gauge!(
            "turnstile_config_last_reload_successful",
            "1 when the last reload of the limits configuration was applied, 0 when it was refused."
        );
        metrics::gauge!("turnstile_config_last_reload_successful").set(if successful {
            1.0
        } else {
            0.0
        });
    }
    #[cfg(not(feature = "metrics"))]
    let _ = successful;
}

/// The `turnstile_config_version` gauge, with the `metrics` feature.
fn report_version(version: u64) {
    #[cfg(feature = "metrics")]
    {
        metrics::describe_gauge!(
            "turnstile_config_version",
            "The version of the limits configuration running (1 when built, one more per reload)."
        );
        // Exact up to 2^53 reloads.
        metrics::gauge!("turnstile_config_version").set(version as f64);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = version;
}

/// Builds `config` beside `running`, taking over its limiters where the limits allow.
fn plan(
    running: Option<&Generation>,
    config: &Config,
    extractors: &Extractors,
    make: &dyn Make,
) -> Result<Planned, ConfigError> {
    config.resolve(Some(extractors.registered()))?;
    let document = &config.document;
    let origin = config.origin();
    let empty = BTreeMap::new();
    let old_limits = running.map_or(&empty, |running| &running.limits);
    let mut changes = Vec::new();
    let mut limits = BTreeMap::new();
    for (name, spec) in &document.limits {
        let built = match old_limits.get(name) {
            Some(old) if old.spec == *spec => old.clone(),
            Some(old)
                if old.spec.algorithm == spec.algorithm
                    && old.spec.key == spec.key
                    && old.spec.store == spec.store
                    && old.spec.memory == spec.memory =>
            {
                let Some(requota) = &old.requota else {
                    return Err(cannot_move(origin, name, &old.spec));
                };
                changes.push(Change::QuotaChanged {
                    limit: name.clone(),
                    from: old.spec.quota.text.clone(),
                    to: spec.quota.text.clone(),
                });
                // Published now, carried only by this configuration's checks: until
                // the swap no request has them, and a plan refused below leaves the
                // running checks under the quota they carry.
                BuiltLimit {
                    spec: spec.clone(),
                    limiter: requota(spec.quota.quota),
                    requota: Some(Arc::clone(requota)),
                }
            }
            old => {
                let built = make
                    .make(name, spec)
                    .map_err(|error| ConfigError::new(origin, format!("limits.{name}"), error))?;
                changes.push(match old {
                    None => Change::LimitAdded {
                        limit: name.clone(),
                    },
                    Some(old) => Change::LimitReplaced {
                        limit: name.clone(),
                        why: if old.spec.algorithm != spec.algorithm {
                            Replaced::Algorithm
                        } else if old.spec.key != spec.key {
                            Replaced::Key
                        } else if old.spec.store != spec.store {
                            Replaced::Store
                        } else {
                            Replaced::Memory
                        },
                    },
                });
                built
            }
        };
        limits.insert(name.clone(), built);
    }
    for name in old_limits.keys().filter(|name| !limits.contains_key(*name)) {
        changes.push(Change::LimitRemoved {
            limit: name.clone(),
        });
    }

    let checks = Checks::new(&limits, extractors, document, origin);
    let policy = |name: &str| checks.policy(name, &document.policies[name]);
    let mut policies = BTreeMap::new();
    for name in document.policies.keys() {
        policies.insert(name.clone(), Arc::new(policy(name)?));
    }
    let layer = build::layer(document, origin, policy)?;
    if let Some(running) = running {
        changes.extend(what_else_changed(&running.config.document, document));
    }
    Ok(Planned {
        limits,
        policies,
        layer,
        changes,
    })
}

/// A quota change the algorithm's keys cannot follow, said of the running limit's
/// `spec` (the quota to keep is the running one's).
fn cannot_move(origin: &str, name: &str, spec: &LimitSpec) -> ConfigError {
    let which = match spec.store {
        Some(_) => "shared (Redis)".to_owned(),
        None => spec.algorithm.name().to_owned(),
    };
    ConfigError::new(
        origin,
        format!("limits.{name}.quota"),
        format!(
            "a running {which} limit cannot move its keys to a new quota (in-process \
             token_bucket, fixed_window and sliding_log can): keep its quota {}, or give \
             the limit a new name to start it afresh (dropping its keys' state)",
            spec.quota.text
        ),
    )
}

/// The changes to policies, routes and how client addresses are found.
fn what_else_changed(old: &Document, new: &Document) -> Vec<Change> {
    let mut changes = Vec::new();
    for (name, spec) in &new.policies {
        match old.policies.get(name) {
            None => changes.push(Change::PolicyAdded {
                policy: name.clone(),
            }),
            Some(old) if old != spec => changes.push(Change::PolicyChanged {
                policy: name.clone(),
            }),
            Some(_) => {}
        }
    }
    for name in old
        .policies
        .keys()
        .filter(|name| !new.policies.contains_key(*name))
    {
        changes.push(Change::PolicyRemoved {
            policy: name.clone(),
        });
    }
    if old.layer != new.layer {
        changes.push(Change::LayerChanged);
    }
    if old.client_address != new.client_address {
        changes.push(Change::ClientAddressChanged);
    }
    changes
}

/// What a reload changed: [`LiveLimits::reload`]'s answer, for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changes {
    version: u64,
    changes: Vec<Change>,
}

impl Changes {
    /// The version now running.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Each change, limits first (in name order), then policies, the layer and how
    /// client addresses are found.
    pub fn changes(&self) -> &[Change] {
        &self.changes
    }

    /// Whether the new configuration says what the old one did.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
}

/// `version N: ` and each change on a line of its own, or "no change".
impl fmt::Display for Changes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "version {}:", self.version)?;
        if self.changes.is_empty() {
            return write!(f, " no change");
        }
        for change in &self.changes {
            write!(f, "\n  {change}")?;
        }
        Ok(())
    }
}

/// One thing a reload changed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// A new limit, with a new limiter.
    LimitAdded {
        /// Its name.
        limit: String,
    },
    /// A limit gone; its limiter and every key's state are dropped once no request
    /// holds them.
    LimitRemoved {
        /// Its name.
        limit: String,
    },
    /// A limit's quota changed: same limiter, each key moves at its first request
    /// under the new configuration.
    QuotaChanged {
        /// Its name.
        limit: String,
        /// The quota before, as written.
        from: String,
        /// The quota now, as written.
        to: String,
    },
    /// A limit whose algorithm, key, store or memory settings changed: a new limiter,
    /// the old one's state dropped.
    LimitReplaced {
        /// Its name.
        limit: String,
        /// What changed.
        why: Replaced,
    },
    /// A new policy.
    PolicyAdded {
        /// Its name.
        policy: String,
    },
    /// A policy gone.
    PolicyRemoved {
        /// Its name.
        policy: String,
    },
    /// A policy's checks or mode changed.
    PolicyChanged {
        /// Its name.
        policy: String,
    },
    /// The layer's routes, fallback, statuses, delay or dry run changed.
    LayerChanged,
    /// How the client's address is found changed.
    ClientAddressChanged,
}

/// Why a limit was replaced by a new limiter ([`Change::LimitReplaced`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Replaced {
    /// Its algorithm changed.
    Algorithm,
    /// Where its key is found changed.
    Key,
    /// Its store changed (in process or Redis, the Redis URL or failure policy).
    Store,
    /// What it holds in process changed (`max_keys`, `overflow`, `eviction_margin`):
    /// a limiter's cap, overflow and margin are set when it is built.
    Memory,
}

impl fmt::Display for Replaced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Replaced::Algorithm => "its algorithm changed",
            Replaced::Key => "its key changed",
            Replaced::Store => "its store changed",
            Replaced::Memory => "its max_keys, overflow or eviction_margin changed",
        })
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::LimitAdded { limit } => write!(f, "limit {limit:?} added"),
            Change::LimitRemoved { limit } => {
                write!(f, "limit {limit:?} removed (its keys' state dropped)")
            }
            Change::QuotaChanged { limit, from, to } => write!(
                f,
                "limit {limit:?}: quota {from} -> {to} (each key moves at its next \
                 request, keeping what it has left, capped at the new quota)"
            ),
            Change::LimitReplaced { limit, why } => write!(
                f,
                "limit {limit:?} replaced: {why} (a new limiter; the old one's keys' \
                 state dropped)"
            ),
            Change::PolicyAdded { policy } => write!(f, "policy {policy:?} added"),
            Change::PolicyRemoved { policy } => write!(f, "policy {policy:?} removed"),
            Change::PolicyChanged { policy } => write!(f, "policy {policy:?} changed"),
            Change::LayerChanged => write!(f, "layer changed (routes, statuses, delay or dry run)"),
            Change::ClientAddressChanged => write!(f, "client_address changed"),
        }
    }
}
