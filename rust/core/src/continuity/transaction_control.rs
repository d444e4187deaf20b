//! Transaction control in SQL text: whether a statement a request sends
//! begins, ends or shapes its transaction. The bindings record a request
//! by its API calls (`commit()`, `rollback()`, a block's end); a `COMMIT`
//! sent as text bypasses them, and a replay after it would commit what it
//! committed once more. One reading here, so that Java and Python refuse
//! the same requests.
//!
//! The reading is PostgreSQL's lexical structure, not a parser: the first
//! words of every statement of the text, with comments (nested `/* */`,
//! `--`), quoted text (`'…'`, `E'…'` with backslash escapes, `"…"`) and
//! dollar-quoted bodies skipped, so a plpgsql body's `BEGIN … END`, a
//! string holding `'COMMIT'` or a column named `"end"` is not transaction
//! control. It errs towards finding control: the `END` closing a
//! `BEGIN ATOMIC` function body counts as one (that request is not
//! replayed, which is safe), and a text with a backslash in a plain string
//! is also read as PostgreSQL reads it with `standard_conforming_strings`
//! off; nothing that controls a transaction is missed.

use super::session_state::SessionWords;

/// What the text does to its transaction: the strongest control of any of
/// its statements (ordered from none to commit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransactionControl {
    /// No statement controls a transaction.
    None,
    /// `SAVEPOINT`, `RELEASE [SAVEPOINT]`, `ROLLBACK [WORK | TRANSACTION]
    /// TO [SAVEPOINT]`: the transaction goes on, and a replay runs them
    /// again in order with the rest of the request.
    Savepoint,
    /// `BEGIN`, `START TRANSACTION`.
    Begin,
    /// `ROLLBACK`, `ABORT`, `ROLLBACK PREPARED`.
    Rollback,
    /// `COMMIT`, `END`, `PREPARE TRANSACTION`, `COMMIT PREPARED`: what ran
    /// before may be committed.
    Commit,
}

impl TransactionControl {
    /// Reads `sql` (one statement or several, separated by `;`).
    pub fn of(sql: &str) -> TransactionControl {
        TransactionControl::of_bytes(sql.as_bytes())
    }

    /// Reads SQL text in any encoding ASCII characters keep their bytes in
    /// (UTF-8, Java's modified UTF-8, Latin-1): the keywords, quotes and
    /// separators it looks for are ASCII, and any other byte is read as a
    /// letter. Text of any length; invalid sequences are read, not refused.
    pub fn of_bytes(sql: &[u8]) -> TransactionControl {
        read(sql).control
    }

    /// Whether a request that sent such text may still be replayed: the
    /// transaction it recorded is the one the server has.
    pub const fn replayable(self) -> bool {
        matches!(self, TransactionControl::None | TransactionControl::Savepoint)
    }

    /// Whether it commits the transaction (or hands it to two-phase commit).
    pub const fn commits(self) -> bool {
        matches!(self, TransactionControl::Commit)
    }

    /// Whether it ends the transaction, committed or not.
    pub const fn ends(self) -> bool {
        matches!(self, TransactionControl::Commit | TransactionControl::Rollback)
    }

    /// Lower-case name, for messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            TransactionControl::None => "none",
            TransactionControl::Savepoint => "savepoint",
            TransactionControl::Begin => "begin",
            TransactionControl::Rollback => "rollback",
            TransactionControl::Commit => "commit",
        }
    }
}

/// Words of a statement read before it is classified: `ROLLBACK WORK TO`
/// needs three, `CREATE OR REPLACE LOCAL TEMP` (session state) five.
const FIRST_WORDS: usize = 5;

/// Both readings of SQL text, from one pass: the Java binding caches them
/// per text and asks once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SqlReading {
    /// What the text does to its transaction.
    pub control: TransactionControl,
    /// Whether it sets session state a replay record does not hold
    /// ([`sets_session_state`](super::sets_session_state)).
    pub session_state: bool,
}

