//! `retry` (docs/behaviour.md §6.17): whether a failed attempt of an exec hook is tried again, and
//! when. Pure: the controller classifies how the attempt ended and records the attempt in its
//! record before the next one starts, so a retry never turns "at most once" into "twice" for a
//! command that may have run, unless the hook says running it twice is safe.

use crate::hooks::plan::RetryPlan;

/// How an attempt that did not succeed ended, as far as running it again is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The API server was unavailable for the exec: it could not be reached, or answered a
    /// server error, 429, or a 403 while it was still starting. The command did not start.
    Unavailable,
    /// The exec was refused before its stream opened (the API server or the kubelet answered the
    /// upgrade with an error: forbidden, container not found or not running, 5xx, 429): the
    /// command did not start.
    NotStarted,
    /// The command ran and exited with this non-zero code.
    Exited(i32),
    /// The stream broke, or ended, before an exit status: the command may have run, wholly or
    /// in part.
    StreamBroke,
    /// The exec timed out: the command may still be running (the exec API cannot kill it).
    TimedOut,
}

impl Failure {
    /// The `reason` label of `restore_hooks_exec_retries_total` and the Event's wording.
    pub fn reason(self) -> &'static str {
        match self {
            Failure::Unavailable => "unavailable",
            Failure::NotStarted => "not_started",
            Failure::Exited(_) => "exit_code",
            Failure::StreamBroke => "stream_broke",
            Failure::TimedOut => "timed_out",
        }
    }
}

/// The wait before a hook's next attempt, in milliseconds, after one that ended as `failure`;
/// `None`: it is not tried again. `failed` is how many attempts of it failed so far counting this
/// one, `unavailable` how many of those the API server was unavailable for, this one included.
///
/// An attempt the API server was unavailable for (`Unavailable`) is tried again whatever the
/// hook's `retry` says, and never counts against its `attempts`: its command did not start, so
/// running it cannot make twice, and an API server that restarts must cost a hook a delay, not
/// its run (docs/behaviour.md §6.17). Its waits follow the hook's backoff, or 1s doubling to 30s
/// without one; only the hook's wait deadline (§6.5) bounds them. An exec refused for good
/// (`NotStarted`: forbidden, container not running) is tried again only as `retry` allows, as is
/// every other failure, and never after a timeout: the command may still run.
pub fn retry_after(
    plan: Option<&RetryPlan>,
    failure: Failure,
    failed: u32,
    unavailable: u32,
) -> Option<u64> {
    let (backoff_ms, max_backoff_ms) = plan
        .map_or((DEFAULT_BACKOFF_MS, DEFAULT_MAX_BACKOFF_MS), |p| {
            (p.backoff_ms, p.max_backoff_ms)
        });
    let wait = |n: u32| {
        let doublings = n.saturating_sub(1).min(32);
        backoff_ms
            .saturating_mul(1u64 << doublings)
            .min(max_backoff_ms)
    };
    let attempt = failed.saturating_sub(unavailable);
    let retried = match (failure, plan) {
        (Failure::Unavailable, _) => return Some(wait(unavailable)),
        (_, None) => return None,
        (_, Some(plan)) if attempt >= plan.attempts => return None,
        (Failure::NotStarted, Some(_)) => true,
        (Failure::Exited(code), Some(plan)) => plan.on_exit_codes.contains(&code),
        (Failure::StreamBroke, Some(plan)) => plan.idempotent,
        (Failure::TimedOut, _) => false,
    };
    retried.then(|| wait(attempt))
}

/// The wait before the second try of an attempt the API server was unavailable for, for a hook
/// without `retry`.
pub const DEFAULT_BACKOFF_MS: u64 = 1_000;
/// The longest such wait.
pub const DEFAULT_MAX_BACKOFF_MS: u64 = 30_000;

#[cfg(test)]
mod tests {
    use super::*;
    use Failure::*;

    #[test]
    fn attempts_that_cannot_have_run_are_retried_and_others_only_as_the_hook_allows() {
        let plan = |codes: &[i32], idempotent: bool| RetryPlan {
            attempts: 4,
            backoff_ms: 1_000,
            max_backoff_ms: 3_000,
            on_exit_codes: codes.to_vec(),
            idempotent,
        };
        // (what, policy, failure, failed attempts so far (this one included), of them the API
        // server was unavailable for, the wait)
        type Case = (
            &'static str,
            Option<RetryPlan>,
            Failure,
            u32,
            u32,
            Option<u64>,
        );
        let p = |codes: &[i32], idempotent: bool| Some(plan(codes, idempotent));
        let cases: [Case; 18] = [
            (
                "refused before it started: retried",
                p(&[], false),
                NotStarted,
                1,
                0,
                Some(1_000),
            ),
            (
                "backoff doubles",
                p(&[], false),
                NotStarted,
                2,
                0,
                Some(2_000),
            ),
            (
                "and is capped at maxBackoff",
                p(&[], false),
                NotStarted,
                3,
                0,
                Some(3_000),
            ),
            (
                "attempt 4 of 4 is the last",
                p(&[], false),
                NotStarted,
                4,
                0,
                None,
            ),
            (
                "a hook without retry: a refusal is final",
                None,
                NotStarted,
                1,
                0,
                None,
            ),
            (
                "the API server unavailable: not counted against attempts",
                p(&[], false),
                Unavailable,
                9,
                9,
                Some(3_000),
            ),
            (
                "a hook without retry: retried while the API server is unavailable",
                None,
                Unavailable,
                1,
                1,
                Some(1_000),
            ),
            (
                "... with its own backoff, capped at 30s",
                None,
                Unavailable,
                7,
                7,
                Some(30_000),
            ),
            (
                "a hook without retry: an exit is final",
                None,
                Exited(75),
                1,
                0,
                None,
            ),
            (
                "exit code not listed: a command that ran is not re-run",
                p(&[], false),
                Exited(1),
                1,
                0,
                None,
            ),
            (
                "exit code listed: re-run",
                p(&[75], false),
                Exited(75),
                1,
                0,
                Some(1_000),
            ),
            (
                "another code than listed",
                p(&[75], false),
                Exited(1),
                1,
                0,
                None,
            ),
            (
                "broken stream: only for an idempotent hook",
                p(&[], false),
                StreamBroke,
                1,
                0,
                None,
            ),
            (
                "broken stream, idempotent",
                p(&[], true),
                StreamBroke,
                2,
                0,
                Some(2_000),
            ),
            (
                "timed out: never (it may still run)",
                p(&[75], true),
                TimedOut,
                1,
                0,
                None,
            ),
            (
                "the last attempt is the last",
                p(&[75], true),
                Exited(75),
                4,
                0,
                None,
            ),
            (
                "attempts the API server was away for do not count: the 6th is the 2nd that ran",
                p(&[75], true),
                Exited(75),
                6,
                4,
                Some(2_000),
            ),
            (
                "the last one that ran, after some the API server was away for",
                p(&[75], false),
                Exited(75),
                6,
                2,
                None,
            ),
        ];
        for (what, plan, failure, failed, unavailable, want) in cases {
            assert_eq!(
                retry_after(plan.as_ref(), failure, failed, unavailable),
                want,
                "{what}"
            );
        }
    }
}
