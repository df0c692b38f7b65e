//! The file's schema: what each table holds, read by serde. Every table refuses
//! fields it does not know, and every value is checked as it is read (a quota's
//! text, an algorithm's bounds, a CIDR, a status), so a mistake is reported at its
//! own line. Names that point elsewhere (a policy's limits, a route's policy) are
//! checked by [`super::names`] once the whole file is read.

use super::names::{Known, check_name, policy_refusal};
use super::quota::{DURATION_FORMS, QUOTA_FORMS, parse_duration, parse_quota};
use crate::Quota;
use crate::algorithm::RulesFromQuota;
use crate::http::{Cidr, ProxyHeader};
use http::{HeaderName, StatusCode};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// A whole file.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Document {
    /// Limiters by name: an algorithm, a quota, a key. (A name defined twice is
    /// refused in every format: TOML's parser does, JSON's and YAML's would keep one.)
    #[serde(default, deserialize_with = "unique_limits")]
    pub(crate) limits: BTreeMap<String, LimitSpec>,
    /// Policies by name: the checks a request must pass.
    #[serde(default, deserialize_with = "unique_policies")]
    pub(crate) policies: BTreeMap<String, PolicySpec>,
    /// The HTTP layer's route table.
    #[serde(default)]
    pub(crate) layer: Option<LayerSpec>,
    /// How the client's address is found.
    #[serde(default)]
    pub(crate) client_address: ClientAddressSpec,
    /// The file limits nothing, on purpose: it defines no limit, policy or layer.
    /// Without it such a file (an empty one, one cut short) is refused.
    #[serde(default)]
    pub(crate) unlimited: bool,
}

fn unique_limits<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, LimitSpec>, D::Error> {
    deserializer.deserialize_map(UniqueMap::new("limit"))
}

fn unique_policies<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, PolicySpec>, D::Error> {
    deserializer.deserialize_map(UniqueMap::new("policy"))
}

/// An entry of a [`UniqueMap`], read knowing its name: a policy a second reading was
/// told to refuse ([`policy_refusal`]) is refused here, at its own place.
struct Named<'a, V> {
    name: &'a str,
    what: &'static str,
    value: std::marker::PhantomData<fn() -> V>,
}

impl<'de, V: Deserialize<'de>> de::DeserializeSeed<'de> for Named<'_, V> {
    type Value = V;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<V, D::Error> {
        let value = V::deserialize(deserializer)?;
        match policy_refusal(self.name) {
            Some(message) if self.what == "policy" => Err(de::Error::custom(message)),
            _ => Ok(value),
        }
    }
}

/// A table of named entries that refuses a name defined twice.
struct UniqueMap<V> {
    what: &'static str,
    values: std::marker::PhantomData<fn() -> V>,
}

impl<V> UniqueMap<V> {
    fn new(what: &'static str) -> Self {
        Self {
            what,
            values: std::marker::PhantomData,
        }
    }
}

impl<'de, V: Deserialize<'de>> Visitor<'de> for UniqueMap<V> {
    type Value = BTreeMap<String, V>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a table of each {} by name", self.what)
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut values = BTreeMap::new();
        while let Some(name) = map.next_key::<String>()? {
            if values.contains_key(&name) {
                return Err(de::Error::custom(format!(
                    "{} {name:?} is defined twice",
                    self.what
                )));
            }
            let value = map.next_value_seed(Named {
                name: &name,
                what: self.what,
                value: std::marker::PhantomData,
            })?;
            values.insert(name, value);
        }
        Ok(values)
    }
}

