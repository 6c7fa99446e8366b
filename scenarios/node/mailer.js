// A mailer in plain Node: one job, one email, a JSON-lines ledger. Nothing of the harness in it
// but the fail points of crashpoints.js (no-ops in production) and where things are.
//
//   node mailer.js sends-then-marks      the bug: a job left "pending" is sent again
//   node mailer.js parks-the-ambiguous   the fix: a job left "pending" is parked for review
const fs = require("node:fs");
const path = require("node:path");
const { failpoint, message } = require("./crashpoints.js");

const env = process.env;
const LEDGER = path.join(env.CRASHPOINTS_RUN_DIR ?? env.MAILER_DIR ?? ".", "jobs.jsonl");
const OWNER = env.CRASHPOINTS_PROCESS ?? `mailer-${process.pid}`;

// The ledger: one line per change, appended whole with one write; an attempt is its lines merged.
function attempt(id) {
  if (!fs.existsSync(LEDGER)) return undefined;
  const lines = fs.readFileSync(LEDGER, "utf8").split("\n").filter((line) => line.trim());
  const mine = lines.map((line) => JSON.parse(line)).filter((row) => row.attempt_id === id);
  return mine.length ? Object.assign({}, ...mine) : undefined;
}

async function record(id, change) {
  const now = await failpoint("ledger.write", { attempt_id: id }); // before every durable write
  const line = { attempt_id: id, owner: OWNER, updated_at: now, ...change };
  if (change.state === "pending") line.created_at = now;
  fs.appendFileSync(LEDGER, JSON.stringify(line) + "\n");
}

async function main(mode) {
  if (!["sends-then-marks", "parks-the-ambiguous"].includes(mode)) {
    throw new Error(`usage: node mailer.js sends-then-marks|parks-the-ambiguous (not ${mode})`);
  }
  const job = message();
  const id = `job:${job.task_id}:send`;
  const row = attempt(id);
  if (row && (row.state === "sent" || row.state === "review")) return; // done before
  if (row && mode === "parks-the-ambiguous") {
    // "pending": a worker died after recording it, maybe after sending it; nobody can tell.
    await record(id, { state: "review", reason: "found pending: it may have been sent" });
    return;
  }
  const mail = {
    personalizations: [{ to: [{ email: job.recipient }] }],
    from: { email: "billing@example.com" },
    subject: "Your invoice",
    content: [{ type: "text/plain", value: job.body }],
  };
  if (!row) {
    await record(id, {
      task_id: job.task_id, tool_name: "send_email", idempotency_key: id,
      args_json: JSON.stringify(mail), state: "pending",
    });
  }
  await failpoint("A", { tool: "send_email" }); // after the intent, before the send
  const response = await fetch(`${env.CRASHPOINTS_EMAIL_URL}/v3/mail/send`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${env.CRASHPOINTS_EMAIL_KEY}`,
      "content-type": "application/json",
      "x-correlation-id": id,
    },
    body: JSON.stringify(mail),
  });
  if (!response.ok) throw new Error(`mail/send answered ${response.status}`);
  await record(id, {
    state: "sent",
    provider_request_id: response.headers.get("x-request-id"),
    result_ref: response.headers.get("x-message-id"),
  });
}

main(process.argv[2]).catch((error) => {
  console.error(error.stack);
  process.exit(1);
});
