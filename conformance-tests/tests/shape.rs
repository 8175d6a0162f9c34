//! The workspace's own shape, checked on its sources: no file under a
//! crate's `src/` over 500 lines (tests live in `tests/`), and no module
//! cycle in any crate — no file
//! names an item of another file that names an item of it, by any path
//! (`crate::`, `super::`, `self::`, a child module's name, a name a `use`
//! bound), parent and child included. A path to a re-export counts as a
//! path to the item's own file.
//!
//! Run alone with `cargo test -p conformance-tests --test shape`.
//! `KNOWN_LONG` lists the files over 500 lines (none now) and
//! `KNOWN_CYCLES` the module cycles (each a set of files that all reach
//! each other) there were when the checks came; each must go (issue 28). The test fails on a long
//! file or a cycle not listed — a new one, or a listed cycle that grew or
//! merged with another — and on a listed one that is gone or shrank, so
//! the lists only shrink.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The size the project set itself.
const MAX_LINES: usize = 500;

/// Files over [`MAX_LINES`] when the check came.
const KNOWN_LONG: &[&str] = &[];

/// Module cycles when the check came: each one's files, sorted, joined
/// by " ↔ ".
const KNOWN_CYCLES: &[&str] = &[];

#[test]
fn no_source_file_is_over_500_lines() {
    let mut long = BTreeSet::new();
    for krate in crates() {
        for file in rust_files(&krate.join("src")) {
            let lines = std::fs::read_to_string(&file)
                .expect("read a source file")
                .lines()
                .count();
            if lines > MAX_LINES {
                long.insert(format!("{} ({lines})", relative(&file)));
            }
        }
    }
    let found: BTreeSet<String> = long
        .iter()
        .map(|l| l.split(" (").next().unwrap_or_default().to_owned())
        .collect();
    compare("file over 500 lines", &found, KNOWN_LONG, &long);
}

#[test]
fn no_module_names_one_that_names_it() {
    let mut cycles = BTreeSet::new();
    let mut shown = BTreeSet::new();
    for krate in crates() {
        for root in crate_roots(&krate.join("src")) {
            let tree = ModuleTree::read(&root);
            for cycle in tree.cycles() {
                let key = cycle.join(" ↔ ");
                shown.insert(format!("{key}\n    {}", tree.explain(&cycle)));
                cycles.insert(key);
            }
        }
    }
    compare("module cycle", &cycles, KNOWN_CYCLES, &shown);
}

/// One config type per backend, at its crate's root: `lib.rs` keeps the
/// `config` module private and re-exports a `…Config` from it, and no
/// second public config type (`…Options`) exists beside it.
#[test]
fn each_backend_has_one_config_type_at_its_root() {
    let backends: Vec<PathBuf> = crates()
        .into_iter()
        .filter(|k| {
            let name = k.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.starts_with("lock-") && name != "lock-core"
        })
        .collect();
    assert!(backends.len() >= 6, "{backends:?}");
    for krate in backends {
        let lib = std::fs::read_to_string(krate.join("src/lib.rs")).expect("read lib.rs");
        let name = relative(&krate);
        assert!(
            lib.lines().any(|l| l.trim() == "mod config;"),
            "{name}: the config module is private; its type is re-exported at the root"
        );
        assert!(
            lib.lines()
                .any(|l| l.starts_with("pub use config::") && l.contains("Config")),
            "{name}: lib.rs re-exports its config type (`pub use config::…Config`)"
        );
        for file in rust_files(&krate.join("src")) {
            let source = std::fs::read_to_string(&file).expect("read a source file");
            for line in source.lines() {
                let line = line.trim();
                let public_options = line.starts_with("pub struct ")
                    && line
                        .split_whitespace()
                        .nth(2)
                        .is_some_and(|t| t.trim_end_matches(['{', '(', ';']).ends_with("Options"));
                assert!(
                    !public_options,
                    "{}: a second public config type: {line}",
                    relative(&file)
                );
            }
        }
    }
}