impl SqlReading {
    /// Reads SQL text as [`TransactionControl::of_bytes`] does.
    pub fn of_bytes(sql: &[u8]) -> SqlReading {
        read(sql)
    }
}

pub(super) fn read(sql: &[u8]) -> SqlReading {
    let mut standard = Scanner::new(sql, false);
    let reading = standard.read();
    if !standard.plain_backslash {
        return reading;
    }
    // A backslash in a plain string: with standard_conforming_strings off
    // (a server, database or role setting the text cannot show) it escapes
    // a quote, and the statements are others. Either reading's findings
    // count, erring towards finding.
    let legacy = Scanner::new(sql, true).read();
    SqlReading {
        control: reading.control.max(legacy.control),
        session_state: reading.session_state || legacy.session_state,
    }
}

struct Scanner<'a> {
    s: &'a [u8],
    i: usize,
    /// Read a backslash in a plain `'…'` string as an escape, as
    /// PostgreSQL does with standard_conforming_strings off.
    legacy_strings: bool,
    /// A plain string held a backslash: the other reading may differ.
    plain_backslash: bool,
}

impl<'a> Scanner<'a> {
    fn new(s: &'a [u8], legacy_strings: bool) -> Scanner<'a> {
        Scanner { s, i: 0, legacy_strings, plain_backslash: false }
    }

    fn read(&mut self) -> SqlReading {
        let mut strongest = TransactionControl::None;
        let mut session = SessionWords::default();
        let mut words: [&'a [u8]; FIRST_WORDS] = [b""; FIRST_WORDS];
        let mut n = 0;
        // Whether the statement began with something no control begins with.
        let mut other = false;
        while let Some(&c) = self.s.get(self.i) {
            match c {
                b';' => {
                    self.i += 1;
                    if !other {
                        strongest = strongest.max(classify(&words[..n]));
                        session.statement(&words[..n]);
                    }
                    session.end_statement();
                    n = 0;
                    other = false;
                    // A statement that begins with no word (`(SELECT …)`)
                    // has no first word, not the previous statement's.
                    words[0] = b"";
                }
                c if c.is_ascii_whitespace() => self.i += 1,
                b'-' if self.at(b"--") => self.line_comment(),
                b'/' if self.at(b"/*") => self.block_comment(),
                b'\'' => {
                    other |= n == 0;
                    let start = self.i;
                    self.quoted(b'\'', self.legacy_strings);
                    self.plain_backslash |= self.s[start..self.i.min(self.s.len())].contains(&b'\\');
                }
                b'"' => {
                    other |= n == 0;
                    let name = self.quoted_identifier();
                    session.quoted_identifier(name, words[0]);
                }
                b'$' if self.dollar_tag().is_some() => {
                    other |= n == 0;
                    self.dollar_quoted();
                }
                c if is_word_start(c) => {
                    let word = self.word();
                    if matches!(word, b"e" | b"E") && self.s.get(self.i) == Some(&b'\'') {
                        other |= n == 0;
                        self.quoted(b'\'', true);
                    } else if matches!(word, b"u" | b"U") && self.at(b"&\"") {
                        other |= n == 0;
                        self.i += 1;
                        let name = self.quoted_identifier();
                        session.unicode_identifier(name, self.uescape(), words[0]);
                    } else {
                        session.word(word, words[0]);
                        if !other && n < FIRST_WORDS {
                            words[n] = word;
                            n += 1;
                        }
                    }
                }
                _ => {
                    other |= n == 0;
                    session.punctuation(c);
                    self.i += 1;
                }
            }
        }
        if !other {
            strongest = strongest.max(classify(&words[..n]));
            session.statement(&words[..n]);
        }
        session.end_statement();
        SqlReading { control: strongest, session_state: session.found }
    }

    fn at(&self, prefix: &[u8]) -> bool {
        self.s[self.i..].starts_with(prefix)
    }

    /// To the end of the line: PostgreSQL's lexer ends it at a carriage
    /// return as well as at a line feed.
    fn line_comment(&mut self) {
        while self.i < self.s.len() && !matches!(self.s[self.i], b'\n' | b'\r') {
            self.i += 1;
        }
    }

    /// PostgreSQL's block comments nest.
    fn block_comment(&mut self) {
        let mut depth = 0usize;
        while self.i < self.s.len() {
            if self.at(b"/*") {
                depth += 1;
                self.i += 2;
            } else if self.at(b"*/") {
                depth -= 1;
                self.i += 2;
                if depth == 0 {
                    return;
                }
            } else {
                self.i += 1;
            }
        }
    }

    /// From an opening `quote` past its closing one (a doubled quote is
    /// one character; with `backslash`, so is a backslash and the byte after
    /// it); an unterminated one runs to the end.
    fn quoted(&mut self, quote: u8, backslash: bool) {
        self.i += 1;
        while let Some(&c) = self.s.get(self.i) {
            if backslash && c == b'\\' {
                self.i += 2;
            } else if c == quote {
                self.i += 1;
                if self.s.get(self.i) != Some(&quote) {
                    return;
                }
                self.i += 1;
            } else {
                self.i += 1;
            }
        }
    }

    /// A `"…"` identifier at the cursor, read past its closing quote: its
    /// text as written (a doubled quote stays doubled; no name the reading
    /// looks for has one).
    fn quoted_identifier(&mut self) -> &'a [u8] {
        let s: &'a [u8] = self.s;
        let start = self.i + 1;
        self.quoted(b'"', false);
        let end = if self.i > start && s[self.i - 1] == b'"' { self.i - 1 } else { self.i };
        &s[start..end.max(start)]
    }

    /// The escape character of the `U&"…"` identifier just read: the one a
    /// `UESCAPE 'c'` after it names (whitespace and comments between), else
    /// the backslash. Looks ahead only: the words are read as any others.
    fn uescape(&self) -> u8 {
        let mut ahead = Scanner::new(self.s, self.legacy_strings);
        ahead.i = self.i;
        ahead.skip_space();
        let named = ahead.s.get(ahead.i).is_some_and(|&c| is_word_start(c)) && {
            ahead.word().eq_ignore_ascii_case(b"uescape")
        };
        if named {
            ahead.skip_space();
            if let [b'\'', c, b'\'', ..] = ahead.s[ahead.i..] {
                return c;
            }
        }
        b'\\'
    }

    /// Past whitespace and comments.
    fn skip_space(&mut self) {
        while let Some(&c) = self.s.get(self.i) {
            if c.is_ascii_whitespace() {
                self.i += 1;
            } else if self.at(b"--") {
                self.line_comment();
            } else if self.at(b"/*") {
                self.block_comment();
            } else {
                return;
            }
        }
    }

    /// The `$tag$` (or `$$`) opening a dollar-quoted body at the cursor;
    /// `$1` is a parameter, not a tag.
    fn dollar_tag(&self) -> Option<&'a [u8]> {
        let s: &'a [u8] = self.s;
        let rest = &s[self.i..];
        let end = 1 + rest[1..].iter().position(|&c| !is_word_char(c) || c == b'$')?;
        let tag = &rest[..=end];
        let valid = rest.get(end) == Some(&b'$') && (end == 1 || !rest[1].is_ascii_digit());
        valid.then_some(tag)
    }

