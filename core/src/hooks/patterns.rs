//! Name patterns: Velero's namespace include/exclude globs and RestoreHook `restores` globs.
//! Velero compiles them with gobwas/glob and no separators: `*` also matches `-` and `.`;
//! `?`, `[abc]`, `[!a]`, `[a-z]` and `{a,b}` work; matching is case-sensitive.

use globset::{GlobBuilder, GlobMatcher};

/// A glob that does not compile: makes the Velero entry or hook object invalid (docs/behaviour.md
/// §3.4 row 11).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid pattern {pattern:?}: {reason}")]
pub struct PatternError {
    /// The pattern as written.
    pub pattern: String,
    /// Why it does not compile (globset's error kind).
    pub reason: String,
}

/// A compiled glob.
#[derive(Clone, Debug)]
pub struct NamePattern(GlobMatcher);

impl NamePattern {
    /// Compiles a glob. Hook objects are compiled once when they arrive (`hooks::compiled`), so
    /// nothing here is cached.
    pub fn compile(pattern: &str) -> Result<Self, PatternError> {
        GlobBuilder::new(pattern)
            .literal_separator(false)
            .case_insensitive(false)
            .build()
            .map(|g| NamePattern(g.compile_matcher()))
            .map_err(|e| PatternError {
                pattern: pattern.to_string(),
                reason: e.kind().to_string(),
            })
    }

    /// Whether the whole of `name` matches the glob (case-sensitive).
    pub fn matches(&self, name: &str) -> bool {
        self.0.is_match(name)
    }
}

/// Velero's `IncludesExcludes`: an exclude match wins; empty includes or a literal `*` include
/// everything.
#[derive(Clone, Debug)]
pub struct IncludesExcludes {
    include_all: bool,
    includes: Vec<NamePattern>,
    excludes: Vec<NamePattern>,
}

impl IncludesExcludes {
    /// Unlike Velero (which stops matching at the first pattern that fails to compile and
    /// silently returns false), a bad pattern is an error the operator gets to see.
    pub fn compile(includes: &[String], excludes: &[String]) -> Result<Self, PatternError> {
        Ok(Self {
            include_all: includes.is_empty() || includes.iter().any(|p| p == "*"),
            includes: includes
                .iter()
                .map(|p| NamePattern::compile(p))
                .collect::<Result<_, _>>()?,
            excludes: excludes
                .iter()
                .map(|p| NamePattern::compile(p))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Whether `name` is included: not excluded, and included by an empty list, `*` or a match
    /// (docs/behaviour.md §2.4).
    pub fn should_include(&self, name: &str) -> bool {
        if self.excludes.iter().any(|p| p.matches(name)) {
            return false;
        }
        self.include_all || self.includes.iter().any(|p| p.matches(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ie(inc: &[&str], exc: &[&str]) -> IncludesExcludes {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        IncludesExcludes::compile(&s(inc), &s(exc)).unwrap()
    }

    #[test]
    fn globs_match_like_gobwas() {
        let cases: &[(&str, &str, bool)] = &[
            ("*", "anything-at.all", true),
            ("*", "", true),
            ("app", "app", true),
            ("app", "App", false),
            ("app", "app2", false),
            ("app-*", "app-prod", true),
            ("app-*", "app-", true),
            ("app-*", "web-prod", false),
            ("*-prod", "shop.eu-prod", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("[abc]x", "bx", true),
            ("[abc]x", "dx", false),
            ("[!a]x", "bx", true),
            ("[!a]x", "ax", false),
            ("[a-c]1", "b1", true),
            ("[a-c]1", "d1", false),
            ("{shop,blog}-*", "blog-1", true),
            ("{shop,blog}-*", "wiki-1", false),
            ("nightly-*", "nightly-2026-12-02", true),
        ];
        for (pattern, name, want) in cases {
            let p = NamePattern::compile(pattern).unwrap();
            assert_eq!(p.matches(name), *want, "{pattern:?} vs {name:?}");
        }
    }

    #[test]
    fn bad_patterns_are_errors() {
        for bad in ["[abc", "{a,b", "a[", "[z-a]"] {
            let err = NamePattern::compile(bad).expect_err(bad);
            assert!(err.to_string().contains(bad), "{err}");
        }
    }

    #[test]
    fn includes_excludes() {
        let cases: &[(&[&str], &[&str], &str, bool)] = &[
            (&[], &[], "app", true),
            (&["*"], &[], "app", true),
            (&["app"], &[], "app", true),
            (&["app"], &[], "web", false),
            (&["app", "web"], &[], "web", true),
            (&[], &["app"], "app", false),
            (&["*"], &["app"], "app", false),
            (&["app"], &["app"], "app", false),
            (&[], &["*"], "app", false),
            (&["app-*"], &["app-test"], "app-prod", true),
            (&["app-*"], &["app-test"], "app-test", false),
        ];
        for (inc, exc, name, want) in cases {
            assert_eq!(
                ie(inc, exc).should_include(name),
                *want,
                "{inc:?} {exc:?} {name:?}"
            );
        }
    }
}