/// Fails on an entry of `found` not in `known` (new) or of `known` not in
/// `found` (gone: take it off the list); `shown` has the details.
fn compare(what: &str, found: &BTreeSet<String>, known: &[&str], shown: &BTreeSet<String>) {
    let known: BTreeSet<String> = known.iter().map(|k| k.to_string()).collect();
    let new: Vec<&String> = found.difference(&known).collect();
    let gone: Vec<&String> = known.difference(found).collect();
    let all: Vec<&String> = shown.iter().collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "{what}: new {new:#?}; gone (take them off the list) {gone:#?}; all found:\n{}",
        all.iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The workspace's root directory.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_owned()
}

/// Every crate of the workspace: a directory with a manifest and `src/`.
fn crates() -> Vec<PathBuf> {
    let mut crates: Vec<PathBuf> = std::fs::read_dir(workspace())
        .expect("list the workspace")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|d| d.join("Cargo.toml").is_file() && d.join("src").is_dir())
        .collect();
    crates.sort();
    assert!(crates.len() > 5, "no crates found in {:?}", workspace());
    crates
}

/// A path from the workspace's root, for messages.
fn relative(file: &Path) -> String {
    file.strip_prefix(workspace())
        .unwrap_or(file)
        .display()
        .to_string()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The crate roots under `src`: `lib.rs`, `main.rs`, `bin/*.rs` and
/// `bin/*/main.rs`.
fn crate_roots(src: &Path) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| src.join(f))
        .filter(|f| f.is_file())
        .collect();
    if let Ok(entries) = std::fs::read_dir(src.join("bin")) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "rs") {
                roots.push(path);
            } else if path.join("main.rs").is_file() {
                roots.push(path.join("main.rs"));
            }
        }
    }
    roots.sort();
    roots
}

/// A module path from the crate root (`[]` is the root).
type ModPath = Vec<String>;

/// One crate's modules that live in files of their own, and what each
/// file names.
struct ModuleTree {
    /// Module path → its file.
    files: BTreeMap<ModPath, PathBuf>,
    /// Module path → its source, tokenized.
    tokens: BTreeMap<ModPath, Vec<Token>>,
    /// Module path → the names its file binds with `use`, to absolute
    /// paths.
    uses: BTreeMap<ModPath, BTreeMap<String, ModPath>>,
    /// File-module → the file-modules it names, each with one path that
    /// names it.
    edges: BTreeMap<ModPath, BTreeMap<ModPath, String>>,
}

impl ModuleTree {
    /// Follows the `mod x;` declarations from `root`.
    fn read(root: &Path) -> Self {
        let mut tree = Self {
            files: BTreeMap::new(),
            tokens: BTreeMap::new(),
            uses: BTreeMap::new(),
            edges: BTreeMap::new(),
        };
        let dir = root.parent().expect("a directory").to_owned();
        tree.add(Vec::new(), root.to_owned(), dir);
        let uses = tree
            .tokens
            .keys()
            .map(|module| (module.clone(), tree.bound_by_use(module)))
            .collect();
        tree.uses = uses;
        tree.edges = tree.named_modules();
        tree
    }

    /// Adds the module `path` in `file`, whose child modules' files are
    /// in `dir`.
    fn add(&mut self, path: ModPath, file: PathBuf, dir: PathBuf) {
        let source = std::fs::read_to_string(&file).expect("read a source file");
        let tokens = tokenize(&source);
        for child in declared_modules(&tokens) {
            let flat = dir.join(format!("{child}.rs"));
            let nested = dir.join(&child).join("mod.rs");
            let (child_file, child_dir) = if flat.is_file() {
                (flat, dir.join(&child))
            } else if nested.is_file() {
                (nested, dir.join(&child))
            } else {
                continue; // an inline module or a cfg'd-out one
            };
            let mut child_path = path.clone();
            child_path.push(child);
            self.add(child_path, child_file, child_dir);
        }
        self.files.insert(path.clone(), file);
        self.tokens.insert(path, tokens);
    }

