//! Limits from a file, reloaded while running. Feature `config`.
//!
//! A file names limits (an algorithm, a quota written as `"100/min"`, where the key
//! is), policies (the checks a request must pass) and the HTTP layer's routes;
//! [`LiveLimits`] builds them, hands out a [`RateLimitLayer`](crate::http::RateLimitLayer)
//! and the policies by name, and [`reload`](LiveLimits::reload)s a new file into the
//! running ones without losing any key's state. The format, the rules of a reload and
//! a whole example: the guide's page
//! [Limits from a file](crate::guide::limits_from_a_file).
//!
//! ```
//! use turnstile::config::{Config, Extractors, LiveLimits};
//!
//! let config = Config::from_toml(r#"
//!     [limits.per-user]
//!     quota = "100/min"
//!     key = { header = "x-api-key" }
//!
//!     [policies.api]
//!     checks = ["per-user"]
//!
//!     [layer]
//!     fallback = "api"
//! "#, "limits.toml")?;
//! let limits = LiveLimits::new(config, Extractors::new())?;
//! let layer = limits.layer(); // put it in front of the service
//! # let _ = layer;
//! assert_eq!(limits.version(), 1);
//! # Ok::<(), turnstile::config::ConfigError>(())
//! ```

mod build;
mod error;
mod live;
mod names;
mod quota;
mod schema;

pub use build::Extractors;
pub use error::ConfigError;
pub use live::{Change, Changes, LiveLimits, PolicyHandle, Replaced};

use names::{Known, KnownNames, Registered};
use schema::{CostSpec, Document, KeySpec};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// The formats a configuration is read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// TOML, through the `toml` crate.
    Toml,
    /// YAML, through `serde_yaml_ng` (a maintained fork of the archived `serde_yaml`).
    Yaml,
    /// JSON, through `serde_json`.
    Json,
}

impl Format {
    /// The format a path's extension names, in any case: `.toml`, `.yaml` or `.yml`,
    /// `.json`.
    pub fn from_path(path: &Path) -> Option<Format> {
        let extension = path.extension()?.to_str()?;
        let is = |name: &str| extension.eq_ignore_ascii_case(name);
        if is("toml") {
            Some(Format::Toml)
        } else if is("yaml") || is("yml") {
            Some(Format::Yaml)
        } else if is("json") {
            Some(Format::Json)
        } else {
            None
        }
    }
}

/// A configuration, read and checked: every value valid, every name pointing
/// somewhere (the names of extractors the program registers are checked when the
/// limits are built from it, by [`LiveLimits`]). Building limiters from it is
/// [`LiveLimits`]'s work.
#[derive(Clone)]
pub struct Config {
    document: Document,
    /// The text, its format and its origin: read again to locate a name that the
    /// program's extractors do not know ([`names`]).
    source: Arc<Source>,
}

struct Source {
    text: String,
    format: Format,
    origin: String,
}

/// Two configurations are equal when they say the same, however written.
impl PartialEq for Config {
    fn eq(&self, other: &Self) -> bool {
        self.document == other.document
    }
}

/// Where it came from, and how many limits, policies and routes it has.
impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("origin", &self.source.origin)
            .field("format", &self.source.format)
            .field("limits", &self.document.limits.len())
            .field("policies", &self.document.policies.len())
            .field(
                "routes",
                &self.document.layer.as_ref().map(|layer| layer.routes.len()),
            )
            .finish()
    }
}

impl Config {
    /// Reads `text` in `format`; `origin` names it in errors (a file's path).
    ///
    /// # Errors
    /// Any mistake, with its line, column and field: syntax, an unknown field, a
    /// value of the wrong kind, a quota's text, a quota the limit's algorithm cannot
    /// hold (with the algorithm's own error), an unknown algorithm, a CIDR, a status,
    /// a route prefix, a name that points nowhere.
    pub fn parse(text: &str, format: Format, origin: &str) -> Result<Config, ConfigError> {
        let document = read(text, format, origin)?;
        let source = Source {
            text: text.to_owned(),
            format,
            origin: origin.to_owned(),
        };
        let config = Config {
            document,
            source: Arc::new(source),
        };
        config.resolve(None)?;
        says_what_it_limits(&config.document, origin)?;
        if let Err((policy, field, message)) = one_mode_per_limit(&config.document) {
            return Err(config.locate_refusal(policy, field, message));
        }
        Ok(config)
    }

