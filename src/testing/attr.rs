//! DynamoDB attribute values between their wire form (AWS JSON 1.0:
//! `{"S": "x"}`, `{"N": "1"}`, `{"B": "<base64>"}`, …) and the SDK's
//! [`AttributeValue`], plus the equality and typing rules expressions use
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_AttributeValue.html>).

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

use super::number::Number;

/// An item as the store keeps it: attributes in name order, so what a test
/// reads back never depends on a hash map's order.
pub(crate) type StoredItem = BTreeMap<String, AttributeValue>;

/// The wire form of an item or key map (`{"pk": {"S": "a"}, …}`).
pub(crate) fn item_from_wire(v: &Value) -> Result<StoredItem, String> {
    let Some(map) = v.as_object() else {
        return Err("an item must be a map of attribute names to values".into());
    };
    map.iter()
        .map(|(k, v)| Ok((k.clone(), from_wire(v).map_err(|e| format!("{k}: {e}"))?)))
        .collect()
}

pub(crate) fn item_to_wire(item: &StoredItem) -> Value {
    Value::Object(item.iter().map(|(k, v)| (k.clone(), to_wire(v))).collect())
}

/// One attribute value from its wire form.
pub(crate) fn from_wire(v: &Value) -> Result<AttributeValue, String> {
    let Some((tag, inner)) = v
        .as_object()
        .filter(|o| o.len() == 1)
        .and_then(|o| o.iter().next())
    else {
        return Err("an attribute value must name exactly one data type".into());
    };
    let string = || {
        inner
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("{tag} must be a string"))
    };
    let strings = || -> Result<Vec<String>, String> {
        inner
            .as_array()
            .ok_or_else(|| format!("{tag} must be a list"))?
            .iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{tag} must hold strings"))
            })
            .collect()
    };
    let blob = |s: &str| {
        STANDARD
            .decode(s)
            .map(Blob::new)
            .map_err(|_| format!("{tag} is not valid base64"))
    };
    let number = |s: String| Number::parse(&s).map(|_| s);
    Ok(match tag.as_str() {
        "S" => AttributeValue::S(string()?),
        "N" => AttributeValue::N(number(string()?)?),
        "B" => AttributeValue::B(blob(&string()?)?),
        "BOOL" => AttributeValue::Bool(inner.as_bool().ok_or("BOOL must be true or false")?),
        "NULL" => AttributeValue::Null(inner.as_bool().ok_or("NULL must be true")?),
        "SS" => AttributeValue::Ss(non_empty_set(tag, strings()?)?),
        "NS" => AttributeValue::Ns(non_empty_set(
            tag,
            strings()?
                .into_iter()
                .map(number)
                .collect::<Result<_, _>>()?,
        )?),
        "BS" => AttributeValue::Bs(non_empty_set(
            tag,
            strings()?
                .iter()
                .map(|s| blob(s))
                .collect::<Result<_, _>>()?,
        )?),
        "L" => AttributeValue::L(
            inner
                .as_array()
                .ok_or("L must be a list")?
                .iter()
                .map(from_wire)
                .collect::<Result<_, _>>()?,
        ),
        "M" => AttributeValue::M(item_from_wire(inner)?.into_iter().collect()),
        other => return Err(format!("unknown attribute data type {other}")),
    })
}

/// "An empty set is not allowed" (sets hold at least one element).
fn non_empty_set<T>(tag: &str, v: Vec<T>) -> Result<Vec<T>, String> {
    if v.is_empty() {
        Err(format!("an empty set ({tag}) is not allowed"))
    } else {
        Ok(v)
    }
}

