//! The expression engine's unit tests: conditions and updates evaluated
//! against items, refusals by name, unused placeholders, and a property
//! test that any text is evaluated or refused, never a panic.

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
