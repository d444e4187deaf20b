//! Session state set by SQL text: whether a statement changes what the
//! server's session holds beyond its transaction (`SET search_path`, a
//! prepared statement, a temporary table, a session advisory lock...). A
//! replay record holds a request's transaction and the session settings
//! made through the bindings' API; state set by text in an earlier
//! transaction or in auto-commit is on the old session only, and a replay
//! on a new connection would run without it (writing to another schema, as
//! another role, without a lock). A connection that sent such text is
//! therefore not replayed afterwards (docs/continuity.md).
//!
//! The reading shares the transaction-control scanner's lexical rules
//! (comments, quoted text and dollar-quoted bodies skipped): the first
//! words decide for the statement kinds, and the advisory-lock and
//! `set_config` function names count anywhere outside quotes and comments.
//! It errs towards finding: a refused replay is safe, a replay without the
//! state is not. Transaction-scoped forms (`SET LOCAL`, `SET TRANSACTION`,
//! `SET CONSTRAINTS`, `set_config(…, true)`, the `_xact_` advisory locks)
//! do not count. Function bodies are not read: a function that sets state
//! when called is not found.

use super::transaction_control;

/// Whether SQL text (as [`TransactionControl::of_bytes`] reads it) sets
/// session state a replay's new connection would not have.
///
/// [`TransactionControl::of_bytes`]: super::TransactionControl::of_bytes
pub fn sets_session_state(sql: &[u8]) -> bool {
    transaction_control::read(sql).session_state
}

/// Session functions, found by name anywhere in the text (lower case):
/// session-level advisory locks, taken or released.
const SESSION_FUNCTIONS: &[&[u8]] = &[
    b"pg_advisory_lock",
    b"pg_advisory_lock_shared",
    b"pg_try_advisory_lock",
    b"pg_try_advisory_lock_shared",
    b"pg_advisory_unlock",
    b"pg_advisory_unlock_shared",
    b"pg_advisory_unlock_all",
];

/// What the word before the current one was, for two-word forms.
#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Previous {
    #[default]
    Other,
    With,
    Into,
    /// `INTO LOCAL` or `INTO GLOBAL`: `TEMP` may follow.
    IntoScope,
    /// `CREATE` in an `EXPLAIN` (which `ANALYZE` runs), or `OR`, `REPLACE`,
    /// `LOCAL`, `GLOBAL` after it: `TEMP` may follow.
    Create,
}

/// Whether `word` is one of `names` (lower case), ignoring ASCII case.
fn one_of(word: &[u8], names: &[&[u8]]) -> bool {
    names.iter().any(|n| word.eq_ignore_ascii_case(n))
}

/// The scanner's findings for session state, fed word by word.
#[derive(Default)]
pub(super) struct SessionWords {
    pub(super) found: bool,
    /// The word before this one in the statement, as far as `WITH HOLD`
    /// and `INTO TEMP` need it (no copy of the word: the reading runs on
    /// every statement text a binding has not cached).
    previous: Previous,
    declare_with_hold: bool,
    /// The statement names the session's temporary schema (`pg_temp.t`):
    /// a `CREATE` of it makes a temporary object.
    names_pg_temp: bool,
    /// Words of the statement so far (up to 2), and whether a `.` came
    /// right after its second: `SET local.foo` names a setting, it is no
    /// `SET LOCAL`.
    words_seen: u8,
    second_word_dotted: bool,
    /// An `EXPLAIN` statement has a `CREATE` (`EXPLAIN ANALYZE CREATE TABLE
    /// pg_temp.t AS …` makes it).
    explained_create: bool,
    /// Inside a `set_config(` call: parenthesis depth, commas at depth 1,
    /// and whether its third argument so far is the word `true` alone: an
    /// expression that starts with it (`true AND false`) may be false.
    set_config: Option<(u32, u32, bool)>,
}

