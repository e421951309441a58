//! The SQL tickler runs, read against what each engine it targets lacks
//! (docs/scaling.md, "The MySQL you run"): MySQL 8.0/8.4 and its managed
//! forms (no SUPER), MariaDB 10.6+, TiDB v7/v8 and Vitess. No server of
//! the three others runs here, so this check reads every migration, the
//! baseline schema, every string literal of `src/store/` and the SQL blocks
//! of docs/ (the recipes operators paste), and refuses:
//!
//! - `CREATE TRIGGER` outside the migrations that once made the history
//!   triggers and the optional hand-edit triggers (`src/store/history.rs`):
//!   ERROR 1419 without SUPER where binary logging is on;
//! - a character set or collation TiDB does not support (ERROR 1273);
//! - `RETURNING`, `CREATE OR REPLACE`, `IF [NOT] EXISTS` on a column or an
//!   index: MariaDB's, not MySQL's;
//! - `||`: OR on MySQL, concatenation under PIPES_AS_CONCAT; vtgate refuses
//!   the mode, so tickler's sessions run without it;
//! - a `SET` (or `ON DUPLICATE KEY UPDATE`) list whose expression reads a
//!   column assigned earlier in the same list: MySQL and MariaDB read the
//!   new value, TiDB the old one;
//! - SQL that takes id order for time order (`ORDER BY id`, `MAX(id)`, a
//!   range on id) without a `id-order:` comment above it saying why that
//!   is sound: on TiDB each server allocates ids from its own range unless
//!   the table says `AUTO_ID_CACHE=1`;
//! - a time bound with `.naive_utc()` outside `db_time`: MySQL rounds a
//!   sub-millisecond time into DATETIME(3), MariaDB truncates it.
//!
//! The check is textual. A statement pieced together at run time (a
//! `QueryBuilder`'s pushes) is read piece by piece, and its `SET` list once
//! more with every piece of its function joined in source order: that view
//! holds every branch, so a read that one branch makes where another
//! assigns is sound only with a `set-order:` comment saying why. The
//! self-tests below show each rule refusing the construct it names.

use std::path::PathBuf;

use regex::Regex;

/// Where a construct may be, and why.
const TRIGGERS_ALLOWED: [(&str, &str); 4] = [
    (
        "migrations/V3__",
        "history triggers before V24: recorded, never run, where not applied",
    ),
    (
        "migrations/V4__",
        "history triggers before V24: recorded, never run, where not applied",
    ),
    (
        "migrations/V20__",
        "history triggers before V24: recorded, never run, where not applied",
    ),
    (
        "src/store/history.rs",
        "history_hand_edits = trigger: optional, never needed by tickler",
    ),
];

/// Collations that may be named although TiDB lacks them, and why.
const COLLATIONS_ALLOWED: [(&str, &str, &str); 1] = [(
    "migrations/V11__",
    "ascii_general_ci",
    "TiDB installs from schema/baseline.sql (schema_baseline), where api_tokens is utf8mb4",
)];

/// What TiDB v7/v8 supports with its new collation framework (the default).
const TIDB_CHARSETS: [&str; 6] = ["ascii", "binary", "gbk", "latin1", "utf8", "utf8mb4"];
const TIDB_COLLATIONS: [&str; 13] = [
    "ascii_bin",
    "binary",
    "gbk_bin",
    "gbk_chinese_ci",
    "latin1_bin",
    "utf8_bin",
    "utf8_general_ci",
    "utf8_unicode_ci",
    "utf8mb4_0900_ai_ci",
    "utf8mb4_0900_bin",
    "utf8mb4_bin",
    "utf8mb4_general_ci",
    "utf8mb4_unicode_ci",
];

/// How many source lines above a statement its `id-order:` comment may be.
const MARKER_REACH: usize = 15;

/// One piece of SQL: its text with comments removed and quoted strings
/// blanked, and the source line of each byte.
struct Sql {
    file: String,
    text: String,
    lines: Vec<usize>,
}

impl Sql {
    fn line(&self, offset: usize) -> usize {
        self.lines[offset.min(self.lines.len().saturating_sub(1))]
    }
}

/// A file's text with the line each character comes from: a piece of SQL
/// before [`clean`].
type Located = Vec<(char, usize)>;

#[derive(Debug, Clone, PartialEq)]
struct Finding {
    file: String,
    line: usize,
    rule: &'static str,
    text: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.file, self.line, self.rule, self.text
        )
    }
}

/// The string literals of Rust source, each character with its line:
/// escapes decoded, a `\` line continuation dropped with the indentation
/// after it, raw strings as written; comments and char literals skipped.
fn rust_literals(source: &str) -> Vec<Located> {
    rust_literals_at(source)
        .into_iter()
        .map(|(_, literal)| literal)
        .collect()
}