/// One limiter.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(try_from = "RawLimit")]
pub(crate) struct LimitSpec {
    pub(crate) algorithm: AlgorithmName,
    pub(crate) quota: QuotaSpec,
    pub(crate) key: KeySpec,
    /// `None`: in process.
    pub(crate) store: Option<StoreSpec>,
    /// What an in-process limit holds (the builder's defaults when unset).
    pub(crate) memory: MemorySpec,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a limit: a table with its quota and key (and algorithm, store, max_keys, overflow, eviction_margin)"
)]
struct RawLimit {
    #[serde(default)]
    algorithm: AlgorithmName,
    quota: QuotaSpec,
    key: KeySpec,
    #[serde(default)]
    store: Option<StoreSpec>,
    #[serde(default)]
    max_keys: Option<MaxKeys>,
    #[serde(default)]
    overflow: Option<OverflowSpec>,
    #[serde(default)]
    eviction_margin: Option<DurationSpec>,
}

/// `max_keys` as written: a whole number of keys, at least 1. Read by its own
/// visitor, so 0, a negative number or a fraction is refused at `max_keys`'s line, in
/// words a file's author reads.
struct MaxKeys(usize);

/// What `max_keys` takes, for messages.
const MAX_KEYS_FORMS: &str = "a whole number of keys, at least 1";

impl<'de> Deserialize<'de> for MaxKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MaxKeysVisitor;

        impl Visitor<'_> for MaxKeysVisitor {
            type Value = MaxKeys;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(MAX_KEYS_FORMS)
            }

            fn visit_u64<E: de::Error>(self, keys: u64) -> Result<MaxKeys, E> {
                if keys == 0 {
                    return Err(E::custom(format!(
                        "max_keys is {MAX_KEYS_FORMS} (a limit that holds no key would \
                         answer every request by its overflow)"
                    )));
                }
                usize::try_from(keys)
                    .map(MaxKeys)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(keys), &self))
            }

            fn visit_i64<E: de::Error>(self, keys: i64) -> Result<MaxKeys, E> {
                match u64::try_from(keys) {
                    Ok(keys) => self.visit_u64(keys),
                    Err(_) => Err(E::invalid_value(de::Unexpected::Signed(keys), &self)),
                }
            }
        }

        deserializer.deserialize_u64(MaxKeysVisitor)
    }
}

/// What an in-process limit holds: at most `max_keys` keys, a new key at the cap
/// answered as `overflow` says ([`Builder::max_keys`](crate::Builder::max_keys)), and
/// how long a key that carries no information is kept
/// ([`Builder::eviction_margin`](crate::Builder::eviction_margin)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MemorySpec {
    pub(crate) max_keys: Option<(usize, OverflowSpec)>,
    pub(crate) eviction_margin: Option<Duration>,
}

/// What a new key gets at `max_keys`: `"deny"`, or a quota every such key shares
/// ([`Overflow`](crate::Overflow)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum OverflowSpec {
    /// Refused ([`Overflow::Deny`](crate::Overflow::Deny)).
    Deny,
    /// One allowance shared by every key that finds no room
    /// ([`Overflow::Shared`](crate::Overflow::Shared)).
    Shared(QuotaSpec),
}

/// What `overflow` takes, for messages.
const OVERFLOW_FORMS: &str = "\"deny\", or a quota that every new key over max_keys \
    shares, such as \"50/s\"";

impl<'de> Deserialize<'de> for OverflowSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OverflowVisitor;

        impl<'de> Visitor<'de> for OverflowVisitor {
            type Value = OverflowSpec;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(OVERFLOW_FORMS)
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<OverflowSpec, E> {
                // Trimmed as a quota's text is, so " deny " is not read as a quota
                // (whose error would say `"deny" is not a quota`).
                if text.trim() == "deny" {
                    return Ok(OverflowSpec::Deny);
                }
                let quota = parse_quota(text)
                    .map_err(|error| E::custom(format!("overflow is {OVERFLOW_FORMS}: {error}")))?;
                Ok(OverflowSpec::Shared(QuotaSpec {
                    quota,
                    text: format!("{text:?}"),
                }))
            }

            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<OverflowSpec, M::Error> {
                QuotaSpec::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(OverflowSpec::Shared)
            }
        }

        deserializer.deserialize_any(OverflowVisitor)
    }
}

