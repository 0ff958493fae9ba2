//! Condition and update expressions, parsed and evaluated as DynamoDB does,
//! for the subset a handler's effect commonly uses. Anything outside it is
//! refused with an error naming it (the store answers a
//! `ValidationException`), never silently accepted.
//!
//! Condition expressions
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.OperatorsAndFunctions.html>):
//! `a = b`, `<>`, `<`, `<=`, `>`, `>=`, `a BETWEEN b AND c`,
//! `a IN (b, c, …)`, `attribute_exists(path)`,
//! `attribute_not_exists(path)`, `begins_with(path, v)`, `AND`, `OR`,
//! `NOT` and parentheses, with DynamoDB's precedence (NOT, then AND, then
//! OR). Not modelled: `attribute_type`, `contains`, `size`.
//!
//! Update expressions
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.UpdateExpressions.html>):
//! `SET a = v`, `SET a = x + y`, `SET a = x - y`,
//! `SET a = if_not_exists(b, v)`, `REMOVE a`, `ADD a v` (a number, or a set
//! joined to a set). Not modelled: `DELETE`, `list_append`.
//!
//! Paths are top-level attributes, written plainly or as `#placeholders`;
//! nested paths (`a.b`, `a[0]`) are not modelled. DynamoDB's reserved
//! words are not checked: a plain name DynamoDB would refuse as reserved
//! (`status`, `count`) is accepted here, so write such names as `#n`.
//!
//! Every expression attribute name and value a request defines must be
//! used by one of its expressions, and every one used must be defined, as
//! DynamoDB requires
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.ExpressionAttributeValues.html>).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::types::AttributeValue;

use super::attr::{StoredItem, equal, type_name};
use super::number::Number;

/// Why an expression was refused (DynamoDB's `ValidationException`).
pub(crate) type ExprError = String;

/// The expression attribute names and values of one request, and which
/// of them the request's expressions use.
pub(crate) struct Placeholders<'a> {
    names: &'a BTreeMap<String, String>,
    values: &'a StoredItem,
    used_names: BTreeSet<String>,
    used_values: BTreeSet<String>,
}

impl<'a> Placeholders<'a> {
    pub(crate) fn new(names: &'a BTreeMap<String, String>, values: &'a StoredItem) -> Self {
        Self {
            names,
            values,
            used_names: BTreeSet::new(),
            used_values: BTreeSet::new(),
        }
    }

    fn name(&mut self, placeholder: &str) -> Result<String, ExprError> {
        let name = self.names.get(placeholder).ok_or_else(|| {
            format!(
                "An expression attribute name used in the document path is not defined; attribute name: {placeholder}"
            )
        })?;
        self.used_names.insert(placeholder.to_owned());
        Ok(name.clone())
    }

    fn value(&mut self, placeholder: &str) -> Result<AttributeValue, ExprError> {
        let value = self.values.get(placeholder).ok_or_else(|| {
            format!(
                "An expression attribute value used in expression is not defined; attribute value: {placeholder}"
            )
        })?;
        self.used_values.insert(placeholder.to_owned());
        Ok(value.clone())
    }

