//! The facts the tests rely on stay checkable from the repository (docs/facts/README.md): every
//! `docs/facts/FILE.md#anchor` citation names a file and anchor that exist, the facts files link
//! to each other correctly, and nothing cites the out-of-repository notes they replaced.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const FACTS_DIR: &str = "docs/facts";
const CITATION_PREFIX: &str = "docs/facts/";
const SCANNED_EXTENSIONS: &[&str] = &["rs", "md", "py", "sh", "proto", "toml", "yaml", "yml"];
const SKIPPED_DIRECTORIES: &[&str] = &["target", ".git", "node_modules", ".venv", "__pycache__"];
/// This file spells out broken and forbidden citations on purpose, so it is not scanned.
const THIS_FILE: &str = "crates/testkit/tests/facts.rs";
/// How the docs write "any facts file" (`docs/facts/FILE.md#anchor`); not a citation.
const PLACEHOLDER_FILE: &str = "FILE.md";

/// Citations of notes that are not in the repository, and what to cite instead.
const OUT_OF_REPOSITORY: &[(&str, &str)] = &[
    ("research/", "the project's research notes are not in the repository"),
    ("research sunk.md", "the project's research notes are not in the repository"),
    ("seed/sunk-integration", "the seed document is not in the repository; cite docs/facts/sunk-guide.md"),
    ("§", "a section number of notes outside the repository"),
];

/// The anchors each facts file defines, by file name.
type FactsAnchors = BTreeMap<String, BTreeSet<String>>;

struct Problem {
    path: String,
    line: usize,
    message: String,
}

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every file of the repository the checks read, as (path relative to the root, text).
fn scanned_files(root: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        let entries = fs::read_dir(&directory).unwrap_or_else(|error| panic!("{}: {error}", directory.display()));
        for entry in entries {
            let entry = entry.expect("a directory entry");
            let path = entry.path();
            let name = path.file_name().and_then(|name| name.to_str()).unwrap_or_default();
            // Not followed: a link could leave the repository or loop.
            let file_type = entry.file_type().expect("a file type");
            if file_type.is_symlink() {
                continue;
            }
            if file_type.is_dir() {
                if !SKIPPED_DIRECTORIES.contains(&name) {
                    pending.push(path);
                }
                continue;
            }
            let extension = path.extension().and_then(|extension| extension.to_str()).unwrap_or_default();
            if !SCANNED_EXTENSIONS.contains(&extension) {
                continue;
            }
            let Ok(text) = fs::read_to_string(&path) else { continue };
            let relative = path.strip_prefix(root).expect("under the root").to_string_lossy().replace('\\', "/");
            if relative != THIS_FILE {
                files.push((relative, text));
            }
        }
    }
    files.sort();
    files
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn heading_slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|character| character.is_alphanumeric() || matches!(character, ' ' | '-' | '_'))
        .map(|character| if character == ' ' { '-' } else { character })
        .collect()
}

/// The anchors a Markdown text defines (explicit `<a id>`s and heading slugs), each with its line.
fn anchor_definitions(text: &str) -> Vec<(String, usize)> {
    let mut definitions = Vec::new();
    let mut slug_counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut in_code = false;
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(start) = rest.find("<a id=\"") {
            let after = &rest[start + "<a id=\"".len()..];
            let Some(end) = after.find('"') else { break };
            definitions.push((after[..end].to_owned(), index + 1));
            rest = &after[end..];
        }
        let hashes = line.chars().take_while(|character| *character == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let slug = heading_slug(&strip_html(&line[hashes..]));
            let count = slug_counts.entry(slug.clone()).or_default();
            definitions.push((if *count == 0 { slug } else { format!("{slug}-{count}") }, index + 1));
            *count += 1;
        }
    }
    definitions
}

fn anchors_of(text: &str) -> BTreeSet<String> {
    anchor_definitions(text).into_iter().map(|(anchor, _)| anchor).collect()
}

fn strip_html(text: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for character in text.chars() {
        match character {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if !in_tag => out.push(character),
            _ => {}
        }
    }
    out
}

fn is_name_character(character: char) -> bool {
    character.is_ascii_alphanumeric() || matches!(character, '-' | '_' | '.')
}

/// `docs/facts/FILE.md#anchor` citations in a line: (file, anchor if any).
fn citations_in(line: &str) -> Vec<(String, Option<String>)> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find(CITATION_PREFIX) {
        let after = &rest[start + CITATION_PREFIX.len()..];
        let file: String = after.chars().take_while(|character| is_name_character(*character)).collect();
        let after_file = &after[file.len()..];
        let file = file.trim_end_matches('.').to_owned();
        let anchor = after_file
            .strip_prefix('#')
            .map(|anchor| anchor.chars().take_while(|character| is_name_character(*character)).collect::<String>())
            .map(|anchor| anchor.trim_end_matches('.').to_owned());
        if !file.is_empty() && file != PLACEHOLDER_FILE {
            found.push((file, anchor));
        }
        rest = after_file;
    }
    found
}

/// Link targets in a Markdown line that stay in the repository: `](target)` and `[tag]: target`.
fn local_links_in(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find("](") {
        let after = &rest[start + 2..];
        let Some(end) = after.find(')') else { break };
        targets.push(after[..end].to_owned());
        rest = &after[end..];
    }
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some(end) = trimmed.find("]: ")
    {
        targets.push(trimmed[end + 3..].split_whitespace().next().unwrap_or_default().to_owned());
    }
    targets.retain(|target| !target.contains("://") && !target.is_empty());
    targets
}