/// Where a shared limit's state lives: `{ redis = "URL", failure = "closed" }`, and
/// for a token bucket optionally `lease = { lifetime = "1s", max = 32 }`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(
    deny_unknown_fields,
    expecting = "a table { redis = \"URL\", failure = \"closed\" or \"open\", lease = { lifetime, max } }"
)]
pub(crate) struct StoreSpec {
    /// The Redis server's URL.
    pub(crate) redis: String,
    /// What a check answers when Redis gives no decision.
    #[serde(default)]
    pub(crate) failure: FailureSpec,
    /// Tokens leased from Redis and spent in process
    /// ([`RedisLeasedTokenBucket`](crate::redis::lease::RedisLeasedTokenBucket)).
    #[serde(default)]
    pub(crate) lease: Option<LeaseSpec>,
}

/// `lease = {}`, `lease = { lifetime = "1s", max = 32 }`: a leased token bucket's
/// settings, each its builder's default when not given (a lifetime of 1 s; at most
/// 1/32 of the capacity held per key).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(
    deny_unknown_fields,
    expecting = "a table { lifetime = \"1s\", max = TOKENS }, each optional"
)]
pub(crate) struct LeaseSpec {
    /// How long a lease's tokens count after its fetch.
    #[serde(default)]
    pub(crate) lifetime: Option<DurationSpec>,
    /// The most tokens this process holds for one key.
    #[serde(default)]
    pub(crate) max: Option<u32>,
}

/// A lease's `max` in the file's own words, refused while the file is read rather
/// than by the lease's builder (whose error names its method, and comes only when the
/// limits are built): from 1 to the quota's capacity.
fn lease_max_fits(max: u32, capacity: u32) -> Result<(), String> {
    if max == 0 || max > capacity {
        return Err(format!(
            "store.lease.max must be at least 1 and at most the quota's capacity \
             ({capacity}), not {max}: a key's lease holds at most that many tokens"
        ));
    }
    Ok(())
}

/// A shared limit's failure policy.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FailureSpec {
    /// Deny while Redis gives no decision (the HTTP layer answers 503).
    #[default]
    Closed,
    /// Allow while Redis gives no decision.
    Open,
}

/// A quota no algorithm of this limit can hold is refused here, with the
/// algorithm's own error.
impl TryFrom<RawLimit> for LimitSpec {
    type Error = String;

    fn try_from(raw: RawLimit) -> Result<Self, String> {
        raw.algorithm.holds(&raw.quota.quota).map_err(|error| {
            format!(
                "{} cannot hold the quota {}: {error}",
                raw.algorithm.name(),
                raw.quota.text
            )
        })?;
        if let Some(store) = &raw.store {
            shared_store_allowed(raw.algorithm)?;
            if store.lease.is_some() && raw.algorithm != AlgorithmName::TokenBucket {
                return Err(format!(
                    "a leased limit (store = {{ lease = ... }}) is a token_bucket, not {}",
                    raw.algorithm.name()
                ));
            }
            if let Some(max) = store.lease.as_ref().and_then(|lease| lease.max) {
                lease_max_fits(max, raw.quota.quota.capacity())?;
            }
            #[cfg(feature = "redis")]
            if let Some(lifetime) = store.lease.as_ref().and_then(|lease| lease.lifetime)
                && !crate::redis::lease::lifetime_fits(lifetime.0)
            {
                return Err(format!(
                    "store.lease.lifetime: {}, not {:?}",
                    crate::redis::lease::LIFETIME_BOUNDS,
                    lifetime.0
                ));
            }
        }
        // Refused as written, a default written out included: a shared limit takes
        // none of them.
        let memory_written =
            raw.max_keys.is_some() || raw.overflow.is_some() || raw.eviction_margin.is_some();
        if raw.store.is_some() && memory_written {
            return Err(
                "max_keys, overflow and eviction_margin are an in-process limit's: a \
                 shared limit's keys live in Redis, which expires them"
                    .into(),
            );
        }
        let memory = memory(
            raw.algorithm,
            raw.max_keys,
            raw.overflow,
            raw.eviction_margin,
        )?;
        Ok(Self {
            algorithm: raw.algorithm,
            quota: raw.quota,
            key: raw.key,
            store: raw.store,
            memory,
        })
    }
}