    fn dollar_quoted(&mut self) {
        let Some(tag) = self.dollar_tag() else { return };
        let start = self.i + tag.len();
        self.i = match find(&self.s[start..], tag) {
            Some(at) => start + at + tag.len(),
            None => self.s.len(),
        };
    }

    fn word(&mut self) -> &'a [u8] {
        let s: &'a [u8] = self.s;
        let start = self.i;
        while self.i < self.s.len() && is_word_char(self.s[self.i]) {
            self.i += 1;
        }
        &s[start..self.i]
    }
}

/// A statement's control, by its first words.
fn classify(words: &[&[u8]]) -> TransactionControl {
    use TransactionControl as T;
    let is = |i: usize, w: &str| words.get(i).is_some_and(|x| x.eq_ignore_ascii_case(w.as_bytes()));
    if is(0, "commit") || is(0, "end") || (is(0, "prepare") && is(1, "transaction")) {
        T::Commit
    } else if is(0, "abort") {
        T::Rollback
    } else if is(0, "rollback") {
        let next = if is(1, "work") || is(1, "transaction") { 2 } else { 1 };
        if is(next, "to") {
            T::Savepoint
        } else {
            T::Rollback
        }
    } else if is(0, "begin") || (is(0, "start") && is(1, "transaction")) {
        T::Begin
    } else if is(0, "savepoint") || is(0, "release") {
        T::Savepoint
    } else {
        T::None
    }
}

