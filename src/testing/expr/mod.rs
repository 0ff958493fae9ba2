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

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::types::AttributeValue;

use super::attr::StoredItem;

mod condition;
mod parser;
#[cfg(test)]
mod tests;
mod update;

pub(crate) use condition::Condition;
pub(crate) use update::Update;

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