/// The memory settings as written, checked and said one way: `overflow` only beside a
/// `max_keys` (`"deny"` when not given), an overflow quota that `algorithm` can hold,
/// the default margin as none.
fn memory(
    algorithm: AlgorithmName,
    max_keys: Option<MaxKeys>,
    overflow: Option<OverflowSpec>,
    eviction_margin: Option<DurationSpec>,
) -> Result<MemorySpec, String> {
    let max_keys = match (max_keys, overflow) {
        (None, None) => None,
        (None, Some(_)) => {
            return Err("overflow says what a new key gets at max_keys: set max_keys too".into());
        }
        (Some(MaxKeys(keys)), overflow) => Some((keys, overflow.unwrap_or(OverflowSpec::Deny))),
    };
    if let Some((_, OverflowSpec::Shared(quota))) = &max_keys {
        algorithm.holds(&quota.quota).map_err(|error| {
            format!(
                "{} cannot hold the overflow quota {}: {error}",
                algorithm.name(),
                quota.text
            )
        })?;
    }
    // The builder's default margin written out is no margin written: the same
    // limiter, so a reload that adds or removes it keeps every key's state.
    let default_margin = crate::evict::EvictionSettings::default().margin;
    Ok(MemorySpec {
        max_keys,
        eviction_margin: eviction_margin
            .map(|margin| margin.0)
            .filter(|margin| *margin != default_margin),
    })
}

/// Whether a limit of `algorithm` can live in Redis: the token bucket and the fixed
/// window have scripts, with the `redis` feature.
fn shared_store_allowed(algorithm: AlgorithmName) -> Result<(), String> {
    if cfg!(not(feature = "redis")) {
        return Err(
            "a shared limit (store = { redis = ... }) needs turnstile's `redis` feature".into(),
        );
    }
    match algorithm {
        AlgorithmName::TokenBucket | AlgorithmName::FixedWindow => Ok(()),
        other => Err(format!(
            "a shared limit (store = {{ redis = ... }}) is a token_bucket or a fixed_window, not {}",
            other.name()
        )),
    }
}

/// The algorithms, by the names the file uses.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AlgorithmName {
    /// [`TokenBucket`](crate::TokenBucket).
    #[default]
    TokenBucket,
    /// [`Gcra`](crate::Gcra).
    Gcra,
    /// [`FixedWindow`](crate::FixedWindow).
    FixedWindow,
    /// [`SlidingWindowCounter`](crate::SlidingWindowCounter).
    SlidingWindow,
    /// [`SlidingLog`](crate::SlidingLog).
    SlidingLog,
}

impl AlgorithmName {
    /// The name the file uses.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::TokenBucket => "token_bucket",
            Self::Gcra => "gcra",
            Self::FixedWindow => "fixed_window",
            Self::SlidingWindow => "sliding_window",
            Self::SlidingLog => "sliding_log",
        }
    }

    /// Whether the algorithm's state can hold `quota`: its own constructor's answer.
    fn holds(self, quota: &Quota) -> Result<(), crate::QuotaError> {
        match self {
            Self::Gcra => crate::gcra::GcraRules::from_quota(quota).map(drop),
            Self::SlidingWindow => {
                crate::sliding_window::SlidingWindowRules::from_quota(quota).map(drop)
            }
            // The other three hold every quota.
            Self::TokenBucket | Self::FixedWindow | Self::SlidingLog => Ok(()),
        }
    }
}

/// A quota, and the text it was written as (for messages).
#[derive(Clone, Debug)]
pub(crate) struct QuotaSpec {
    pub(crate) quota: Quota,
    pub(crate) text: String,
}