impl SessionWords {
    /// A word of the statement (outside quotes and comments); `first` is
    /// the statement's first word.
    pub(super) fn word(&mut self, word: &[u8], first: &[u8]) {
        if let Some((1, 2, true_alone)) = self.set_config.as_mut() {
            // Its is_local argument: only a literal `true` keeps it in the
            // transaction, so a word after one, or any other, counts.
            if !*true_alone && word.eq_ignore_ascii_case(b"true") {
                *true_alone = true;
            } else {
                self.found = true;
                self.set_config = None;
            }
        }
        if one_of(word, SESSION_FUNCTIONS) {
            self.found = true;
        } else if word.eq_ignore_ascii_case(b"set_config") {
            self.set_config = Some((0, 0, false));
        }
        match self.previous {
            Previous::With if word.eq_ignore_ascii_case(b"hold") => self.declare_with_hold = true,
            // `SELECT … INTO [LOCAL|GLOBAL] TEMP t`, `… INTO pg_temp.t`; an
            // INSERT INTO a table named temp is not.
            Previous::Into | Previous::IntoScope
                if (one_of(word, &[b"temp", b"temporary"]) || is_pg_temp(word))
                    && !first.eq_ignore_ascii_case(b"insert") =>
            {
                self.found = true
            }
            Previous::Create if one_of(word, &[b"temp", b"temporary"]) => self.found = true,
            _ => {}
        }
        self.names_pg_temp |= is_pg_temp(word);
        self.words_seen = self.words_seen.saturating_add(1);
        self.previous = if word.eq_ignore_ascii_case(b"with") {
            Previous::With
        } else if word.eq_ignore_ascii_case(b"into") {
            Previous::Into
        } else if self.previous == Previous::Into && one_of(word, &[b"local", b"global"]) {
            Previous::IntoScope
        } else if first.eq_ignore_ascii_case(b"explain") && word.eq_ignore_ascii_case(b"create") {
            self.explained_create = true;
            Previous::Create
        } else if self.previous == Previous::Create && one_of(word, &[b"or", b"replace", b"local", b"global"]) {
            Previous::Create
        } else {
            Previous::Other
        };
    }

    /// A `"…"` identifier (its text between the quotes): a function or
    /// schema so named is the one the unquoted word names (`"pg_temp".t`),
    /// and in `set_config`'s third argument it is a column, not the
    /// literal `true`.
    pub(super) fn quoted_identifier(&mut self, name: &[u8], first: &[u8]) {
        if let Some((1, 2, _)) = self.set_config {
            self.found = true;
            self.set_config = None;
        }
        if one_of(name, SESSION_FUNCTIONS) {
            self.found = true;
        } else if name.eq_ignore_ascii_case(b"set_config") {
            self.set_config = Some((0, 0, false));
        }
        if matches!(self.previous, Previous::Into | Previous::IntoScope)
            && is_pg_temp(name)
            && !first.eq_ignore_ascii_case(b"insert")
        {
            self.found = true;
        }
        self.names_pg_temp |= is_pg_temp(name);
        self.previous = Previous::Other;
        // Not a bare word: nothing dotted after the second word follows.
        self.words_seen = self.words_seen.saturating_add(1).max(3);
    }

    /// A `U&"…"` identifier (its text between the quotes, and the escape
    /// character): read as [`quoted_identifier`](Self::quoted_identifier)
    /// once its escapes are decoded, so `U&"\0070g_advisory_lock"` counts.
    pub(super) fn unicode_identifier(&mut self, raw: &[u8], escape: u8, first: &[u8]) {
        let mut buf = [0u8; NAME_BYTES];
        // Undecodable (the server refuses it), too long or not ASCII: no
        // name looked for, so a placeholder that matches none.
        let name = decode_unicode_escapes(raw, escape, &mut buf).unwrap_or(b"\"");
        self.quoted_identifier(name, first);
    }

