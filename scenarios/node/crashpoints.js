// Fail points for a worker the harness runs as a command (docs/howto-any-language.md).
// Outside a crash test CRASHPOINTS_URL is not set, and every call returns at once.
const BASE = process.env.CRASHPOINTS_URL;

// Mark a place where the harness may kill (or pause) this process; returns harness seconds.
async function failpoint(name, context = {}) {
  if (!BASE) return Date.now() / 1000;
  const response = await fetch(`${BASE}/failpoint/${encodeURIComponent(name)}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(context),
  });
  const answer = await response.json();
  if (answer.action !== "continue") throw new Error(`fail point ${name}: ${answer.error}`);
  return answer.now;
}

// Harness time in seconds (the machine's clock outside a crash test).
const now = async () =>
  BASE ? (await (await fetch(`${BASE}/now`)).json()).now : Date.now() / 1000;

// The message this process handles: JSON on standard input.
const message = () => JSON.parse(require("node:fs").readFileSync(0, "utf8"));

module.exports = { failpoint, now, message };