/// Two quotas are the same when they are: the text does not matter.
impl PartialEq for QuotaSpec {
    fn eq(&self, other: &Self) -> bool {
        self.quota == other.quota
    }
}

impl Eq for QuotaSpec {}

/// `{ capacity = 50, refill_every = "100ms" }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotaTable {
    capacity: u32,
    refill_every: DurationSpec,
}

impl<'de> Deserialize<'de> for QuotaSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct QuotaVisitor;

        impl<'de> Visitor<'de> for QuotaVisitor {
            type Value = QuotaSpec;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(QUOTA_FORMS)
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<QuotaSpec, E> {
                let quota = parse_quota(text).map_err(E::custom)?;
                Ok(QuotaSpec {
                    quota,
                    text: format!("{text:?}"),
                })
            }

            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<QuotaSpec, M::Error> {
                let table = QuotaTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let quota =
                    Quota::new(table.capacity, table.refill_every.0).map_err(de::Error::custom)?;
                Ok(QuotaSpec {
                    quota,
                    text: format!(
                        "{{ capacity = {}, refill_every = {:?} }}",
                        table.capacity, table.refill_every.0
                    ),
                })
            }
        }

        deserializer.deserialize_any(QuotaVisitor)
    }
}

/// A duration written as `"250ms"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DurationSpec(pub(crate) Duration);

/// Read through a visitor whose `expecting` names the forms, so a value of the wrong
/// kind says what a duration looks like while serde's own errors (a missing field)
/// pass through as they are.
impl<'de> Deserialize<'de> for DurationSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;

        impl Visitor<'_> for DurationVisitor {
            type Value = DurationSpec;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(DURATION_FORMS)
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<DurationSpec, E> {
                parse_duration(text).map(DurationSpec).map_err(E::custom)
            }
        }

        deserializer.deserialize_str(DurationVisitor)
    }
}

/// Where a limit finds its key in a request: `"client_address"`, `{ header = "NAME" }`
/// or `{ extractor = "NAME" }` (read by hand rather than as a serde enum: YAML's
/// serde crates want a tag for an enum's variant, not a one-key map).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeySpec {
    /// The client's address (`client_address` says how it is found).
    ClientAddress,
    /// A header's value.
    Header(HeaderSpec),
    /// An extractor the program registered under this name.
    Extractor(Name<{ Known::EXTRACTOR }>),
}

/// `{ header = "NAME" }` or `{ extractor = "NAME" }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyTable {
    header: Option<HeaderSpec>,
    extractor: Option<Name<{ Known::EXTRACTOR }>>,
}

const KEY_FORMS: &str =
    "\"client_address\", a table { header = \"NAME\" } or a table { extractor = \"NAME\" }";

impl<'de> Deserialize<'de> for KeySpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;

        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = KeySpec;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(KEY_FORMS)
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<KeySpec, E> {
                match text {
                    "client_address" => Ok(KeySpec::ClientAddress),
                    _ => Err(E::custom(format!("{text:?}: expected {KEY_FORMS}"))),
                }
            }

            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<KeySpec, M::Error> {
                let table = KeyTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                match (table.header, table.extractor) {
                    (Some(header), None) => Ok(KeySpec::Header(header)),
                    (None, Some(extractor)) => Ok(KeySpec::Extractor(extractor)),
                    _ => Err(de::Error::custom(format!("expected {KEY_FORMS}"))),
                }
            }
        }

        deserializer.deserialize_any(KeyVisitor)
    }
}

/// A header name, checked as HTTP's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HeaderSpec(pub(crate) HeaderName);

impl<'de> Deserialize<'de> for HeaderSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        HeaderName::from_bytes(text.as_bytes())
            .map(HeaderSpec)
            .map_err(|_| de::Error::custom(format!("{text:?} is not a valid header name")))
    }
}