    /// A byte outside words, quotes and comments.
    pub(super) fn punctuation(&mut self, c: u8) {
        if self.words_seen == 2 {
            self.second_word_dotted = c == b'.';
            self.words_seen = 3;
        }
        if let Some((depth, commas, true_alone)) = self.set_config.as_mut() {
            match c {
                // `set_config` not called (a column so named): erring
                // towards finding, it counts.
                _ if *depth == 0 && c != b'(' => {
                    self.found = true;
                    self.set_config = None;
                }
                b')' if *depth == 1 => {
                    // The call ends: local only with `true` alone third.
                    self.found |= !*true_alone;
                    self.set_config = None;
                }
                // Anything else in the third argument, or a fourth one.
                _ if *depth == 1 && *commas == 2 => {
                    self.found = true;
                    self.set_config = None;
                }
                b'(' => *depth += 1,
                b',' if *depth == 1 => *commas += 1,
                b')' => *depth -= 1,
                _ => {}
            }
        }
    }

    /// A complete statement's first words (the statement began with a word).
    pub(super) fn statement(&mut self, words: &[&[u8]]) {
        let is = |i: usize, w: &str| words.get(i).is_some_and(|x| x.eq_ignore_ascii_case(w.as_bytes()));
        let temp = |i: usize| is(i, "temp") || is(i, "temporary");
        // CREATE [OR REPLACE] [LOCAL | GLOBAL] TEMP …
        let mut scope = if is(1, "or") && is(2, "replace") { 3 } else { 1 };
        if is(scope, "local") || is(scope, "global") {
            scope += 1;
        }
        let scoped = (is(1, "local") || is(1, "transaction") || is(1, "constraints")) && !self.second_word_dotted;
        self.found |= (is(0, "set") && !scoped)
            || is(0, "reset")
            || is(0, "discard")
            || is(0, "listen")
            || is(0, "unlisten")
            || is(0, "load")
            || is(0, "deallocate")
            // PREPARE TRANSACTION takes a string, no word: with a word
            // after it, `transaction` is the prepared statement's name.
            || (is(0, "prepare") && (!is(1, "transaction") || words.len() > 2))
            || (is(0, "create") && (temp(scope) || self.names_pg_temp))
            || (self.explained_create && self.names_pg_temp)
            || (is(0, "declare") && self.declare_with_hold);
    }

    /// The statement ended (`;` or the end of the text).
    pub(super) fn end_statement(&mut self) {
        if self.set_config.is_some() {
            // A call cut off by the end of the statement: count it.
            self.found = true;
            self.set_config = None;
        }
        self.previous = Previous::Other;
        self.declare_with_hold = false;
        self.names_pg_temp = false;
        self.words_seen = 0;
        self.second_word_dotted = false;
        self.explained_create = false;
    }
}

/// Longer than any name the reading looks for (`pg_try_advisory_lock_shared`
/// has 27 bytes): a decoded identifier that does not fit is none of them.
const NAME_BYTES: usize = 32;

/// A `U&` identifier's text with its escapes (`\XXXX`, `\+XXXXXX`, the
/// escape character doubled) decoded into `buf`, without allocating; `None`
/// when it is invalid, longer than `buf` or not ASCII.
fn decode_unicode_escapes<'b>(raw: &[u8], escape: u8, buf: &'b mut [u8; NAME_BYTES]) -> Option<&'b [u8]> {
    let (mut i, mut n) = (0, 0);
    while i < raw.len() {
        let c = if raw[i] != escape {
            i += 1;
            raw[i - 1]
        } else if raw.get(i + 1) == Some(&escape) {
            i += 2;
            escape
        } else {
            let (skip, digits) = if raw.get(i + 1) == Some(&b'+') { (2, 6) } else { (1, 4) };
            let hex = raw.get(i + skip..i + skip + digits).filter(|h| h.iter().all(u8::is_ascii_hexdigit))?;
            i += skip + digits;
            let code = u32::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
            u8::try_from(code).ok().filter(u8::is_ascii)?
        };
        *buf.get_mut(n)? = c;
        n += 1;
    }
    Some(&buf[..n])
}

/// `pg_temp`, or the `pg_temp_N` it stands for: the session's own
/// temporary schema (another session's is refused by the server).
fn is_pg_temp(word: &[u8]) -> bool {
    const PG_TEMP: &[u8] = b"pg_temp";
    word.len() >= PG_TEMP.len()
        && word[..PG_TEMP.len()].eq_ignore_ascii_case(PG_TEMP)
        && match &word[PG_TEMP.len()..] {
            [] => true,
            [b'_', digits @ ..] => !digits.is_empty() && digits.iter().all(u8::is_ascii_digit),
            _ => false,
        }
}

