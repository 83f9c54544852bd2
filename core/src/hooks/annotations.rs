//! Velero's restore-hook pod annotations (docs/behaviour.md §2.1): keys, defaults and parsing.

use std::collections::BTreeMap;

/// Image of the annotation init container; a non-empty value enables the annotation init hook and
/// suppresses spec init hooks (docs/behaviour.md §2.1, §3.1).
pub const INIT_CONTAINER_IMAGE: &str = "init.hook.restore.velero.io/container-image";
/// Name of the annotation init container, a lowercase RFC 1123 label; default
/// [`DEFAULT_INIT_CONTAINER_NAME`] (docs/behaviour.md §2.1).
pub const INIT_CONTAINER_NAME: &str = "init.hook.restore.velero.io/container-name";
/// Command of the annotation init container, by the command rule (docs/behaviour.md §2.2); unset:
/// the image entrypoint.
pub const INIT_COMMAND: &str = "init.hook.restore.velero.io/command";
/// Command of the annotation exec hook, by the command rule; a non-empty value enables that hook
/// and suppresses spec exec hooks (docs/behaviour.md §2.1, §3.1).
pub const POST_COMMAND: &str = "post.hook.restore.velero.io/command";
/// Target container of the annotation exec hook; default: the pod's first container
/// (docs/behaviour.md §2.1).
pub const POST_CONTAINER: &str = "post.hook.restore.velero.io/container";
/// `Continue` (default) or `Fail`, case-sensitive, for the annotation exec hook (docs/behaviour.md
/// §2.1, §6.7).
pub const POST_ON_ERROR: &str = "post.hook.restore.velero.io/on-error";
/// Go duration bounding the annotation exec hook; default 30s, capped by `--max-exec-timeout`
/// (docs/behaviour.md §2.3, §6.6).
pub const POST_EXEC_TIMEOUT: &str = "post.hook.restore.velero.io/exec-timeout";
/// Go duration counted from the pod's creation within which the annotation exec hook must start;
/// default: `--default-wait-timeout` (1h); `0`: no limit (docs/behaviour.md §6.5).
pub const POST_WAIT_TIMEOUT: &str = "post.hook.restore.velero.io/wait-timeout";
/// Go boolean: the annotation exec hook waits for the container to be Ready, not only Running;
/// default `false` (docs/behaviour.md §2.3, §6.4).
pub const POST_WAIT_FOR_READY: &str = "post.hook.restore.velero.io/wait-for-ready";

/// Name of the annotation init container when `container-name` is not set. Velero uses a random
/// name; a fixed one makes injection idempotent across re-restores and reinvocation.
pub const DEFAULT_INIT_CONTAINER_NAME: &str = "restore-hooks-init";
/// Hook name of the annotation exec hook, as Velero's tracker names it.
pub const ANNOTATION_HOOK_NAME: &str = "<from-annotation>";

/// Go's `strconv.ParseBool`.
pub fn parse_go_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// A non-empty annotation value. Empty values count as unset: Velero treats an empty image or
/// command as "no hook", and we extend that to the optional keys.
pub fn get<'a>(annotations: Option<&'a BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    annotations
        .and_then(|a| a.get(key))
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_bool_forms() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(t), Some(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(f), Some(false), "{f}");
        }
        for bad in ["yes", "on", "tRUE", " true", "2", ""] {
            assert_eq!(parse_go_bool(bad), None, "{bad}");
        }
    }
}