    /// DynamoDB refuses a request that defines a name or value no
    /// expression uses.
    pub(crate) fn check_all_used(&self) -> Result<(), ExprError> {
        let unused = |all: Vec<&String>, used: &BTreeSet<String>| -> Vec<String> {
            all.into_iter()
                .filter(|k| !used.contains(*k))
                .cloned()
                .collect()
        };
        let names = unused(self.names.keys().collect(), &self.used_names);
        if !names.is_empty() {
            return Err(format!(
                "Value provided in ExpressionAttributeNames unused in expressions: keys: {{{}}}",
                names.join(", ")
            ));
        }
        let values = unused(self.values.keys().collect(), &self.used_values);
        if !values.is_empty() {
            return Err(format!(
                "Value provided in ExpressionAttributeValues unused in expressions: keys: {{{}}}",
                values.join(", ")
            ));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Tokens
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Tok {
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
    fn symbol(self) -> &'static str {
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

fn tokens(expr: &str) -> Result<Vec<Tok>, ExprError> {
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

struct Parser<'t, 'p, 'a> {
    toks: &'t [Tok],
    at: usize,
    ph: &'p mut Placeholders<'a>,
    expr: &'t str,
}

impl Parser<'_, '_, '_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }

    fn peek2(&self) -> Option<&Tok> {
        self.toks.get(self.at + 1)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn keyword(&self, kw: &str) -> bool {
        matches!(self.peek(), Some(Tok::Word(w)) if w.eq_ignore_ascii_case(kw))
    }

    fn syntax(&self, what: &str) -> ExprError {
        let near = match self.peek() {
            Some(t) => format!("{t:?}"),
            None => "the end".into(),
        };
        format!("Invalid expression: {what}, near {near} in {:?}", self.expr)
    }

    fn expect(&mut self, tok: &Tok, what: &str) -> Result<(), ExprError> {
        if self.peek() == Some(tok) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.syntax(&format!("expected {what}")))
        }
    }

    /// A top-level attribute name: `name` or `#placeholder`.
    fn path(&mut self) -> Result<String, ExprError> {
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

    fn done(&self) -> Result<(), ExprError> {
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

// ---------------------------------------------------------------------------
// Conditions
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub(crate) enum Operand {
    Attr(String),
    Value(AttributeValue),
}

/// A parsed condition expression, its placeholders resolved.
#[derive(Debug, Clone)]
pub(crate) enum Condition {
    Or(Box<Condition>, Box<Condition>),
    And(Box<Condition>, Box<Condition>),
    Not(Box<Condition>),
    Compare(Operand, Cmp, Operand),
    Between(Operand, Operand, Operand),
    In(Operand, Vec<Operand>),
    Exists(String),
    NotExists(String),
    BeginsWith(Operand, Operand),
}

impl Condition {
    pub(crate) fn parse(expr: &str, ph: &mut Placeholders<'_>) -> Result<Self, ExprError> {
        let toks = tokens(expr)?;
        if toks.is_empty() {
            return Err("Invalid ConditionExpression: The expression can not be empty;".into());
        }
        let mut p = Parser {
            toks: &toks,
            at: 0,
            ph,
            expr,
        };
        let c = or(&mut p)?;
        p.done()?;
        Ok(c)
    }

    /// Whether the condition holds on `item` (`None`: no item stored).
    pub(crate) fn eval(&self, item: Option<&StoredItem>) -> Result<bool, ExprError> {
        let get = |o: &Operand| -> Option<AttributeValue> {
            match o {
                Operand::Attr(a) => item.and_then(|i| i.get(a)).cloned(),
                Operand::Value(v) => Some(v.clone()),
            }
        };
        Ok(match self {
            Condition::Or(a, b) => a.eval(item)? || b.eval(item)?,
            Condition::And(a, b) => a.eval(item)? && b.eval(item)?,
            Condition::Not(a) => !a.eval(item)?,
            Condition::Exists(a) => item.is_some_and(|i| i.contains_key(a)),
            Condition::NotExists(a) => !item.is_some_and(|i| i.contains_key(a)),
            Condition::Compare(a, op, b) => {
                let (x, y) = (get(a), get(b));
                match op {
                    // A missing attribute equals nothing, so `<>` holds.
                    Cmp::Eq => matches!((&x, &y), (Some(x), Some(y)) if equal(x, y)),
                    Cmp::Ne => !matches!((&x, &y), (Some(x), Some(y)) if equal(x, y)),
                    _ => {
                        check_scalar(a, op.symbol())?;
                        check_scalar(b, op.symbol())?;
                        match order(x.as_ref(), y.as_ref()) {
                            None => false,
                            Some(o) => match op {
                                Cmp::Lt => o == Ordering::Less,
                                Cmp::Le => o != Ordering::Greater,
                                Cmp::Gt => o == Ordering::Greater,
                                _ => o != Ordering::Less,
                            },
                        }
                    }
                }
            }
            Condition::Between(x, lo, hi) => {
                for o in [x, lo, hi] {
                    check_scalar(o, "BETWEEN")?;
                }
                let (v, l, h) = (get(x), get(lo), get(hi));
                if order(l.as_ref(), h.as_ref()) == Some(Ordering::Greater) {
                    return Err("Invalid ConditionExpression: The BETWEEN operator requires upper bound to be greater than or equal to lower bound".into());
                }
                order(v.as_ref(), l.as_ref()).is_some_and(|o| o != Ordering::Less)
                    && order(v.as_ref(), h.as_ref()).is_some_and(|o| o != Ordering::Greater)
            }
            Condition::In(x, list) => {
                let v = get(x);
                list.iter()
                    .any(|o| matches!((&v, get(o)), (Some(v), Some(w)) if equal(v, &w)))
            }
            Condition::BeginsWith(x, prefix) => match (get(x), get(prefix)) {
                (Some(AttributeValue::S(s)), Some(AttributeValue::S(p))) => s.starts_with(&p),
                (Some(AttributeValue::B(s)), Some(AttributeValue::B(p))) => {
                    s.as_ref().starts_with(p.as_ref())
                }
                (_, None | Some(AttributeValue::S(_) | AttributeValue::B(_))) => false,
                (_, Some(p)) => {
                    return Err(format!(
                        "Invalid ConditionExpression: Incorrect operand type for operator or function; operator or function: begins_with, operand type: {}",
                        type_name(&p)
                    ));
                }
            },
        })
    }
}

/// An ordering comparison takes scalars (S, N, B); a literal of another
/// type is a `ValidationException`, a stored one just compares false.
fn check_scalar(o: &Operand, op: &str) -> Result<(), ExprError> {
    match o {
        Operand::Value(
            v @ (AttributeValue::Bool(_)
            | AttributeValue::Null(_)
            | AttributeValue::L(_)
            | AttributeValue::M(_)
            | AttributeValue::Ss(_)
            | AttributeValue::Ns(_)
            | AttributeValue::Bs(_)),
        ) => Err(format!(
            "Invalid ConditionExpression: Incorrect operand type for operator or function; operator or function: {op}, operand type: {}",
            type_name(v)
        )),
        _ => Ok(()),
    }
}

/// The order of two scalars of one type; `None` if either is missing or
/// the types differ (the comparison is then false).
fn order(a: Option<&AttributeValue>, b: Option<&AttributeValue>) -> Option<Ordering> {
    match (a?, b?) {
        (AttributeValue::N(x), AttributeValue::N(y)) => {
            Some(Number::parse(x).ok()?.cmp(&Number::parse(y).ok()?))
        }
        // Strings by their UTF-8 bytes, binary by bytes.
        (AttributeValue::S(x), AttributeValue::S(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        (AttributeValue::B(x), AttributeValue::B(y)) => Some(x.as_ref().cmp(y.as_ref())),
        _ => None,
    }
}

fn or(p: &mut Parser<'_, '_, '_>) -> Result<Condition, ExprError> {
    let mut left = and(p)?;
    while p.keyword("OR") {
        p.at += 1;
        left = Condition::Or(Box::new(left), Box::new(and(p)?));
    }
    Ok(left)
}

fn and(p: &mut Parser<'_, '_, '_>) -> Result<Condition, ExprError> {
    let mut left = not(p)?;
    while p.keyword("AND") {
        p.at += 1;
        left = Condition::And(Box::new(left), Box::new(not(p)?));
    }
    Ok(left)
}

fn not(p: &mut Parser<'_, '_, '_>) -> Result<Condition, ExprError> {
    if p.keyword("NOT") {
        p.at += 1;
        return Ok(Condition::Not(Box::new(not(p)?)));
    }
    primary(p)
}

fn primary(p: &mut Parser<'_, '_, '_>) -> Result<Condition, ExprError> {
    if p.peek() == Some(&Tok::LParen) {
        p.at += 1;
        let c = or(p)?;
        p.expect(&Tok::RParen, "')'")?;
        return Ok(c);
    }
    if let (Some(Tok::Word(f)), Some(Tok::LParen)) = (p.peek(), p.peek2()) {
        let f = f.clone();
        p.at += 2;
        let c = match f.as_str() {
            "attribute_exists" => Condition::Exists(p.path()?),
            "attribute_not_exists" => Condition::NotExists(p.path()?),
            "begins_with" => {
                let path = Operand::Attr(p.path()?);
                p.expect(&Tok::Comma, "','")?;
                Condition::BeginsWith(path, operand(p)?)
            }
            other => {
                return Err(format!(
                    "the function {other}() in the condition {:?} is not modelled by idemq::testing",
                    p.expr
                ));
            }
        };
        p.expect(&Tok::RParen, "')'")?;
        return Ok(c);
    }
    let left = operand(p)?;
    match p.next() {
        Some(Tok::Cmp(op)) => Ok(Condition::Compare(left, op, operand(p)?)),
        Some(Tok::Word(w)) if w.eq_ignore_ascii_case("BETWEEN") => {
            let lo = operand(p)?;
            if !p.keyword("AND") {
                return Err(p.syntax("expected AND in BETWEEN"));
            }
            p.at += 1;
            Ok(Condition::Between(left, lo, operand(p)?))
        }
        Some(Tok::Word(w)) if w.eq_ignore_ascii_case("IN") => {
            p.expect(&Tok::LParen, "'(' after IN")?;
            let mut list = vec![operand(p)?];
            while p.peek() == Some(&Tok::Comma) {
                p.at += 1;
                list.push(operand(p)?);
            }
            p.expect(&Tok::RParen, "')'")?;
            if list.len() > 100 {
                return Err("Invalid ConditionExpression: IN takes at most 100 values".into());
            }
            Ok(Condition::In(left, list))
        }
        _ => {
            p.at -= 1;
            Err(p.syntax("expected a comparison, BETWEEN or IN"))
        }
    }
}

fn operand(p: &mut Parser<'_, '_, '_>) -> Result<Operand, ExprError> {
    if let (Some(Tok::Word(f)), Some(Tok::LParen)) = (p.peek(), p.peek2()) {
        return Err(format!(
            "the function {f}() as an operand in {:?} is not modelled by idemq::testing",
            p.expr
        ));
    }
    match p.peek() {
        Some(Tok::Value(v)) => {
            let v = v.clone();
            p.at += 1;
            Ok(Operand::Value(p.ph.value(&v)?))
        }
        _ => Ok(Operand::Attr(p.path()?)),
    }
}

// ---------------------------------------------------------------------------
// Updates
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum SetOperand {
    Attr(String),
    Value(AttributeValue),
    IfNotExists(String, Box<SetOperand>),
}

#[derive(Debug, Clone)]
enum SetValue {
    One(SetOperand),
    Plus(SetOperand, SetOperand),
    Minus(SetOperand, SetOperand),
}

#[derive(Debug, Clone)]
enum Action {
    Set(String, SetValue),
    Remove(String),
    Add(String, AttributeValue),
}

impl Action {
    fn target(&self) -> &str {
        match self {
            Action::Set(a, _) | Action::Remove(a) | Action::Add(a, _) => a,
        }
    }
}

/// A parsed update expression, its placeholders resolved.
#[derive(Debug, Clone)]
pub(crate) struct Update {
    actions: Vec<Action>,
}

impl Update {
    /// Parses `expr`; `key` names the table's key attributes, which an
    /// update may not touch.
    pub(crate) fn parse(
        expr: &str,
        ph: &mut Placeholders<'_>,
        key: &[&str],
    ) -> Result<Self, ExprError> {
        let toks = tokens(expr)?;
        if toks.is_empty() {
            return Err("Invalid UpdateExpression: The expression can not be empty;".into());
        }
        let mut p = Parser {
            toks: &toks,
            at: 0,
            ph,
            expr,
        };
        let mut actions = Vec::new();
        let mut seen: Vec<String> = Vec::new();
        while let Some(tok) = p.next() {
            let Tok::Word(clause) = tok else {
                p.at -= 1;
                return Err(p.syntax("expected SET, REMOVE, ADD or DELETE"));
            };
            let clause = clause.to_ascii_uppercase();
            if seen.contains(&clause) {
                return Err(format!(
                    "Invalid UpdateExpression: The \"{clause}\" section can only be used once in an update expression;"
                ));
            }
            loop {
                let action = match clause.as_str() {
                    "SET" => {
                        let path = p.path()?;
                        p.expect(&Tok::Cmp(Cmp::Eq), "'=' in SET")?;
                        let first = set_operand(&mut p)?;
                        let value = match p.peek() {
                            Some(Tok::Plus) => {
                                p.at += 1;
                                SetValue::Plus(first, set_operand(&mut p)?)
                            }
                            Some(Tok::Minus) => {
                                p.at += 1;
                                SetValue::Minus(first, set_operand(&mut p)?)
                            }
                            _ => SetValue::One(first),
                        };
                        Action::Set(path, value)
                    }
                    "REMOVE" => Action::Remove(p.path()?),
                    "ADD" => {
                        let path = p.path()?;
                        match p.next() {
                            Some(Tok::Value(v)) => Action::Add(path, p.ph.value(&v)?),
                            _ => {
                                p.at -= 1;
                                return Err(p.syntax("ADD takes an expression attribute value"));
                            }
                        }
                    }
                    "DELETE" => {
                        return Err(format!(
                            "the DELETE clause of the update {expr:?} is not modelled by idemq::testing"
                        ));
                    }
                    other => {
                        return Err(format!(
                            "Invalid UpdateExpression: Syntax error; token: \"{other}\""
                        ));
                    }
                };
                actions.push(action);
                if p.peek() == Some(&Tok::Comma) {
                    p.at += 1;
                } else {
                    break;
                }
            }
            seen.push(clause);
        }
        let mut targets = BTreeSet::new();
        for a in &actions {
            let t = a.target();
            if key.contains(&t) {
                return Err(format!(
                    "One or more parameter values were invalid: Cannot update attribute {t}. This attribute is part of the key"
                ));
            }
            if !targets.insert(t.to_owned()) {
                return Err(format!(
                    "Invalid UpdateExpression: Two document paths overlap with each other; must remove or rewrite one of these paths; path one: [{t}], path two: [{t}]"
                ));
            }
        }
        Ok(Self { actions })
    }

    /// Applies the update to `item`. Every operand reads the item as it was
    /// before the update. `Err` is a data error (a wrong type, a missing
    /// operand): DynamoDB's `ValidationException`, or in a transaction the
    /// cancellation reason `ValidationError`.
    pub(crate) fn apply(&self, item: &mut StoredItem) -> Result<(), ExprError> {
        let before = item.clone();
        for action in &self.actions {
            match action {
                Action::Set(path, value) => {
                    let v = match value {
                        SetValue::One(o) => resolve(o, &before)?,
                        SetValue::Plus(a, b) => {
                            arith(resolve(a, &before)?, resolve(b, &before)?, false)?
                        }
                        SetValue::Minus(a, b) => {
                            arith(resolve(a, &before)?, resolve(b, &before)?, true)?
                        }
                    };
                    item.insert(path.clone(), v);
                }
                Action::Remove(path) => {
                    item.remove(path);
                }
                Action::Add(path, v) => {
                    let next = add(before.get(path), v)?;
                    item.insert(path.clone(), next);
                }
            }
        }
        Ok(())
    }
}

fn set_operand(p: &mut Parser<'_, '_, '_>) -> Result<SetOperand, ExprError> {
    if let (Some(Tok::Word(f)), Some(Tok::LParen)) = (p.peek(), p.peek2()) {
        let f = f.clone();
        if f != "if_not_exists" {
            return Err(format!(
                "the function {f}() in the update {:?} is not modelled by idemq::testing",
                p.expr
            ));
        }
        p.at += 2;
        let path = p.path()?;
        p.expect(&Tok::Comma, "','")?;
        let fallback = set_operand(p)?;
        p.expect(&Tok::RParen, "')'")?;
        return Ok(SetOperand::IfNotExists(path, Box::new(fallback)));
    }
    match p.peek() {
        Some(Tok::Value(v)) => {
            let v = v.clone();
            p.at += 1;
            Ok(SetOperand::Value(p.ph.value(&v)?))
        }
        _ => Ok(SetOperand::Attr(p.path()?)),
    }
}

fn resolve(o: &SetOperand, item: &StoredItem) -> Result<AttributeValue, ExprError> {
    match o {
        SetOperand::Value(v) => Ok(v.clone()),
        SetOperand::Attr(a) => item.get(a).cloned().ok_or_else(|| {
            format!("The provided expression refers to an attribute that does not exist in the item ({a})")
        }),
        SetOperand::IfNotExists(a, fallback) => match item.get(a) {
            Some(v) => Ok(v.clone()),
            None => resolve(fallback, item),
        },
    }
}

fn number_of(v: &AttributeValue, op: &str) -> Result<Number, ExprError> {
    match v {
        AttributeValue::N(n) => Number::parse(n),
        other => Err(format!(
            "An operand in the update expression has an incorrect data type (operator: {op}, operand type: {})",
            type_name(other)
        )),
    }
}

fn arith(a: AttributeValue, b: AttributeValue, minus: bool) -> Result<AttributeValue, ExprError> {
    let op = if minus { "-" } else { "+" };
    let (x, y) = (number_of(&a, op)?, number_of(&b, op)?);
    let y = if minus { y.neg() } else { y };
    Ok(AttributeValue::N(x.add(y)?.to_string()))
}

/// `ADD`: a number to a number (a missing one counting as 0), or a set
/// joined to a set of the same type (a missing one counting as empty).
fn add(old: Option<&AttributeValue>, v: &AttributeValue) -> Result<AttributeValue, ExprError> {
    use AttributeValue as A;
    let wrong = |t: &AttributeValue| {
        format!(
            "Invalid UpdateExpression: Incorrect operand type for operator or function; operator: ADD, operand type: {}",
            type_name(t)
        )
    };
    fn join<T: Clone>(old: &[T], new: &[T], same: impl Fn(&T, &T) -> bool) -> Vec<T> {
        let mut out = old.to_vec();
        for n in new {
            if !out.iter().any(|o| same(o, n)) {
                out.push(n.clone());
            }
        }
        out
    }
    match (old, v) {
        (None, A::N(_) | A::Ss(_) | A::Ns(_) | A::Bs(_)) => Ok(match v {
            A::N(n) => A::N(Number::parse(n)?.to_string()),
            other => other.clone(),
        }),
        (Some(A::N(o)), A::N(n)) => Ok(A::N(Number::parse(o)?.add(Number::parse(n)?)?.to_string())),
        (Some(A::Ss(o)), A::Ss(n)) => Ok(A::Ss(join(o, n, |a, b| a == b))),
        (Some(A::Ns(o)), A::Ns(n)) => Ok(A::Ns(join(o, n, |a, b| {
            equal(&A::N(a.clone()), &A::N(b.clone()))
        }))),
        (Some(A::Bs(o)), A::Bs(n)) => Ok(A::Bs(join(o, n, |a, b| a == b))),
        (None, other) => Err(wrong(other)),
        (Some(o), A::N(_) | A::Ss(_) | A::Ns(_) | A::Bs(_)) => Err(format!(
            "An operand in the update expression has an incorrect data type (ADD of {} to {})",
            type_name(v),
            type_name(o)
        )),
        (Some(_), other) => Err(wrong(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> AttributeValue {
        AttributeValue::N(s.into())
    }
    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }

    struct Case {
        names: BTreeMap<String, String>,
        values: StoredItem,
    }

    impl Case {
        fn new(names: &[(&str, &str)], values: &[(&str, AttributeValue)]) -> Self {
            Self {
                names: names
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                values: values
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect(),
            }
        }

        fn cond(&self, expr: &str, item: Option<&StoredItem>) -> Result<bool, ExprError> {
            let mut ph = Placeholders::new(&self.names, &self.values);
            Condition::parse(expr, &mut ph)?.eval(item)
        }

        fn update(&self, expr: &str, item: &mut StoredItem) -> Result<(), ExprError> {
            let mut ph = Placeholders::new(&self.names, &self.values);
            Update::parse(expr, &mut ph, &["pk"])?.apply(item)
        }
    }

    fn item(attrs: &[(&str, AttributeValue)]) -> StoredItem {
        attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn existence_functions_with_names_and_without_an_item() {
        let c = Case::new(&[("#pk", "pk")], &[]);
        let stored = item(&[("pk", s("a"))]);
        assert!(c.cond("attribute_not_exists(#pk)", None).unwrap());
        assert!(!c.cond("attribute_not_exists(#pk)", Some(&stored)).unwrap());
        assert!(c.cond("attribute_exists(#pk)", Some(&stored)).unwrap());
        assert!(c.cond("attribute_exists(pk)", Some(&stored)).unwrap());
        assert!(!c.cond("attribute_exists(other)", Some(&stored)).unwrap());
    }

    #[test]
    fn comparisons_by_type_numbers_by_value() {
        let c = Case::new(
            &[],
            &[(":ten", n("10")), (":nine", n("9.0")), (":s", s("10"))],
        );
        let i = item(&[("balance", n("9"))]);
        assert!(c.cond("balance < :ten", Some(&i)).unwrap());
        assert!(c.cond("balance = :nine", Some(&i)).unwrap(), "9 = 9.0");
        assert!(c.cond("balance <= :nine", Some(&i)).unwrap());
        assert!(!c.cond("balance > :nine", Some(&i)).unwrap());
        assert!(c.cond("balance >= :nine", Some(&i)).unwrap());
        // Another type: never equal, never ordered.
        assert!(!c.cond("balance = :s", Some(&i)).unwrap());
        assert!(!c.cond("balance < :s", Some(&i)).unwrap());
        assert!(c.cond("balance <> :s", Some(&i)).unwrap());
        // A missing attribute: ordered comparisons are false, <> is true.
        assert!(!c.cond("missing < :ten", Some(&i)).unwrap());
        assert!(!c.cond("missing = :ten", None).unwrap());
        assert!(c.cond("missing <> :ten", None).unwrap());
    }

    #[test]
    fn and_or_not_precedence_and_parentheses() {
        let c = Case::new(&[], &[(":v", n("1"))]);
        let i = item(&[("a", n("1"))]);
        // NOT binds tighter than AND, AND tighter than OR.
        assert!(
            c.cond(
                "attribute_exists(b) AND attribute_exists(c) OR a = :v",
                Some(&i)
            )
            .unwrap()
        );
        assert!(
            !c.cond(
                "attribute_exists(b) AND (attribute_exists(c) OR a = :v)",
                Some(&i)
            )
            .unwrap()
        );
        assert!(
            c.cond("NOT attribute_exists(b) AND a = :v", Some(&i))
                .unwrap()
        );
        assert!(
            !c.cond("NOT (attribute_exists(b) OR a = :v)", Some(&i))
                .unwrap()
        );
        assert!(
            c.cond("not attribute_exists(b) and a = :v", Some(&i))
                .unwrap(),
            "keywords ignore case"
        );
    }

    #[test]
    fn between_in_and_begins_with() {
        let c = Case::new(
            &[],
            &[
                (":lo", n("1")),
                (":hi", n("5")),
                (":a", s("x")),
                (":b", s("acc")),
                (":p", s("acc")),
            ],
        );
        let i = item(&[("n", n("3")), ("k", s("account#a"))]);
        assert!(c.cond("n BETWEEN :lo AND :hi", Some(&i)).unwrap());
        assert!(!c.cond("n BETWEEN :hi AND :hi", Some(&i)).unwrap());
        assert!(
            c.cond("n BETWEEN :hi AND :lo", Some(&i)).is_err(),
            "bounds reversed"
        );
        assert!(!c.cond("k IN (:a, :b)", Some(&i)).unwrap());
    }

    #[test]
    fn begins_with_and_in_match() {
        let c = Case::new(
            &[],
            &[
                (":p", s("account#")),
                (":x", s("account#a")),
                (":y", s("other")),
            ],
        );
        let i = item(&[("k", s("account#a"))]);
        assert!(c.cond("begins_with(k, :p)", Some(&i)).unwrap());
        assert!(c.cond("k IN (:x, :y)", Some(&i)).unwrap());
        assert!(!c.cond("k IN (:y)", Some(&i)).unwrap());
    }

    #[test]
    fn unmodelled_and_invalid_conditions_are_refused_by_name() {
        let c = Case::new(&[("#a", "a")], &[(":v", n("1"))]);
        for (expr, names) in [
            ("size(a) > :v", "size"),
            ("contains(a, :v)", "contains"),
            ("attribute_type(a, :v)", "attribute_type"),
            ("a.b = :v", "nested"),
            ("a[0] = :v", "nested"),
            ("#b = :v", "#b"),
            ("a = :w", ":w"),
            ("a = ", "Invalid"),
            ("a = :v extra", "Invalid"),
            ("(a = :v", "Invalid"),
            ("", "empty"),
            ("a ~ :v", "Invalid"),
        ] {
            let e = c.cond(expr, None).expect_err(expr);
            assert!(e.contains(names), "{expr:?}: {e}");
        }
    }

    #[test]
    fn set_with_plus_minus_and_if_not_exists() {
        let c = Case::new(&[("#b", "balance")], &[(":n", n("2.5")), (":zero", n("0"))]);
        let mut i = item(&[("pk", s("a")), ("balance", n("10"))]);
        c.update("SET #b = #b + :n", &mut i).unwrap();
        assert_eq!(i["balance"], n("12.5"));
        c.update("SET #b = #b - :n", &mut i).unwrap();
        assert_eq!(i["balance"], n("10"));
        c.update("SET other = if_not_exists(other, :zero) + :n", &mut i)
            .unwrap();
        assert_eq!(i["other"], n("2.5"));
        // Operands read the item as it was before the update.
        let c2 = Case::new(&[], &[(":n", n("1"))]);
        let mut j = item(&[("a", n("1")), ("b", n("5"))]);
        c2.update("SET a = b, b = a + :n", &mut j).unwrap();
        assert_eq!((j["a"].clone(), j["b"].clone()), (n("5"), n("2")));
    }

    #[test]
    fn add_numbers_and_sets_remove_attributes() {
        let c = Case::new(
            &[],
            &[
                (":n", n("-3")),
                (":tags", AttributeValue::Ss(vec!["b".into(), "c".into()])),
            ],
        );
        let mut i = item(&[
            ("pk", s("a")),
            ("tags", AttributeValue::Ss(vec!["a".into(), "b".into()])),
            ("gone", s("x")),
        ]);
        c.update("ADD balance :n, tags :tags REMOVE gone", &mut i)
            .unwrap();
        assert_eq!(i["balance"], n("-3"), "a missing number counts as 0");
        assert_eq!(
            i["tags"],
            AttributeValue::Ss(vec!["a".into(), "b".into(), "c".into()])
        );
        assert!(!i.contains_key("gone"));
        c.update("ADD balance :n REMOVE tags", &mut i).unwrap();
        assert_eq!(i["balance"], n("-6"));
    }

    #[test]
    fn update_data_errors() {
        let c = Case::new(&[], &[(":n", n("1")), (":s", s("x"))]);
        let mut i = item(&[("pk", s("a")), ("name", s("x"))]);
        let e = c
            .update("ADD name :n REMOVE nothing SET v = :s", &mut i)
            .unwrap_err();
        assert!(e.contains("incorrect data type"), "{e}");
        let e = c
            .update("SET v = missing + :n REMOVE x SET w = :s", &mut i)
            .unwrap_err();
        assert!(e.contains("only be used once"), "{e}");
        let e = c
            .update("SET v = missing + :n, w = :s", &mut i)
            .unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
        let e = c.update("SET v = name + :n, w = :s", &mut i).unwrap_err();
        assert!(e.contains("incorrect data type"), "{e}");
    }

    #[test]
    fn unmodelled_and_invalid_updates_are_refused_by_name() {
        let c = Case::new(
            &[("#pk", "pk")],
            &[(":n", n("1")), (":l", AttributeValue::L(vec![]))],
        );
        let mut i = StoredItem::new();
        for (expr, names) in [
            ("DELETE tags :n", "DELETE"),
            ("SET l = list_append(l, :l)", "list_append"),
            ("SET #pk = :n", "part of the key"),
            ("SET a = :n, a = :n", "overlap"),
            ("SET a = :n REMOVE a", "overlap"),
            ("UPSERT a = :n", "Syntax error"),
            ("SET a :n", "Invalid"),
            ("ADD a b", "ADD takes"),
            ("SET a.b = :n", "nested"),
        ] {
            let e = c.update(expr, &mut i).expect_err(expr);
            assert!(e.contains(names), "{expr:?}: {e}");
        }
    }

    proptest::proptest! {
        /// Any expression text: parsed and evaluated, or refused with an
        /// error; never a panic.
        #[test]
        fn any_expression_is_evaluated_or_refused(expr in "[a-z#:()<>=, +.\\[\\]-]{0,40}|(SET|ADD|REMOVE|NOT|AND|OR|IN|BETWEEN| |a|#n|:v|:s|,|=|<|>|\\(|\\)|\\+|-|attribute_exists|if_not_exists|begins_with){0,12}") {
            let c = Case::new(&[("#n", "n")], &[(":v", n("1")), (":s", s("x"))]);
            let stored = item(&[("pk", s("k")), ("a", n("2")), ("n", s("y"))]);
            let _ = c.cond(&expr, Some(&stored));
            let _ = c.cond(&expr, None);
            let mut updated = stored.clone();
            let _ = c.update(&expr, &mut updated);
        }
    }

    #[test]
    fn every_defined_placeholder_must_be_used() {
        let names = BTreeMap::from([
            ("#a".to_string(), "a".to_string()),
            ("#x".to_string(), "x".to_string()),
        ]);
        let values = item(&[(":v", n("1")), (":unused", n("2"))]);
        let mut ph = Placeholders::new(&names, &values);
        Condition::parse("#a = :v", &mut ph).unwrap();
        let e = ph.check_all_used().unwrap_err();
        assert!(
            e.contains("ExpressionAttributeNames unused") && e.contains("#x"),
            "{e}"
        );
        let mut ph = Placeholders::new(&names, &values);
        Condition::parse("#a = :v AND attribute_exists(#x)", &mut ph).unwrap();
        let e = ph.check_all_used().unwrap_err();
        assert!(
            e.contains("ExpressionAttributeValues unused") && e.contains(":unused"),
            "{e}"
        );
    }
}