/// [`rust_literals`], each with the index of the character it opens at.
fn rust_literals_at(source: &str) -> Vec<(usize, Located)> {
    let chars: Vec<char> = source.chars().collect();
    let mut literals = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                i += 2;
                while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
                i += 2;
            }
            '\'' => {
                // A char literal ('x', '\n', '"'), else a lifetime.
                if next == Some('\\') {
                    i += 2;
                    while i < chars.len() && chars[i] != '\'' {
                        i += 1;
                    }
                    i += 1;
                } else if chars.get(i + 2) == Some(&'\'') {
                    i += 3;
                } else {
                    i += 1;
                }
            }
            'r' if (i == 0 || !ident(chars[i - 1])) && matches!(next, Some('"') | Some('#')) => {
                let mut j = i + 1;
                let mut hashes = 0;
                while chars.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if chars.get(j) != Some(&'"') {
                    i += 1;
                    continue;
                }
                j += 1;
                let mut literal = Vec::new();
                while j < chars.len() {
                    let closes =
                        chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#'));
                    if closes {
                        break;
                    }
                    literal.push((chars[j], line));
                    line += usize::from(chars[j] == '\n');
                    j += 1;
                }
                literals.push((i, literal));
                i = j + 1 + hashes;
            }
            '"' => {
                let mut j = i + 1;
                let mut literal = Vec::new();
                while j < chars.len() && chars[j] != '"' {
                    if chars[j] == '\\' {
                        let escaped = chars.get(j + 1).copied().unwrap_or('\\');
                        j += 2;
                        match escaped {
                            '\n' => {
                                line += 1;
                                while j < chars.len() && chars[j].is_whitespace() {
                                    line += usize::from(chars[j] == '\n');
                                    j += 1;
                                }
                            }
                            'n' => literal.push(('\n', line)),
                            't' => literal.push(('\t', line)),
                            'r' | '0' => literal.push((' ', line)),
                            'x' => {
                                j += 2;
                                literal.push(('?', line));
                            }
                            'u' => {
                                while j < chars.len() && chars[j] != '}' {
                                    j += 1;
                                }
                                j += 1;
                                literal.push(('?', line));
                            }
                            other => literal.push((other, line)),
                        }
                        continue;
                    }
                    literal.push((chars[j], line));
                    line += usize::from(chars[j] == '\n');
                    j += 1;
                }
                literals.push((i, literal));
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    literals
}

/// A whole file, each character with its line.
fn located(text: &str) -> Located {
    let mut line = 1;
    text.chars()
        .map(|c| {
            let at = (c, line);
            line += usize::from(c == '\n');
            at
        })
        .collect()
}

/// SQL without its comments (`-- `, `#`, `/* */`, TiDB's `/*T! */` too) and
/// with every quoted string's content blanked, so neither is read as SQL.
fn clean(file: &str, sql: &[(char, usize)]) -> Sql {
    let mut text = String::new();
    let mut lines = Vec::new();
    let mut push = |c: char, line: usize, text: &mut String| {
        text.push(c);
        lines.extend(std::iter::repeat_n(line, c.len_utf8()));
    };
    let mut i = 0;
    while i < sql.len() {
        let (c, line) = sql[i];
        let next = sql.get(i + 1).map(|&(c, _)| c);
        let after = sql.get(i + 2).map(|&(c, _)| c);
        if (c == '-' && next == Some('-') && after.is_none_or(char::is_whitespace)) || c == '#' {
            while i < sql.len() && sql[i].0 != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < sql.len() && !(sql[i].0 == '*' && sql[i + 1].0 == '/') {
                i += 1;
            }
            i += 2;
            push(' ', line, &mut text);
        } else if c == '\'' || c == '"' {
            push(c, line, &mut text);
            i += 1;
            while i < sql.len() {
                let (q, line) = sql[i];
                if q == '\\' {
                    i += 2;
                    continue;
                }
                if q == c && sql.get(i + 1).map(|&(c, _)| c) == Some(c) {
                    i += 2;
                    continue;
                }
                if q == c {
                    push(c, line, &mut text);
                    i += 1;
                    break;
                }
                push(if q == '\n' { '\n' } else { ' ' }, line, &mut text);
                i += 1;
            }
        } else {
            push(c, line, &mut text);
            i += 1;
        }
    }
    Sql {
        file: file.to_owned(),
        text,
        lines,
    }
}

/// Whether a Rust literal is SQL: tickler writes its SQL's keywords in
/// capitals, its messages in sentences.
fn looks_like_sql(text: &str) -> bool {
    static KEYWORDS: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    KEYWORDS
        .get_or_init(|| {
            Regex::new(
                r"\b(SELECT|INSERT|UPDATE|DELETE|REPLACE|CREATE|ALTER|DROP|SET|WHERE|FROM|JOIN|ORDER BY|GROUP BY|LIMIT|VALUES|COLLATE|RETURNING)\b",
            )
            .unwrap()
        })
        .is_match(text)
}

fn finding(sql: &Sql, offset: usize, rule: &'static str, text: &str) -> Finding {
    Finding {
        file: sql.file.clone(),
        line: sql.line(offset),
        rule,
        text: text.split_whitespace().collect::<Vec<_>>().join(" "),
    }
}

fn regex(pattern: &str) -> Regex {
    Regex::new(&format!("(?i){pattern}")).unwrap()
}

fn triggers(sql: &Sql) -> Vec<Finding> {
    if TRIGGERS_ALLOWED
        .iter()
        .any(|(file, _)| sql.file.contains(file))
    {
        return Vec::new();
    }
    let create = regex(r"\bCREATE\s+(DEFINER\s*=\s*\S+\s+)?TRIGGER\s+\S+\s+(BEFORE|AFTER)\b");
    create
        .find_iter(&sql.text)
        .map(|m| finding(sql, m.start(), "trigger", m.as_str()))
        .collect()
}