/// A name that points at another table (`KIND`: [`Known`]'s constants), checked
/// against that table's names once the whole file is read ([`super::names`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Name<const KIND: u8>(pub(crate) String);

impl<'de, const KIND: u8> Deserialize<'de> for Name<KIND> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        check_name(KIND, &name).map_err(de::Error::custom)?;
        Ok(Name(name))
    }
}

/// A policy: its checks, in the order they are asked.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct PolicySpec {
    pub(crate) checks: Vec<CheckSpec>,
    /// Every check of the policy in dry run.
    #[serde(default)]
    pub(crate) dry_run: bool,
}

/// One check: a limit's name, or a table with the limit and its settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CheckSpec {
    pub(crate) limit: Name<{ Known::LIMIT }>,
    /// The cost, or for a settled check the estimate taken at admission.
    pub(crate) cost: CostSpec,
    pub(crate) dry_run: bool,
    pub(crate) missing_key: MissingKeySpec,
    /// Settled at the cost the response reports (the layer's `settle_from`, or
    /// `Policy::settle` for a policy asked by name).
    pub(crate) settled: bool,
}

/// `{ limit = "per-ip", cost = 2, dry_run = true, missing_key = "skip", settled = true }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckTable {
    limit: Name<{ Known::LIMIT }>,
    #[serde(default)]
    cost: CostSpec,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    missing_key: MissingKeySpec,
    #[serde(default)]
    settled: bool,
}

/// A check's cost (a settled check's estimate): a number, at least 1 (a check of cost
/// 0 would admit everything and count nothing; leave the check out instead. A settled
/// check that counts only some responses, failed logins say, takes an estimate of 1
/// and is settled at 1 or 0: see `crate::policy`'s "reserve, then settle"), or
/// `{ estimate = "NAME" }`, made from each request by an estimate the program
/// registered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CostSpec {
    Fixed(u32),
    Estimated(Name<{ Known::ESTIMATE }>),
}

impl Default for CostSpec {
    fn default() -> Self {
        CostSpec::Fixed(1)
    }
}

/// `{ estimate = "NAME" }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EstimateTable {
    estimate: Name<{ Known::ESTIMATE }>,
}

impl<'de> Deserialize<'de> for CostSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CostVisitor;

        impl<'de> Visitor<'de> for CostVisitor {
            type Value = CostSpec;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a cost: a whole number, at least 1, or { estimate = \"NAME\" } for an \
                     estimate the program registered",
                )
            }

            fn visit_u64<E: de::Error>(self, cost: u64) -> Result<CostSpec, E> {
                match u32::try_from(cost) {
                    Ok(0) => Err(E::custom(
                        "a check's cost must be at least 1 (a cost of 0 counts nothing: \
                         leave the check out, or make it dry_run)",
                    )),
                    Ok(cost) => Ok(CostSpec::Fixed(cost)),
                    Err(_) => Err(E::custom(format!(
                        "a check's cost must be at most {} (u32::MAX), not {cost}",
                        u32::MAX
                    ))),
                }
            }

            fn visit_i64<E: de::Error>(self, cost: i64) -> Result<CostSpec, E> {
                match u64::try_from(cost) {
                    Ok(cost) => self.visit_u64(cost),
                    Err(_) => Err(E::custom(format!(
                        "a check's cost must be at least 1, not {cost}"
                    ))),
                }
            }

            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<CostSpec, M::Error> {
                let table = EstimateTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(CostSpec::Estimated(table.estimate))
            }
        }

        deserializer.deserialize_any(CostVisitor)
    }
}

