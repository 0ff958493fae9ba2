//! A fused marker ([`Effect::marked_by`]) is the user's item, and the user
//! may replace it: a later `Put` of the same key without idemq's attributes
//! (the user's own code, another job, a backfill) erases the job id, the
//! payload hash, the commit time and the stored follow-ups. A redelivery of the job then
//! finds an item that marks nothing. It cannot be a duplicate: the item may
//! as well have been there before the job ever ran, and acknowledging it
//! would lose that job. It cannot be applied either: its key is taken, and
//! if the job did commit its other writes would be applied twice. So it is
//! rejected (dead-lettered at once), with a reason that names the item,
//! both readings and what a replaced marker lost, so the operator can tell
//! which one it is and send the follow-ups by hand.

use aws_sdk_dynamodb::types::AttributeValue;

use crate::store::dynamodb::effect::{Effect, Item, Write, WriteKind};

/// The rejection's reason when the item at `write`'s key (the job's fused
/// marker) is `stored` and carries no job id.
pub(super) fn reason(write: &Write, stored: &Item, effect: &Effect) -> String {
    let mut key: Vec<String> = write
        .key()
        .as_item()
        .iter()
        .map(|(name, value)| format!("{name}={}", scalar(value)))
        .collect();
    key.sort_unstable();
    let same = matches!(write.kind(), WriteKind::Put { attributes }
        if stored.len() == write.key().as_item().len() + attributes.len()
            && attributes.iter().all(|(k, v)| stored.get(k) == Some(v)));
    let hint = if same {
        "; its attributes are exactly the ones this job's Put writes, so it is most likely \
         this job's own item, replaced"
    } else {
        ""
    };
    let follow_ups = match effect.follow_ups() {
        [] => "no follow-ups".to_owned(),
        list => format!(
            "{} follow-up(s), not sent now: {}",
            list.len(),
            crate::followup::describe(list)
        ),
    };
    format!(
        "the marker item was overwritten or never this job's: the item this job's marker \
         creates (table {}, key {}) exists and is not a job's marker: it has no idemq job id \
         and payload hash{hint}. \
         Either a Put without those attributes replaced it after this job committed (the job \
         was applied once; the replaced marker lost its job id, payload hash and {follow_ups}), \
         or it was there before the job ran, or a version of this handler with a separate \
         marker wrote it (see Effect::switching_marker_form). Not applied again: check the \
         item, and if the job committed, send its follow-ups by hand",
        write.table(),
        key.join(", "),
    )
}

/// A key value as text: strings and numbers as they are, anything else by
/// its type.
fn scalar(value: &AttributeValue) -> String {
    match value {
        AttributeValue::S(s) | AttributeValue::N(s) => s.clone(),
        AttributeValue::B(b) => format!("<{} bytes>", b.as_ref().len()),
        _ => "<value>".to_owned(),
    }
}
