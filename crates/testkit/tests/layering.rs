//! The one-way stack holds inside each crate too (ARCHITECTURE.md, "Layers"): Cargo keeps the
//! crates from importing upwards, and this check keeps the files of one crate from growing import
//! cycles. A file imports another when it names a path into it (`crate::a::b`, `super::x`,
//! `self::c`, or a child module's name); tests and comments do not count. A module and its parent
//! may refer to each other, so a cycle of up to [`LARGEST_ALLOWED_CYCLE`] files is allowed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const LARGEST_ALLOWED_CYCLE: usize = 3;

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One source file of a crate, by its module path (`["world", "kubelet"]`; the root is `[]`).
struct SourceFile {
    module: Vec<String>,
    tokens: Vec<Token>,
    children: BTreeSet<String>,
    /// What the file re-exports (`pub use a::B;`): a path to `B` through this file leads on to `a`.
    reexports: BTreeMap<String, Vec<String>>,
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Semi,
    Other,
}

/// The text the check reads: comments, string and character literals, and items under
/// `#[cfg(test)]` (unit tests, test-only imports) left out.
fn code_of(source: &str) -> String {
    without_test_items(&without_comments_and_literals(source))
}

/// `code` without each item that `#[cfg(test)]` marks: up to its `;`, or its `{…}` block.
fn without_test_items(code: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut kept = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(start) = rest.find(MARK) {
        kept.push_str(&rest[..start]);
        let item = &rest[start + MARK.len()..];
        let end = match item.find(['{', ';']) {
            Some(at) if item.as_bytes()[at] == b';' => at + 1,
            Some(at) => {
                let mut depth = 0usize;
                let mut end = item.len();
                for (offset, c) in item[at..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = at + offset + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            None => item.len(),
        };
        rest = &item[end..];
    }
    kept.push_str(rest);
    kept
}

fn without_comments_and_literals(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut code = String::with_capacity(source.len());
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '/' if chars.get(i + 1) == Some(&'/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if chars.get(i + 1) == Some(&'*') => {
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            'r' if matches!(chars.get(i + 1), Some('"' | '#')) && (i == 0 || !is_ident_char(chars[i - 1])) => {
                let mut j = i + 1;
                let mut hashes = 0;
                while chars.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if chars.get(j) != Some(&'"') {
                    code.push(chars[i]);
                    i += 1;
                    continue;
                }
                j += 1;
                'raw: while j < chars.len() {
                    if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                        j += 1 + hashes;
                        break 'raw;
                    }
                    j += 1;
                }
                code.push_str("\"\"");
                i = j;
            }
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                code.push_str("\"\"");
            }
            // A character literal ('x', '\n', '\''), not a lifetime ('a).
            '\'' if chars.get(i + 2) == Some(&'\'') || chars.get(i + 1) == Some(&'\\') => {
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                code.push_str("' '");
            }
            c => {
                code.push(c);
                i += 1;
            }
        }
    }
    code
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn tokens_of(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if is_ident_char(c) {
            let start = i;
            while i < chars.len() && is_ident_char(chars[i]) {
                i += 1;
            }
            // `$crate` in a macro names whichever crate expands it, not a file of this one.
            if start > 0 && chars[start - 1] == '$' {
                tokens.push(Token::Other);
            } else {
                tokens.push(Token::Ident(chars[start..i].iter().collect()));
            }
            continue;
        }
        tokens.push(match c {
            ':' if chars.get(i + 1) == Some(&':') => {
                i += 1;
                Token::PathSep
            }
            '{' => Token::Open,
            '}' => Token::Close,
            ',' => Token::Comma,
            ';' => Token::Semi,
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            _ => Token::Other,
        });
        i += 1;
    }
    tokens
}

/// The child modules a file declares (`mod name;`, `pub(crate) mod name;`).
fn declared_children(tokens: &[Token]) -> BTreeSet<String> {
    tokens
        .windows(3)
        .filter_map(|window| match window {
            [Token::Ident(keyword), Token::Ident(name), Token::Semi] if keyword == "mod" => Some(name.clone()),
            _ => None,
        })
        .collect()
}