#[cfg(test)]
mod tests {
    use super::sets_session_state;

    /// The statements that leave state on the session, and those that look
    /// alike but stay in the transaction or in quoted text.
    #[test]
    fn finds_session_state_set_by_text_and_not_in_its_data() {
        let session: &[&str] = &[
            "SET search_path TO alt",
            "set search_path = alt, public",
            "SET SESSION search_path TO alt",
            "SET ROLE other",
            "SET SESSION AUTHORIZATION other",
            "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
            "SET TIME ZONE 'UTC'",
            "RESET search_path",
            "RESET ALL",
            "DISCARD ALL",
            "LISTEN chan",
            "UNLISTEN *",
            "PREPARE q AS SELECT 1",
            "PREPARE q(int) AS SELECT $1",
            "DEALLOCATE q",
            "DEALLOCATE ALL",
            "CREATE TEMP TABLE t (a int)",
            "create temporary table t (a int)",
            "CREATE LOCAL TEMPORARY TABLE t (a int)",
            "CREATE GLOBAL TEMP TABLE t (a int)",
            "CREATE TEMP VIEW v AS SELECT 1",
            "SELECT 1 AS a INTO TEMP t",
            "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
            "declare c scroll cursor with hold for select 1",
            "LOAD 'auto_explain'",
            "SELECT pg_advisory_lock(1)",
            "SELECT pg_advisory_lock_shared(1, 2)",
            "SELECT PG_TRY_ADVISORY_LOCK(1)",
            "SELECT pg_try_advisory_lock_shared(1)",
            "SELECT pg_advisory_unlock_all()",
            "SELECT x FROM t WHERE pg_try_advisory_lock(t.id)",
            "SELECT set_config('search_path', 'alt', false)",
            "SELECT set_config('search_path', 'alt', $1)",
            "SELECT set_config('search_path', f(1, 2), 'false')",
            "SELECT set_config('search_path', 'alt'",
            "SELECT 1; SET search_path TO alt",
            "/* c */ -- l\n SET search_path TO alt",
            "INSERT INTO t VALUES (1); select pg_advisory_lock(1); COMMIT",
        ];
        for sql in session {
            assert!(sets_session_state(sql.as_bytes()), "{sql:?} sets session state");
        }
        let not: &[&str] = &[
            "SET LOCAL search_path TO alt",
            "set transaction isolation level serializable",
            "SET CONSTRAINTS ALL DEFERRED",
            "SELECT set_config('search_path', 'alt', true)",
            "SELECT set_config('a', f(1, 2), TRUE)",
            "SELECT pg_advisory_xact_lock(1)",
            "SELECT pg_try_advisory_xact_lock(1)",
            "PREPARE TRANSACTION 'x'",
            "CREATE TABLE temp (a int)",
            "INSERT INTO temp VALUES (1)",
            "DECLARE c CURSOR FOR SELECT 1",
            "DECLARE c CURSOR WITHOUT HOLD FOR SELECT 1",
            "SELECT 'SET search_path TO alt'",
            "SELECT 'pg_advisory_lock(1)' -- pg_advisory_lock(1)",
            "/* SET search_path TO alt */ SELECT 1",
            "DO $$ BEGIN PERFORM 1; END $$",
            "SELECT \"set\" FROM t",
            "UPDATE t SET a = 1",
            "INSERT INTO t VALUES (1) ON CONFLICT (a) DO UPDATE SET a = 2",
            "COMMIT",
            "",
        ];
        for sql in not {
            assert!(!sets_session_state(sql.as_bytes()), "{sql:?} sets no session state");
        }
    }