fn collations(sql: &Sql) -> Vec<Finding> {
    let named = regex(r"\b(COLLATE|CHARACTER\s+SET|CHARSET)\s*=?\s*([A-Za-z0-9_]+)");
    named
        .captures_iter(&sql.text)
        .filter_map(|caps| {
            let kind = caps[1].to_ascii_uppercase();
            let name = caps[2].to_ascii_lowercase();
            let supported = if kind == "COLLATE" {
                TIDB_COLLATIONS.contains(&name.as_str())
            } else {
                TIDB_CHARSETS.contains(&name.as_str())
            };
            let allowed = COLLATIONS_ALLOWED
                .iter()
                .any(|(file, collation, _)| sql.file.contains(file) && *collation == name);
            let whole = caps.get(0).unwrap();
            (!supported && !allowed)
                .then(|| finding(sql, whole.start(), "collation", whole.as_str()))
        })
        .collect()
}

fn mariadb_only(sql: &Sql) -> Vec<Finding> {
    let rules: [(&str, &'static str); 4] = [
        (r"\bRETURNING\b", "returning"),
        (r"\bCREATE\s+OR\s+REPLACE\b", "create-or-replace"),
        (
            r"\b(ADD|DROP|MODIFY|CHANGE)\s+((COLUMN|INDEX|KEY|CONSTRAINT|PARTITION|(UNIQUE|FULLTEXT|SPATIAL)\s+(INDEX|KEY))\s+)?IF\s+(NOT\s+)?EXISTS\b",
            "if-exists-on-column-or-index",
        ),
        (
            r"\bCREATE\s+((UNIQUE|FULLTEXT|SPATIAL)\s+)?INDEX\s+IF\s+NOT\s+EXISTS\b",
            "if-exists-on-column-or-index",
        ),
    ];
    let mut found = Vec::new();
    for (pattern, rule) in rules {
        found.extend(
            regex(pattern)
                .find_iter(&sql.text)
                .map(|m| finding(sql, m.start(), rule, m.as_str())),
        );
    }
    found.extend(sql.text.match_indices("||").map(|(at, _)| {
        finding(
            sql,
            at,
            "pipes",
            &sql.text[at.saturating_sub(30)..(at + 32).min(sql.text.len())],
        )
    }));
    found
}

/// Splits at the commas outside parentheses.
fn split_top(list: &str) -> Vec<(usize, &str)> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (at, c) in list.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push((start, &list[start..at]));
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push((start, &list[start..]));
    parts
}

/// The table alias and column an identifier names, lower case: `j.status`
/// is (`j`, `status`).
fn column(identifier: &str) -> (Option<String>, String) {
    let name = |part: &str| part.trim_matches('`').to_ascii_lowercase();
    match identifier.rsplit_once('.') {
        Some((table, column)) => (Some(name(table)), name(column)),
        None => (None, name(identifier)),
    }
}

/// Whether two identifiers may name the same column: `v.status` (a
/// derived table's) is not `j.status`.
fn same_column(a: &(Option<String>, String), b: &(Option<String>, String)) -> bool {
    a.1 == b.1 && (a.0.is_none() || b.0.is_none() || a.0 == b.0)
}

fn set_order(sql: &Sql) -> Vec<Finding> {
    let list_start = regex(r"\bSET\b|\bON\s+DUPLICATE\s+KEY\s+UPDATE\b");
    let list_end = regex(r"\b(WHERE|ORDER\s+BY|LIMIT)\b|;");
    let assignment =
        regex(r"^\s*(`?[A-Za-z_][A-Za-z0-9_]*`?(\.`?[A-Za-z_][A-Za-z0-9_]*`?)?)\s*=(.*)$");
    let insert_row = regex(r"\bVALUES\s*\(\s*[A-Za-z0-9_.`]+\s*\)");
    let placeholder = regex(r"\{[^}]*\}");
    let identifier = regex(r"@*`?[A-Za-z_][A-Za-z0-9_]*`?(\.`?[A-Za-z_][A-Za-z0-9_]*`?)?");
    let mut found = Vec::new();
    for start in list_start.find_iter(&sql.text) {
        let rest = &sql.text[start.end()..];
        // Session variables and transaction settings are not row updates.
        let head = rest.trim_start().to_ascii_uppercase();
        if [
            "@",
            "SESSION",
            "GLOBAL",
            "NAMES",
            "TRANSACTION",
            "LOCAL",
            "PERSIST",
        ]
        .iter()
        .any(|word| head.starts_with(word))
        {
            continue;
        }
        let end = list_end.find(rest).map_or(rest.len(), |m| m.start());
        let mut assigned: Vec<(Option<String>, String)> = Vec::new();
        for (offset, part) in split_top(&rest[..end]) {
            let Some(caps) = assignment.captures(part.trim_end()) else {
                continue;
            };
            let target = column(&caps[1]);
            let expression = insert_row.replace_all(&caps[3], " ");
            let expression = placeholder.replace_all(&expression, " ");
            let read = identifier
                .find_iter(&expression)
                .map(|m| m.as_str())
                .filter(|token| !token.starts_with('@'))
                .map(column)
                // Its own column: the row's (a column assigned twice in
                // one list is, pieced together, two branches' alternatives).
                .filter(|read| !same_column(read, &target))
                .find(|read| assigned.iter().any(|earlier| same_column(earlier, read)));
            if let Some((_, name)) = read {
                let indent = part.len() - part.trim_start().len();
                found.push(finding(
                    sql,
                    start.end() + offset + indent,
                    "set-order",
                    &format!(
                        "{} reads {name}, assigned before it: {}",
                        target.1,
                        part.trim()
                    ),
                ));
            }
            assigned.push(target);
        }
    }
    found
}

