#!/usr/bin/env python3
"""Release metadata checks: what a release publishes says the same thing everywhere.

  release_checks.py                        run the checks; exit 1 naming each one that fails
  release_checks.py --tag vX.Y.Z --notes F also: the tag names the version; write the version's
                                           CHANGELOG.md section to F (the GitHub release notes)
  release_checks.py --print-changes        print the artifacthub.io/changes value for Chart.yaml
  release_checks.py --self-test            break the files in memory, one way at a time, and fail
                                           unless every break is caught

The checks: LICENSE is the Apache-2.0 text and every crate and the chart say Apache-2.0; Cargo.toml
version == Chart.yaml version == appVersion; CHANGELOG.md has a dated section for it, and Chart.yaml's
artifacthub.io/changes (and containsSecurityUpdates, prerelease) is that section; artifacthub.io/images
is values.yaml's image at appVersion on the platforms the release workflow builds, and the workflow
pushes that image; artifacthub.io/crds lists the CRDs of files/crds/; the icon and links into the repository name files that exist; docs/install.md's
"Upgrading" names versions, never "this release"; SECURITY.md supports the current minor version.
Needs Python >= 3.11 and PyYAML (.tools/venv has both).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = "charts/restore-hooks/Chart.yaml"
VALUES = "charts/restore-hooks/values.yaml"
WORKFLOW = ".github/workflows/release.yml"
LICENSE_ID = "Apache-2.0"
# sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt (= Debian's /usr/share/common-licenses/Apache-2.0).
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
KINDS = {"Added": "added", "Changed": "changed", "Deprecated": "deprecated", "Removed": "removed",
         "Fixed": "fixed", "Security": "security"}
SEMVER = re.compile(r"(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?")


def plain(markdown: str) -> str:
    """A changelog bullet as Artifact Hub shows it: without Markdown links, bold and code marks."""
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", markdown)
    return re.sub(r"`([^`]*)`", r"\1", text.replace("**", ""))


def changelog_sections(text: str) -> dict[str, dict]:
    """'## [X.Y.Z] - date' sections: their date, their text and their entries as (kind, bullet)."""
    sections: dict[str, dict] = {}
    current = kind = None
    for line in text.splitlines():
        if m := re.fullmatch(r"## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?", line):
            current = sections.setdefault(m.group(1), {"date": m.group(2), "lines": [], "entries": []})
            kind = None
            continue
        if current is None or re.fullmatch(r"\[[^\]]+\]: \S+", line):
            continue
        current["lines"].append(line)
        if line.startswith("### "):
            kind = KINDS.get(line[4:], f"unknown section '{line[4:]}'")
        elif line.startswith("- "):
            current["entries"].append([kind, line[2:].strip()])
        elif line.startswith("  ") and line.strip() and current["entries"]:
            current["entries"][-1][1] += " " + line.strip()
    return sections


def checks(read, exists) -> list[str]:
    """Every failure, as a sentence that names the file and the fix; [] when all hold."""
    failures: list[str] = []

    def check(cond: object, what: str) -> None:
        if not cond:
            failures.append(what)

    def annotation(name: str) -> object:
        try:
            return yaml.safe_load(ann.get(name) or "[]")
        except yaml.YAMLError as e:
            failures.append(f"Chart.yaml: {name} is not YAML: {e}")
            return None

    chart = yaml.safe_load(read(CHART))
    ann = chart.get("annotations") or {}
    cargo = tomllib.loads(read("Cargo.toml"))

    # License.
    digest = hashlib.sha256(read("LICENSE").encode()).hexdigest()
    check(digest == APACHE_2_SHA256, "LICENSE is not the Apache License 2.0 verbatim: copy /usr/share/common-licenses/Apache-2.0")
    check(ann.get("artifacthub.io/license") == LICENSE_ID, f"Chart.yaml: artifacthub.io/license is not {LICENSE_ID}")
    manifests = subprocess.run(["git", "ls-files", "Cargo.toml", "*/Cargo.toml"], cwd=ROOT, check=True,
                               capture_output=True, text=True).stdout.split()
    for path in manifests:
        manifest = tomllib.loads(read(path))
        if "package" not in manifest:
            continue
        lic = manifest["package"].get("license")
        if lic == {"workspace": True}:
            # fuzz/ is a workspace of its own; every other crate inherits the root's.
            lic = (manifest if "workspace" in manifest else cargo)["workspace"]["package"].get("license")
        check(lic == LICENSE_ID, f"{path}: license is {lic!r}: set license = \"{LICENSE_ID}\" (or license.workspace = true)")

    # One version.
    version = cargo["package"]["version"]
    check(version == str(chart.get("version")) == str(chart.get("appVersion")),
          f"Cargo.toml version {version}, Chart.yaml version {chart.get('version')} and appVersion "
          f"{chart.get('appVersion')} must be one version")
    m = SEMVER.fullmatch(version)
    check(m, f"Cargo.toml version {version} is not SemVer")
    check(ann.get("artifacthub.io/prerelease") == ("true" if m and m.group(4) else "false"),
          f"Chart.yaml: artifacthub.io/prerelease is wrong for version {version}")

    # CHANGELOG.md and the changes annotation.
    sections = changelog_sections(read("CHANGELOG.md"))
    check(next(iter(sections), None) == "Unreleased", "CHANGELOG.md: the first section must be ## [Unreleased]")
    for name, s in sections.items():
        check(all(kind in KINDS.values() for kind, _ in s["entries"]),
              f"CHANGELOG.md: {name} has a bullet outside Added/Changed/Deprecated/Removed/Fixed/Security")
    section = sections.get(version)
    if section is None or not section["date"]:
        failures.append(f"CHANGELOG.md has no '## [{version}] - YYYY-MM-DD' section for the version being released")
    else:
        want = [{"kind": k, "description": plain(t)} for k, t in section["entries"]]
        got = annotation("artifacthub.io/changes")
        check(got == want, f"Chart.yaml: artifacthub.io/changes is not CHANGELOG.md's {version} section: "
                           "replace it with the output of .ci/release_checks.py --print-changes")
        security = any(k == "security" for k, _ in section["entries"])
        check(ann.get("artifacthub.io/containsSecurityUpdates") == str(security).lower(),
              f"Chart.yaml: artifacthub.io/containsSecurityUpdates must be \"{str(security).lower()}\"")

    # The image: values.yaml, Artifact Hub and the release workflow name the same one.
    image = yaml.safe_load(read(VALUES))["image"]
    ref = f"{image['repository']}:{image.get('tag') or chart.get('appVersion')}"
    workflow = yaml.safe_load(read(WORKFLOW))
    builds = [step.get("with", {}) for job in workflow["jobs"].values() for step in job.get("steps", [])
              if str(step.get("uses", "")).startswith("docker/build-push-action@")]
    check(len(builds) == 1, f"{WORKFLOW}: want one docker/build-push-action step, found {len(builds)}")
    platforms = sorted(p.strip() for b in builds for p in str(b.get("platforms", "")).split(","))
    check(annotation("artifacthub.io/images")
          == [{"name": "restore-hooks", "image": ref, "platforms": platforms}],
          f"Chart.yaml: artifacthub.io/images must name {ref} on {platforms} ({WORKFLOW}'s platforms)")
    check(workflow.get("env", {}).get("IMAGE") == image["repository"],
          f"{WORKFLOW}: env.IMAGE must be values.yaml's image.repository {image['repository']}")

    # Every CRD the chart installs is listed for Artifact Hub, and nothing else.
    crds = {yaml.safe_load(read(str(f.relative_to(ROOT))))["metadata"]["name"]
            for f in (ROOT / "charts/restore-hooks/files/crds").glob("*.yaml")}
    check(bool(crds), "charts/restore-hooks/files/crds/ holds no CRD: did the CRDs move?")
    listed = {c.get("name") for c in annotation("artifacthub.io/crds") or [] if isinstance(c, dict)}
    check(listed == crds, f"Chart.yaml: artifacthub.io/crds lists {sorted(listed)}, files/crds/ holds {sorted(crds)}")

    # Links into the repository name files that exist.
    home = chart.get("home", "")
    check(home in (chart.get("sources") or []), f"Chart.yaml: sources must hold home {home}")
    raw = home.replace("https://github.com/", "https://raw.githubusercontent.com/")
    links = annotation("artifacthub.io/links")
    check(isinstance(links, list) and all(isinstance(x, dict) and {"name", "url"} == set(x) for x in links),
          "Chart.yaml: artifacthub.io/links must be a list of {name, url}")
    urls = [chart.get("icon", "")] + [x.get("url", "") for x in links or [] if isinstance(x, dict)]
    for url in urls:
        for prefix in (f"{raw}/main/", f"{home}/blob/main/"):
            if url.startswith(prefix):
                path = url.removeprefix(prefix).split("#")[0]
                check(exists(path), f"Chart.yaml: {url} names {path}, which is not in the repository")

    # Documents.
    upgrading = read("docs/install.md").partition("\n## Upgrading\n")[2].partition("\n## ")[0]
    check(upgrading, "docs/install.md has no '## Upgrading' section")
    check("this release" not in upgrading.lower(), "docs/install.md, Upgrading: say which version, not 'this release'")
    security_md = read("SECURITY.md")
    check(f"{home}/security/advisories/new" in security_md, "SECURITY.md must point at private vulnerability reporting")
    if m:
        check(re.search(rf"^\| {m.group(1)}\.{m.group(2)}\.x +\| yes", security_md, re.M),
              f"SECURITY.md: the supported versions table has no '| {m.group(1)}.{m.group(2)}.x | yes' row")
    return failures


def repo_files(overrides: dict[str, str] | None = None):
    overrides = overrides or {}

    def read(path: str) -> str:
        return overrides[path] if path in overrides else (ROOT / path).read_text(encoding="utf-8")

    def exists(path: str) -> bool:
        return (ROOT / path).is_file()

    return read, exists


def self_test() -> int:
    read, exists = repo_files()
    if failures := checks(read, exists):
        print("self-test: the repository itself fails the checks:", *failures, sep="\n  ", file=sys.stderr)
        return 1
    version = tomllib.loads(read("Cargo.toml"))["package"]["version"]
    breaks = [  # (what, file, old, new, a word of the expected failure)
        ("the license changed", "LICENSE", "Version 2.0", "Version 2.1", "LICENSE"),
        ("the fuzz crate lost its license", "fuzz/Cargo.toml", 'license = "Apache-2.0"\n', "", "fuzz/Cargo.toml"),
        ("the chart's version moved alone", CHART, f'version: {version}\n', "version: 9.9.9\n", "one version"),
        ("a changes entry reworded", CHART, "description: Hook objects created", "description: Hooks created", "artifacthub.io/changes"),
        ("a changelog entry reworded", "CHANGELOG.md", "- Hook objects created", "- Hooks created", "artifacthub.io/changes"),
        ("the version's changelog section renamed", "CHANGELOG.md", f"## [{version}]", "## [9.9.9]", "no '## ["),
        ("a bullet under a made-up section", "CHANGELOG.md", "### Fixed", "### Improved", "outside Added"),
        ("security flag flipped", CHART, 'containsSecurityUpdates: "true"', 'containsSecurityUpdates: "false"', "containsSecurityUpdates"),
        ("the image at another tag", CHART, f"restore-hooks:{version}", "restore-hooks:0.0.1", "artifacthub.io/images"),
        ("the workflow builds amd64 only", WORKFLOW, "platforms: linux/amd64,linux/arm64", "platforms: linux/amd64", "artifacthub.io/images"),
        ("the workflow pushes elsewhere", WORKFLOW, "IMAGE: ghcr.io/restore-hooks/restore-hooks", "IMAGE: ghcr.io/x/y", "env.IMAGE"),
        ("a CRD left out of artifacthub.io/crds", CHART, "name: restorerecords.restore-hooks.dev", "name: records.example", "artifacthub.io/crds"),
        ("a link to a missing file", CHART, "blob/main/docs/operations.md", "blob/main/docs/nowhere.md", "not in the repository"),
        ("the icon moved", CHART, "main/docs/assets/icon.svg", "main/docs/assets/gone.svg", "not in the repository"),
        ("install.md says 'this release'", "docs/install.md", "\n## Upgrading\n", "\n## Upgrading\n\nThis release adds X.\n", "this release"),
        ("no private reporting", "SECURITY.md", "/security/advisories/new", "/issues", "private vulnerability"),
    ]
    missed = 0
    for what, path, old, new, expect in breaks:
        text = read(path)
        assert old in text, f"self-test: '{old}' is not in {path}; update the break '{what}'"
        try:
            failures = checks(*repo_files({path: text.replace(old, new, 1)}))
        except Exception as e:  # noqa: BLE001 - a crash is not a caught break
            failures = [f"crashed: {e!r}"]
        caught = [f for f in failures if expect in f]
        print(f"  {'ok  ' if caught else 'MISS'}  {what}: {caught[0] if caught else failures}")
        missed += not caught
    tag_ok = tag_failures(f"v{version}", version) == [] and tag_failures("v0.0.1", version) != []
    print(f"  {'ok  ' if tag_ok else 'MISS'}  a tag that is not the version")
    missed += not tag_ok
    print(f"release_checks self-test: {len(breaks) + 1 - missed} passed, {missed} failed")
    return 1 if missed else 0


def tag_failures(tag: str, version: str) -> list[str]:
    return [] if tag == f"v{version}" else [f"tag {tag} does not name the version v{version} (Cargo.toml, Chart.yaml)"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tag")
    ap.add_argument("--notes", type=Path)
    ap.add_argument("--print-changes", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    read, exists = repo_files()
    version = tomllib.loads(read("Cargo.toml"))["package"]["version"]
    section = changelog_sections(read("CHANGELOG.md")).get(version)
    if args.print_changes:
        if section is None:
            sys.exit(f"CHANGELOG.md has no section for {version}")
        changes = [{"kind": k, "description": plain(t)} for k, t in section["entries"]]
        print(yaml.safe_dump(changes, sort_keys=False, allow_unicode=True, width=10_000), end="")
        return 0
    failures = checks(read, exists) + (tag_failures(args.tag, version) if args.tag else [])
    for f in failures:
        print(f"  FAIL  {f}", file=sys.stderr)
    if args.notes and not failures:
        args.notes.write_text("\n".join(section["lines"]).strip() + "\n", encoding="utf-8")
    print(f"release_checks: {version}: {'ok' if not failures else f'{len(failures)} failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