pub(crate) fn to_wire(v: &AttributeValue) -> Value {
    let b64 = |b: &Blob| Value::String(STANDARD.encode(b.as_ref()));
    match v {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::B(b) => json!({ "B": b64(b) }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(b) => json!({ "NULL": b }),
        AttributeValue::Ss(s) => json!({ "SS": s }),
        AttributeValue::Ns(s) => json!({ "NS": s }),
        AttributeValue::Bs(s) => json!({ "BS": s.iter().map(b64).collect::<Vec<_>>() }),
        AttributeValue::L(l) => json!({ "L": l.iter().map(to_wire).collect::<Vec<_>>() }),
        AttributeValue::M(m) => {
            let sorted: BTreeMap<_, _> = m.iter().collect();
            json!({ "M": sorted.into_iter().map(|(k, v)| (k.clone(), to_wire(v))).collect::<Map<_, _>>() })
        }
        // A variant newer than this code: say so rather than guess.
        _ => json!({ "NULL": true }),
    }
}

/// The data type's name, as DynamoDB's messages spell it.
pub(crate) fn type_name(v: &AttributeValue) -> &'static str {
    match v {
        AttributeValue::S(_) => "S",
        AttributeValue::N(_) => "N",
        AttributeValue::B(_) => "B",
        AttributeValue::Bool(_) => "BOOL",
        AttributeValue::Null(_) => "NULL",
        AttributeValue::Ss(_) => "SS",
        AttributeValue::Ns(_) => "NS",
        AttributeValue::Bs(_) => "BS",
        AttributeValue::L(_) => "L",
        AttributeValue::M(_) => "M",
        _ => "unknown",
    }
}

/// DynamoDB equality: same type and value; numbers by value (`1.0 = 1`);
/// sets regardless of order.
pub(crate) fn equal(a: &AttributeValue, b: &AttributeValue) -> bool {
    use AttributeValue as A;
    let num = |s: &str| Number::parse(s).ok();
    let set_eq = |a: &[String], b: &[String]| {
        let (mut a, mut b) = (a.to_vec(), b.to_vec());
        a.sort();
        a.dedup();
        b.sort();
        b.dedup();
        a == b
    };
    match (a, b) {
        (A::N(x), A::N(y)) => num(x).is_some() && num(x) == num(y),
        (A::Ns(x), A::Ns(y)) => {
            let norm = |v: &[String]| -> Vec<String> {
                v.iter()
                    .map(|s| num(s).map_or_else(|| s.clone(), |n| n.to_string()))
                    .collect()
            };
            set_eq(&norm(x), &norm(y))
        }
        (A::Ss(x), A::Ss(y)) => set_eq(x, y),
        (A::Bs(x), A::Bs(y)) => {
            let enc = |v: &[Blob]| -> Vec<String> {
                v.iter().map(|b| STANDARD.encode(b.as_ref())).collect()
            };
            set_eq(&enc(x), &enc(y))
        }
        (A::L(x), A::L(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b)),
        (A::M(x), A::M(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equal(v, w)))
        }
        _ => a == b,
    }
}

/// An item from the SDK's form (for seeding the store from a test).
pub(crate) fn from_sdk(item: &HashMap<String, AttributeValue>) -> StoredItem {
    item.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_round_trip_of_every_type() {
        let wire = json!({
            "s": {"S": "x"}, "n": {"N": "1.5"}, "b": {"B": "AAE="},
            "t": {"BOOL": true}, "z": {"NULL": true},
            "ss": {"SS": ["a", "b"]}, "ns": {"NS": ["1", "2"]}, "bs": {"BS": ["AA=="]},
            "l": {"L": [{"S": "a"}, {"N": "2"}]}, "m": {"M": {"k": {"S": "v"}}}
        });
        let item = item_from_wire(&wire).unwrap();
        assert_eq!(item["b"], AttributeValue::B(Blob::new(vec![0, 1])));
        assert_eq!(item_to_wire(&item), wire);
    }

    #[test]
    fn bad_wire_values_are_errors() {
        for bad in [
            json!({"N": "ten"}),
            json!({"S": 1}),
            json!({"SS": []}),
            json!({"B": "not base64!"}),
            json!({"X": "?"}),
            json!({"S": "a", "N": "1"}),
            json!("plain"),
        ] {
            assert!(from_wire(&bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn equality_follows_dynamodb() {
        let n = |s: &str| AttributeValue::N(s.into());
        assert!(equal(&n("1.0"), &n("1")));
        assert!(!equal(&n("1"), &AttributeValue::S("1".into())));
        assert!(equal(
            &AttributeValue::Ss(vec!["a".into(), "b".into()]),
            &AttributeValue::Ss(vec!["b".into(), "a".into()])
        ));
    }
}
