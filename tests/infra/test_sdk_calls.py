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


def test_init_only_code_is_in_the_bootstrap_policy_alone(
    function_actions, cli_actions, operator_actions, bootstrap_actions
):
    # src/init.rs is reached by the function only through retention(), and
    # by the CLI only through `idemq init`.
    for init_only in ("sqs:CreateQueue", "sqs:SetQueueAttributes", "dynamodb:CreateTable", "dynamodb:UpdateTimeToLive"):
        assert init_only in bootstrap_actions, init_only
        assert init_only not in operator_actions and init_only not in function_actions, init_only
    # The two CLI policies together are the whole CLI: nothing falls between,
    # but `idemq send --topic-arn`'s sns:Publish, which is granted on the
    # user's own topic, not by the templates (sdk_calls.TOPIC_SEND).
    assert set(operator_actions) | set(bootstrap_actions) | {"sns:Publish"} == set(cli_actions)
    assert "sns:Publish" not in operator_actions
    # And the operator keeps what `dlq` needs.
    assert {"sqs:ReceiveMessage", "sqs:StartMessageMoveTask", "dynamodb:BatchGetItem"} <= set(operator_actions)


def test_no_code_scans_the_table(cli_actions, function_actions):
    """A DLQ peek's own `scan` (`Peek::scan`) is not DynamoDB's Scan: the
    reader once matched a method of that name, and the operator policy
    granted a table-wide read of every ledger item."""
    assert "dynamodb:Scan" not in cli_actions
    assert "dynamodb:Scan" not in function_actions


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


def test_a_local_method_named_like_an_operation_is_not_an_sdk_call(tmp_path):
    repo = _crate(
        tmp_path,
        {
            "src/lib.rs": "pub mod a;\npub use a::entry;\n",
            "src/a.rs": """
pub struct Ctx { peek: Peek }
impl Ctx {
    // Named like DynamoDB's Scan, but the crate's own: no builder, no send.
    async fn scan(&self) -> Vec<u8> { self.peek.receive().await }
    pub async fn list(&self) { let items = self.scan().await?; }
}
pub struct Peek { sqs: Client }
impl Peek {
    async fn receive(&self) -> Vec<u8> {
        self.sqs.receive_message().queue_url("u").send().await?
    }
}
pub async fn stored(c: &Client) {
    // A builder kept in a binding and sent later is still a call.
    let mut q = c.query().table_name("t");
    q = q.limit(1);
    q.send().await;
}
pub fn entry(ctx: &Ctx, c: &Client) { ctx.list(); stored(c); }
""",
            "examples/x.rs": "fn main() { idemq::entry(); }\n",
        },
    )
    ops = {"scan": "dynamodb", "query": "dynamodb", "receive_message": "sqs"}
    graph = sdk_calls.CallGraph(sdk_calls.read_crate(repo, [repo / "examples" / "x.rs"]), ops)
    assert set(graph.reach("example:x").ops) == {"receive_message", "query"}
    # Without a method of its own by that name, an unsent `.scan()` still
    # counts (the reader over-grants rather than misses).
    text = (repo / "src" / "a.rs").read_text().replace("async fn scan(&self)", "async fn peek_all(&self)")
    (repo / "src" / "a.rs").write_text(text)
    graph = sdk_calls.CallGraph(sdk_calls.read_crate(repo, [repo / "examples" / "x.rs"]), ops)
    assert "scan" in graph.reach("example:x").ops