/// Where the file's re-exports (`pub use …;`) stand, as token ranges.
fn reexport_statements(tokens: &[Token]) -> Vec<std::ops::Range<usize>> {
    let mut statements = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i] != Token::Ident("pub".to_owned()) {
            i += 1;
            continue;
        }
        let Some(offset) = tokens[i..].iter().take(8).position(|token| *token == Token::Ident("use".to_owned())) else {
            i += 1;
            continue;
        };
        let start = i + offset + 1;
        let end = tokens[start..].iter().position(|token| *token == Token::Semi).map_or(tokens.len(), |at| start + at);
        statements.push(start..end);
        i = end;
    }
    statements
}

/// The names a file re-exports, each with the path it stands for (a glob re-exports no name).
fn reexports_of(tokens: &[Token]) -> BTreeMap<String, Vec<String>> {
    let mut reexports = BTreeMap::new();
    for statement in reexport_statements(tokens) {
        for path in named_paths(&tokens[statement]) {
            if let Some(name) = path.last() {
                reexports.insert(name.clone(), path.clone());
            }
        }
    }
    reexports
}

/// The file's tokens without its re-exports: a re-export is how others reach a name, not a use of
/// it by this file (a path through the re-export is followed to where it leads).
fn own_tokens(tokens: &[Token]) -> Vec<Token> {
    let mut own = tokens.to_vec();
    for statement in reexport_statements(tokens) {
        for token in &mut own[statement] {
            *token = Token::Other;
        }
    }
    own
}

fn crate_sources(source_root: &Path) -> Vec<SourceFile> {
    let mut files = Vec::new();
    let mut pending = vec![source_root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        let Ok(entries) = fs::read_dir(&directory) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                // Binaries are their own crates; `tests` directories hold test modules.
                if path.file_name().is_some_and(|name| name != "bin" && name != "tests") {
                    pending.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|extension| extension != "rs") {
                continue;
            }
            let relative = path.strip_prefix(source_root).expect("under the source root");
            let mut module: Vec<String> =
                relative.iter().map(|part| part.to_string_lossy().trim_end_matches(".rs").to_owned()).collect();
            let stem = module.pop().expect("a file name");
            if stem == "tests" || stem.ends_with("_tests") {
                continue;
            }
            // `mod.rs`, `lib.rs` and `main.rs` are the module of their directory.
            if !matches!(stem.as_str(), "mod" | "lib" | "main") {
                module.push(stem);
            }
            let text = fs::read_to_string(&path).expect("a readable source file");
            let tokens = tokens_of(&code_of(&text));
            let children = declared_children(&tokens);
            let reexports = reexports_of(&tokens);
            let tokens = own_tokens(&tokens);
            files.push(SourceFile { module, tokens, children, reexports });
        }
    }
    files
}

/// Every path the file names, as segments, with use trees (`a::{b, c::d}`) expanded.
fn named_paths(tokens: &[Token]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let Token::Ident(first) = &tokens[i] else {
            i += 1;
            continue;
        };
        // A path starts at an identifier not preceded by `::`.
        if i > 0 && tokens[i - 1] == Token::PathSep {
            i += 1;
            continue;
        }
        let mut segments = vec![first.clone()];
        let mut j = i + 1;
        while tokens.get(j) == Some(&Token::PathSep) {
            match tokens.get(j + 1) {
                Some(Token::Ident(segment)) => {
                    segments.push(segment.clone());
                    j += 2;
                }
                Some(Token::Open) => {
                    j = use_group(tokens, j + 2, &segments, &mut paths);
                    break;
                }
                _ => {
                    j += 1;
                    break;
                }
            }
        }
        if segments.len() > 1 {
            paths.push(segments);
        }
        i = j.max(i + 1);
    }
    paths
}

