#!/usr/bin/env python3
"""Integration test of `tq serve` (the OpenAI-compatible HTTP server) on a real model.

    python tests/test_serve.py PATH_TO_TQ [MODEL_NAME]      (run from the repository root)

MODEL_NAME is a name tq knows (default smollm2-135m) or a GGUF path. Needs the `openai` package
(the project venv has it; tests/test_serve.sh finds it and skips when it is missing) and nothing
else beyond the standard library.

The server runs with `-c 1024 -t 2 --parallel 8 --kv turbo3` on a free loopback port; a second
instance with --api-key checks authentication. Each check prints `ok NAME`, `FAIL NAME: why` or
`skip NAME: why` (a skip is never counted as a pass); the last line sums them up. Exit status 1
when any check failed, else 0. On a failure the tail of the server's stderr is printed.

What is checked (the server's contract):
  * GET /health, GET /v1/models (raw and through the openai client), GET /metrics fields;
  * /v1/completions at temperature 0 equals `tq generate --temp 0` with the same -c and --kv,
    streaming deltas concatenate to the non-stream text, the `kv` extension (f16), curl;
  * /v1/chat/completions non-stream and stream agree (and equal `tq chat --temp 0`);
  * two streams interleave; one greedy request gives the same text alone and among 7 others;
  * stop strings (never returned, also when streaming), max_tokens -> "length", seeded sampling
    repeats;
  * bad input (malformed JSON, wrong types, a too long prompt or max_tokens, a body over 1 MiB,
    unknown path, wrong method, unknown kv scheme) gives the documented status and error JSON
    while a streaming request runs, which still completes correctly. Unknown fields are IGNORED,
    not refused: OpenAI clients send fields the server does not know (user, logit_bias, ...);
  * a client that disconnects mid-stream frees its sequence (tq_sequences_active back to 0), and
    so does one that closes while waiting for a whole answer;
  * --api-key: 401 without or with a wrong key, 200 with the right one;
  * SIGTERM: an in-flight request completes with 200, then the process exits 0 within 10 s;
  * prefix reuse: a prompt that extends an earlier one (about 200 tokens, so that it is prefilled
    in several chunks) starts from the kept prompt (tq_prefix_reused_tokens_total grows) and its
    greedy answer still equals `tq generate`'s; so does the long prompt itself (chunked prefill
    gives what one whole prefill gives);
  * --cache-dir: a kept prompt pushed out of memory is written to the folder and a later prompt
    extending it loads it (answers equal tq generate's); kept prompts are written at exit and a
    restarted server finds them; other files in the folder are left alone; file names are 16
    hex digits; a path that is not a folder, or --cache-dir without the prefix cache, is refused;
  * the server's stderr holds no sanitizer report (ASan, UBSan, TSan builds).

Sanitizer builds are many times slower, and CI has a time budget: TQ_SERVE_TESTS=threads runs
only the checks where threads meet (health, two streams interleave, a client disconnecting,
SIGTERM; `make test-tsan`, with TQ_SERVE_THREADS=2), TQ_SERVE_TESTS=san the ones through the
most code (those and every bad input during a stream, prefix reuse; the ASan+UBSan build), with
fewer tokens per request. The optimized build runs everything.
TQ_SERVE_SLOW=F multiplies the SIGTERM deadline (10 s) and the wait for a disconnected client's
sequence to be freed (5 s: it is freed at its next token) by F for such builds.
"""
import http.client
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

# TQ_SERVE_TESTS=threads|san: a subset on a sanitizer build, with fewer tokens per request
QUICK = os.environ.get("TQ_SERVE_TESTS") in ("threads", "san")
N_INTERLEAVE, N_ALONE, N_OTHERS, N_BAD, N_SIGTERM = (12, 12, 12, 24, 8) if QUICK else (40, 32, 48, 120, 24)

HOST = "127.0.0.1"
CTX = 1024
# one engine thread by default: ctest runs other tests beside this one, and a pool's workers
# spinning against them on a 2-core machine cost 10x; TSan sets 2 (it runs alone there)
THREADS = int(os.environ.get("TQ_SERVE_THREADS", "1"))
PARALLEL = 8
KV = "turbo3"
API_KEY = "tq-test-key-123"
START_TIMEOUT = 60.0

# Prompts whose greedy continuation with SmolLM2-135M / Gemma 3 270M runs on without an early
# end of text (the interleave, disconnect and shutdown checks need streams that last).
LONG_PROMPTS = [
    "Count: 1, 2, 3, 4, 5,",
    "A, B, C, D, E,",
    "One hundred, ninety-nine, ninety-eight,",
    "Once upon a time, in a small village,",
]
OTHER_PROMPTS = [  # the 7 concurrent requests of the batch-invariance check
    "The history of the Roman Empire",
    "def fibonacci(n):",
    "My favourite recipe for pancakes is",
    "The three laws of motion are",
    "In the year 2050, cities will",
    "Photosynthesis is the process by which",
    "Dear diary, today I",
]
CAPITAL = "The capital of France is"


