//! Condition expressions: their grammar (comparisons, `BETWEEN`, `IN`, the
//! functions, `NOT`/`AND`/`OR` with DynamoDB's precedence) and their
//! evaluation against a stored item.

use std::cmp::Ordering;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::testing::attr::{StoredItem, equal, type_name};
use crate::testing::number::Number;

use super::parser::{Cmp, Parser, Tok, tokens};
use super::{ExprError, Placeholders};

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
