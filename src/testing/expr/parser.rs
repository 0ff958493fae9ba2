//! The tokens of an expression and the parser's cursor over them, with its
//! syntax errors and placeholder look-ups: what condition and update
//! expressions share before their grammars part.

use super::{ExprError, Placeholders};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    /// A plain attribute name, a keyword or a function name.
    Word(String),
    /// `#name`
    Name(String),
    /// `:value`
    Value(String),
    LParen,
    RParen,
    Comma,
    Cmp(Cmp),
    Plus,
    Minus,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    pub(super) fn symbol(self) -> &'static str {
        match self {
            Cmp::Eq => "=",
            Cmp::Ne => "<>",
            Cmp::Lt => "<",
            Cmp::Le => "<=",
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
        }
    }
}

pub(super) fn tokens(expr: &str) -> Result<Vec<Tok>, ExprError> {
    let word_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut chars = expr.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let take_word = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if !word_char(d) {
                    break;
                }
                end = j + d.len_utf8();
                chars.next();
            }
            expr[i..end].to_owned()
        };
        match c {
            c if c.is_whitespace() => {}
            '(' => out.push(Tok::LParen),
            ')' => out.push(Tok::RParen),
            ',' => out.push(Tok::Comma),
            '+' => out.push(Tok::Plus),
            '-' => out.push(Tok::Minus),
            '=' => out.push(Tok::Cmp(Cmp::Eq)),
            '<' => match chars.peek().map(|&(_, d)| d) {
                Some('>') => {
                    chars.next();
                    out.push(Tok::Cmp(Cmp::Ne));
                }
                Some('=') => {
                    chars.next();
                    out.push(Tok::Cmp(Cmp::Le));
                }
                _ => out.push(Tok::Cmp(Cmp::Lt)),
            },
            '>' => {
                if chars.peek().map(|&(_, d)| d) == Some('=') {
                    chars.next();
                    out.push(Tok::Cmp(Cmp::Ge));
                } else {
                    out.push(Tok::Cmp(Cmp::Gt));
                }
            }
            '.' | '[' | ']' => {
                return Err(format!(
                    "nested attribute paths ({c:?} in {expr:?}) are not modelled by idemq::testing"
                ));
            }
            '#' | ':' => {
                let token = take_word(&mut chars);
                if token.len() == 1 {
                    return Err(format!("Invalid expression: a lone {c:?} in {expr:?}"));
                }
                out.push(if c == '#' {
                    Tok::Name(token)
                } else {
                    Tok::Value(token)
                });
            }
            c if word_char(c) => out.push(Tok::Word(take_word(&mut chars))),
            other => {
                return Err(format!(
                    "Invalid expression: unexpected character {other:?} in {expr:?}"
                ));
            }
        }
    }
    Ok(out)
}

pub(super) struct Parser<'t, 'p, 'a> {
    pub(super) toks: &'t [Tok],
    pub(super) at: usize,
    pub(super) ph: &'p mut Placeholders<'a>,
    pub(super) expr: &'t str,
}

impl Parser<'_, '_, '_> {
    pub(super) fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }

    pub(super) fn peek2(&self) -> Option<&Tok> {
        self.toks.get(self.at + 1)
    }

    pub(super) fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.at).cloned();
        self.at += 1;
        t
    }

    pub(super) fn keyword(&self, kw: &str) -> bool {
        matches!(self.peek(), Some(Tok::Word(w)) if w.eq_ignore_ascii_case(kw))
    }

    pub(super) fn syntax(&self, what: &str) -> ExprError {
        let near = match self.peek() {
            Some(t) => format!("{t:?}"),
            None => "the end".into(),
        };
        format!("Invalid expression: {what}, near {near} in {:?}", self.expr)
    }

    pub(super) fn expect(&mut self, tok: &Tok, what: &str) -> Result<(), ExprError> {
        if self.peek() == Some(tok) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.syntax(&format!("expected {what}")))
        }
    }

    /// A top-level attribute name: `name` or `#placeholder`.
    pub(super) fn path(&mut self) -> Result<String, ExprError> {
        match self.next() {
            Some(Tok::Name(n)) => self.ph.name(&n),
            Some(Tok::Word(w)) if is_keyword(&w) => {
                self.at -= 1;
                Err(self.syntax("expected an attribute name"))
            }
            Some(Tok::Word(w)) => Ok(w),
            _ => {
                self.at -= 1;
                Err(self.syntax("expected an attribute name"))
            }
        }
    }

    pub(super) fn done(&self) -> Result<(), ExprError> {
        if self.at < self.toks.len() {
            Err(self.syntax("unexpected token"))
        } else {
            Ok(())
        }
    }
}

fn is_keyword(w: &str) -> bool {
    [
        "AND", "OR", "NOT", "BETWEEN", "IN", "SET", "REMOVE", "ADD", "DELETE",
    ]
    .iter()
    .any(|k| w.eq_ignore_ascii_case(k))
}
