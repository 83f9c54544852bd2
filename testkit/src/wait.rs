use std::fmt::{self, Display};
use std::time::{Duration, Instant};

/// The default limit of a wait.
pub const GUARD: Duration = Duration::from_secs(60);

/// How often an async probe runs.
pub const POLL: Duration = Duration::from_millis(20);

/// How often a blocking probe runs: it usually starts a process (kubectl) or asks a real API
/// server, which costs far more than an async probe of in-process state.
pub const POLL_BLOCKING: Duration = Duration::from_millis(200);

/// What a probe returns: `true`, `Some(v)` or `Ok(v)` when the condition holds. `Err(e)` says
/// what was seen instead, for the failure message (`false` and `None` say nothing more).
pub trait Probe {
    /// The value the wait returns.
    type Output;
    /// The value, or what was seen instead (if the probe says).
    fn ready(self) -> Result<Self::Output, Option<String>>;
}

impl Probe for bool {
    type Output = ();
    fn ready(self) -> Result<(), Option<String>> {
        if self { Ok(()) } else { Err(None) }
    }
}

impl<T> Probe for Option<T> {
    type Output = T;
    fn ready(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: Display> Probe for Result<T, E> {
    type Output = T;
    fn ready(self) -> Result<T, Option<String>> {
        self.map_err(|e| Some(e.to_string()))
    }
}

/// A wait that ran out of time: `timed out after <limit> waiting for <what>[; last seen: <last>]`.
#[derive(Clone, Debug)]
pub struct TimedOut {
    /// What was awaited.
    pub what: String,
    /// How long.
    pub limit: Duration,
    /// What the last probe saw instead, if it said.
    pub last: Option<String>,
}

impl Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "timed out after {:?} waiting for {}",
            self.limit, self.what
        )?;
        match &self.last {
            Some(last) => write!(f, "; last seen: {last}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for TimedOut {}

/// The failure of a wait that ran out of time.
#[doc(hidden)]
pub fn timed_out(what: &dyn Display, limit: Duration, last: Option<String>) -> ! {
    let failure = TimedOut {
        what: what.to_string(),
        limit,
        last,
    };
    panic!("{failure}")
}

/// Polls `probe` every [`POLL_BLOCKING`] until it is ready (see [`Probe`]) and returns its value;
/// after `limit`, panics naming `what` and the last thing seen. For blocking code (real
/// processes, kubectl); async code uses [`eventually!`](crate::eventually).
pub fn wait_until<P: Probe>(
    what: impl Display,
    limit: Duration,
    probe: impl FnMut() -> P,
) -> P::Output {
    try_wait_until(what, limit, probe).unwrap_or_else(|failure| panic!("{failure}"))
}

/// [`wait_until`] that returns the failure instead of panicking: for library code that reports
/// errors (the real control plane's startup, which adds the blamed component's log).
pub fn try_wait_until<P: Probe>(
    what: impl Display,
    limit: Duration,
    mut probe: impl FnMut() -> P,
) -> Result<P::Output, TimedOut> {
    let deadline = Instant::now() + limit;
    loop {
        match probe().ready() {
            Ok(v) => return Ok(v),
            Err(last) if Instant::now() >= deadline => {
                return Err(TimedOut {
                    what: what.to_string(),
                    limit,
                    last,
                });
            }
            Err(_) => std::thread::sleep(POLL_BLOCKING),
        }
    }
}

/// Polls `$probe` (an expression that may `.await`, yielding a [`Probe`]: `bool`, `Option` or
/// `Result`) every [`POLL`] until it is ready and yields its value; after `$limit` (default
/// [`GUARD`]) panics with `timed out after <limit> waiting for <$what>` and the last thing seen.
/// `$what` (any `Display`) is only evaluated then.
#[macro_export]
macro_rules! eventually {
    ($what:expr, $probe:expr) => {
        $crate::eventually!($what, $crate::GUARD, $probe)
    };
    ($what:expr, $limit:expr, $probe:expr) => {{
        let limit: ::std::time::Duration = $limit;
        let deadline = ::std::time::Instant::now() + limit;
        loop {
            // Its own statement: the probe's temporaries (a lock guard, say) end here, not
            // across the sleep below.
            let ready = $crate::Probe::ready($probe);
            match ready {
                Ok(v) => break v,
                Err(last) if ::std::time::Instant::now() >= deadline => {
                    $crate::__timed_out(&$what, limit, last)
                }
                Err(_) => $crate::__tokio::time::sleep($crate::POLL).await,
            }
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_returns_the_probe_s_value_once_ready() {
        let mut calls = 0;
        let v = wait_until("the third call", GUARD, || {
            calls += 1;
            (calls == 3).then_some(calls)
        });
        assert_eq!(v, 3);
    }

    #[test]
    fn a_wait_that_runs_out_names_what_and_the_last_thing_seen() {
        let failure = std::panic::catch_unwind(|| {
            wait_until("the sky to fall", Duration::ZERO, || {
                Err::<(), _>("blue sky")
            })
        })
        .unwrap_err();
        let message = failure.downcast_ref::<String>().unwrap();
        assert_eq!(
            message,
            "timed out after 0ns waiting for the sky to fall; last seen: blue sky"
        );
    }

    #[test]
    fn a_condition_that_never_held_says_only_what_was_awaited() {
        let failure = try_wait_until("a flag", Duration::ZERO, || false).unwrap_err();
        assert_eq!(
            failure.to_string(),
            "timed out after 0ns waiting for a flag"
        );
    }
}
