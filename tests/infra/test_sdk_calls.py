"""The reader behind the IAM checks: it finds the SDK calls a binary can
reach, and only those."""

from __future__ import annotations

from pathlib import Path

import sdk_calls


def test_the_function_needs_what_its_code_calls(function_actions):
    # One TransactWriteItems authorises four item actions.
    assert {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem"} <= set(
        function_actions
    )
    # The batch APIs map to their single-message actions.
    assert "sqs:ChangeMessageVisibility" in function_actions
    assert not any(a.endswith("Batch") for a in function_actions)
    # The call path is reported, from the example's main.
    assert function_actions["sqs:ChangeMessageVisibility"].startswith(
        ".change_message_visibility_batch() via example:ledger::main"
    )


def test_cli_only_code_is_not_in_the_function(function_actions, cli_actions):
    # src/init.rs is reached by the function only through retention().
    for cli_only in ("sqs:CreateQueue", "sqs:SetQueueAttributes", "dynamodb:CreateTable", "dynamodb:UpdateTimeToLive"):
        assert cli_only in cli_actions and cli_only not in function_actions, cli_only


def _crate(tmp: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text(text)
    return tmp


def test_reachability_on_a_small_crate(tmp_path):
    repo = _crate(
        tmp_path,
        {
            "src/lib.rs": "pub mod a;\npub mod b;\npub use b::entry;\n",
            "src/a.rs": """
use crate::b::Thing;
/// Doc comments are not code: `client.scan()`.
pub async fn used(c: &Client) {
    let s = "neither are strings: .query()";
    c.put_item().table_name("t").send().await;
    Thing::new().go(1);
}
pub async fn unused(c: &Client) { c.delete_table().send().await; }
#[cfg(test)]
mod tests {
    fn t(c: &Client) { c.describe_table().send(); }
}
""",
            "src/b.rs": """
pub struct Thing;
impl Thing {
    pub fn new() -> Self { Thing }
    pub fn go(&self, n: u32) { self.client.get_item().send(); }
    pub fn idle(&self) { self.client.batch_get_item().send(); }
}
pub fn entry() { crate::a::used(&c); }
""",
            "examples/x.rs": "fn main() { idemq::entry(); }\n",
        },
    )
    ops = {
        op: "dynamodb"
        for op in ("put_item", "get_item", "scan", "query", "delete_table", "describe_table", "batch_get_item")
    }
    graph = sdk_calls.CallGraph(sdk_calls.read_crate(repo, [repo / "examples" / "x.rs"]), ops)
    assert set(graph.reach("example:x").ops) == {"put_item", "get_item"}
