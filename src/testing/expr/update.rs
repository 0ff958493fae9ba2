//! Update expressions: their clauses (`SET`, `REMOVE`, `ADD`), the checks
//! on their targets, and their application to a stored item with
//! DynamoDB's number and set arithmetic.

use std::collections::BTreeSet;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::testing::attr::{StoredItem, equal, type_name};
use crate::testing::number::Number;

use super::parser::{Cmp, Parser, Tok, tokens};
use super::{ExprError, Placeholders};

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