/// Reads the use group that starts at `start` (just after `{`), adding `prefix::member` for each
/// member; returns the index after the closing `}`.
fn use_group(tokens: &[Token], start: usize, prefix: &[String], paths: &mut Vec<Vec<String>>) -> usize {
    let mut i = start;
    let mut member = prefix.to_vec();
    while i < tokens.len() {
        match &tokens[i] {
            Token::Close => {
                if member.len() > prefix.len() {
                    paths.push(member);
                }
                return i + 1;
            }
            Token::Comma => {
                if member.len() > prefix.len() {
                    paths.push(std::mem::replace(&mut member, prefix.to_vec()));
                }
                i += 1;
            }
            Token::Open => {
                i = use_group(tokens, i + 1, &member, paths);
                member = prefix.to_vec();
            }
            Token::Ident(segment) if segment == "as" => {
                // `x as y`: the alias names nothing new.
                i += 2;
            }
            Token::Ident(segment) => {
                member.push(segment.clone());
                i += 1;
            }
            _ => i += 1,
        }
    }
    i
}

/// The file a path leads into, as an index into `files`: the longest prefix that is a module,
/// followed through that module's re-exports.
fn resolve(
    files: &[SourceFile],
    from: usize,
    path: &[String],
    by_module: &BTreeMap<Vec<String>, usize>,
) -> Option<usize> {
    resolve_within(files, from, path, by_module, 0)
}

fn resolve_within(
    files: &[SourceFile],
    from: usize,
    path: &[String],
    by_module: &BTreeMap<Vec<String>, usize>,
    depth: usize,
) -> Option<usize> {
    const DEEPEST_REEXPORT_CHAIN: usize = 8;
    let file = &files[from];
    let own_module = &file.module;
    let (mut base, rest): (Vec<String>, &[String]) = match path[0].as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (own_module.clone(), &path[1..]),
        "super" => {
            let mut base = own_module.clone();
            let mut rest = path;
            while rest.first().is_some_and(|segment| segment == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
            (base, rest)
        }
        child if file.children.contains(child) => (own_module.clone(), path),
        _ => return None,
    };
    let mut found = by_module.get(&base).copied()?;
    let mut consumed = 0;
    for segment in rest {
        base.push(segment.clone());
        match by_module.get(&base) {
            Some(&next) => {
                found = next;
                consumed += 1;
            }
            None => break,
        }
    }
    if let Some(name) = rest.get(consumed)
        && let Some(target) = files[found].reexports.get(name)
        && depth < DEEPEST_REEXPORT_CHAIN
        && let Some(through) = resolve_within(files, found, target, by_module, depth + 1)
    {
        return Some(through);
    }
    Some(found)
}

/// The strongly connected components of the import graph with more than one file (Tarjan).
fn import_cycles(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct Search<'a> {
        edges: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        cycles: Vec<Vec<usize>>,
    }
    impl Search<'_> {
        fn visit(&mut self, node: usize) {
            self.index[node] = Some(self.next);
            self.low[node] = self.next;
            self.next += 1;
            self.stack.push(node);
            self.on_stack[node] = true;
            for &next in &self.edges[node] {
                match self.index[next] {
                    None => {
                        self.visit(next);
                        self.low[node] = self.low[node].min(self.low[next]);
                    }
                    Some(index) if self.on_stack[next] => self.low[node] = self.low[node].min(index),
                    Some(_) => {}
                }
            }
            if Some(self.low[node]) == self.index[node] {
                let mut component = Vec::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack[member] = false;
                    component.push(member);
                    if member == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.cycles.push(component);
                }
            }
        }
    }
    let mut search = Search {
        edges,
        index: vec![None; edges.len()],
        low: vec![0; edges.len()],
        on_stack: vec![false; edges.len()],
        stack: Vec::new(),
        next: 0,
        cycles: Vec::new(),
    };
    for node in 0..edges.len() {
        if search.index[node].is_none() {
            search.visit(node);
        }
    }
    search.cycles
}

/// Whether one file is the module of the other's parent: the two may refer to each other (a
/// module's children implement its types, and it names theirs), so that is no cycle.
fn parent_and_child(one: &SourceFile, other: &SourceFile) -> bool {
    let is_parent = |parent: &SourceFile, child: &SourceFile| {
        child.module.len() == parent.module.len() + 1 && child.module.starts_with(&parent.module)
    };
    // The crate root is every top-level module's parent, but it is the facade, not a layer: a
    // top-level module that names an item of the root still imports from it.
    !one.module.is_empty() && !other.module.is_empty() && (is_parent(one, other) || is_parent(other, one))
}

fn module_name(file: &SourceFile) -> String {
    if file.module.is_empty() { "crate root".to_owned() } else { file.module.join("::") }
}