    /// The module of `path`'s longest prefix that has a file, and what is
    /// left of the path after it.
    fn file_module<'a>(&self, path: &'a [String]) -> (ModPath, &'a [String]) {
        for len in (0..=path.len()).rev() {
            if self.files.contains_key(&path[..len]) {
                return (path[..len].to_vec(), &path[len..]);
            }
        }
        (Vec::new(), path)
    }

    /// The file-module an absolute path leads to, through re-exports.
    fn target(&self, path: &[String], depth: usize) -> ModPath {
        let (module, rest) = self.file_module(path);
        if depth < 8
            && let Some(first) = rest.first()
            && let Some(bound) = self.uses[&module].get(first)
        {
            let mut next = bound.clone();
            next.extend(rest[1..].iter().cloned());
            let (next_module, _) = self.file_module(&next);
            if next_module != module {
                return self.target(&next, depth + 1);
            }
        }
        module
    }

    /// The names `module`'s file binds with `use`, to absolute paths.
    fn bound_by_use(&self, module: &ModPath) -> BTreeMap<String, ModPath> {
        let tokens = &self.tokens[module];
        let mut bound = BTreeMap::new();
        for (context, path) in paths(tokens, module) {
            if let Some(absolute) = self.absolute(&context, &path.segments, None)
                && let Some(name) = path.binds
            {
                bound.insert(name, absolute);
            }
        }
        bound
    }

    /// `segments` as an absolute module path, read in `context` (a module
    /// path, inline modules included); `None` for another crate's path or
    /// a local name. `uses` are the names bound in the file.
    fn absolute(
        &self,
        context: &ModPath,
        segments: &[String],
        uses: Option<&BTreeMap<String, ModPath>>,
    ) -> Option<ModPath> {
        let first = segments.first()?;
        let mut base = match first.as_str() {
            "crate" | "$crate" => return Some(segments[1..].to_vec()),
            "self" => context.clone(),
            "super" => {
                let mut base = context.clone();
                let mut rest = segments;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
                base.extend(rest.iter().cloned());
                return Some(base);
            }
            _ => {
                let mut child = context.clone();
                child.push(first.clone());
                if self.files.contains_key(&child) || self.is_inline(context, first) {
                    child.extend(segments[1..].iter().cloned());
                    return Some(child);
                }
                let bound = uses?.get(first)?;
                let mut path = bound.clone();
                path.extend(segments[1..].iter().cloned());
                return Some(path);
            }
        };
        base.extend(segments[1..].iter().cloned());
        Some(base)
    }

    /// Whether `name` is an inline module in the file of `context`.
    fn is_inline(&self, context: &ModPath, name: &str) -> bool {
        let (module, _) = self.file_module(context);
        self.tokens[&module]
            .windows(3)
            .any(|w| w[0].is("mod") && w[1].is(name) && w[2].is("{"))
    }

    /// Which file-modules each file-module names.
    fn named_modules(&self) -> BTreeMap<ModPath, BTreeMap<ModPath, String>> {
        let mut edges: BTreeMap<ModPath, BTreeMap<ModPath, String>> = BTreeMap::new();
        for (module, tokens) in &self.tokens {
            let uses = &self.uses[module];
            for (context, path) in paths(tokens, module) {
                let Some(absolute) = self.absolute(&context, &path.segments, Some(uses)) else {
                    continue;
                };
                let target = self.target(&absolute, 0);
                if &target != module {
                    edges
                        .entry(module.clone())
                        .or_default()
                        .entry(target)
                        .or_insert_with(|| path.segments.join("::"));
                }
            }
        }
        edges
    }

    /// The strongly connected sets of more than one file, each as its
    /// files (relative, sorted).
    fn cycles(&self) -> Vec<Vec<String>> {
        let edges = &self.edges;
        let mut cycles = Vec::new();
        let mut seen = BTreeSet::new();
        for start in self.files.keys() {
            if seen.contains(start) {
                continue;
            }
            let reach = |from: &ModPath| {
                let mut found = BTreeSet::from([from.clone()]);
                let mut todo = vec![from.clone()];
                while let Some(m) = todo.pop() {
                    for next in edges.get(&m).into_iter().flat_map(|e| e.keys()) {
                        if found.insert(next.clone()) {
                            todo.push(next.clone());
                        }
                    }
                }
                found
            };
            let forward = reach(start);
            let component: BTreeSet<ModPath> = forward
                .into_iter()
                .filter(|m| reach(m).contains(start))
                .collect();
            seen.extend(component.iter().cloned());
            if component.len() > 1 {
                let mut files: Vec<String> =
                    component.iter().map(|m| relative(&self.files[m])).collect();
                files.sort();
                cycles.push(files);
            }
        }
        cycles
    }

    /// The edges inside `cycle` (files), each with one path that makes it.
    fn explain(&self, cycle: &[String]) -> String {
        let edges = &self.edges;
        let module_of = |file: &String| {
            self.files
                .iter()
                .find(|(_, f)| &relative(f) == file)
                .map(|(m, _)| m.clone())
        };
        let members: Vec<ModPath> = cycle.iter().filter_map(module_of).collect();
        let mut lines = Vec::new();
        for from in &members {
            for (to, via) in edges.get(from).into_iter().flatten() {
                if members.contains(to) {
                    lines.push(format!(
                        "{} → {} ({via})",
                        relative(&self.files[from]),
                        relative(&self.files[to])
                    ));
                }
            }
        }
        lines.join("\n    ")
    }
}