impl<'de> Deserialize<'de> for CheckSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CheckVisitor;

        impl<'de> Visitor<'de> for CheckVisitor {
            type Value = CheckSpec;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a limit's name, or a table { limit = \"NAME\", cost, dry_run, missing_key, \
                     settled }",
                )
            }

            fn visit_str<E: de::Error>(self, name: &str) -> Result<CheckSpec, E> {
                check_name(Known::LIMIT, name).map_err(E::custom)?;
                Ok(CheckSpec {
                    limit: Name(name.to_owned()),
                    cost: CostSpec::Fixed(1),
                    dry_run: false,
                    missing_key: MissingKeySpec::Reject,
                    settled: false,
                })
            }

            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<CheckSpec, M::Error> {
                let table = CheckTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(CheckSpec {
                    limit: table.limit,
                    cost: table.cost,
                    dry_run: table.dry_run,
                    missing_key: table.missing_key,
                    settled: table.settled,
                })
            }
        }

        deserializer.deserialize_any(CheckVisitor)
    }
}

/// What a check does with a request that has no key.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum MissingKeySpec {
    /// Refuse it ([`MissingKey::Reject`](crate::policy::MissingKey::Reject)).
    #[default]
    Reject,
    /// Skip the check ([`MissingKey::Skip`](crate::policy::MissingKey::Skip)).
    Skip,
}

/// The HTTP layer.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct LayerSpec {
    /// The policy for requests that match no route.
    pub(crate) fallback: Name<{ Known::POLICY }>,
    /// Tried in order; the first whose prefix matches applies. A prefix given twice
    /// is refused (the second could never apply).
    #[serde(default, deserialize_with = "unique_prefixes")]
    pub(crate) routes: Vec<RouteSpec>,
    #[serde(default)]
    pub(crate) statuses: StatusesSpec,
    /// Delay mode: a denied request waits up to this long.
    #[serde(default)]
    pub(crate) delay: Option<DurationSpec>,
    /// Every route in dry run.
    #[serde(default)]
    pub(crate) dry_run: bool,
    /// Where each response reports its request's actual cost, for the settled
    /// checks of its route's policy.
    #[serde(default)]
    pub(crate) settle_from: Option<SettleFromSpec>,
}

/// `settle_from = { header = "x-tokens-used" }`: the response header that reports a
/// request's actual cost (ASCII digits; anything else, or the header absent or
/// repeated, leaves the request at its estimate: [`crate::http::cost_in_header`]).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(
    deny_unknown_fields,
    expecting = "a table { header = \"NAME\" }: the response header that reports the cost"
)]
pub(crate) struct SettleFromSpec {
    pub(crate) header: HeaderSpec,
}

fn unique_prefixes<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<RouteSpec>, D::Error> {
    let routes = Vec::<RouteSpec>::deserialize(deserializer)?;
    for (index, route) in routes.iter().enumerate() {
        if let Some(first) = routes[..index]
            .iter()
            .position(|earlier| earlier.prefix == route.prefix)
        {
            return Err(de::Error::custom(format!(
                "routes[{index}]: the prefix {:?} is routes[{first}]'s already (the first \
                 match applies, so this route could never apply)",
                route.prefix.0
            )));
        }
    }
    Ok(routes)
}

/// One route.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(
    deny_unknown_fields,
    expecting = "a route { prefix = \"/PATH\", policy = \"NAME\" }"
)]
pub(crate) struct RouteSpec {
    pub(crate) prefix: PrefixSpec,
    pub(crate) policy: Name<{ Known::POLICY }>,
}

/// A path prefix, which must start with `/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PrefixSpec(pub(crate) String);

impl<'de> Deserialize<'de> for PrefixSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let prefix = String::deserialize(deserializer)?;
        if prefix.starts_with('/') {
            Ok(PrefixSpec(prefix))
        } else {
            Err(de::Error::custom(format!(
                "route prefix {prefix:?} must start with '/'"
            )))
        }
    }
}

/// The statuses of refused requests.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(
    deny_unknown_fields,
    expecting = "a table of statuses { missing_key, exceeds_capacity, unavailable }"
)]
pub(crate) struct StatusesSpec {
    #[serde(default = "bad_request")]
    pub(crate) missing_key: ErrorStatus,
    #[serde(default = "too_many_requests")]
    pub(crate) exceeds_capacity: ErrorStatus,
    #[serde(default = "service_unavailable")]
    pub(crate) unavailable: ErrorStatus,
}