/// The anchors of every facts file, by file name.
fn facts_anchors(root: &Path) -> FactsAnchors {
    let directory = root.join(FACTS_DIR);
    let mut anchors = BTreeMap::new();
    for entry in fs::read_dir(&directory).unwrap_or_else(|error| panic!("{}: {error}", directory.display())) {
        let path = entry.expect("a directory entry").path();
        if path.extension().and_then(|extension| extension.to_str()) == Some("md") {
            let text = fs::read_to_string(&path).expect("a facts file is UTF-8");
            let name = path.file_name().and_then(|name| name.to_str()).expect("a file name").to_owned();
            anchors.insert(name, anchors_of(&text));
        }
    }
    anchors
}

fn unresolved(anchors: &FactsAnchors, file: &str, anchor: Option<&str>, shown: &str) -> Option<String> {
    let Some(defined) = anchors.get(file) else {
        return Some(format!("{shown}: no file {FACTS_DIR}/{file}"));
    };
    match anchor {
        Some(anchor) if !defined.contains(anchor) => {
            Some(format!("{shown}: no anchor #{anchor} in {FACTS_DIR}/{file}"))
        }
        _ => None,
    }
}

fn citation_problems(files: &[(String, String)], anchors: &FactsAnchors) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (path, text) in files {
        for (index, line) in text.lines().enumerate() {
            for (file, anchor) in citations_in(line) {
                let shown = format!(
                    "{CITATION_PREFIX}{file}{}",
                    anchor.as_deref().map(|anchor| format!("#{anchor}")).unwrap_or_default()
                );
                if let Some(message) = unresolved(anchors, &file, anchor.as_deref(), &shown) {
                    problems.push(Problem { path: path.clone(), line: index + 1, message });
                }
            }
        }
    }
    problems
}

fn facts_link_problems(root: &Path, files: &[(String, String)], anchors: &FactsAnchors) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (path, text) in files.iter().filter(|(path, _)| path.starts_with(CITATION_PREFIX) && path.ends_with(".md")) {
        let own_name = path.rsplit('/').next().expect("a file name");
        let mut seen = BTreeSet::new();
        for (anchor, line) in anchor_definitions(text) {
            if !seen.insert(anchor.clone()) {
                problems.push(Problem { path: path.clone(), line, message: format!("anchor #{anchor} defined twice") });
            }
        }
        let mut in_code = false;
        for (index, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
            }
            if in_code {
                continue;
            }
            for target in local_links_in(line) {
                let (file, anchor) = match target.split_once('#') {
                    Some((file, anchor)) => (file, Some(anchor)),
                    None => (target.as_str(), None),
                };
                let message = if file.is_empty() || !file.contains('/') {
                    let file = if file.is_empty() { own_name } else { file };
                    unresolved(anchors, file, anchor, &target)
                } else if !root.join(FACTS_DIR).join(file).exists() {
                    Some(format!("{target}: no such file"))
                } else {
                    None
                };
                if let Some(message) = message {
                    problems.push(Problem { path: path.clone(), line: index + 1, message });
                }
            }
        }
    }
    problems
}

fn out_of_repository_problems(files: &[(String, String)]) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (path, text) in files.iter().filter(|(path, _)| !path.starts_with(CITATION_PREFIX)) {
        for (index, line) in text.lines().enumerate() {
            if let Some((pattern, why)) = OUT_OF_REPOSITORY.iter().find(|(pattern, _)| line.contains(pattern)) {
                problems.push(Problem {
                    path: path.clone(),
                    line: index + 1,
                    message: format!("cites `{pattern}` ({why}); cite docs/facts/FILE.md#anchor instead"),
                });
            }
        }
    }
    problems
}

fn report(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|problem| format!("{}:{}: {}", problem.path, problem.line, problem.message))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_facts_citation_names_an_existing_file_and_anchor() {
    let root = repository_root();
    let problems = citation_problems(&scanned_files(&root), &facts_anchors(&root));
    assert!(problems.is_empty(), "unresolved citations (see docs/facts/README.md):\n{}", report(&problems));
}

#[test]
fn facts_files_link_only_to_existing_anchors() {
    let root = repository_root();
    let problems = facts_link_problems(&root, &scanned_files(&root), &facts_anchors(&root));
    assert!(problems.is_empty(), "broken links in docs/facts:\n{}", report(&problems));
}

#[test]
fn nothing_cites_notes_outside_the_repository() {
    let problems = out_of_repository_problems(&scanned_files(&repository_root()));
    assert!(problems.is_empty(), "citations of notes that are not in the repository:\n{}", report(&problems));
}

#[test]
fn a_broken_citation_is_reported_with_its_file_and_line() {
    let facts = BTreeMap::from([("sunk.md".to_owned(), anchors_of("<a id=\"kill-wait\"></a>\n## Teardown\n"))]);
    let files = [(
        "crates/x/tests/y.rs".to_owned(),
        "// docs/facts/sunk.md#kill-wait.\n// docs/facts/sunk.md#teardown\n// docs/facts/sunk.md#nope\n// docs/facts/none.md\n"
            .to_owned(),
    )];
    let problems = citation_problems(&files, &facts);
    assert_eq!(
        report(&problems),
        "crates/x/tests/y.rs:3: docs/facts/sunk.md#nope: no anchor #nope in docs/facts/sunk.md\n\
         crates/x/tests/y.rs:4: docs/facts/none.md: no file docs/facts/none.md"
    );
}
