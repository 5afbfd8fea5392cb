"""The program as it runs: a prelude that gives it ``tools``, and what one execution said.

Every execution runs the program from its start (deterministic replay). The prelude holds the
journal, the results of the calls earlier executions made, in call order, in two lanes (the
client's tools, the gateway's): the program's n-th call of a lane answers from that lane's
n-th entry at once (checked to be the same tool, else the
program is not deterministic and ends). A call past the journal is recorded as pending and
never resolves in this execution. When the event loop has nothing left to do (Node's
``beforeExit``), the prelude prints one frame, the last line of stdout: ``done`` with the
program's result, ``error`` with what it threw, or ``calls`` with the pending calls (all the
calls the program made before it had to wait: ``Promise.all`` over three calls pends three).
The gateway answers them (a tool it runs) or hands them to the client (the response pauses),
and runs the program again with a longer journal. A call the frame names is checked against
the tools a program may call (tool.py): the frame comes from inside the jail.

Why replay, not a live process: a program paused on the client's calls must resume in
another response, which another process or Lambda instance may serve, hours later; a process
cannot be kept or moved, while the journal is in the items themselves (the calls and their
outputs). AgentCore's ``executeCode`` is one-shot too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from responses_gateway.tools.programmatic.allowed import Callable

#: marks the prelude's frame in stdout (the program's own output is captured apart)
MARK = "\x1eprogram-frame:"

_PRELUDE = r"""
'use strict';
const __journal = %(journal)s;
const __callable = %(callable)s;
const __refused = %(refused)s;
const __logs = [];
const __index = { client: 0, server: 0 };
let __diverged = null, __finished = false, __result, __error;
const __pending = [];
const __fmt = (a) => {
  if (typeof a === 'string') { return a; }
  try { return JSON.stringify(a); } catch (e) { return String(a); }
};
for (const k of ['log', 'info', 'warn', 'error', 'debug']) {
  console[k] = (...a) => { __logs.push(a.map(__fmt).join(' ')); };
}
Math.random = () => {
  throw new Error('Math.random is not available: programs must be deterministic');
};
function __call(path, kind, name, namespace, arg) {
  const lane = kind.startsWith('server:') ? 'server' : 'client';
  const i = __index[lane]++;
  const journal = __journal[lane];
  let args;
  if (kind === 'custom') {
    args = typeof arg === 'string' ? arg : __fmt(arg === undefined ? '' : arg);
  } else {
    args = JSON.stringify(arg === undefined ? {} : arg);
  }
  if (i < journal.length) {
    const e = journal[i];
    if (e.path !== path) {
      __diverged = `call ${i + 1} of the program to the ${lane}'s tools was ${path} on this ` +
        `run but ${e.path} before: the program is not deterministic`;
      return new Promise(() => {});
    }
    return e.error != null ? Promise.reject(new Error(e.error)) : Promise.resolve(e.output);
  }
  __pending.push({ path, kind, name, namespace, arguments: args });
  return new Promise(() => {});
}
const __refuse = (path) => () => Promise.reject(new Error(
  `${path} may not be called from a program (its allowed_callers do not include "programmatic")`));
const __tree = {};
for (const c of __callable) {
  const fn = (arg) => __call(c.path, c.kind, c.name, c.namespace, arg);
  if (c.namespace) { (__tree[c.namespace] = __tree[c.namespace] || {})[c.name] = fn; }
  else { __tree[c.name] = fn; }
}
const __guard = (target, prefix) => new Proxy(target, { get(t, p) {
  if (typeof p !== 'string' || p in t) { return t[p]; }
  const path = prefix ? `${prefix}.${p}` : p;
  if (__refused.includes(path)) { return __refuse(path); }
  return () => Promise.reject(new Error(`there is no tool ${path} a program may call`));
}});
const tools = __guard(Object.fromEntries(Object.entries(__tree).map(
  ([k, v]) => [k, typeof v === 'function' ? v : __guard(v, k)])), '');
const __frame = (f) => { process.stdout.write('\n' + %(mark)s + JSON.stringify(f) + '\n'); };
process.on('unhandledRejection', () => {});
process.on('beforeExit', () => {
  if (__frame.sent) { return; }
  __frame.sent = true;
  const logs = __logs.join('\n');
  if (__diverged) { __frame({ error: __diverged, logs }); }
  else if (__finished) {
    __frame(__error !== undefined ? { error: __error, logs } : { done: __result, logs });
  } else if (__pending.length) { __frame({ calls: __pending, logs }); }
  else { __frame({ error: 'the program waited for something that never came', logs }); }
});
(async () => {
%(code)s
})().then((v) => {
  __finished = true;
  __result = v === undefined ? undefined : (typeof v === 'string' ? v : __fmt(v));
}, (e) => {
  __finished = true;
  __error = (e && e.stack) ? String(e.stack) : String(e);
});
"""


def script(code: str, journal: Sequence[dict[str, Any]], allowed: Sequence[Callable],
           refused: Sequence[str]) -> str:
    """The file Node runs: the prelude with the journal, then ``code`` as an async body."""
    return _PRELUDE % {
        "journal": json.dumps({lane: [{"path": e["path"], "output": e.get("output"),
                                   "error": e.get("error")} for e in journal
                                  if e.get("lane", "client") == lane]
                           for lane in ("client", "server")}),
        "callable": json.dumps([{"path": c.path, "kind": c.kind, "name": c.name,
                                 "namespace": c.namespace} for c in allowed]),
        "refused": json.dumps(list(refused)),
        "mark": json.dumps(MARK),
        "code": code,
    }


@dataclass(slots=True)
class Outcome:
    """What one execution ended with."""

    done: bool = False
    result: str | None = None  # the returned value, as text (None: it returned nothing)
    error: str | None = None  # what it threw, or why it could not run / ended
    calls: list[dict[str, Any]] = field(default_factory=list)  # pending, in call order
    logs: str = ""


def read(stdout: str, stderr: str, *, timed_out: bool, timeout: float,
         dropped: int = 0) -> Outcome:
    """The execution's frame, else why there is none (a timeout, a crash, a syntax error, an
    output past its bound: ``dropped`` bytes of it were not kept)."""
    at = stdout.rfind(MARK)
    if at >= 0:
        line = stdout[at + len(MARK):].split("\n", 1)[0]
        try:
            frame = json.loads(line)
        except ValueError:
            frame = None
        if isinstance(frame, dict):
            logs = frame.get("logs") if isinstance(frame.get("logs"), str) else ""
            if "calls" in frame and isinstance(frame["calls"], list):
                return Outcome(calls=frame["calls"], logs=logs)
            if "error" in frame:
                return Outcome(error=str(frame["error"]), logs=logs)
            result = frame.get("done")
            return Outcome(done=True, result=result if isinstance(result, str) else None,
                           logs=logs)
    if timed_out:
        return Outcome(error=f"The program did not finish within {timeout:g} seconds "
                             "(GATEWAY_CODE_TIMEOUT) and was stopped.")
    if dropped:
        return Outcome(error="Its result and what it printed were longer than this gateway "
                             "keeps (GATEWAY_CODE_MAX_OUTPUT_BYTES): return less.")
    reason = _stderr_reason(stderr)
    return Outcome(error=f"The program could not run: {reason}")


def _stderr_reason(stderr: str) -> str:
    """Node's own complaint (a syntax error, out of memory), without its warnings."""
    lines = [line for line in stderr.splitlines()
             if line.strip() and not line.startswith("Warning: disabling flag")]
    text = "\n".join(lines[-12:]).strip()
    return text or "it ended without a result"