    /// [`Config::parse`] of TOML.
    ///
    /// # Errors
    /// As [`Config::parse`].
    pub fn from_toml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        Self::parse(text, Format::Toml, origin)
    }

    /// [`Config::parse`] of YAML.
    ///
    /// # Errors
    /// As [`Config::parse`].
    pub fn from_yaml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        Self::parse(text, Format::Yaml, origin)
    }

    /// [`Config::parse`] of JSON.
    ///
    /// # Errors
    /// As [`Config::parse`].
    pub fn from_json(text: &str, origin: &str) -> Result<Config, ConfigError> {
        Self::parse(text, Format::Json, origin)
    }

    /// Reads the file at `path`, in the format its extension names.
    ///
    /// Only a regular file is read (after following symbolic links): a FIFO, a
    /// device or a directory is refused before it is opened, so a reload never
    /// blocks waiting for a writer, nor reads without end. A file larger than
    /// 16 MiB is refused too, before it is read.
    ///
    /// # Errors
    /// An unreadable file, one that is not a regular file or is larger than
    /// 16 MiB, an extension that names no format, and what
    /// [`Config::parse`] refuses.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        let format = Format::from_path(path).ok_or_else(|| {
            ConfigError::new(
                &origin,
                "",
                "unknown format: expected a file ending in .toml, .yaml, .yml or .json",
            )
        })?;
        let text =
            read_limits_file(path).map_err(|message| ConfigError::new(&origin, "", message))?;
        Self::parse(&text, format, &origin)
    }

    /// The policy `policy` refused with `message`, located by a second reading that
    /// refuses it where it is read (as [`names`] locates a name); said at `field`
    /// without a place should that reading not refuse it.
    fn locate_refusal(&self, policy: String, field: String, message: String) -> ConfigError {
        let document = &self.document;
        let known = KnownNames::new(
            document.limits.keys().cloned().collect(),
            document.policies.keys().cloned().collect(),
            None,
        )
        .refusing(policy, message.clone());
        let Source {
            text,
            format,
            origin,
        } = &*self.source;
        match known.while_known(|| read(text, *format, origin)) {
            Err(error) => error,
            Ok(_) => ConfigError::new(origin, field, message),
        }
    }

    /// Where it came from: the path, or the name given to [`Config::parse`].
    pub fn origin(&self) -> &str {
        &self.source.origin
    }

    /// Checks every name against what it points at (`registered`: the extractors and
    /// estimates the program registered, where known). A name that points nowhere is
    /// located by a second reading that knows every name ([`names`]).
    fn resolve(&self, registered: Option<Registered>) -> Result<(), ConfigError> {
        let document = &self.document;
        let known = KnownNames::new(
            document.limits.keys().cloned().collect(),
            document.policies.keys().cloned().collect(),
            registered,
        );
        if all_resolve(&known, document) {
            return Ok(());
        }
        let Source {
            text,
            format,
            origin,
        } = &*self.source;
        match known.while_known(|| read(text, *format, origin)) {
            Err(error) => Err(error),
            // Not reached: the same names fail the same way when read again. Said
            // without a place rather than not at all.
            Ok(_) => Err(ConfigError::new(
                origin,
                "",
                "a name points at nothing defined",
            )),
        }
    }
}