    /// Every spelling PostgreSQL creates a temporary object by (checked on
    /// PostgreSQL 15): `OR REPLACE` before `TEMP`, `LOCAL`/`GLOBAL` after
    /// `INTO`, and the `pg_temp` schema named instead of the keyword.
    #[test]
    fn temporary_objects_of_every_spelling_are_found() {
        for sql in [
            "CREATE OR REPLACE TEMP VIEW v AS SELECT 1",
            "create or replace temporary recursive view v (n) as select 1",
            "CREATE OR REPLACE LOCAL TEMP VIEW v AS SELECT 1",
            "SELECT 1 AS a INTO LOCAL TEMP t",
            "SELECT 1 AS a INTO GLOBAL TEMPORARY TABLE t",
            "CREATE TABLE pg_temp.t (a int)",
            "CREATE FUNCTION pg_temp.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
            "create sequence PG_TEMP.s",
            "CREATE TABLE pg_temp_3.t (a int)",
            "SELECT 1 AS a INTO pg_temp.t",
        ] {
            assert!(sets_session_state(sql.as_bytes()), "{sql:?} sets session state");
        }
        for sql in [
            "CREATE OR REPLACE VIEW temp AS SELECT 1",
            "CREATE OR REPLACE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
            "INSERT INTO pg_temp.t VALUES (1)",
            "INSERT INTO local VALUES (1)",
            "SELECT * FROM pg_temporary",
        ] {
            assert!(!sets_session_state(sql.as_bytes()), "{sql:?} sets no session state");
        }
    }

    /// A function or schema named by a quoted identifier, plain or `U&`
    /// with escapes, is the same function (checked on PostgreSQL 15: each
    /// of these took its lock, set search_path or made a temporary table).
    #[test]
    fn quoted_identifiers_name_the_session_functions_too() {
        for sql in [
            "SELECT \"pg_advisory_lock\"(1)",
            "SELECT pg_catalog.\"pg_try_advisory_lock\"(1)",
            "SELECT \"set_config\"('search_path', 'alt', false)",
            "SELECT U&\"\\0070g_advisory_lock\"(1)",
            "SELECT u&\"pg\\+00005Fadvisory_lock\"(1)",
            "SELECT U&\"!0070g_advisory_lock\" UESCAPE '!' (1)",
            "SELECT U&\"!0070g_advisory_lock\" /* c */ uescape\n'!' (1)",
            "CREATE TABLE \"pg_temp\".t (a int)",
            "SELECT 1 AS a INTO \"pg_temp\".t",
            "SELECT set_config('search_path', 'alt', \"true\") FROM (SELECT false AS \"true\") s",
        ] {
            assert!(sets_session_state(sql.as_bytes()), "{sql:?} sets session state");
        }
        for sql in [
            "SELECT \"pg_advisory_xact_lock\"(1)",
            "SELECT \"set_config\"('search_path', 'alt', true)",
            "SELECT \"a\"\"pg_advisory_lock\" FROM t",
            "SELECT U&\"\\0070g_advisory_xact_lock\"(1)",
            "SELECT U&'\\0070g_advisory_lock(1)'",
            "SELECT U&\"\\00e9\" FROM t",
            "SELECT U&\"\\zz\" FROM t",
            "INSERT INTO \"pg_temp\".t VALUES (1)",
        ] {
            assert!(!sets_session_state(sql.as_bytes()), "{sql:?} sets no session state");
        }
    }

    /// Only `true` alone is the literal `true`: an expression that starts
    /// with it may be false (checked on PostgreSQL 15: `true AND false`
    /// left search_path set after the transaction).
    #[test]
    fn set_configs_third_argument_is_local_only_when_it_is_true_alone() {
        for sql in [
            "SELECT set_config('search_path', 'alt', true AND false)",
            "SELECT set_config('search_path', 'alt', true = $1)",
            "SELECT set_config('search_path', 'alt', true AND $1)",
            "SELECT set_config('search_path', 'alt', true IS NULL)",
            "SELECT set_config('search_path', 'alt', true AND (SELECT false))",
        ] {
            assert!(sets_session_state(sql.as_bytes()), "{sql:?} sets session state");
        }
        for sql in [
            "SELECT set_config('search_path', 'alt', true)",
            "SELECT set_config('search_path', 'alt', TRUE /* local */ )",
            "SELECT set_config('a', 'b', true), set_config('c', 'd', true)",
        ] {
            assert!(!sets_session_state(sql.as_bytes()), "{sql:?} sets no session state");
        }
    }

