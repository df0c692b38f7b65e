//! LLM-token budgets with reserve and settle: so many tokens a minute per user, when
//! what a call costs is known only once the model has answered.
//!
//! # The problem
//! A chat endpoint's cost is the tokens the model reads and writes. The prompt's share
//! can be guessed from its length before the call; the answer's is known only after
//! it. A limiter that takes a fixed cost per request limits requests, not tokens, and
//! one that takes the tokens afterwards admits a user who has none left. The gateways
//! that meter model calls reserve an estimate when the request is admitted and
//! reconcile it with the actual use afterwards; so does turnstile:
//!
//! 1. **Reserve**: the request takes an *estimate* of its tokens, an ordinary
//!    `acquire`. A user with fewer tokens left than the estimate is refused with the
//!    exact wait, as for any cost.
//! 2. **Settle**: once the model has answered, the request is settled at what it
//!    actually used ([`RateLimiter::settle`](crate::RateLimiter::settle)). Used less:
//!    the difference goes back. Used more: the difference is charged, even beyond what
//!    the user has left — the user then *owes* tokens, is refused (every request, even
//!    one estimated at 0) until refill has repaid the debt, and the refusal's
//!    `retry_after` counts the debt exactly.
//!
//! A request never settled (the client went away, the handler failed) stays at its
//! estimate. Debt is capped at one capacity (fixed, not configurable) so that one
//! enormous call cannot lock a user out for hours, and what the cap turned away is
//! reported in [`Settlement::forgiven`](crate::Settlement::forgiven), never dropped
//! silently.
//!
//! **For refunds on settle, use the token bucket or GCRA**: their tokens are
//! fungible, so what a call did not use goes back. The fixed window, the sliding
//! window counter and the sliding log give nothing back on settle (`refunded: 0`):
//! their state cannot tell which window counted the estimate, and giving it to a
//! later window would admit more than the limit there. With them, an upper-bound
//! estimate is charged in full.
//!
//! # A policy: tokens a minute, settled, beside requests a second
//! A [`Check`](crate::policy::Check) estimates from the request with
//! [`cost_with`](crate::policy::Check::cost_with) and is marked
//! [`settled`](crate::policy::Check::settled); [`Policy::settle`] then settles each
//! such check at its own estimate. A check beside it that is not settled — requests a
//! second — keeps its cost of 1 whatever the tokens. See
//! [reserve, then settle](crate::policy#reserve-then-settle) for the exact rules.
//!
//! ```rust
//! use std::sync::Arc;
//! use turnstile::policy::{Check, Policy};
//! use turnstile::{ManualClock, Quota, TokenBucket};
//!
//! struct Chat { user: String, prompt: String, max_answer_tokens: u32 }
//!
//! /// About four bytes a token for English text, plus the most the answer may use:
//! /// an upper bound, so most calls give some back.
//! fn estimate(chat: &Chat) -> u32 {
//!     let prompt = u32::try_from(chat.prompt.len() / 4).unwrap_or(u32::MAX);
//!     prompt.saturating_add(chat.max_answer_tokens)
//! }
//!
//! let clock = ManualClock::new(); // a service uses the default clock
//! // 10,000 tokens a minute per user: one token back every 6 ms.
//! let per_minute = Quota::per_minute(10_000)?;
//! let tokens = Arc::new(TokenBucket::<String, _>::with_clock(per_minute, clock.clone())?);
//! let calls = Arc::new(TokenBucket::<String, _>::with_clock(Quota::per_second(2)?, clock.clone())?);
//! let policy: Policy<Chat> = Policy::builder()
//!     .check(
//!         Check::from_limiter("tokens", tokens.clone(), |c: &Chat| Some(c.user.clone()))
//!             .cost_with(estimate)
//!             .settled(),
//!     )
//!     .check(Check::from_limiter("calls", calls, |c: &Chat| Some(c.user.clone())))
//!     .build()?;
//!
//! let chat = Chat { user: "alice".into(), prompt: "x".repeat(4_000), max_answer_tokens: 1_000 };
//! let verdict = policy.acquire(&chat); // reserves 2,000 tokens
//! assert!(verdict.is_allowed());
//! assert_eq!(tokens.peek("alice"), 8_000);
//!
//! // The model read 1,000 tokens and wrote 400: 600 of the estimate go back.
//! let settlement = policy.settle(&chat, &verdict, 1_400);
//! assert_eq!(settlement.refunded, 600);
//! assert_eq!(tokens.peek("alice"), 8_600);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Estimating: high or low
//! The estimate decides who waits, and how much a call can cost beyond it: the
//! settlement charges the actual cost, but a user's debt is capped at one capacity, and
//! what a call used past its estimate plus that cap is forgiven, reported in
//! [`Settlement::forgiven`](crate::Settlement::forgiven) and charged to nobody.
//!
//! - **An upper bound** (the prompt plus the answer's `max_tokens`): the actual can
//!   never pass the estimate, so nothing is ever forgiven and a user never owes — **the
//!   recipe for a hard budget**: reserve the model request's own `max_tokens` (plus
//!   the prompt), and the user gets no more than the quota over time. The cost: while a
//!   call runs its whole bound is held, so a user with several calls in flight is
//!   refused earlier than their actual use would warrant.
//! - **A guess** (the prompt alone, or the user's average): more calls start, and a call
//!   that used more than its guess puts the user in debt, which the next request's wait
//!   counts. That holds the quota only while a call's excess stays within one capacity:
//!   debt is capped at one capacity and the rest is forgiven. Against 1,000 tokens a
//!   minute, a call guessed at 300 that used 50,000 is charged 1,700 (the 700 left and
//!   1,000 of debt), and 48,000 are forgiven. So a guess bounds what a user gets over
//!   time only by the quota plus what is forgiven: watch `forgiven` (log it, or count
//!   it in a metric) — a user whose calls are forgiven often is outrunning the guess.
//! - **An estimate of 0** holds nothing while a call runs, and still refuses a user in
//!   debt: a request is allowed iff what the user has covers its cost, and a user who
//!   owes has less than nothing. So calls start freely until one puts the user in
//!   debt, and then every call, even one estimated at 0, waits until refill has
//!   repaid it. Like a guess, it forgives what a call uses past one capacity.
//!
//! ```rust
//! use std::sync::Arc;
//! use std::time::Duration;
//! use turnstile::policy::{Check, Outcome, Policy};
//! use turnstile::{ManualClock, Quota, Settlement, TokenBucket};
//!
//! struct Chat { user: u64, prompt_tokens: u32 }
//!
//! let clock = ManualClock::new();
//! let per_minute = Quota::per_minute(1_000)?; // a token back every 60 ms
//! let tokens = Arc::new(TokenBucket::<u64, _>::with_clock(per_minute, clock.clone())?);
//! let policy: Policy<Chat> = Policy::builder()
//!     .check(
//!         Check::from_limiter("tokens", tokens.clone(), |c: &Chat| Some(c.user))
//!             .cost_with(|c: &Chat| c.prompt_tokens) // the prompt alone: a guess
//!             .settled(),
//!     )
//!     .build()?;
//!
//! let chat = Chat { user: 7, prompt_tokens: 300 };
//! let verdict = policy.acquire(&chat);
//! assert!(verdict.is_allowed());
//! // The answer was long: 1,500 used in all, 1,200 more than the guess. The user had
//! // 700 left, so now owes 500.
//! assert_eq!(policy.settle(&chat, &verdict, 1_500).charged, 1_200);
//! assert_eq!(tokens.peek(&7), 0);
//!
//! // The next call (guessed at 300) waits until the debt and its own 300 have
//! // refilled: 800 tokens of 60 ms.
//! let next = policy.acquire(&chat);
//! assert_eq!(next.outcome(), Outcome::Denied { retry_after: Duration::from_millis(800 * 60) });
//!
//! // Another user's call, guessed at 300, used 50,000: 1,700 are charged (the 700
//! // left and a debt of one capacity), and the other 48,000 are forgiven.
//! let huge = Chat { user: 8, prompt_tokens: 300 };
//! let verdict = policy.acquire(&huge);
//! let settlement = policy.settle(&huge, &verdict, 50_000);
//! assert_eq!(settlement, Settlement { refunded: 0, charged: 1_700, forgiven: 48_000 });
//! if settlement.forgiven > 0 {
//!     // Log it or count it: this user's calls outrun their estimates.
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # In the handler, or in the HTTP layer
//! **In the handler** is the general form: the handler reads the body (the prompt),
//! asks the policy, calls the model, and settles with the verdict it got. It is also
//! the form for **streaming answers** (server-sent events): the tokens used are known
//! when the stream ends, so the handler settles then — a stream the client abandons
//! half-way stays at its estimate unless the handler settles what was sent.
//!
//! **In the tower layer** (feature `tower`) the policy sees only the request head —
//! the estimate comes from a header or the `Content-Length`, not from the prompt —
//! and the layer settles from the response head:
//! [`RateLimitLayerBuilder::settle_from`](crate::http::RateLimitLayerBuilder::settle_from)
//! reads the actual cost, here from a header the handler sets with
//! [`cost_in_header`](crate::http::cost_in_header). The cost is read when the head
//! arrives, before the response is returned, so the client's next request sees the
//! charge; a body still streaming does not delay it (and cannot change it). See
//! [charging from the response](crate::http#charging-from-the-response).
//!
//! ```rust
//! # #[cfg(feature = "tower")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use http::header::CONTENT_LENGTH;
//! use http::request::Parts;
//! use http::HeaderName;
//! use std::sync::Arc;
//! use turnstile::http::{HeaderKey, RateLimitLayer, cost_in_header};
//! use turnstile::policy::{Check, Policy};
//! use turnstile::{Quota, TokenBucket};
//!
//! const API_KEY: HeaderName = HeaderName::from_static("x-api-key");
//! const TOKENS_USED: HeaderName = HeaderName::from_static("x-tokens-used");
//!
//! /// The tokens quota's capacity: the most one request may be estimated at.
//! const CAPACITY: u32 = 10_000;
//!
//! /// A quarter of the body's declared length: a guess at the prompt's tokens, at
//! /// most the capacity (so a long prompt waits rather than being refused as
//! /// exceeding it). No length — a chunked body — or one that is not a number
//! /// assumes the worst, the capacity: a client must not start a call for free by
//! /// leaving the length out, or by declaring more than a `u32` holds.
//! fn from_length(request: &Parts) -> u32 {
//!     let length = request.headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok());
//!     match length.map(|v| v.trim().parse::<u64>()) {
//!         Some(Ok(bytes)) => u32::try_from(bytes / 4).unwrap_or(u32::MAX).min(CAPACITY),
//!         None | Some(Err(_)) => CAPACITY,
//!     }
//! }
//!
//! let head = |length: Option<&str>| {
//!     let mut request = http::Request::builder();
//!     if let Some(length) = length {
//!         request = request.header(CONTENT_LENGTH, length);
//!     }
//!     request.body(()).unwrap().into_parts().0
//! };
//! assert_eq!(from_length(&head(Some("4000"))), 1_000);
//! assert_eq!(from_length(&head(Some("99999999999"))), CAPACITY, "oversized");
//! assert_eq!(from_length(&head(None)), CAPACITY, "chunked: no length");
//! assert_eq!(from_length(&head(Some("lots"))), CAPACITY, "not a number");
//!
//! let tokens = Arc::new(TokenBucket::<String>::new(Quota::per_minute(CAPACITY)?)?);
//! let chat = Policy::builder()
//!     .check(
//!         Check::from_limiter("tokens", tokens, HeaderKey::new(API_KEY))
//!             .cost_with(from_length)
//!             .settled(),
//!     )
//!     .build()?;
//! let layer = RateLimitLayer::builder(Policy::unlimited())
//!     .prefix("/v1/chat", chat)
//!     // The handler answers with `x-tokens-used: N`.
//!     .settle_from(|response| cost_in_header(response, &TOKENS_USED))
//!     .build()?;
//! # let _ = layer;
//! # Ok(()) }
//! # #[cfg(not(feature = "tower"))]
//! # fn main() {}
//! ```
//!
//! An estimate above the key's capacity can never be admitted: the request is refused
//! as exceeding capacity (429 without `Retry-After`), so `from_length` clamps an
//! estimate from an untrusted length to the capacity, where such requests wait instead.
//!
//! The example server (`examples/http_server.rs`) has such a route, `/chat`, whose
//! handler reports the tokens it used; `results/http.md` shows a response reporting
//! 500 tokens driving a key into debt, and the next request's `Retry-After`.
//!
//! # Shared across servers
//! A check on Redis ([`Check::shared`](crate::policy::Check::shared)) settles on its
//! store, one script call per check: [`Policy::settle_async`] awaits it (the layer does
//! so for a route whose policy has shared checks). A settlement that does not reach the
//! store is lost, and `settle_async` says so: an undercharge, where a lost refund is an
//! overcharge.
//!
//! [`Policy::settle`]: crate::policy::Policy::settle
//! [`Policy::settle_async`]: crate::policy::Policy::settle_async