/// A configuration must say what it limits: at least one limit and one policy, or
/// `unlimited = true` and nothing else. An empty file (`""`, `{}`, an empty YAML
/// document) and a file cut short before its policies are then refused rather than
/// read as "limit nothing" — which, reloaded, would drop every key's state, so a
/// throttled key would start afresh once the whole file came back. (A file cut
/// short after its policies but before its `[layer]` is refused by the reload, which
/// keeps a running layer: [`LiveLimits::reload`].)
fn says_what_it_limits(document: &Document, origin: &str) -> Result<(), ConfigError> {
    let refuse = |field: &str, message: &str| Err(ConfigError::new(origin, field, message));
    if document.unlimited {
        if !document.limits.is_empty() || !document.policies.is_empty() {
            return refuse(
                "unlimited",
                "`unlimited = true` says the file limits nothing, but it defines limits \
                 or policies: remove them, or remove `unlimited`",
            );
        }
        if document.layer.is_some() {
            return refuse(
                "unlimited",
                "`unlimited = true` says the file limits nothing, but it has a [layer]: \
                 remove it (the layer then limits nothing), or remove `unlimited`",
            );
        }
        return Ok(());
    }
    if document.limits.is_empty() {
        return refuse(
            "limits",
            "no limit defined: a configuration must define at least one limit under \
             [limits] (an empty or cut-short file is refused, not read as \"limit \
             nothing\"); write `unlimited = true` alone to limit nothing on purpose",
        );
    }
    if document.policies.is_empty() {
        return refuse(
            "policies",
            "no policy defined: a configuration must define at least one policy under \
             [policies] (an empty or cut-short file is refused, not read as \"limit \
             nothing\")",
        );
    }
    Ok(())
}