fn is_word_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c >= 0x80
}

/// Identifiers go on with digits and `$` (`a$1` is one word).
fn is_word_char(c: u8) -> bool {
    is_word_start(c) || c.is_ascii_digit() || c == b'$'
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::TransactionControl as T;

    /// Every spelling the bindings met in review, and the texts that hold
    /// the words without being control.
    #[test]
    fn reads_control_in_text_and_not_in_its_data() {
        let cases: &[(&str, T)] = &[
            ("COMMIT", T::Commit),
            ("commit work", T::Commit),
            ("COMMIT AND CHAIN", T::Commit),
            ("end transaction", T::Commit),
            ("END", T::Commit),
            ("INSERT INTO t VALUES (1); commit", T::Commit),
            ("SAVEPOINT a; INSERT INTO t VALUES (1); COMMIT", T::Commit),
            ("COMMIT; ROLLBACK", T::Commit),
            ("ROLLBACK; COMMIT", T::Commit),
            ("PREPARE TRANSACTION 'x'", T::Commit),
            ("COMMIT PREPARED 'x'", T::Commit),
            ("ROLLBACK PREPARED 'x'", T::Rollback),
            ("ROLLBACK", T::Rollback),
            ("rollback work", T::Rollback),
            ("ABORT", T::Rollback),
            ("ROLLBACK; BEGIN", T::Rollback),
            ("BEGIN", T::Begin),
            ("begin isolation level serializable", T::Begin),
            ("START TRANSACTION ISOLATION LEVEL SERIALIZABLE", T::Begin),
            ("rollback to savepoint a", T::Savepoint),
            ("ROLLBACK WORK TO a", T::Savepoint),
            ("ROLLBACK TRANSACTION TO SAVEPOINT a", T::Savepoint),
            ("SAVEPOINT s", T::Savepoint),
            ("RELEASE SAVEPOINT s", T::Savepoint),
            ("release s", T::Savepoint),
            ("/* lead */ -- line\n  COMMIT", T::Commit),
            ("/* a /* nested */ COMMIT */ SELECT 1", T::None),
            ("SELECT 1 /* ; COMMIT */", T::None),
            ("-- COMMIT\nSELECT 1", T::None),
            ("SELECT 'COMMIT'; SELECT \"end\" FROM t", T::None),
            ("SELECT 'it''s; COMMIT'", T::None),
            ("SELECT E'it\\'s; COMMIT' ", T::None),
            ("SELECT e'\\\\'; COMMIT", T::Commit),
            ("SELECT CASE WHEN x THEN 1 END FROM t", T::None),
            ("DO $$ BEGIN PERFORM 1; END $$", T::None),
            ("CREATE FUNCTION f() RETURNS int AS $body$ BEGIN RETURN 1; END $body$ LANGUAGE plpgsql", T::None),
            ("SELECT $1::text; SELECT $2", T::None),
            ("SELECT a$b FROM t; commit", T::Commit),
            ("PREPARE q AS SELECT 1", T::None),
            ("START q", T::None),
            ("\"commit\"", T::None),
            ("'commit'", T::None),
            ("(COMMIT)", T::None),
            ("SELECT 1; ; ", T::None),
            ("", T::None),
            ("SELECT 'unterminated; COMMIT", T::None),
            ("SELECT $x$ unterminated; COMMIT", T::None),
            ("/* unterminated; COMMIT", T::None),
            ("endless", T::None),
            ("committed", T::None),
        ];
        for &(sql, want) in cases {
            assert_eq!(T::of(sql), want, "{sql:?}");
        }
    }

    /// PostgreSQL ends a `--` comment at a carriage return as at a line
    /// feed (`SELECT 1; -- c\rCOMMIT` commits), so text with lone CR line
    /// ends hides no statement in a comment.
    #[test]
    fn a_carriage_return_ends_a_line_comment() {
        assert_eq!(T::of("SELECT 1; -- note\rCOMMIT"), T::Commit);
        assert_eq!(T::of("-- note\r\nCOMMIT"), T::Commit);
        assert_eq!(T::of("-- note\rBEGIN"), T::Begin);
        assert_eq!(T::of("SELECT 1 -- ; COMMIT\r"), T::None);
    }

    /// With `standard_conforming_strings` off (a server, database or role
    /// setting of older applications) a backslash escapes a quote in a
    /// plain string too: `SELECT '\''; COMMIT` commits (checked on
    /// PostgreSQL 15). The reading cannot know the setting, so it finds
    /// what either reading finds.
    #[test]
    fn a_backslash_in_a_plain_string_is_read_both_ways() {
        assert_eq!(T::of("SELECT '\\''; COMMIT"), T::Commit);
        assert_eq!(T::of("SELECT 'a\\'; COMMIT; --'"), T::Commit);
        assert_eq!(T::of("SELECT 'C:\\'; SELECT 1"), T::None);
        assert_eq!(T::of("SELECT 'it''s'; SELECT '\\\\'"), T::None);
        assert!(super::super::sets_session_state(b"SELECT '\\''; SET search_path TO alt"));
    }

    #[test]
    fn only_none_and_savepoints_leave_a_request_replayable() {
        assert!(T::None.replayable() && T::Savepoint.replayable());
        assert!(!T::Begin.replayable() && !T::Rollback.replayable() && !T::Commit.replayable());
        assert!(T::Commit.commits() && T::Commit.ends() && T::Rollback.ends());
        assert!(!T::Rollback.commits() && !T::Begin.ends() && !T::Savepoint.ends());
    }

    /// Multi-byte text, lone bytes of an escape at the end, and every prefix
    /// of a mixed text: no panic, no index past the end.
    #[test]
    fn any_text_reads_without_panic() {
        let text = "SELECT E'\\'; $t$ é $t$ /* /* */ \"q\"\"\" -- x\n; COMMIT $1 $";
        for end in (0..=text.len()).filter(|&e| text.is_char_boundary(e)) {
            let _ = T::of(&text[..end]);
        }
        assert_eq!(T::of("SELECT 'é'; COMMIT"), T::Commit);
        assert_eq!(T::of("SELECT E'\\"), T::None);
    }

    proptest::proptest! {
        /// Texts stitched from the pieces the scanner treats specially, in
        /// any order and cut anywhere: an answer, never a panic.
        #[test]
        fn stitched_texts_read_without_panic(pieces in proptest::collection::vec(0usize..PIECES.len(), 0..24)) {
            let text: String = pieces.iter().map(|&i| PIECES[i]).collect();
            for end in (0..=text.len()).filter(|&e| text.is_char_boundary(e)) {
                let _ = T::of(&text[..end]);
            }
        }
    }

    const PIECES: &[&str] = &[
        "COMMIT",
        "end",
        "rollback",
        " to ",
        "BEGIN",
        "savepoint",
        "'",
        "\"",
        "$$",
        "$t$",
        "$1",
        "/*",
        "*/",
        "--",
        "\n",
        ";",
        "e'",
        "\\",
        " ",
        "x",
        "(",
        "é",
        "U&\"",
        " UESCAPE ",
        "\\0070",
        "pg_advisory_lock",
        "set_config(",
        ",",
        ")",
    ];
}