fn id_order(sql: &Sql, source_lines: &[&str]) -> Vec<Finding> {
    let patterns = [
        regex(r"\bORDER\s+BY\s+([A-Za-z_][A-Za-z0-9_]*\.)?`?id`?\b"),
        regex(r"\b(MAX|MIN)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*\.)?`?id`?\s*\)"),
        regex(r"\b([A-Za-z_][A-Za-z0-9_]*\.)?`?id`?\s*(<=>|<>|>=|<=|>|<)"),
    ];
    let mut found = Vec::new();
    for pattern in &patterns {
        for m in pattern.find_iter(&sql.text) {
            if m.as_str().ends_with("<=>") || m.as_str().ends_with("<>") {
                continue;
            }
            if !marked(source_lines, sql.line(m.start()), "id-order:") {
                found.push(finding(sql, m.start(), "id-order", m.as_str()));
            }
        }
    }
    found
}

/// `.naive_utc()` outside `db_time`: a bound time not truncated to the
/// millisecond.
fn naive_utc(file: &str, source: &str) -> Vec<Finding> {
    let lines: Vec<&str> = source.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, text)| text.contains(".naive_utc()") && !text.trim_start().starts_with("//"))
        .filter(|(n, _)| {
            let from = n.saturating_sub(MARKER_REACH);
            !lines[from..*n]
                .iter()
                .any(|text| text.contains("fn db_time("))
        })
        .map(|(n, text)| Finding {
            file: file.to_owned(),
            line: n + 1,
            rule: "naive-utc",
            text: text.trim().to_owned(),
        })
        .collect()
}

/// Every rule over one piece of SQL.
fn check(sql: &Sql, source_lines: &[&str], with_id_order: bool) -> Vec<Finding> {
    let mut found = triggers(sql);
    found.extend(collations(sql));
    found.extend(mariadb_only(sql));
    found.extend(set_order(sql));
    if with_id_order {
        found.extend(id_order(sql, source_lines));
    }
    found
}

/// Checks Rust source: each SQL-looking literal, each function's
/// statements pieced together, and its `.naive_utc()`s.
fn check_rust(file: &str, source: &str) -> Vec<Finding> {
    let source_lines: Vec<&str> = source.lines().collect();
    let mut found: Vec<Finding> = rust_literals(source)
        .iter()
        .map(|literal| clean(file, literal))
        .filter(|sql| looks_like_sql(&sql.text))
        .flat_map(|sql| check(&sql, &source_lines, true))
        .collect();
    for joined in pieced_together(file, source) {
        for piece in set_order(&joined) {
            let seen = found
                .iter()
                .any(|f| f.line == piece.line && f.rule == piece.rule);
            if !seen && !marked(&source_lines, piece.line, "set-order:") {
                found.push(piece);
            }
        }
    }
    found.extend(naive_utc(file, source));
    found
}

/// Each function's SQL pieces (the literals that look like SQL or are
/// pushed onto a `QueryBuilder`) joined in source order, a statement
/// keyword starting a new statement: what a `SET` list pieced together
/// from pushes reads. Every branch's pieces are there, so a read that only
/// one branch makes after another branch's assignment is found too: a
/// `set-order:` comment above it says why it is sound.
fn pieced_together(file: &str, source: &str) -> Vec<Sql> {
    let chars: Vec<char> = source.chars().collect();
    let starts_function = regex(r"^\s*(pub(\([a-z]+\))?\s+)?(async\s+)?fn\s");
    let statement = regex(r"^\s*(SELECT|INSERT|UPDATE|DELETE|REPLACE|CREATE|ALTER|DROP|WITH)\b");
    let mut functions: Vec<Located> = Vec::new();
    let mut function_of_line = Vec::new();
    for line in source.lines() {
        if starts_function.is_match(line) || functions.is_empty() {
            functions.push(Vec::new());
        }
        function_of_line.push(functions.len() - 1);
    }
    for (at, literal) in rust_literals_at(source) {
        let before: String = chars[at.saturating_sub(40)..at].iter().collect();
        let before = before.trim_end();
        let text: String = literal.iter().map(|(c, _)| *c).collect();
        let pushed = ["push(", "push_unseparated(", "new(", "format!("]
            .iter()
            .any(|call| before.ends_with(call));
        if !pushed && !looks_like_sql(&text) {
            continue;
        }
        let Some(&(_, line)) = literal.first() else {
            continue;
        };
        let function = &mut functions[function_of_line[line - 1]];
        let separator = if statement.is_match(&text) { ';' } else { ' ' };
        function.push((separator, line));
        function.extend(literal);
    }
    functions
        .iter()
        .filter(|function| !function.is_empty())
        .map(|function| clean(file, function))
        .collect()
}

/// Whether a `marker` comment with a reason sits at most [`MARKER_REACH`]
/// lines above `line` (1-based).
fn marked(source_lines: &[&str], line: usize, marker: &str) -> bool {
    let from = line.saturating_sub(MARKER_REACH).max(1);
    (from..=line).any(|n| {
        source_lines
            .get(n - 1)
            .and_then(|text| text.split_once(marker))
            .is_some_and(|(_, why)| why.split_whitespace().count() >= 3)
    })
}