    /// A statement's own first word decides, not the previous statement's:
    /// a parenthesized `SELECT … INTO TEMP` after an `INSERT` makes its
    /// table (checked on PostgreSQL 15).
    #[test]
    fn each_statement_is_read_by_its_own_first_word() {
        assert!(sets_session_state(b"INSERT INTO t VALUES (1); (SELECT 1 AS a INTO TEMP t2)"));
        assert!(sets_session_state(b"INSERT INTO t VALUES (1); (SELECT 1 AS a INTO pg_temp.t2)"));
        assert!(!sets_session_state(b"(SELECT 1); INSERT INTO temp VALUES (1)"));
    }

    /// `local`, `transaction` and `constraints` are also the first part of
    /// custom setting names: `SET local.foo = 1` sets `local.foo` for the
    /// session (checked on PostgreSQL 15), it is no `SET LOCAL`.
    #[test]
    fn a_setting_named_like_a_scope_keyword_is_set_for_the_session() {
        for sql in [
            "SET local.foo = 1",
            "set LOCAL . foo TO 1",
            "SET transaction.tenant = 'a'",
            "SET constraints.x TO 1",
            "SET SESSION local.foo = 1",
        ] {
            assert!(sets_session_state(sql.as_bytes()), "{sql:?} sets session state");
        }
        for sql in ["SET LOCAL local.foo = 1", "SET LOCAL app.tenant = 'a'", "SET TRANSACTION READ ONLY"] {
            assert!(!sets_session_state(sql.as_bytes()), "{sql:?} sets no session state");
        }
    }

    /// `EXPLAIN ANALYZE` runs the statement it explains: of a `CREATE TEMP
    /// TABLE … AS` it makes the table (checked on PostgreSQL 15).
    #[test]
    fn an_explained_create_temp_counts() {
        for sql in [
            "EXPLAIN ANALYZE CREATE TEMP TABLE t AS SELECT 1",
            "explain (analyze, costs off) create local temporary table t as select 1",
            "EXPLAIN ANALYZE CREATE TABLE pg_temp.t AS SELECT 1",
        ] {
            assert!(sets_session_state(sql.as_bytes()), "{sql:?} sets session state");
        }
        for sql in ["EXPLAIN ANALYZE CREATE TABLE t AS SELECT * FROM temp", "EXPLAIN SELECT * FROM pg_temp.t"] {
            assert!(!sets_session_state(sql.as_bytes()), "{sql:?} sets no session state");
        }
    }

    /// `transaction` is a name a prepared statement may have: `PREPARE
    /// transaction AS SELECT 1` prepares one (checked on PostgreSQL 15),
    /// where `PREPARE TRANSACTION 'g'`, a string after it, hands the
    /// transaction to two-phase commit.
    #[test]
    fn a_statement_prepared_under_the_name_transaction_counts() {
        assert!(sets_session_state(b"PREPARE transaction AS SELECT 1"));
        assert!(sets_session_state(b"prepare transaction (int) as select $1"));
        assert!(!sets_session_state(b"PREPARE TRANSACTION 'g'"));
        assert!(!sets_session_state(b"PREPARE TRANSACTION E'g'"));
    }

    /// A carriage return ends a `--` comment, as PostgreSQL reads it.
    #[test]
    fn a_carriage_return_ends_a_line_comment() {
        assert!(sets_session_state(b"SELECT 1; -- note\rSET search_path TO alt"));
        assert!(!sets_session_state(b"SELECT 1 -- SET search_path TO alt\r"));
    }

    /// One pass reads both: the control is unchanged by the session reading.
    #[test]
    fn one_reading_holds_both() {
        use super::super::{SqlReading, TransactionControl as T};
        let r = SqlReading::of_bytes(b"SET search_path TO alt; COMMIT");
        assert_eq!((r.control, r.session_state), (T::Commit, true));
        let r = SqlReading::of_bytes(b"SAVEPOINT a");
        assert_eq!((r.control, r.session_state), (T::Savepoint, false));
    }
}