/// A token of Rust source: comments, strings and characters are gone.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Token(String);

impl Token {
    fn is(&self, text: &str) -> bool {
        self.0 == text
    }

    fn is_ident(&self) -> bool {
        let mut chars = self.0.chars();
        chars
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_' || c == '$')
            && chars.all(|c| c.is_alphanumeric() || c == '_')
    }
}

/// Identifiers, `::` and single punctuation characters of `source`.
fn tokenize(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
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
        } else if c == 'r'
            && next == Some('#')
            && chars
                .get(i + 2)
                .is_some_and(|c| c.is_alphabetic() || *c == '_')
        {
            // A raw identifier, `r#type`: the identifier without `r#`.
            i += 2;
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token(chars[start..i].iter().collect()));
        } else if c == '"' || ((c == 'b' || c == 'c') && next == Some('"')) {
            i += if c == '"' { 1 } else { 2 };
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if (c == 'r' || ((c == 'b' || c == 'c') && next == Some('r')))
            && raw_string_start(&chars, i).is_some()
        {
            let (hashes, body) = raw_string_start(&chars, i).unwrap_or_default();
            i = body;
            loop {
                if i >= chars.len() {
                    break;
                }
                if chars[i] == '"' && chars[i + 1..].iter().take(hashes).all(|&h| h == '#') {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
        } else if c == '\'' {
            // A character literal ('a', '\n', '\u{..}') or a lifetime.
            if next == Some('\\') {
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_alphabetic()
            || c == '_'
            || (c == '$' && next.is_some_and(char::is_alphabetic))
        {
            let start = i;
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token(chars[start..i].iter().collect()));
        } else if c == ':' && next == Some(':') {
            tokens.push(Token("::".into()));
            i += 2;
        } else if c.is_whitespace() || c.is_ascii_digit() {
            i += 1;
        } else {
            tokens.push(Token(c.to_string()));
            i += 1;
        }
    }
    tokens
}

/// For `r"…"`, `r#"…"#`, `br"…"` at `i`: the number of hashes and where
/// the body starts.
fn raw_string_start(chars: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i + if chars[i] == 'r' { 1 } else { 2 };
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (chars.get(j) == Some(&'"')).then_some((hashes, j + 1))
}

/// The names of `mod name;` declarations (not inline `mod name { … }`).
fn declared_modules(tokens: &[Token]) -> Vec<String> {
    tokens
        .windows(3)
        .filter(|w| w[0].is("mod") && w[1].is_ident() && w[2].is(";"))
        .map(|w| w[1].0.clone())
        .collect()
}

/// A path in the source.
struct SourcePath {
    segments: Vec<String>,
    /// The name a `use` binds it to, if it is a `use` leaf.
    binds: Option<String>,
}

/// Every path in `tokens` of the file of `module`, with the module path
/// it is read in (inline modules included): `use` trees expanded, and
/// every `a::b…` elsewhere.
fn paths(tokens: &[Token], module: &ModPath) -> Vec<(ModPath, SourcePath)> {
    let mut found = Vec::new();
    // Inline modules open at a brace depth: (depth, name).
    let mut inline: Vec<(usize, String)> = Vec::new();
    let mut depth = 0;
    let context = |inline: &[(usize, String)]| {
        let mut c = module.clone();
        c.extend(inline.iter().map(|(_, n)| n.clone()));
        c
    };
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        if t.is("{") {
            if i >= 2 && tokens[i - 2].is("mod") && tokens[i - 1].is_ident() {
                inline.push((depth, tokens[i - 1].0.clone()));
            }
            depth += 1;
            i += 1;
        } else if t.is("}") {
            depth = depth.saturating_sub(1);
            if inline.last().is_some_and(|(d, _)| *d == depth) {
                inline.pop();
            }
            i += 1;
        } else if t.is("use") && tokens.get(i + 1).is_some_and(|n| n.is("<")) {
            // `impl Trait + use<'a, T>`: precise capturing, not an import.
            i += 1;
        } else if t.is("in") && i >= 2 && tokens[i - 1].is("(") && tokens[i - 2].is("pub") {
            // `pub(in path)` says where an item is visible; it names none.
            let close = tokens[i..]
                .iter()
                .position(|t| t.is(")"))
                .map_or(tokens.len(), |p| i + p);
            i = close + 1;
        } else if t.is("use") {
            let end = tokens[i..]
                .iter()
                .position(|t| t.is(";"))
                .map_or(tokens.len(), |p| i + p);
            let mut leaves = Vec::new();
            use_tree(&tokens[i + 1..end], Vec::new(), &mut leaves);
            let here = context(&inline);
            found.extend(leaves.into_iter().map(|leaf| (here.clone(), leaf)));
            i = end + 1;
        } else if t.is_ident() && tokens.get(i + 1).is_some_and(|n| n.is("::")) {
            let preceded = i > 0 && tokens[i - 1].is("::");
            let mut segments = vec![t.0.clone()];
            let mut j = i + 1;
            while j + 1 < tokens.len() && tokens[j].is("::") && tokens[j + 1].is_ident() {
                segments.push(tokens[j + 1].0.clone());
                j += 2;
            }
            if !preceded {
                found.push((
                    context(&inline),
                    SourcePath {
                        segments,
                        binds: None,
                    },
                ));
            }
            i = j;
        } else {
            i += 1;
        }
    }
    found
}

/// Expands a `use` tree (`a::{b, c::d as e, f::*}`) after `prefix` into
/// its leaves.
fn use_tree(tokens: &[Token], prefix: Vec<String>, leaves: &mut Vec<SourcePath>) {
    let mut path = prefix;
    let mut i = 0;
    // A leading `::` (a path from the extern prelude) names no module here.
    if tokens.first().is_some_and(|t| t.is("::")) {
        return;
    }
    while i < tokens.len() {
        let t = &tokens[i];
        if t.is("{") {
            // Split the group's items at top-level commas.
            let mut depth = 0;
            let mut start = i + 1;
            for j in i + 1..tokens.len() {
                if tokens[j].is("{") {
                    depth += 1;
                } else if tokens[j].is("}") && depth > 0 {
                    depth -= 1;
                } else if (tokens[j].is(",") || tokens[j].is("}")) && depth == 0 {
                    if start < j {
                        use_tree(&tokens[start..j], path.clone(), leaves);
                    }
                    start = j + 1;
                    if tokens[j].is("}") {
                        return;
                    }
                }
            }
            return;
        } else if t.is("*") {
            leaves.push(SourcePath {
                segments: path,
                binds: None,
            });
            return;
        } else if t.is("as") {
            let name = tokens.get(i + 1).map(|t| t.0.clone());
            leaves.push(SourcePath {
                segments: path,
                binds: name.filter(|n| n != "_"),
            });
            return;
        } else if t.is("self") && !path.is_empty() {
            // `a::{self}` binds `a`.
        } else if t.is_ident() {
            path.push(t.0.clone());
        }
        i += 1;
    }
    let binds = path.last().cloned();
    if !path.is_empty() {
        leaves.push(SourcePath {
            segments: path,
            binds,
        });
    }
}