/// A limit is enforced everywhere it is checked, or in dry run everywhere: a limit in
/// dry run in one policy (counted, never refusing) and enforced in another would have
/// its trial requests use up the enforced policy's allowance. A mistake names the
/// policy to refuse, the check's field, and what is wrong.
fn one_mode_per_limit(document: &Document) -> Result<(), (String, String, String)> {
    // A limit's first check: its mode and where it is.
    let mut first: std::collections::BTreeMap<&str, (bool, String)> = Default::default();
    for (policy_name, policy) in &document.policies {
        for (index, check) in policy.checks.iter().enumerate() {
            let dry_run = check.dry_run || policy.dry_run;
            let here = format!("policies.{policy_name}.checks[{index}]");
            match first.get(check.limit.0.as_str()) {
                None => {
                    first.insert(&check.limit.0, (dry_run, here));
                }
                Some((mode, there)) if *mode != dry_run => {
                    let (trial, enforced) = if dry_run {
                        (&here, there)
                    } else {
                        (there, &here)
                    };
                    let message = format!(
                        "limit {:?} is in dry run at {trial} and enforced at {enforced}: \
                         its trial requests would use up the enforced allowance; use one \
                         mode everywhere, or two limits",
                        check.limit.0
                    );
                    return Err((policy_name.clone(), here, message));
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// Whether every name in `document` points somewhere `known`.
fn all_resolve(known: &KnownNames, document: &Document) -> bool {
    let checks = || document.policies.values().flat_map(|policy| &policy.checks);
    let limits_resolve = checks().all(|check| known.check(Known::LIMIT, &check.limit.0).is_ok());
    let estimates_resolve = checks().all(|check| match &check.cost {
        CostSpec::Estimated(name) => known.check(Known::ESTIMATE, &name.0).is_ok(),
        CostSpec::Fixed(_) => true,
    });
    let policies_resolve = document.layer.iter().all(|layer| {
        let mut policies = layer.routes.iter().map(|route| &route.policy);
        known.check(Known::POLICY, &layer.fallback.0).is_ok()
            && policies.all(|policy| known.check(Known::POLICY, &policy.0).is_ok())
    });
    let extractors_resolve = document.limits.values().all(|limit| match &limit.key {
        KeySpec::Extractor(name) => known.check(Known::EXTRACTOR, &name.0).is_ok(),
        KeySpec::ClientAddress | KeySpec::Header(_) => true,
    });
    limits_resolve && policies_resolve && extractors_resolve && estimates_resolve
}

/// The largest file [`Config::load`] reads: 16 MiB. A limits file of thousands of
/// limits and routes is well under a megabyte; the cap keeps a wrong path (a log, a
/// disk image) from being read whole into memory, and parsed, on each reload.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The text of the limits file at `path`, or why it cannot be read: not a regular
/// file (checked before opening it, since opening a FIFO waits for a writer), over
/// 16 MiB, or what the system said.
fn read_limits_file(path: &Path) -> Result<String, String> {
    let cannot = |error: std::io::Error| format!("cannot read: {error}");
    // `metadata` follows symbolic links: a link to a regular file is read.
    let metadata = std::fs::metadata(path).map_err(cannot)?;
    if !metadata.is_file() {
        return Err(format!(
            "not a regular file ({}): a limits file must be one",
            file_kind(&metadata.file_type())
        ));
    }
    let too_large = |bytes: u64| {
        format!(
            "{bytes} bytes: larger than the {} a limits file may have",
            MAX_FILE_BYTES
        )
    };
    if metadata.len() > MAX_FILE_BYTES {
        return Err(too_large(metadata.len()));
    }
    // The file may have grown since: read one byte past the cap at most, so a file
    // written to while it is read is refused instead of read without end.
    let mut text = String::new();
    let file = std::fs::File::open(path).map_err(cannot)?;
    let read = std::io::Read::read_to_string(
        &mut std::io::Read::take(file, MAX_FILE_BYTES + 1),
        &mut text,
    )
    .map_err(cannot)?;
    if read as u64 > MAX_FILE_BYTES {
        return Err(too_large(read as u64));
    }
    Ok(text)
}

/// What a file that is not a regular file is, for the error.
fn file_kind(kind: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_char_device() || kind.is_block_device() {
            return "a device";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    if kind.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

/// Reads a document, each format through its own deserializer and
/// `serde_path_to_error` for the field.
fn read(text: &str, format: Format, origin: &str) -> Result<Document, ConfigError> {
    match format {
        Format::Toml => {
            let deserializer = toml::Deserializer::parse(text)
                .map_err(|error| toml_error(text, origin, String::new(), error))?;
            serde_path_to_error::deserialize(deserializer).map_err(|error| {
                let field = field_of(error.path());
                toml_error(text, origin, field, error.into_inner())
            })
        }
        Format::Json => {
            let mut deserializer = serde_json::Deserializer::from_str(text);
            let document =
                serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
                    let field = field_of(error.path());
                    json_error(origin, field, error.into_inner())
                })?;
            deserializer
                .end()
                .map_err(|error| json_error(origin, String::new(), error))?;
            Ok(document)
        }
        Format::Yaml => {
            let deserializer = serde_yaml_ng::Deserializer::from_str(text);
            serde_path_to_error::deserialize(deserializer).map_err(|error| {
                let field = field_of(error.path());
                yaml_error(origin, field, error.into_inner())
            })
        }
    }
}

/// The dotted path, empty for the root.
fn field_of(path: &serde_path_to_error::Path) -> String {
    let path = path.to_string();
    if path == "." { String::new() } else { path }
}

fn toml_error(text: &str, origin: &str, field: String, error: toml::de::Error) -> ConfigError {
    let located = ConfigError::new(origin, field, error.message().trim());
    match error.span() {
        Some(span) => located.at_offset(text, span.start),
        None => located,
    }
}

/// serde_json's message ends with " at line L column C": said once, by the error's
/// own place.
fn json_error(origin: &str, field: String, error: serde_json::Error) -> ConfigError {
    let message = strip_position(&error.to_string());
    let located = ConfigError::new(origin, field, message);
    if error.line() == 0 {
        located
    } else {
        located.at(error.line(), error.column())
    }
}

fn yaml_error(origin: &str, field: String, error: serde_yaml_ng::Error) -> ConfigError {
    let mut message = strip_position(&error.to_string());
    // serde_yaml_ng puts its own path in front ("limits.a: unknown field …"), the
    // field or the table around it: said once, as the field.
    if let Some((path, rest)) = message.split_once(": ")
        && !path.is_empty()
        && field.starts_with(path)
    {
        message = rest.to_owned();
    }
    let located = ConfigError::new(origin, field, message);
    match error.location() {
        Some(location) => located.at(location.line(), location.column()),
        None => located,
    }
}

/// `message` without a trailing " at line L column C".
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) if message[at..].contains(" column ") => message[..at].to_owned(),
        _ => message.to_owned(),
    }
}