impl Default for StatusesSpec {
    fn default() -> Self {
        Self {
            missing_key: bad_request(),
            exceeds_capacity: too_many_requests(),
            unavailable: service_unavailable(),
        }
    }
}

fn bad_request() -> ErrorStatus {
    ErrorStatus(StatusCode::BAD_REQUEST)
}

fn too_many_requests() -> ErrorStatus {
    ErrorStatus(StatusCode::TOO_MANY_REQUESTS)
}

fn service_unavailable() -> ErrorStatus {
    ErrorStatus(StatusCode::SERVICE_UNAVAILABLE)
}

/// A 4xx or 5xx status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ErrorStatus(pub(crate) StatusCode);

impl<'de> Deserialize<'de> for ErrorStatus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let code = u16::deserialize(deserializer)?;
        match StatusCode::from_u16(code) {
            Ok(status) if status.is_client_error() || status.is_server_error() => {
                Ok(ErrorStatus(status))
            }
            _ => Err(de::Error::custom(format!(
                "status {code} for refused requests must be a 4xx or 5xx error"
            ))),
        }
    }
}

/// How the client's address is found: the peer's, or behind trusted proxies the one
/// they append to a header ([`RealIp`](crate::http::RealIp)).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(
    deny_unknown_fields,
    expecting = "a table { trusted_proxies, header, ipv6_prefix }"
)]
pub(crate) struct ClientAddressSpec {
    /// The proxies whose header is believed; none: the peer is the client.
    #[serde(default)]
    pub(crate) trusted_proxies: Vec<CidrSpec>,
    /// The header they append to.
    #[serde(default)]
    pub(crate) header: ProxyHeaderSpec,
    /// IPv6 clients are keyed by this prefix.
    #[serde(default)]
    pub(crate) ipv6_prefix: Ipv6Prefix,
}

impl Default for ClientAddressSpec {
    fn default() -> Self {
        Self {
            trusted_proxies: Vec::new(),
            header: ProxyHeaderSpec::XForwardedFor,
            ipv6_prefix: Ipv6Prefix::default(),
        }
    }
}

/// How many leading bits of an IPv6 address key its client: 1 to 128, 64 by default
/// (a /0 would make every IPv6 client one key; more than 128 bits do not exist).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ipv6Prefix(pub(crate) u8);

impl Default for Ipv6Prefix {
    fn default() -> Self {
        Ipv6Prefix(64)
    }
}

impl<'de> Deserialize<'de> for Ipv6Prefix {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let bits = u32::deserialize(deserializer)?;
        match u8::try_from(bits) {
            Ok(bits @ 1..=128) => Ok(Ipv6Prefix(bits)),
            _ => Err(de::Error::custom(format!(
                "ipv6_prefix {bits} is not a prefix length from 1 to 128 (64 keys each \
                 /64 network, 128 each address)"
            ))),
        }
    }
}

/// A network in CIDR notation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CidrSpec(pub(crate) Cidr);

impl<'de> Deserialize<'de> for CidrSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse::<Cidr>()
            .map(CidrSpec)
            .map_err(|error| de::Error::custom(format!("{text:?} is not a CIDR range: {error}")))
    }
}

/// The header trusted proxies append the client's address to.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ProxyHeaderSpec {
    /// `X-Forwarded-For`.
    #[default]
    XForwardedFor,
    /// `Forwarded` (RFC 7239).
    Forwarded,
}

impl From<ProxyHeaderSpec> for ProxyHeader {
    fn from(header: ProxyHeaderSpec) -> Self {
        match header {
            ProxyHeaderSpec::XForwardedFor => ProxyHeader::XForwardedFor,
            ProxyHeaderSpec::Forwarded => ProxyHeader::Forwarded,
        }
    }
}
