//! `retry` (docs/behaviour.md §6.17): whether a failed attempt of an exec hook is tried again, and
//! when. Pure: the controller classifies how the attempt ended and records the attempt in its
//! record before the next one starts, so a retry never turns "at most once" into "twice" for a
//! command that may have run, unless the hook says running it twice is safe.

use crate::hooks::plan::RetryPlan;

/// How an attempt that did not succeed ended, as far as running it again is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
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
            Failure::NotStarted => "not_started",
            Failure::Exited(_) => "exit_code",
            Failure::StreamBroke => "stream_broke",
            Failure::TimedOut => "timed_out",
        }
    }
}

/// The wait before attempt `attempt + 1` after attempt `attempt` (1-based) failed as `failure`,
/// in milliseconds; `None`: no more attempts. Never after a timeout: the command may still run.
pub fn retry_after(plan: &RetryPlan, failure: Failure, attempt: u32) -> Option<u64> {
    if attempt >= plan.attempts {
        return None;
    }
    let retried = match failure {
        Failure::NotStarted => true,
        Failure::Exited(code) => plan.on_exit_codes.contains(&code),
        Failure::StreamBroke => plan.idempotent,
        Failure::TimedOut => false,
    };
    retried.then(|| {
        let doublings = attempt.saturating_sub(1).min(32);
        plan.backoff_ms
            .saturating_mul(1u64 << doublings)
            .min(plan.max_backoff_ms)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use Failure::*;

    #[test]
    fn only_attempts_that_cannot_have_run_are_retried_unless_the_hook_allows_more() {
        let plan = |codes: &[i32], idempotent: bool| RetryPlan {
            attempts: 4,
            backoff_ms: 1_000,
            max_backoff_ms: 3_000,
            on_exit_codes: codes.to_vec(),
            idempotent,
        };
        let cases: [(&str, RetryPlan, Failure, u32, Option<u64>); 12] = [
            (
                "not started: retried",
                plan(&[], false),
                NotStarted,
                1,
                Some(1_000),
            ),
            (
                "backoff doubles",
                plan(&[], false),
                NotStarted,
                2,
                Some(2_000),
            ),
            (
                "and is capped at maxBackoff",
                plan(&[], false),
                NotStarted,
                3,
                Some(3_000),
            ),
            (
                "attempt 4 of 4 is the last",
                plan(&[], false),
                NotStarted,
                4,
                None,
            ),
            (
                "exit code not listed: a command that ran is not re-run",
                plan(&[], false),
                Exited(1),
                1,
                None,
            ),
            (
                "exit code listed: re-run",
                plan(&[75], false),
                Exited(75),
                1,
                Some(1_000),
            ),
            (
                "another code than listed",
                plan(&[75], false),
                Exited(1),
                1,
                None,
            ),
            (
                "broken stream: only for an idempotent hook",
                plan(&[], false),
                StreamBroke,
                1,
                None,
            ),
            (
                "broken stream, idempotent",
                plan(&[], true),
                StreamBroke,
                2,
                Some(2_000),
            ),
            (
                "timed out: never (it may still run)",
                plan(&[75], true),
                TimedOut,
                1,
                None,
            ),
            (
                "the last attempt is the last",
                plan(&[75], true),
                Exited(75),
                4,
                None,
            ),
            ("past the last", plan(&[], false), NotStarted, 9, None),
        ];
        for (what, plan, failure, attempt, want) in cases {
            assert_eq!(retry_after(&plan, failure, attempt), want, "{what}");
        }
        let many = RetryPlan {
            attempts: 10,
            ..plan(&[], false)
        };
        assert_eq!(
            retry_after(&many, NotStarted, 9),
            Some(3_000),
            "still capped"
        );
    }
}