/// The import cycles of one crate, each as its files' module paths, sorted.
fn cycles_of_crate(source_root: &Path) -> Vec<Vec<String>> {
    let files = crate_sources(source_root);
    let by_module: BTreeMap<Vec<String>, usize> =
        files.iter().enumerate().map(|(index, file)| (file.module.clone(), index)).collect();
    let edges: Vec<BTreeSet<usize>> = files
        .iter()
        .enumerate()
        .map(|(index, file)| {
            named_paths(&file.tokens)
                .iter()
                .filter_map(|path| resolve(&files, index, path, &by_module))
                .filter(|&target| target != index && !parent_and_child(&files[index], &files[target]))
                .collect()
        })
        .collect();
    let mut cycles: Vec<Vec<String>> = import_cycles(&edges)
        .into_iter()
        .map(|component| {
            let mut names: Vec<String> = component.iter().map(|&file| module_name(&files[file])).collect();
            names.sort();
            names
        })
        .collect();
    cycles.sort();
    cycles
}

fn workspace_crates() -> Vec<(String, PathBuf)> {
    let root = repository_root();
    let mut crates = vec![("cwsandbox-api".to_owned(), root.join("src"))];
    let mut members: Vec<PathBuf> = fs::read_dir(root.join("crates"))
        .expect("the crates directory")
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.join("src").is_dir())
        .collect();
    members.sort();
    crates.extend(members.into_iter().map(|path| {
        let name = path.file_name().expect("a crate directory").to_string_lossy().into_owned();
        (name, path.join("src"))
    }));
    crates
}

#[test]
fn no_crate_has_an_import_cycle_of_more_than_three_files() {
    let mut problems = Vec::new();
    for (name, source_root) in workspace_crates() {
        for cycle in cycles_of_crate(&source_root) {
            if cycle.len() > LARGEST_ALLOWED_CYCLE {
                problems.push(format!("{name}: {} files import each other: {}", cycle.len(), cycle.join(", ")));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "import cycles larger than {LARGEST_ALLOWED_CYCLE} files (a module and its parent may refer to each \
         other; anything larger is a layer importing from above it):\n{}",
        problems.join("\n")
    );
}

/// The check finds what it is for: a cycle through `crate::`, `super::`, a use group and a
/// re-export of the crate root (followed to the file it leads to, and not an import of the root
/// itself), in a crate written for the test; a module and its parent, comments, strings and tests
/// do not count.
#[test]
fn the_check_sees_each_kind_of_path_and_ignores_comments_strings_and_tests() {
    let directory = std::env::temp_dir().join(format!("cwsbx-layering-{}", std::process::id()));
    let source_root = directory.join("src");
    fs::create_dir_all(source_root.join("world")).expect("a scratch crate");
    let write = |relative: &str, text: &str| fs::write(source_root.join(relative), text).expect("a scratch file");
    write("lib.rs", "pub mod a;\npub mod b;\npub mod c;\npub mod world;\npub mod quiet;\npub use c::cee;\n");
    write("a.rs", "use crate::{b::{Bee as B2}, x};\npub fn a() {}\n");
    write("b.rs", "pub fn b() { crate::cee(); }\n");
    write("c.rs", "pub fn cee() { super::world::helper::h(); }\n");
    // A module and its child refer to each other: no cycle.
    write("world/mod.rs", "mod helper;\npub fn w() { helper::h(); }\n");
    write("world/helper.rs", "pub fn h() { crate::a::a(); super::w(); }\n");
    write(
        "quiet.rs",
        "// crate::a::a()\n/* crate::b::b() */\npub const S: &str = \"crate::c::c\";\npub const R: &str = \
         r#\"crate::a\"#;\n#[cfg(test)]\nuse crate::b::b;\n#[cfg(test)]\nmod tests { use crate::a::a; fn f() { \
         crate::c::c(); } }\npub fn later() { crate::quiet::later(); }\n",
    );
    let cycles = cycles_of_crate(&source_root);
    fs::remove_dir_all(&directory).ok();
    assert_eq!(cycles, vec![vec!["a".to_owned(), "b".to_owned(), "c".to_owned(), "world::helper".to_owned()]]);
}
