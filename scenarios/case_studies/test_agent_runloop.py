"""agent-runloop 0.3.2: "A tool with `writes=True` never runs on the model's word ...
`resume_agent(run_id, approved=True|False)` continues it, from another request or another
process. The approve step is a compare-and-set, so two approvals cannot both execute." Its
limit: "Recovering after a crash during an approved write re-executes that write. It is safe
only if the tool is idempotent across processes (`current_call_id`).\""""

import json

import pytest

pytest.importorskip("agent_loop", reason="pip install -e '.[case-studies]'")

import agent_loop
from pydantic import BaseModel

from pytest_crashpoints import SQLiteLedgerView, State
from scenarios.case_studies.tools import charge, send_email

ASK = {"task_id": "ticket-9", "step": "ask"}           # a request: the agent proposes
APPROVAL = {"task_id": "ticket-9", "step": "approve"}  # another request: a person approves
STATES = {"awaiting_approval": State.INTENT_RECORDED, "resuming": State.DISPATCHED,
          "running": State.DISPATCHED, "answered": State.OUTCOME_CONFIRMED,
          **dict.fromkeys(["max_iterations", "budget_exceeded", "timeout", "rejected_final",
                           "model_unavailable", "cancelled"], State.FAILED)}


class Model:
    """The README's backend contract ("any object with `generate`"), answering as a model
    would: propose the write, then answer once its result is in the conversation."""

    async def generate(self, messages, format=None, options=None, trace_id=None):
        if any('"result"' in str(m.get("content")) for m in messages[2:]):
            return json.dumps({"action": "final", "answer": "Done.", "citations": []})
        return json.dumps({"action": "call_tool", "tool": "settle",
                           "arguments": {"amount": 4200}})


class Settle(BaseModel):
    amount: int


def tools(ctx, keyed):
    async def settle(args, trace_id):
        task = ASK["task_id"]
        if keyed:   # the README: `current_call_id` as the idempotency key
            return charge(ctx, task, args.amount, key=agent_loop.current_call_id.get())
        return send_email(ctx, task, "ada@example.com", f"Refunded {args.amount}")
    return [agent_loop.ToolSpec("settle", "Settle the ticket.", Settle, settle, writes=True)]


async def agent(message, ctx, *, keyed=True):
    store = agent_loop.SqliteAgentRunStore(str(ctx.env.path / "runs.sqlite3"))
    run_id_file = ctx.env.path / "run-id"      # where the approval screen finds the run
    if message["step"] == "ask":
        if run_id_file.exists():                # asked before: a redelivery
            return "proposed"
        result = await agent_loop.run_agent("Settle ticket 9.", "You settle tickets.",
                                            tools(ctx, keyed), backend=Model(), run_store=store)
        run_id_file.write_text(result.run_id)
        return result.status
    run_id = run_id_file.read_text()
    try:
        result = await agent_loop.resume_agent(run_id, True, tools(ctx, keyed), store, Model())
    except RuntimeError:                        # approved before: a redelivery
        return (await store.aload(run_id))[0]
    return result.status


async def unkeyed_agent(message, ctx):
    return await agent(message, ctx, keyed=False)


def runs(ctx):
    return SQLiteLedgerView(ctx.env.path / "runs.sqlite3", table="agent_runs", states=STATES,
                            columns={"attempt_id": "run_id", "state": "status"})


@pytest.mark.crashpoints(points="ABCD", providers=["payments"], mode="exhaustive",
                         strict_coverage=False)
def test_an_approved_keyed_write_runs_once(crashpoints):
    crashpoints.run(worker=agent, messages=[ASK, APPROVAL], ledger_view=runs)


@pytest.mark.crashpoints(points="B", faults=["kill"], providers=["email"], mode="exhaustive",
                         expect=1, strict_coverage=False)
def test_an_approved_write_without_a_key_runs_again_as_documented(crashpoints):
    crashpoints.run(worker=unkeyed_agent, messages=[ASK, APPROVAL], ledger_view=runs)