/// Checks a `.sql` file.
fn check_sql_file(file: &str, source: &str) -> Vec<Finding> {
    let source_lines: Vec<&str> = source.lines().collect();
    check(&clean(file, &located(source)), &source_lines, true)
}

/// Checks the ```sql blocks of a Markdown file: an operator's recipe must
/// run on every engine too; its id order is the operator's business.
fn check_markdown(file: &str, source: &str) -> Vec<Finding> {
    let all = located(source);
    let mut found = Vec::new();
    let mut in_sql: Option<usize> = None;
    let mut offset = 0;
    for line in source.split_inclusive('\n') {
        let fence = line.trim_start();
        let chars = line.chars().count();
        match in_sql {
            None if fence.starts_with("```sql") => in_sql = Some(offset + chars),
            Some(start) if fence.starts_with("```") => {
                let block = &all[start..offset];
                found.extend(check(&clean(file, block), &[], false));
                in_sql = None;
            }
            _ => {}
        }
        offset += chars;
    }
    found
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn files(dir: &str, extension: &str) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(root().join(dir))
        .unwrap_or_else(|err| panic!("{dir}: {err}"))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == extension))
        .map(|path| {
            let name = path.strip_prefix(root()).unwrap().display().to_string();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn the_sql_tickler_runs_uses_only_what_every_target_engine_has() {
    let mut found = Vec::new();
    let mut pieces = 0;
    let migrations = files("migrations", "sql");
    assert!(migrations.len() >= 29, "the migrations are read");
    let baseline = "schema/baseline.sql".to_owned();
    let baseline_text = std::fs::read_to_string(root().join(&baseline)).unwrap();
    for (file, text) in migrations.iter().chain([(baseline, baseline_text)].iter()) {
        found.extend(check_sql_file(file, text));
        pieces += 1;
    }
    let store = files("src/store", "rs");
    assert!(store.len() >= 10, "src/store is read");
    for (file, text) in &store {
        pieces += rust_literals(text)
            .iter()
            .filter(|l| looks_like_sql(&l.iter().map(|(c, _)| *c).collect::<String>()))
            .count();
        found.extend(check_rust(file, text));
    }
    for (file, text) in files("docs", "md")
        .iter()
        .chain(files("docs/sql", "sql").iter())
    {
        if file.ends_with(".md") {
            found.extend(check_markdown(file, text));
        } else {
            found.extend(check_sql_file(file, text));
        }
    }
    assert!(
        pieces > 200,
        "only {pieces} pieces of SQL were found: is the reader broken?"
    );
    let report: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert!(
        found.is_empty(),
        "{} construct(s) some target engine lacks (tests/portability.rs says why each is refused):\n{}",
        found.len(),
        report.join("\n")
    );
}

// What TiDB and Vitess lack that tickler still uses (#62): a locking read
// (TiDB locks no subquery, may lose a pessimistic lock with a storage node,
// has no `SKIP LOCKED`; Vitess takes `GET_LOCK` only from `dual`), a write
// to several tables at once or a write that reads another table (refused by
// sharded Vitess), a stored generated column (TiDB cannot add one). The
// portable mode #62 asks for uses none of them; until every one is gone,
// the ones there are counted per file, and the count may only fall: a new
// statement that needs one is refused, and a file that sheds one lowers
// its count here.

/// (file, rule, how many): what is left to take out for #62.
const PORTABLE_DEBT: &[(&str, &str, usize)] = &[("src/store/scratch.rs", "subquery-in-write", 1)];

fn portable_rules() -> &'static [(&'static str, Regex)] {
    static RULES: std::sync::OnceLock<Vec<(&'static str, Regex)>> = std::sync::OnceLock::new();
    RULES.get_or_init(|| {
        vec![
            (
                "locking-read",
                regex(r"\bFOR\s+(UPDATE|SHARE)\b|\bLOCK\s+IN\s+SHARE\s+MODE\b|\bSKIP\s+LOCKED\b|\b(GET_LOCK|RELEASE_LOCK|IS_FREE_LOCK|IS_USED_LOCK)\s*\("),
            ),
            (
                "multi-table-write",
                regex(r"^\s*(UPDATE\s+\w+(\s+(AS\s+)?\w+)?(\s+(FORCE|USE|IGNORE)\s+INDEX\s*\([^)]*\))?\s*((INNER|LEFT|CROSS|STRAIGHT_)\s*)?JOIN\b|UPDATE\s+\w+(\s+(AS\s+)?\w+)?\s*,\s*\w+(\s+(AS\s+)?\w+)?\s+SET\b|DELETE\s+\w+(\s*,\s*\w+)*\s+FROM\b)"),
            ),
            (
                "subquery-in-write",
                regex(r"^\s*(UPDATE|DELETE|INSERT|REPLACE)\b[\s\S]*\bSELECT\b"),
            ),
            (
                "stored-generated-column",
                regex(r"\bAS\s*\([\s\S]*\)\s*(STORED|PERSISTENT)\b"),
            ),
        ]
    })
}

/// The rules one statement breaks, each once.
fn portable_debt_of(sql: &Sql) -> Vec<Finding> {
    portable_rules()
        .iter()
        .filter_map(|(rule, pattern)| {
            let m = pattern.find(&sql.text)?;
            let text: String = m.as_str().chars().take(80).collect();
            Some(finding(sql, m.start(), rule, &text))
        })
        .collect()
}

/// Helpers that put a derived table, or a subquery, into the statement
/// their caller writes: a call counts as the construct in the caller.
const DEBT_HELPERS: [(&str, &str); 4] = [
    ("update_joined(", "multi-table-write"),
    ("positions_join(", "multi-table-write"),
    ("push_fence(", "subquery-in-write"),
    ("PAUSED_NOT", "subquery-in-write"),
];

/// The portable-mode debt of a Rust file, by function: each rule a
/// function's statements break (its SQL pieces joined in source order, as
/// [`pieced_together`] reads them, split into statements) counts once,
/// and so does a call of one of [`DEBT_HELPERS`] from a function that
/// writes.
fn portable_debt_rust(file: &str, source: &str) -> Vec<Finding> {
    let starts_function = regex(r"^\s*(pub(\([a-z]+\))?\s+)?(async\s+)?fn\s+(\w+)");
    let lines: Vec<&str> = source.lines().collect();
    let mut found = Vec::new();
    for function in pieced_together(file, source) {
        let Some(&first) = function.lines.first() else {
            continue;
        };
        // The function's own lines: from the `fn` at or above its first
        // piece to the next `fn`.
        let start = (1..=first)
            .rev()
            .find(|line| starts_function.is_match(lines[line - 1]))
            .unwrap_or(1);
        let end = (first + 1..=lines.len())
            .find(|line| starts_function.is_match(lines[line - 1]))
            .map_or(lines.len(), |line| line - 1);
        let body = lines[start - 1..end].join("\n");
        let defines = starts_function
            .captures(lines[start - 1])
            .and_then(|c| c.get(4))
            .map(|m| format!("{}(", m.as_str()))
            .unwrap_or_default();
        let mut rules: Vec<Finding> = Vec::new();
        let mut offset = 0;
        let mut writes = false;
        for statement in function.text.split(';') {
            let piece = Sql {
                file: file.to_owned(),
                text: statement.to_owned(),
                lines: function.lines[offset..offset + statement.len()].to_vec(),
            };
            offset += statement.len() + 1;
            writes |= regex(r"^\s*(UPDATE|DELETE|INSERT|REPLACE)\b").is_match(statement);
            for finding in portable_debt_of(&piece) {
                if !rules.iter().any(|f| f.rule == finding.rule) {
                    rules.push(finding);
                }
            }
        }
        // A joined UPDATE's helper writes; a subquery's helper counts in a
        // function that writes.
        let calls = |helper: &str| body.contains(helper) && defines != helper;
        writes |= DEBT_HELPERS
            .iter()
            .any(|(helper, rule)| *rule == "multi-table-write" && calls(helper));
        for (helper, rule) in DEBT_HELPERS {
            if calls(helper) && writes && !rules.iter().any(|f| f.rule == rule) {
                rules.push(Finding {
                    file: file.to_owned(),
                    line: start,
                    rule,
                    text: format!("{helper} in a function that writes"),
                });
            }
        }
        found.extend(rules);
    }
    found
}

/// The portable-mode debt of everything tickler sends: the migrations
/// statement by statement, and `src/` function by function.
fn portable_debt() -> Vec<Finding> {
    let mut found = Vec::new();
    for (file, text) in files("migrations", "sql") {
        let mut line = 0;
        for statement in text.split(';') {
            let mut sql = clean(&file, &located(statement));
            sql.lines.iter_mut().for_each(|l| *l += line);
            line += statement.matches('\n').count();
            found.extend(portable_debt_of(&sql));
        }
    }
    let mut dirs = vec![root().join("src")];
    let mut sources = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let name = path.strip_prefix(root()).unwrap().display().to_string();
                sources.push((name, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    sources.sort();
    for (file, text) in &sources {
        found.extend(portable_debt_rust(file, text));
    }
    found
}

#[test]
fn no_new_statement_needs_what_tidb_or_vitess_lack() {
    use std::collections::BTreeMap;
    let found = portable_debt();
    let mut counted: BTreeMap<(String, &str), Vec<&Finding>> = BTreeMap::new();
    for finding in &found {
        counted
            .entry((finding.file.clone(), finding.rule))
            .or_default()
            .push(finding);
    }
    let allowed: BTreeMap<(String, &str), usize> = PORTABLE_DEBT
        .iter()
        .map(|(file, rule, n)| ((file.to_string(), *rule), *n))
        .collect();
    let mut problems = Vec::new();
    for ((file, rule), findings) in &counted {
        let allowed = allowed.get(&(file.clone(), *rule)).copied().unwrap_or(0);
        if findings.len() > allowed {
            problems.push(format!(
                "{file}: {} {rule} where {allowed} were left from before #62 — a new statement needs what TiDB or Vitess lack; write it as a compare-and-set on one table (docs/scaling.md):\n  {}",
                findings.len(),
                findings.iter().map(|f| f.to_string()).collect::<Vec<_>>().join("\n  ")
            ));
        }
    }
    for ((file, rule), n) in &allowed {
        let now = counted.get(&(file.clone(), *rule)).map_or(0, Vec::len);
        if now < *n {
            problems.push(format!(
                "{file}: {now} {rule} where {n} are allowed — one was taken out: lower its count in PORTABLE_DEBT"
            ));
        }
    }
    let total: usize = counted.values().map(Vec::len).sum();
    println!(
        "portable-mode debt: {total} construct(s) in {} (file, rule) pairs",
        counted.len()
    );
    for ((file, rule), findings) in &counted {
        println!("    (\"{file}\", \"{rule}\", {}),", findings.len());
        if std::env::var_os("TICKLER_PORTABLE_DEBT").is_some() {
            for finding in findings {
                println!("        {finding}");
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_portable_debt_rules_find_what_they_name() {
    let rules = |sql: &str| -> Vec<&'static str> {
        let mut rules: Vec<&str> = portable_debt_of(&clean("sample.sql", &located(sql)))
            .iter()
            .map(|f| f.rule)
            .collect();
        rules.dedup();
        rules
    };
    let found = [
        (
            "SELECT id FROM jobs WHERE id = ? FOR UPDATE",
            "locking-read",
        ),
        (
            "SELECT id FROM jobs WHERE status = 'pending' LIMIT 10 FOR UPDATE SKIP LOCKED",
            "locking-read",
        ),
        (
            "SELECT a FROM t WHERE b = ? LOCK IN SHARE MODE",
            "locking-read",
        ),
        ("SELECT GET_LOCK('tickler', 0)", "locking-read"),
        (
            "UPDATE jobs j JOIN t ON t.id = j.id SET j.status = 'x'",
            "multi-table-write",
        ),
        (
            "UPDATE jobs j FORCE INDEX (PRIMARY) STRAIGHT_JOIN t ON t.id = j.id SET j.a = 1",
            "multi-table-write",
        ),
        (
            "UPDATE jobs, instances SET jobs.a = 1 WHERE jobs.b = instances.id",
            "multi-table-write",
        ),
        (
            "DELETE j FROM jobs j JOIN t ON t.id = j.id",
            "multi-table-write",
        ),
        (
            "UPDATE jobs SET a = 1 WHERE topic NOT IN (SELECT topic FROM topic_controls)",
            "subquery-in-write",
        ),
        (
            "INSERT INTO job_events (job_id) SELECT id FROM jobs WHERE event_token = ?",
            "subquery-in-write",
        ),
        (
            "ALTER TABLE jobs ADD COLUMN x INT GENERATED ALWAYS AS (a + 1) STORED",
            "stored-generated-column",
        ),
        (
            "ALTER TABLE jobs ADD COLUMN x INT AS (a + 1) PERSISTENT",
            "stored-generated-column",
        ),
    ];
    for (sql, rule) in found {
        assert_eq!(rules(sql), vec![rule], "{sql}");
    }
    for sql in [
        "UPDATE jobs FORCE INDEX (PRIMARY) SET status = 'dispatching' WHERE id IN (?, ?) AND status = 'pending'",
        "UPDATE jobs SET last_error = 'for update' WHERE id = ?",
        "SELECT j.id FROM jobs j JOIN job_events e ON e.job_id = j.id",
        "ALTER TABLE jobs ADD COLUMN x INT GENERATED ALWAYS AS (a + 1) VIRTUAL",
        "INSERT INTO jobs (topic, payload) VALUES (?, ?)",
        "DELETE FROM jobs WHERE id IN (?, ?)",
    ] {
        assert_eq!(rules(sql), Vec::<&str>::new(), "{sql}");
    }
}

// The check itself: each rule refuses what it names, and lets the
// constructs next to it through.

fn rules_of(sql: &str) -> Vec<&'static str> {
    let mut rules: Vec<&str> = check_sql_file("sample.sql", sql)
        .iter()
        .map(|f| f.rule)
        .collect();
    rules.dedup();
    rules
}

#[test]
fn each_rule_refuses_the_construct_it_names() {
    let refused = [
        // The bulk policy change TiDB got wrong: the base read the old cap.
        (
            "UPDATE jobs SET backoff_cap_ms = ?, backoff_base_ms = LEAST(?, backoff_cap_ms) WHERE id = ?",
            "set-order",
        ),
        (
            "UPDATE jobs j SET j.status = 'done', j.finished_at = IF(j.status = 'done', NOW(), NULL)",
            "set-order",
        ),
        (
            "INSERT INTO t (a, b) VALUES (?, ?) ON DUPLICATE KEY UPDATE a = a + 1, b = a",
            "set-order",
        ),
        ("CREATE TABLE t (a INT) DEFAULT CHARSET = ascii COLLATE = ascii_general_ci", "collation"),
        ("CREATE TABLE t (a VARCHAR(9) CHARACTER SET ucs2)", "collation"),
        ("DELETE FROM jobs WHERE status = 'done' RETURNING id", "returning"),
        ("CREATE OR REPLACE TABLE t (a INT)", "create-or-replace"),
        ("ALTER TABLE jobs ADD COLUMN IF NOT EXISTS x INT", "if-exists-on-column-or-index"),
        ("ALTER TABLE jobs DROP INDEX IF EXISTS x", "if-exists-on-column-or-index"),
        ("CREATE INDEX IF NOT EXISTS i ON jobs (a)", "if-exists-on-column-or-index"),
        ("SELECT topic || ':' || job_key FROM jobs", "pipes"),
        (
            "CREATE TRIGGER t AFTER INSERT ON jobs FOR EACH ROW SET @x = 1",
            "trigger",
        ),
        (
            "CREATE DEFINER = `root`@`%` TRIGGER t BEFORE UPDATE ON jobs FOR EACH ROW SET @x = 1",
            "trigger",
        ),
        ("SELECT id FROM jobs ORDER BY id LIMIT 10", "id-order"),
        ("SELECT MAX(j.id) FROM jobs j", "id-order"),
        ("SELECT * FROM jobs WHERE id >= ? LIMIT 500", "id-order"),
        ("SELECT * FROM jobs WHERE id < ?", "id-order"),
    ];
    for (sql, rule) in refused {
        assert_eq!(rules_of(sql), vec![rule], "{sql}");
    }
}

#[test]
fn what_every_engine_has_passes() {
    let passed = [
        "UPDATE jobs SET version = version + 1, status = ? WHERE id = ? AND version = ?",
        "UPDATE jobs SET status = 'dispatched', attempts = attempts + 1 WHERE status = 'pending'",
        "INSERT INTO t (a, b) VALUES (?, ?) ON DUPLICATE KEY UPDATE a = VALUES(a), b = VALUES(a)",
        "SET SESSION lock_wait_timeout = 2",
        "SET @tickler_actor = 'api'",
        "DROP TABLE IF EXISTS t",
        "DROP TRIGGER IF EXISTS jobs_hand_edited",
        "CREATE TABLE IF NOT EXISTS t (a INT) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin",
        "SELECT 'a || b', \"RETURNING\" FROM t -- ORDER BY id\n",
        "SELECT * FROM job_events WHERE job_id > ? AND id <=> ? AND id <> ?",
        "-- id-order: ids of one statement's multi-row insert only\nSELECT id FROM jobs WHERE id >= ? LIMIT 5",
        "UPDATE jobs SET topic = {column}, status = {status} WHERE id = ?",
    ];
    for sql in passed {
        assert_eq!(rules_of(sql), Vec::<&str>::new(), "{sql}");
    }
    // A marker needs a reason, and to be near.
    let far = format!(
        "-- id-order: sound for reasons\n{}SELECT MAX(id) FROM t",
        "\n".repeat(20)
    );
    assert_eq!(rules_of(&far), vec!["id-order"]);
    assert_eq!(
        rules_of("-- id-order:\nSELECT MAX(id) FROM t"),
        vec!["id-order"]
    );
    // A trigger where it is allowed.
    let hand = check_sql_file(
        "src/store/history.rs",
        "CREATE TRIGGER t AFTER INSERT ON jobs FOR EACH ROW SET @x = 1",
    );
    assert!(hand.is_empty(), "{hand:?}");
}

#[test]
fn rust_literals_are_read_as_the_compiler_reads_them() {
    let source = r##"
// "not a literal" in a comment
/* nor "this" */
let c = '"'; let q = '\''; fn f<'a>(x: &'a str) {}
let sql = "UPDATE jobs \
           SET a = ?, \
           b = a";
let raw = r#"SELECT "quoted" FROM t"#;
let with_escape = "say \"hi\"\n";
"##;
    let literals: Vec<(String, usize)> = rust_literals(source)
        .iter()
        .map(|l| {
            (
                l.iter().map(|(c, _)| *c).collect(),
                l.first().map_or(0, |(_, n)| *n),
            )
        })
        .collect();
    assert_eq!(
        literals,
        vec![
            ("UPDATE jobs SET a = ?, b = a".to_owned(), 5),
            ("SELECT \"quoted\" FROM t".to_owned(), 8),
            ("say \"hi\"\n".to_owned(), 9),
        ]
    );
    // The line of a finding is the line it is written on.
    let found = check_rust("x.rs", source);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].rule, found[0].line), ("set-order", 7));
}

#[test]
fn a_set_list_pieced_together_from_pushes_is_read_whole() {
    // The bulk policy change as it was before #25: each piece is innocent,
    // the statement they make is not (TiDB's base could exceed the cap).
    let before = r#"
fn policy(update: &mut QueryBuilder<'_, MySql>, base: Option<u32>, cap: Option<u32>) {
    let mut update = QueryBuilder::<MySql>::new("UPDATE jobs SET ");
    update.push("version = version + 1");
    if let Some(v) = cap {
        update.push(", backoff_cap_ms = ").push_bind(v);
    }
    if let Some(v) = base {
        update.push(", backoff_base_ms = LEAST(").push_bind(v).push(", backoff_cap_ms)");
    }
    update.push(" WHERE status = 'pending'");
}
"#;
    let found = check_rust("src/store/bulk.rs", before);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].rule, found[0].line), ("set-order", 9));
    // A comment saying why a read is sound lets it through.
    let marked = before.replace(
        "    if let Some(v) = base {",
        "    // set-order: sound because of reasons given here\n    if let Some(v) = base {",
    );
    assert!(check_rust("src/store/bulk.rs", &marked).is_empty());
    // Pieces of two functions are two statements.
    let apart = before.replace(
        "    if let Some(v) = base {",
        "}\nfn other(update: &mut QueryBuilder<'_, MySql>, base: Option<u32>) {\n    if let Some(v) = base {",
    );
    assert!(check_rust("src/store/bulk.rs", &apart).is_empty());
}