class Skip(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def short(x, n=300):
    s = x if isinstance(x, str) else repr(x)
    return s if len(s) <= n else s[:n] + "...(%d chars)" % len(s)


# ---- the server process --------------------------------------------------------------------------


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Server:
    """`tq serve` as a child process; its stderr is collected by a thread."""

    def __init__(self, tq, model, extra=()):
        self.port = free_port()
        self.cmd = [tq, "serve", "-m", model, "-c", str(CTX), "-t", str(THREADS),
                    "--parallel", str(PARALLEL), "--kv", KV, "--host", HOST,
                    "--port", str(self.port)] + list(extra)
        self.lines = []
        self.ready = threading.Event()
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.ready.wait(0.1):
                return
            if self.proc.poll() is not None:
                time.sleep(0.2)  # let the reader thread collect the last lines
                raise RuntimeError("tq serve exited with %s before listening" % self.proc.returncode)
        raise RuntimeError("tq serve did not print 'listening on' within %.0f s" % START_TIMEOUT)

    def _read(self):
        for raw in iter(self.proc.stderr.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            if "listening on http://" in line:
                m = re.search(r"listening on http://[^:/\s]+:(\d+)", line)
                if m and int(m.group(1)) != self.port:
                    self.lines.append("(test: listening line names port %s, not %d)" % (m.group(1), self.port))
                self.ready.set()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """SIGTERM, then SIGKILL after 10 s; never raises."""
        if not self.alive():
            return
        try:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        except Exception:
            pass

    def tail(self, n=40):
        return self.lines[-n:]


# ---- HTTP helpers (stdlib) -----------------------------------------------------------------------


class Resp:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        try:
            return json.loads(self.body.decode("utf-8"))
        except Exception:
            return None

    def __repr__(self):
        return "HTTP %s %s" % (self.status, short(self.body.decode("utf-8", "replace"), 400))


def request(port, method, path, body=None, headers=None, timeout=120):
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        h = {}
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        elif isinstance(body, str):
            body = body.encode()
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read()
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
    finally:
        conn.close()


class StreamResult:
    def __init__(self):
        self.status = None
        self.headers = {}
        self.t_sent = None
        self.events = []  # (monotonic time, data string) of each `data:` event, [DONE] included
        self.done = False  # saw data: [DONE]
        self.problems = []  # format problems: lines that are not `data:`, text after [DONE] ...
        self.body = b""  # the body of a non-200 answer

    def chunks(self):
        """(time, parsed JSON) of each event before [DONE]."""
        out = []
        for t, d in self.events:
            if d == "[DONE]":
                break
            out.append((t, json.loads(d)))
        return out


def stream(port, path, body, headers=None, timeout=120, on_event=None):
    """POST body with stream:true and read the server-sent events by hand."""
    res = StreamResult()
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        h.update(headers or {})
        res.t_sent = time.monotonic()
        conn.request("POST", path, body=json.dumps(body).encode(), headers=h)
        r = conn.getresponse()
        res.status = r.status
        res.headers = {k.lower(): v for k, v in r.getheaders()}
        if r.status != 200:
            res.body = r.read()
            return res
        data = []
        while True:
            raw = r.readline()
            if not raw:
                if data:
                    res.problems.append("event without its closing blank line at the end")
                break
            line = raw.decode("utf-8").rstrip("\r\n")
            if line == "":
                if data:
                    d = "\n".join(data)
                    data = []
                    res.events.append((time.monotonic(), d))
                    if on_event:
                        on_event(d)
                    if d == "[DONE]":
                        res.done = True
                        break
                continue
            if line.startswith(":"):
                continue  # an SSE comment (keep-alive): allowed
            if line.startswith("data:"):
                data.append(line[5:][1:] if line[5:].startswith(" ") else line[5:])
            else:
                res.problems.append("line not 'data:': %s" % short(line, 80))
        return res
    finally:
        conn.close()


def parse_metrics(text):
    """Prometheus text -> {sample name: [(labels, value)]}."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m:
            out.setdefault("__bad__", []).append(("", line))
            continue
        try:
            v = float(m.group(3))
        except ValueError:
            out.setdefault("__bad__", []).append(("", line))
            continue
        out.setdefault(m.group(1), []).append((m.group(2) or "", v))
    return out


def metric(ms, name):
    s = ms.get(name)
    if not s:
        return None
    for labels, v in s:
        if labels == "":
            return v
    return s[0][1]


def get_metrics(port):
    r = request(port, "GET", "/metrics", timeout=10)
    expect(r.status == 200, "GET /metrics: %r" % r)
    return parse_metrics(r.body.decode("utf-8", "replace")), r


# TQ_SERVE_SLOW: how many times slower than the optimized build this build runs (the docstring)
SLOW = float(os.environ.get("TQ_SERVE_SLOW", "1"))


def wait_active(port, pred, timeout):
    """Poll tq_sequences_active until pred(value); returns the last value seen."""
    deadline = time.monotonic() + timeout
    v = None
    while True:
        try:
            v = metric(get_metrics(port)[0], "tq_sequences_active")
        except Exception:
            v = None
        if v is not None and pred(v):
            return v
        if time.monotonic() > deadline:
            return v
        time.sleep(0.05)


def check_error(r, status, param=None, code=None, strict_param=False):
    """An error answer: the status and {"error":{"message","type","param","code"}}."""
    expect(r.status == status, "wanted HTTP %d, got %r" % (status, r))
    j = r.json()
    expect(isinstance(j, dict) and isinstance(j.get("error"), dict),
           "error body is not {\"error\":{...}}: %r" % r)
    e = j["error"]
    for k in ("message", "type", "param", "code"):
        expect(k in e, "error object lacks '%s': %r" % (k, r))
    expect(isinstance(e["message"], str) and e["message"], "error message empty: %r" % r)
    if status == 400:
        expect(e["type"] == "invalid_request_error", "error type %r, wanted invalid_request_error" % e["type"])
    if code is not None:
        expect(e["code"] == code, "error code %r, wanted %r" % (e["code"], code))
    if param is not None:
        if strict_param:
            expect(e["param"] == param, "error param %r, wanted %r" % (e["param"], param))
        else:
            expect(e["param"] in (None, param), "error param %r, wanted %r or null" % (e["param"], param))
    return e


# ---- the tq reference ----------------------------------------------------------------------------


class Reference:
    """Greedy continuations from `tq generate` / `tq chat`, the same -c, -t and --kv as the server."""

    def __init__(self, tq, model):
        self.tq, self.model, self.cache = tq, model, {}

    def generate(self, prompt, n, kv=KV):
        key = ("g", prompt, n, kv)
        if key not in self.cache:
            # the server's prompt chunks (its default --prefill-chunk): the same K/V bit for bit
            cmd = [self.tq, "generate", "-m", self.model, "-p", prompt, "-n", str(n), "--temp", "0",
                   "--kv", kv, "-c", str(CTX), "-t", str(THREADS), "--prefill-chunk", "64"]
            p = subprocess.run(cmd, capture_output=True, timeout=120)
            if p.returncode != 0:
                raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), p.returncode,
                                                        p.stderr.decode("utf-8", "replace")[-500:]))
            out, err = p.stdout, p.stderr.decode("utf-8", "replace")
            pb = prompt.encode("utf-8")
            if not out.startswith(pb) or not out.endswith(b"\n"):
                raise RuntimeError("tq generate stdout is not PROMPT + TEXT + newline: %r" % out[:200])
            text = out[len(pb):-1].decode("utf-8")
            m = re.search(r"prefill: (\d+) tokens", err)
            self.cache[key] = {
                "text": text,
                "eos": "stopped: end of text" in err,
                "prompt_tokens": int(m.group(1)) if m else None,
            }
        return self.cache[key]

    def chat(self, user, n, kv=KV):
        key = ("c", user, n, kv)
        if key not in self.cache:
            cmd = [self.tq, "chat", "-m", self.model, "--temp", "0", "-n", str(n), "--kv", kv,
                   "-c", str(CTX), "-t", str(THREADS)]
            p = subprocess.run(cmd, input=(user + "\n").encode(), capture_output=True, timeout=120)
            if p.returncode != 0:
                raise RuntimeError("tq chat: exit %d" % p.returncode)
            out = p.stdout.decode("utf-8")
            self.cache[key] = out[:-1] if out.endswith("\n") else out
        return self.cache[key]


# ---- the checks ----------------------------------------------------------------------------------


class Suite:
    def __init__(self, tq, model):
        self.tq, self.model = tq, model
        self.ref = Reference(tq, model)
        self.passed, self.failed, self.skipped = [], [], []
        self.server = None
        self.auth_server = None
        self.port = None
        self.client = None
        self.metrics0 = None

    def run(self, name, fn, *args):
        t0 = time.monotonic()
        try:
            fn(*args)
        except Skip as e:
            self.skipped.append(name)
            print("skip %s: %s" % (name, e), flush=True)
        except AssertionError as e:
            self.failed.append(name)
            print("FAIL %s: %s" % (name, e), flush=True)
        except Exception as e:
            self.failed.append(name)
            tb = traceback.extract_tb(e.__traceback__)
            where = "%s:%d" % (os.path.basename(tb[-1].filename), tb[-1].lineno) if tb else "?"
            print("FAIL %s: %s: %s (at %s)" % (name, type(e).__name__, short(str(e), 500), where), flush=True)
        else:
            self.passed.append(name)
            print("ok %s  [%.1f s]" % (name, time.monotonic() - t0), flush=True)

    def openai_client(self, port, api_key="sk-no-key"):
        import openai
        return openai.OpenAI(base_url="http://%s:%d/v1" % (HOST, port), api_key=api_key,
                             max_retries=0, timeout=120)

    def completion(self, body, port=None, headers=None):
        b = {"model": self.model}
        b.update(body)
        return request(port or self.port, "POST", "/v1/completions", b, headers)

    # -- basic endpoints

    def t_health(self):
        r = request(self.port, "GET", "/health")
        expect(r.status == 200, "GET /health: %r" % r)
        expect(r.json() == {"status": "ok"}, "body %r" % r)

    def t_models(self):
        r = request(self.port, "GET", "/v1/models")
        expect(r.status == 200, "GET /v1/models: %r" % r)
        j = r.json()
        expect(isinstance(j, dict) and j.get("object") == "list" and isinstance(j.get("data"), list)
               and j["data"], "not a model list: %r" % r)
        m = j["data"][0]
        expect(m.get("id") == self.model, "id %r, wanted %r" % (m.get("id"), self.model))
        expect(m.get("object") == "model", "object %r" % m.get("object"))
        expect(m.get("owned_by") == "turboquant", "owned_by %r" % m.get("owned_by"))

    def t_models_openai(self):
        ids = [m.id for m in self.client.models.list()]
        expect(self.model in ids, "client.models.list() ids %r" % ids)

    def t_metrics_start(self):
        ms, r = get_metrics(self.port)
        self.metrics0 = ms

    # -- completions

    def t_completion_greedy(self):
        want = self.ref.generate(CAPITAL, 24)
        c = self.client.completions.create(model=self.model, prompt=CAPITAL, max_tokens=24, temperature=0)
        expect(c.object == "text_completion", "object %r" % c.object)
        expect(c.model == self.model, "model %r" % c.model)
        expect(isinstance(c.id, str) and c.id, "id %r" % c.id)
        expect(isinstance(c.created, int) and c.created > 1600000000, "created %r" % c.created)
        expect(len(c.choices) == 1 and c.choices[0].index == 0, "choices %r" % c.choices)
        text = c.choices[0].text
        expect(text == want["text"], "text %r\n     tq generate: %r" % (text, want["text"]))
        fr = "stop" if want["eos"] else "length"
        expect(c.choices[0].finish_reason == fr, "finish_reason %r, wanted %r (tq generate %s)"
               % (c.choices[0].finish_reason, fr, "stopped at end of text" if want["eos"] else "ran to -n"))
        self.greedy = c

    def t_completion_usage(self):
        want = self.ref.generate(CAPITAL, 24)
        c = getattr(self, "greedy", None)
        if c is None:
            raise Skip("no greedy completion to look at")
        u = c.usage
        expect(u is not None, "no usage")
        expect(u.total_tokens == u.prompt_tokens + u.completion_tokens, "usage %r" % u)
        expect(0 < u.completion_tokens <= 24, "completion_tokens %r" % u.completion_tokens)
        if want["prompt_tokens"] is not None:
            expect(u.prompt_tokens == want["prompt_tokens"],
                   "prompt_tokens %d, tq generate prefilled %d" % (u.prompt_tokens, want["prompt_tokens"]))

    def t_completion_stream(self):
        want = self.ref.generate(CAPITAL, 24)
        s = self.client.completions.create(model=self.model, prompt=CAPITAL, max_tokens=24,
                                           temperature=0, stream=True)
        parts, finish = [], []
        for ch in s:
            expect(ch.object == "text_completion", "chunk object %r" % ch.object)
            parts.append(ch.choices[0].text)
            finish.append(ch.choices[0].finish_reason)
        text = "".join(parts)
        expect(text == want["text"], "streamed %r\n     non-stream/tq generate %r" % (text, want["text"]))
        expect(finish and finish[-1] in ("stop", "length"), "last finish_reason %r" % (finish[-1:],))
        expect(all(f is None for f in finish[:-1]), "finish_reason before the last chunk: %r" % finish)
        expect(finish[-1] == ("stop" if want["eos"] else "length"), "last finish_reason %r" % finish[-1])

    def t_stream_format(self):
        res = stream(self.port, "/v1/completions", {"model": self.model, "prompt": CAPITAL, "max_tokens": 8,
                                                    "temperature": 0, "stream": True})
        expect(res.status == 200, "HTTP %s %s" % (res.status, short(res.body)))
        ct = res.headers.get("content-type", "")
        expect(ct.startswith("text/event-stream"), "Content-Type %r" % ct)
        expect(not res.problems, "; ".join(res.problems))
        expect(res.done, "no 'data: [DONE]' at the end (events %r)" % [d for _, d in res.events][-3:])
        ch = res.chunks()
        expect(len(ch) >= 1, "no chunks")
        for _, c in ch:
            expect(c.get("object") == "text_completion", "chunk object %r" % c.get("object"))
            expect(isinstance(c.get("choices"), list) and len(c["choices"]) == 1, "chunk choices %r" % c)

    def t_completion_kv_f16(self):
        want = self.ref.generate(CAPITAL, 24, kv="f16")
        c = self.client.completions.create(model=self.model, prompt=CAPITAL, max_tokens=24, temperature=0,
                                           extra_body={"kv": "f16"})
        expect(c.choices[0].text == want["text"],
               "kv f16: %r\n     tq generate --kv f16: %r" % (c.choices[0].text, want["text"]))

    def t_curl(self):
        curl = shutil.which("curl")
        if not curl:
            raise Skip("no curl on PATH")
        want = self.ref.generate(CAPITAL, 24)
        body = json.dumps({"model": self.model, "prompt": CAPITAL, "max_tokens": 24, "temperature": 0})
        p = subprocess.run([curl, "-s", "-S", "-w", "\n%{http_code}", "-H", "Content-Type: application/json",
                            "-d", body, "http://%s:%d/v1/completions" % (HOST, self.port)],
                           capture_output=True, timeout=60)
        expect(p.returncode == 0, "curl exit %d: %s" % (p.returncode, p.stderr.decode()))
        out = p.stdout.decode("utf-8")
        body, _, code = out.rpartition("\n")
        expect(code == "200", "HTTP %s: %s" % (code, short(body)))
        j = json.loads(body)
        expect(j["choices"][0]["text"] == want["text"], "curl text %r, wanted %r" % (j["choices"][0]["text"], want["text"]))

    # -- chat

    def t_chat(self):
        q = "What is the capital of France?"
        msgs = [{"role": "user", "content": q}]
        c = self.client.chat.completions.create(model=self.model, messages=msgs, max_tokens=16, temperature=0)
        expect(c.object == "chat.completion", "object %r" % c.object)
        expect(c.model == self.model, "model %r" % c.model)
        m = c.choices[0].message
        expect(m.role == "assistant", "role %r" % m.role)
        expect(isinstance(m.content, str) and m.content.strip(), "empty content %r" % m.content)
        expect(c.choices[0].finish_reason in ("stop", "length"), "finish_reason %r" % c.choices[0].finish_reason)
        u = c.usage
        expect(u is not None and u.total_tokens == u.prompt_tokens + u.completion_tokens and u.prompt_tokens > 0,
               "usage %r" % u)
        s = self.client.chat.completions.create(model=self.model, messages=msgs, max_tokens=16, temperature=0,
                                                stream=True)
        parts, roles, finish = [], [], []
        for ch in s:
            expect(ch.object == "chat.completion.chunk", "chunk object %r" % ch.object)
            if not ch.choices:
                continue
            d = ch.choices[0].delta
            roles.append(d.role)
            parts.append(d.content or "")
            finish.append(ch.choices[0].finish_reason)
        expect(roles and roles[0] == "assistant", "first delta role %r" % (roles[:1],))
        expect("".join(parts) == m.content, "streamed %r\n     non-stream %r" % ("".join(parts), m.content))
        expect(finish and finish[-1] == c.choices[0].finish_reason,
               "stream finish_reason %r, non-stream %r" % (finish[-1:], c.choices[0].finish_reason))
        expect(all(f is None for f in finish[:-1]), "finish_reason before the last chunk: %r" % finish)
        self.chat_content = m.content

    def t_chat_matches_tq_chat(self):
        # Not stated by the contract in so many words, but the server and tq chat share the model's
        # template: the same single user turn at temperature 0 should give the same answer.
        got = getattr(self, "chat_content", None)
        if got is None:
            raise Skip("no chat answer to compare")
        want = self.ref.chat("What is the capital of France?", 16)
        expect(got == want, "server %r\n     tq chat %r" % (got, want))

    def t_chat_system(self):
        c = self.client.chat.completions.create(
            model=self.model, temperature=0, max_tokens=8,
            messages=[{"role": "system", "content": "Answer in one word."},
                      {"role": "user", "content": "Name a colour."},
                      {"role": "assistant", "content": "Blue."},
                      {"role": "user", "content": "Another one?"}])
        expect(c.choices[0].message.role == "assistant", "role %r" % c.choices[0].message.role)
        expect(c.usage.prompt_tokens > 10, "prompt_tokens %r for four messages" % c.usage.prompt_tokens)

    # -- concurrency

    def t_interleave(self):
        prompts = LONG_PROMPTS[:2]
        res = [None, None]
        barrier = threading.Barrier(2)

        def worker(i):
            barrier.wait()
            res[i] = stream(self.port, "/v1/completions", {"model": self.model, "prompt": prompts[i],
                                                           "max_tokens": N_INTERLEAVE, "temperature": 0, "stream": True})

        ts = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        for i in range(2):
            r = res[i]
            expect(r is not None and r.status == 200, "stream %d: %s" % (i, r and (r.status, short(r.body))))
            expect(r.done, "stream %d: no [DONE]" % i)
            expect(len(r.chunks()) >= 10, "stream %d: only %d chunks" % (i, len(r.chunks())))
        first = [r.events[0][0] for r in res]
        last = [r.events[-1][0] for r in res]
        for i in range(2):
            o = 1 - i
            expect(first[i] < last[o],
                   "stream %d's first chunk came %.2f s after stream %d had finished: not interleaved"
                   % (i, first[i] - last[o], o))
        self.interleaved = res

    def t_interleave_text(self):
        res = getattr(self, "interleaved", None)
        if not res:
            raise Skip("the interleave check produced no streams")
        for i, r in enumerate(res):
            text = "".join(c["choices"][0]["text"] for _, c in r.chunks())
            want = self.ref.generate(LONG_PROMPTS[i], 40)["text"]
            expect(text == want, "stream %d %r\n     tq generate %r" % (i, text, want))

    def t_batch_invariance(self):
        prompt = LONG_PROMPTS[2]
        body = {"prompt": prompt, "max_tokens": N_ALONE, "temperature": 0}
        alone = self.completion(body)
        expect(alone.status == 200, "alone: %r" % alone)
        t_alone = alone.json()["choices"][0]["text"]
        started = threading.Semaphore(0)
        others = [None] * len(OTHER_PROMPTS)

        def other(i):
            fired = [False]

            def on_event(_d):
                if not fired[0]:
                    fired[0] = True
                    started.release()
            others[i] = stream(self.port, "/v1/completions",
                               {"model": self.model, "prompt": OTHER_PROMPTS[i], "max_tokens": N_OTHERS,
                                "temperature": 0.7, "seed": i, "stream": True}, on_event=on_event)
            if not fired[0]:
                started.release()

        ts = [threading.Thread(target=other, args=(i,)) for i in range(len(OTHER_PROMPTS))]
        for t in ts:
            t.start()
        for _ in ts:  # every other stream is decoding (or finished) before the request
            started.acquire(timeout=60)
        peak = [0.0]
        stop = threading.Event()

        def poll():
            while not stop.is_set():
                try:
                    v = metric(get_metrics(self.port)[0], "tq_sequences_active")
                    if v is not None:
                        peak[0] = max(peak[0], v)
                except Exception:
                    pass
                time.sleep(0.05)
        pt = threading.Thread(target=poll)
        pt.start()
        try:
            busy = self.completion(body)
        finally:
            stop.set()
            pt.join()
            for t in ts:
                t.join(120)
        expect(busy.status == 200, "among others: %r" % busy)
        t_busy = busy.json()["choices"][0]["text"]
        for i, o in enumerate(others):
            expect(o is not None and o.status == 200 and o.done, "other request %d: %s" % (i, o and o.status))
        expect(t_busy == t_alone, "alone %r\n     among 7 others %r" % (t_alone, t_busy))
        expect(peak[0] >= 2, "tq_sequences_active peaked at %s during the request: nothing ran beside it"
               % peak[0])

    # -- sampling parameters

    def t_stop(self):
        want = self.ref.generate(CAPITAL, 24)["text"]
        words = want.split()
        if len(words) < 4:
            raise Skip("greedy reference %r too short to pick a stop string" % want)
        stop_s = " " + words[len(words) // 2]
        cut = want[:want.index(stop_s)]
        for form, stop_v in (("string", stop_s), ("list", ["@@never@@", stop_s])):
            c = self.client.completions.create(model=self.model, prompt=CAPITAL, max_tokens=24, temperature=0,
                                               stop=stop_v)
            t = c.choices[0].text
            expect(stop_s not in t, "stop as %s: text %r contains %r" % (form, t, stop_s))
            expect(t == cut, "stop %r as %s: text %r, wanted %r" % (stop_s, form, t, cut))
            expect(c.choices[0].finish_reason == "stop", "stop as %s: finish_reason %r" % (form, c.choices[0].finish_reason))
        s = self.client.completions.create(model=self.model, prompt=CAPITAL, max_tokens=24, temperature=0,
                                           stop=[stop_s], stream=True)
        chunks = list(s)
        t = "".join(ch.choices[0].text for ch in chunks)
        expect(t == cut, "streamed with stop %r: %r, wanted %r" % (stop_s, t, cut))
        expect(chunks[-1].choices[0].finish_reason == "stop", "streamed finish_reason %r" % chunks[-1].choices[0].finish_reason)

    def t_chat_stop(self):
        c = self.client.chat.completions.create(model=self.model, temperature=0, max_tokens=16,
                                                messages=[{"role": "user", "content": "What is the capital of France?"}])
        full = c.choices[0].message.content
        words = full.split()
        if len(words) < 3:
            raise Skip("answer %r too short" % full)
        stop_s = " " + words[1]
        c2 = self.client.chat.completions.create(model=self.model, temperature=0, max_tokens=16, stop=stop_s,
                                                 messages=[{"role": "user", "content": "What is the capital of France?"}])
        t = c2.choices[0].message.content
        expect(t == full[:full.index(stop_s)], "chat with stop %r: %r (full answer %r)" % (stop_s, t, full))
        expect(c2.choices[0].finish_reason == "stop", "finish_reason %r" % c2.choices[0].finish_reason)

    def t_max_tokens(self):
        want = self.ref.generate(LONG_PROMPTS[0], 40)["text"]
        c = self.client.completions.create(model=self.model, prompt=LONG_PROMPTS[0], max_tokens=5, temperature=0)
        expect(c.choices[0].finish_reason == "length", "finish_reason %r" % c.choices[0].finish_reason)
        expect(c.usage.completion_tokens == 5, "completion_tokens %r" % c.usage.completion_tokens)
        expect(c.usage.total_tokens == c.usage.prompt_tokens + 5, "usage %r" % c.usage)
        t = c.choices[0].text
        expect(t and want.startswith(t), "5 tokens %r are not a prefix of the 40-token text %r" % (t, want))

    def t_max_tokens_default(self):
        r = self.completion({"prompt": LONG_PROMPTS[0], "temperature": 0})
        expect(r.status == 200, "%r" % r)
        j = r.json()
        expect(j["usage"]["completion_tokens"] == 16 and j["choices"][0]["finish_reason"] == "length",
               "without max_tokens: usage %r finish %r (default 16)" % (j["usage"], j["choices"][0]["finish_reason"]))

    def t_seed(self):
        kw = dict(model=self.model, prompt="Once upon a time", max_tokens=16, temperature=0.8, seed=7)
        a = self.client.completions.create(**kw).choices[0].text
        b = self.client.completions.create(**kw).choices[0].text
        expect(a == b, "seed 7 twice: %r vs %r" % (a, b))
        expect(a, "empty text")

    # -- bad input while a stream runs

    def t_bad_inputs(self):
        prompt = LONG_PROMPTS[3]
        n = N_BAD
        want = self.ref.generate(prompt, n)["text"]
        holder = {}

        def bg():
            holder["res"] = stream(self.port, "/v1/completions", {"model": self.model, "prompt": prompt,
                                                                  "max_tokens": n, "temperature": 0, "stream": True})
            holder["t_end"] = time.monotonic()

        th = threading.Thread(target=bg)
        th.start()
        wait_active(self.port, lambda v: v >= 1, 10)
        long_prompt = "hello " * (CTX * 2)
        cases = [
            ("malformed JSON", lambda: self.check_raw(b'{"model": "x", "prompt": ', 400)),
            ("JSON not an object", lambda: self.check_raw(b'[1, 2, 3]', 400)),
            ("max_tokens \"abc\"", lambda: check_error(self.completion({"prompt": "hi", "max_tokens": "abc"}), 400, "max_tokens")),
            ("temperature -1", lambda: check_error(self.completion({"prompt": "hi", "temperature": -1}), 400, "temperature")),
            ("prompt not a string", lambda: check_error(self.completion({"prompt": {"a": 1}}), 400, "prompt")),
            ("messages not a list", lambda: check_error(
                request(self.port, "POST", "/v1/chat/completions", {"model": self.model, "messages": "hi"}), 400, "messages")),
            ("message content not a string", lambda: check_error(
                request(self.port, "POST", "/v1/chat/completions",
                        {"model": self.model, "messages": [{"role": "user", "content": 5}]}), 400)),
            ("stop list of 5 (up to 4 allowed)", lambda: check_error(self.completion({"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}), 400, "stop")),
            ("prompt longer than the context", lambda: check_error(
                self.completion({"prompt": long_prompt, "max_tokens": 4}), 400, code="context_length_exceeded")),
            ("max_tokens beyond the context", lambda: check_error(
                self.completion({"prompt": "hi", "max_tokens": CTX + 100}), 400, code="context_length_exceeded")),
            ("unknown kv scheme", lambda: check_error(
                self.completion({"prompt": "hi", "max_tokens": 2, "kv": "turbo99"}), 400, "kv", strict_param=True)),
            ("body over 1 MiB -> 413", self.check_413),
            ("unknown path -> 404", lambda: check_error(request(self.port, "GET", "/v1/nothing-here"), 404)),
            ("wrong method -> 405", lambda: check_error(request(self.port, "GET", "/v1/completions"), 405)),
            ("unknown fields ignored", self.check_unknown_fields),
        ]
        t_last = None
        for name, fn in cases:
            self.run("bad input: " + name, fn)
            t_last = time.monotonic()
        th.join(180)
        res = holder.get("res")
        expect(res is not None and res.status == 200, "the background stream: %s" % ((res and (res.status, short(res.body))),))
        expect(res.done, "the background stream ended without [DONE]")
        text = "".join(c["choices"][0]["text"] for _, c in res.chunks())
        expect(text == want, "the background stream gave %r\n     tq generate %r" % (text, want))
        if holder["t_end"] < t_last:
            print("     (note: the background stream ended %.2f s before the last bad request)"
                  % (t_last - holder["t_end"]))

    def check_raw(self, body, status):
        r = request(self.port, "POST", "/v1/completions", body, {"Content-Type": "application/json"})
        check_error(r, status)

    def check_unknown_fields(self):
        # OpenAI clients send fields a small server does not implement: they are ignored.
        r = self.completion({"prompt": "hi", "max_tokens": 2, "temperature": 0, "frobnicate": {"x": [1, 2]},
                             "user": "someone", "logit_bias": {}, "presence_penalty": 0, "n": 1})
        expect(r.status == 200, "%r" % r)
        r = request(self.port, "POST", "/v1/chat/completions",
                    {"model": self.model, "max_tokens": 2, "temperature": 0, "frobnicate": True,
                     "messages": [{"role": "user", "content": "hi", "name": "bob"}]})
        expect(r.status == 200, "chat: %r" % r)

    def check_413(self):
        """1.1 MiB of JSON: the server may answer before it has read the body, so send in slices
        and read as soon as the answer arrives."""
        size = 1100 * 1024
        body = b'{"model":"x","prompt":"' + b"a" * (size - 40) + b'"}'
        head = ("POST /v1/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\nConnection: close\r\n\r\n" % (HOST, self.port, len(body))).encode()
        s = socket.create_connection((HOST, self.port), timeout=30)
        got = b""
        try:
            s.sendall(head)
            off = 0
            while off < len(body):
                r, _, _ = select.select([s], [], [], 0)
                if r:
                    break
                try:
                    off += s.send(body[off:off + 65536])
                except (BrokenPipeError, ConnectionResetError):
                    break
            s.settimeout(30)
            try:
                while True:
                    d = s.recv(65536)
                    if not d:
                        break
                    got += d
            except ConnectionResetError:
                pass
        finally:
            s.close()
        expect(got, "no answer (the connection was reset before a response was read)")
        head_b, _, resp_body = got.partition(b"\r\n\r\n")
        status_line = head_b.split(b"\r\n")[0].decode("latin-1")
        m = re.match(r"HTTP/1\.[01] (\d+)", status_line)
        expect(m, "status line %r" % status_line)
        hdrs = {}
        for l in head_b.split(b"\r\n")[1:]:
            k, _, v = l.decode("latin-1").partition(":")
            hdrs[k.strip().lower()] = v.strip()
        if "content-length" in hdrs:
            resp_body = resp_body[:int(hdrs["content-length"])]
        check_error(Resp(int(m.group(1)), hdrs, resp_body), 413)

    # -- disconnect

    def t_disconnect(self):
        body = json.dumps({"model": self.model, "prompt": LONG_PROMPTS[1], "max_tokens": 500,
                           "temperature": 0, "stream": True}).encode()
        head = ("POST /v1/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\n\r\n" % (HOST, self.port, len(body))).encode()
        s = socket.create_connection((HOST, self.port), timeout=30)
        buf = b""
        try:
            s.sendall(head + body)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                d = s.recv(4096)
                if not d:
                    break
                buf += d
                i = buf.find(b"data: ")
                if i >= 0 and buf.find(b"\n\n", i) >= 0:
                    break
        finally:
            s.close()
        expect(b"data: " in buf, "no chunk before the close: %r" % buf[:300])
        wait = 5 * SLOW
        v = wait_active(self.port, lambda x: x == 0, wait)
        expect(v == 0, "tq_sequences_active is %s %g s after the client went away" % (v, wait))
        r = request(self.port, "GET", "/health")
        expect(r.status == 200, "health after the disconnect: %r" % r)
        ms, _ = get_metrics(self.port)
        gen = metric(ms, "tq_generated_tokens_total")
        time.sleep(0.5)
        gen2 = metric(get_metrics(self.port)[0], "tq_generated_tokens_total")
        expect(gen == gen2, "tokens still being generated after the disconnect (%s -> %s)" % (gen, gen2))

    def t_disconnect_whole(self):
        """A client waiting for a whole (non-streamed) answer that closes its connection frees
        its sequence too."""
        body = json.dumps({"model": self.model, "prompt": LONG_PROMPTS[1], "max_tokens": 500,
                           "temperature": 0}).encode()
        head = ("POST /v1/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\n\r\n" % (HOST, self.port, len(body))).encode()
        s = socket.create_connection((HOST, self.port), timeout=30)
        try:
            s.sendall(head + body)
            v = wait_active(self.port, lambda x: x >= 1, 10)
            expect(v is not None and v >= 1, "the request never showed in tq_sequences_active (%s)" % v)
            g0 = metric(get_metrics(self.port)[0], "tq_generated_tokens_total")
        finally:
            s.close()
        wait = 5 * SLOW
        v = wait_active(self.port, lambda x: x == 0, wait)
        expect(v == 0, "tq_sequences_active is %s %g s after the client went away" % (v, wait))
        g1 = metric(get_metrics(self.port)[0], "tq_generated_tokens_total")
        expect(g1 - g0 < 400, "%s tokens generated after the close: the sequence ran on" % (g1 - g0))
        r = request(self.port, "GET", "/health")
        expect(r.status == 200, "health after the disconnect: %r" % r)

    # -- metrics

    def t_metrics(self):
        ms, r = get_metrics(self.port)
        ct = r.headers.get("content-type", "")
        expect(ct.startswith("text/plain"), "Content-Type %r" % ct)
        expect("__bad__" not in ms, "unparsable lines: %r" % ms.get("__bad__", [])[:3])
        names = ["tq_sequences_active", "tq_sequences_queued", "tq_kv_bytes_in_use", "tq_kv_budget_bytes",
                 "tq_kv_f16_bytes_equivalent", "tq_prompt_tokens_total", "tq_generated_tokens_total",
                 "tq_prompt_tokens_per_second", "tq_generated_tokens_per_second",
                 "tq_time_to_first_token_seconds", "tq_requests_total"]
        missing = [n for n in names if not any(k == n or k.startswith(n + "_") for k in ms)]
        expect(not missing, "missing: %s" % ", ".join(missing))
        # this server runs without --kv-budget: the budget gauge may be 0 ("none")
        expect(metric(ms, "tq_kv_budget_bytes") >= 0, "tq_kv_budget_bytes %s" % metric(ms, "tq_kv_budget_bytes"))
        expect(metric(ms, "tq_kv_bytes_in_use") >= 0, "tq_kv_bytes_in_use %s" % metric(ms, "tq_kv_bytes_in_use"))
        expect(metric(ms, "tq_sequences_active") == 0, "tq_sequences_active %s at rest" % metric(ms, "tq_sequences_active"))
        m0 = self.metrics0 or {}
        g0, g1 = metric(m0, "tq_generated_tokens_total") or 0, metric(ms, "tq_generated_tokens_total")
        expect(g1 > g0, "tq_generated_tokens_total %s -> %s" % (g0, g1))
        p0, p1 = metric(m0, "tq_prompt_tokens_total") or 0, metric(ms, "tq_prompt_tokens_total")
        expect(p1 > p0, "tq_prompt_tokens_total %s -> %s" % (p0, p1))
        r0, r1 = sum(v for _, v in m0.get("tq_requests_total", [])), sum(v for _, v in ms.get("tq_requests_total", []))
        expect(r1 > r0, "tq_requests_total %s -> %s" % (r0, r1))

    # -- api key (a second server)

    def t_auth(self):
        port = self.auth_server.port
        body = {"model": self.model, "prompt": "hi", "max_tokens": 2, "temperature": 0}
        r = request(port, "POST", "/v1/completions", body)
        check_error(r, 401)
        r = request(port, "POST", "/v1/completions", body, {"Authorization": "Bearer wrong-key"})
        check_error(r, 401)
        r = request(port, "POST", "/v1/completions", body, {"Authorization": API_KEY})
        check_error(r, 401)  # the key without "Bearer "
        r = request(port, "GET", "/v1/models")
        check_error(r, 401)
        r = request(port, "GET", "/health")
        expect(r.status in (200, 401), "/health with --api-key: %r" % r)
        import openai
        try:
            self.openai_client(port, "wrong-key").completions.create(model=self.model, prompt="hi", max_tokens=2)
            raise AssertionError("a wrong key through the openai client was accepted")
        except openai.AuthenticationError:
            pass
        c = self.openai_client(port, API_KEY).completions.create(model=self.model, prompt="hi", max_tokens=2,
                                                                  temperature=0)
        expect(c.choices and isinstance(c.choices[0].text, str), "with the key: %r" % c)
        r = request(port, "POST", "/v1/completions", body, {"Authorization": "Bearer " + API_KEY})
        expect(r.status == 200, "raw request with the key: %r" % r)

    # -- shutdown

    def t_sigterm(self):
        prompt = LONG_PROMPTS[0]
        want = self.ref.generate(prompt, N_SIGTERM)["text"]
        holder = {}

        def bg():
            try:
                holder["r"] = self.completion({"prompt": prompt, "max_tokens": N_SIGTERM, "temperature": 0})
                holder["t"] = time.monotonic()
            except Exception as e:
                holder["e"] = e

        th = threading.Thread(target=bg)
        th.start()
        v = wait_active(self.port, lambda x: x >= 1, 10)
        expect(v is not None and v >= 1, "the request never showed in tq_sequences_active (%s)" % v)
        t0 = time.monotonic()
        self.server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        late = None
        try:  # a new request while shutting down: 503, or refused once the listener is closed
            late = self.completion({"prompt": "hi", "max_tokens": 2}, headers={"Connection": "close"})
        except (ConnectionError, OSError, http.client.HTTPException) as e:
            late = e
        deadline = 10 * SLOW
        try:
            rc = self.server.proc.wait(deadline)
        except subprocess.TimeoutExpired:
            raise AssertionError("still running %.0f s after SIGTERM (idle keep-alive connections from the "
                                 "openai client were open: they must not hold the exit)" % deadline)
        dt = time.monotonic() - t0
        th.join(30)
        r = holder.get("r")
        expect(r is not None, "the in-flight request failed: %r" % holder.get("e"))
        expect(r.status == 200, "the in-flight request: %r" % r)
        text = r.json()["choices"][0]["text"]
        expect(text == want, "the in-flight request gave %r, tq generate %r" % (text, want))
        expect(rc == 0, "exit code %s after SIGTERM (%.1f s)" % (rc, dt))
        if isinstance(late, Resp):
            expect(late.status == 503, "a request during shutdown got %r, wanted 503" % late)
        print("     (SIGTERM -> exit %d in %.2f s, the in-flight request answered after %.2f s; a new request "
              "meanwhile: %s)" % (rc, dt, holder["t"] - t0, late.status if isinstance(late, Resp) else type(late).__name__))

    def t_prefix_reuse(self):
        base = ("The history of printing starts in East Asia, where woodblocks carried text and images onto "
                "cloth and paper long before movable type. ") * 10
        want_a = self.ref.generate(base, 8)["text"]
        m0 = get_metrics(self.port)[0]
        a = self.completion({"prompt": base, "max_tokens": 8, "temperature": 0})
        expect(a.status == 200, "the long prompt: %r" % a)
        expect(a.json()["usage"]["prompt_tokens"] > 180, "the long prompt is only %d tokens"
               % a.json()["usage"]["prompt_tokens"])
        expect(a.json()["choices"][0]["text"] == want_a, "the long prompt (chunked prefill) %r, tq generate %r"
               % (a.json()["choices"][0]["text"], want_a))
        longer = base + "In Europe, Gutenberg's press"
        want_b = self.ref.generate(longer, 12)["text"]
        b = self.completion({"prompt": longer, "max_tokens": 12, "temperature": 0})
        expect(b.status == 200, "the extended prompt: %r" % b)
        m1 = get_metrics(self.port)[0]
        reused = metric(m1, "tq_prefix_reused_tokens_total") - metric(m0, "tq_prefix_reused_tokens_total")
        expect(reused >= 180, "the extended prompt reused %s tokens of the kept one" % reused)
        expect(metric(m1, "tq_prefix_cache_entries") >= 1, "no prompt kept")
        expect(b.json()["choices"][0]["text"] == want_b, "after reuse %r, tq generate %r"
               % (b.json()["choices"][0]["text"], want_b))

    def t_cache_dir(self):
        """--cache-dir: a kept prompt pushed out of memory is written to the folder and reused from
        there, kept prompts are written at exit and found again by the next server; answers equal
        tq generate's; files not the server's are left alone; names are content hashes."""
        d = tempfile.mkdtemp(prefix="tq_cache_dir_")
        srv = None
        try:
            alien = os.path.join(d, "0123456789abcdef.tqpc")  # a name like ours, not a cache
            with open(alien, "wb") as f:
                f.write(b"not a prompt cache")
            with open(os.path.join(d, "notes.txt"), "w") as f:
                f.write("a person's file\n")
            base_a = ("The history of printing starts in East Asia, where woodblocks carried text and images "
                      "onto cloth and paper long before movable type. ") * 10
            base_b = ("Rivers shape the land they cross: they cut valleys, carry silt to the sea and build "
                      "deltas where the current slows. ") * 10
            # room in memory for one 192-token raw prompt (SmolLM2: about 23 kB per token)
            extra = ["--cache-dir", d, "--prefix-cache", "6"]

            def start():
                s2 = Server(self.tq, self.model, extra)
                s2.start()
                return s2

            def ask(port, prompt, n):
                r = self.completion({"prompt": prompt, "max_tokens": n, "temperature": 0}, port=port)
                expect(r.status == 200, "%r" % r)
                got, want = r.json()["choices"][0]["text"], self.ref.generate(prompt, n)["text"]
                expect(got == want, "server %r, tq generate %r" % (got, want))

            srv = start()
            found = [l for l in srv.lines if "cache-dir" in l]
            expect(any("0 prompt(s) of this model" in l for l in found), "start-up lines: %s" % found)
            expect(any("0123456789abcdef.tqpc not used" in l for l in found), "the alien file: %s" % found)
            ask(srv.port, base_a, 4)
            ask(srv.port, base_b, 4)  # keeping B pushes A out of memory: A is written
            m = get_metrics(srv.port)[0]
            expect(metric(m, "tq_cache_dir_saves_total") == 1 and metric(m, "tq_cache_dir_entries") == 1,
                   "after A was pushed out: saves %s, entries %s" % (metric(m, "tq_cache_dir_saves_total"),
                                                                    metric(m, "tq_cache_dir_entries")))
            r0 = metric(m, "tq_prefix_reused_tokens_total")
            ask(srv.port, base_a + "In Europe, Gutenberg's press", 8)  # A comes back from the folder
            m = get_metrics(srv.port)[0]
            expect(metric(m, "tq_cache_dir_loads_total") == 1, "loads %s" % metric(m, "tq_cache_dir_loads_total"))
            expect(metric(m, "tq_prefix_reused_tokens_total") - r0 >= 180, "reused %s tokens"
                   % (metric(m, "tq_prefix_reused_tokens_total") - r0))
            srv.stop()
            expect(srv.proc.returncode == 0, "exit %s" % srv.proc.returncode)
            names = sorted(n for n in os.listdir(d) if n.endswith(".tqpc") and n != "0123456789abcdef.tqpc")
            # A (pushed out), B (pushed out by A's return; A's extension keeps A's boundary)
            expect(len(names) == 2 and all(re.fullmatch(r"[0-9a-f]{16}\.tqpc", n) for n in names),
                   "files after exit: %s" % os.listdir(d))
            expect(os.path.exists(alien) and os.path.exists(os.path.join(d, "notes.txt")),
                   "files not the server's were touched: %s" % os.listdir(d))
            srv = start()  # a restart finds both
            found = [l for l in srv.lines if "cache-dir" in l]
            expect(any("2 prompt(s) of this model" in l for l in found), "after the restart: %s" % found)
            ask(srv.port, base_b + "Near the mouth of the river", 8)
            m = get_metrics(srv.port)[0]
            expect(metric(m, "tq_cache_dir_loads_total") == 1 and metric(m, "tq_prefix_cache_hits_total") >= 1,
                   "after the restart: loads %s" % metric(m, "tq_cache_dir_loads_total"))
            srv.stop()
            # not a folder, or without the prefix cache: refused
            for args, rc, text in ((["--cache-dir", alien], 1, "not a directory"),
                                   (["--cache-dir", d, "--prefix-cache", "0"], 2, "needs the prefix cache")):
                p = subprocess.run([self.tq, "serve", "-m", self.model, "--port", "0"] + args,
                                   capture_output=True, timeout=120)
                err = p.stderr.decode("utf-8", "replace")
                expect(p.returncode == rc and text in err, "%s: exit %d: %s" % (args, p.returncode, short(err)))
        finally:
            if srv is not None:
                srv.stop()
            shutil.rmtree(d, ignore_errors=True)

    def t_no_sanitizer_report(self):
        """Sanitizer builds report to stderr and may keep running: any report fails the test."""
        time.sleep(0.2)
        marks = ("ERROR: AddressSanitizer", "WARNING: ThreadSanitizer", "runtime error:", "ERROR: LeakSanitizer")
        for srv in (self.server, self.auth_server):
            if srv is None:
                continue
            bad = [l for l in srv.lines if any(m in l for m in marks)]
            expect(not bad, "sanitizer report in the server's stderr: %s" % bad[:3])

    # -- driver

    def main(self):
        t_start = time.monotonic()
        self.server = Server(self.tq, self.model)
        try:
            try:
                self.server.start()
            except Exception as e:
                self.failed.append("start")
                print("FAIL start: %s\n  %s" % (e, " ".join(self.server.cmd)))
                return self.finish(t_start)
            self.port = self.server.port
            adm = [l for l in self.server.lines if "budget" in l]
            print("server: %s" % " ".join(self.server.cmd))
            if adm:
                print("server: %s" % adm[0])
            self.client = self.openai_client(self.port)
            subset = os.environ.get("TQ_SERVE_TESTS")
            if subset in ("threads", "san"):
                self.run("health", self.t_health)
                self.run("two streams interleave", self.t_interleave)
                if subset == "san":
                    self.run("bad inputs during a stream; the stream completes", self.t_bad_inputs)
                    self.run("prefix reuse = tq generate", self.t_prefix_reuse)
                self.run("client disconnect frees the sequence", self.t_disconnect)
                self.run("SIGTERM: in-flight completes, exit 0", self.t_sigterm)
                self.run("no sanitizer report", self.t_no_sanitizer_report)
                return self.finish(t_start)
            self.run("health", self.t_health)
            self.run("models", self.t_models)
            self.run("models via openai", self.t_models_openai)
            self.run("metrics at start", self.t_metrics_start)
            self.run("completion greedy = tq generate", self.t_completion_greedy)
            self.run("completion usage", self.t_completion_usage)
            self.run("completion stream = non-stream", self.t_completion_stream)
            self.run("stream format (SSE, [DONE])", self.t_stream_format)
            self.run("kv extension f16 = tq generate --kv f16", self.t_completion_kv_f16)
            self.run("curl", self.t_curl)
            self.run("chat stream = non-stream", self.t_chat)
            self.run("chat = tq chat greedy", self.t_chat_matches_tq_chat)
            self.run("chat with system and history", self.t_chat_system)
            self.run("two streams interleave", self.t_interleave)
            self.run("interleaved streams = tq generate", self.t_interleave_text)
            self.run("batch invariance (alone = among 7)", self.t_batch_invariance)
            self.run("stop strings", self.t_stop)
            self.run("chat stop string", self.t_chat_stop)
            self.run("max_tokens -> length", self.t_max_tokens)
            self.run("max_tokens default 16", self.t_max_tokens_default)
            self.run("seed repeats", self.t_seed)
            self.run("prefix reuse = tq generate", self.t_prefix_reuse)
            self.run("--cache-dir: saved, reused, after a restart too", self.t_cache_dir)
            self.run("bad inputs during a stream; the stream completes", self.t_bad_inputs)
            self.run("client disconnect frees the sequence", self.t_disconnect)
            self.run("client disconnect frees a whole answer's sequence", self.t_disconnect_whole)
            self.run("metrics", self.t_metrics)
            self.run("server alive", lambda: expect(self.server.alive(), "the server has exited (%s)"
                                                     % self.server.proc.returncode))
            self.auth_server = Server(self.tq, self.model, ["--api-key", API_KEY])
            try:
                self.auth_server.start()
                self.run("api key", self.t_auth)
            except Exception as e:
                self.failed.append("api key")
                print("FAIL api key: the --api-key server: %s" % e)
            finally:
                self.auth_server.stop()
            if self.server.alive():
                self.run("SIGTERM: in-flight completes, exit 0", self.t_sigterm)
            else:
                self.failed.append("SIGTERM")
                print("FAIL SIGTERM: the server is not running")
            self.run("no sanitizer report", self.t_no_sanitizer_report)
        finally:
            self.server.stop()
            if self.auth_server:
                self.auth_server.stop()
        return self.finish(t_start)

    def finish(self, t_start):
        if self.failed:
            for s, label in ((self.server, "server"), (self.auth_server, "--api-key server")):
                if s is not None and s.lines:
                    print("---- %s stderr (last 40 lines) ----" % label)
                    for l in s.tail():
                        print("  " + l)
        print("%d passed, %d failed, %d skipped (%.1f s)" % (len(self.passed), len(self.failed),
                                                             len(self.skipped), time.monotonic() - t_start))
        return 1 if self.failed else 0


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2
    tq = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else "smollm2-135m"
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    os.environ["no_proxy"] = os.environ["NO_PROXY"]
    return Suite(tq, model).main()


if __name__ == "__main__":
    sys.exit(main())
