#!/usr/bin/env python3
"""Bounded load test of `tq serve`: N concurrent clients, each R streaming chat requests.

    python3 bench/serve_load.py --tq build/tq --model smollm2-135m --kv turbo3 --kv-budget 256 \\
        [--clients 32] [--requests 20] [--prompt-tokens 1000:4000] [--max-tokens 32] \\
        [--port P] [--time-limit 600] [--json]

It starts the server itself (or uses one already running with --url), drives the clients with
http.client (SSE parsed by hand: standard library only, so the clients cost little CPU beside the
server), and stops by itself: after --time-limit seconds no new request is issued, and each request
is bounded by --request-timeout seconds of silence. Then it prints

  requests served / failed (and the first distinct errors),
  aggregate generated tokens/s (content chunks received; the server's tq_generated_tokens_total too),
  time to first token p50 / p99 (request sent -> first content chunk),
  inter-token latency p50 / p99 (between successive content chunks of one stream),
  the server's peak RSS (VmHWM of /proc/PID/status at the end),
  the most sequences decoding at once (tq_sequences_active, /metrics polled every 0.5 s),

or with --json one JSON object. Prompts are slices of ../shared/data/wikitext-2-raw-test.txt (a
generated text when it is absent) of about MIN..MAX tokens: one calibration request measures the
text's characters per token first. Exit status 0 when every request was served, 1 otherwise.
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

HOST = "127.0.0.1"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def pct(xs, p):
    """Nearest-rank percentile; None for no data."""
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def rnd(v, d=5):
    return None if v is None else round(v, d)


def load_text():
    for p in (os.path.join(ROOT, "..", "shared", "data", "wikitext-2-raw-test.txt"),
              os.path.join(ROOT, "shared", "data", "wikitext-2-raw-test.txt")):
        try:
            with open(p, encoding="utf-8", errors="replace") as f:
                t = re.sub(r"\s+", " ", f.read())
            if len(t) > 100000:
                return t, os.path.normpath(p)
        except OSError:
            pass
    rng = random.Random(12345)
    words = ("the of and to in a is that for it as was with be by on not he this are or his from at "
             "which but have an they you were her she there been one all we their has would when if "
             "so no will more can out up into than them other time river city history music season "
             "game year team army village church station bridge island language species album").split()
    sents = []
    for _ in range(40000):
        n = rng.randint(6, 22)
        s = " ".join(rng.choice(words) for _ in range(n))
        sents.append(s[0].upper() + s[1:] + ".")
    return " ".join(sents), "(generated text)"


# ---- metrics --------------------------------------------------------------------------------------


def get(host, port, path, timeout=10):
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def metrics(host, port):
    st, body = get(host, port, "/metrics")
    if st != 200:
        return {}
    out = {}
    for line in body.decode("utf-8", "replace").splitlines():
        m = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if m and not line.startswith("#"):
            try:
                v = float(m.group(3))
            except ValueError:
                continue
            if m.group(2) is None or m.group(1) not in out:
                out[m.group(1)] = v
    return out


class Poller(threading.Thread):
    def __init__(self, host, port, period=0.5):
        super().__init__(daemon=True)
        self.host, self.port, self.period = host, port, period
        self.stop_ev = threading.Event()
        self.max_active = 0.0
        self.active = 0.0
        self.max_queued = 0.0
        self.max_kv = 0.0
        self.samples = 0
        self.errors = 0

    def run(self):
        while not self.stop_ev.is_set():
            try:
                m = metrics(self.host, self.port)
                self.samples += 1
                self.active = m.get("tq_sequences_active", 0)
                self.max_active = max(self.max_active, self.active)
                self.max_queued = max(self.max_queued, m.get("tq_sequences_queued", 0))
                self.max_kv = max(self.max_kv, m.get("tq_kv_bytes_in_use", 0))
            except Exception:
                self.errors += 1
            self.stop_ev.wait(self.period)


# ---- one streaming chat request -------------------------------------------------------------------


def chat_stream(host, port, body, headers, timeout):
    """Returns dict(ok, error, t_first, chunk_times, text_len, finish)."""
    out = {"ok": False, "error": None, "t_first": None, "times": [], "finish": None}
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        h.update(headers)
        t0 = time.monotonic()
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(), headers=h)
        r = conn.getresponse()
        if r.status != 200:
            msg = r.read()[:300].decode("utf-8", "replace")
            out["error"] = "HTTP %d %s" % (r.status, msg)
            return out
        data = []
        done = False
        while True:
            raw = r.readline()
            if not raw:
                break
            line = raw.rstrip(b"\r\n")
            if line.startswith(b"data:"):
                v = line[5:]
                data.append(v[1:] if v.startswith(b" ") else v)
                continue
            if line or not data:
                continue
            d = b"\n".join(data)
            data = []
            if d == b"[DONE]":
                done = True
                break
            c = json.loads(d)
            ch = (c.get("choices") or [{}])[0]
            if ch.get("finish_reason"):
                out["finish"] = ch["finish_reason"]
            content = (ch.get("delta") or {}).get("content")
            if content:
                t = time.monotonic() - t0
                if out["t_first"] is None:
                    out["t_first"] = t
                out["times"].append(t)
        if not done:
            out["error"] = "stream ended without [DONE]"
        else:
            out["ok"] = True
        return out
    except Exception as e:
        out["error"] = "%s: %s" % (type(e).__name__, e)
        return out
    finally:
        conn.close()


# ---- the run ----------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tq", default=os.path.join(ROOT, "build", "tq"), help="the tq binary (default build/tq)")
    ap.add_argument("--model", default="smollm2-135m", help="model name or GGUF path (default smollm2-135m)")
    ap.add_argument("--kv", default="turbo3", help="KV scheme for the server (default turbo3)")
    ap.add_argument("--kv-budget", type=int, default=None, metavar="MB", help="server --kv-budget (MB)")
    ap.add_argument("--clients", type=int, default=32, help="concurrent clients (default 32)")
    ap.add_argument("--requests", type=int, default=20, help="requests per client (default 20)")
    ap.add_argument("--prompt-tokens", default="1000:4000", metavar="MIN:MAX",
                    help="approximate prompt length range in tokens (default 1000:4000)")
    ap.add_argument("--max-tokens", type=int, default=32, help="max_tokens per request (default 32)")
    ap.add_argument("--port", type=int, default=0, help="server port (default: a free one)")
    ap.add_argument("--time-limit", type=float, default=600, metavar="S",
                    help="stop issuing requests after S seconds (default 600)")
    ap.add_argument("--request-timeout", type=float, default=300, metavar="S",
                    help="give up on a request after S seconds of silence (default 300)")
    ap.add_argument("--temperature", type=float, default=0.7, help="sampling temperature (default 0.7)")
    ap.add_argument("--seed", type=int, default=1, help="seed for prompt choice and sampling (default 1)")
    ap.add_argument("--ctx", type=int, default=None, help="server -c (default: the server's)")
    ap.add_argument("--threads", type=int, default=None, help="server -t (default: the server's)")
    ap.add_argument("--parallel", type=int, default=None, help="server --parallel (default: the server's)")
    ap.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for tq serve (repeatable), e.g. --server-arg=--max-connections=64")
    ap.add_argument("--url", default=None, help="use a running server (http://HOST:PORT) instead of starting one")
    ap.add_argument("--pid", type=int, default=None, help="with --url: the server's pid, for its peak RSS")
    ap.add_argument("--api-key", default=None, help="send Authorization: Bearer KEY (also given to a started server)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    a = ap.parse_args()

    try:
        pmin, pmax = (int(x) for x in a.prompt_tokens.split(":"))
        assert 1 <= pmin <= pmax
    except Exception:
        ap.error("--prompt-tokens wants MIN:MAX with 1 <= MIN <= MAX")
    if a.clients < 1 or a.requests < 1 or a.max_tokens < 1:
        ap.error("--clients, --requests and --max-tokens must be at least 1")

    log = (lambda *x: print(*x, file=sys.stderr, flush=True)) if a.json else (lambda *x: print(*x, flush=True))
    host, port = HOST, a.port or free_port()
    proc = None
    lines = []
    headers = {"Authorization": "Bearer " + a.api_key} if a.api_key else {}
    result = {"model": a.model, "kv": a.kv, "kv_budget_mb": a.kv_budget, "clients": a.clients,
              "requests_per_client": a.requests, "prompt_tokens_range": [pmin, pmax],
              "max_tokens": a.max_tokens}

    def tail():
        return "\n".join("  " + l for l in lines[-30:])

    if a.url:
        m = re.match(r"^https?://([^:/]+):(\d+)", a.url)
        if not m:
            ap.error("--url wants http://HOST:PORT")
        host, port = m.group(1), int(m.group(2))
        pid = a.pid
    else:
        cmd = [a.tq, "serve", "-m", a.model, "--kv", a.kv, "--host", HOST, "--port", str(port)]
        if a.kv_budget is not None:
            cmd += ["--kv-budget", str(a.kv_budget)]
        if a.ctx is not None:
            cmd += ["-c", str(a.ctx)]
        if a.threads is not None:
            cmd += ["-t", str(a.threads)]
        if a.parallel is not None:
            cmd += ["--parallel", str(a.parallel)]
        if a.api_key:
            cmd += ["--api-key", a.api_key]
        cmd += a.server_arg
        result["server_command"] = cmd
        log("starting: %s" % " ".join(cmd))
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                cwd=ROOT)
        pid = proc.pid
        ready = threading.Event()

        def reader():
            for raw in iter(proc.stderr.readline, b""):
                l = raw.decode("utf-8", "replace").rstrip("\n")
                lines.append(l)
                if "listening on http://" in l:
                    ready.set()
        threading.Thread(target=reader, daemon=True).start()
        deadline = time.monotonic() + 120
        while not ready.wait(0.1):
            if proc.poll() is not None or time.monotonic() > deadline:
                time.sleep(0.2)
                log("tq serve did not start (exit %s):\n%s" % (proc.poll(), tail()))
                if proc.poll() is None:
                    proc.kill()
                return 1
        adm = [l for l in lines if "budget" in l]
        result["admission"] = adm[0] if adm else None
        if adm:
            log(adm[0])

    try:
        text, text_src = load_text()
        result["prompt_source"] = text_src
        # calibration: characters per token of this text (the chat template adds a few tokens)
        cpt = 4.0
        try:
            sample = text[:4000]
            conn = http.client.HTTPConnection(host, port, timeout=a.request_timeout)
            h = {"Content-Type": "application/json"}
            h.update(headers)
            conn.request("POST", "/v1/completions", body=json.dumps(
                {"model": a.model, "prompt": sample, "max_tokens": 1, "temperature": 0}).encode(), headers=h)
            r = conn.getresponse()
            body = r.read()
            conn.close()
            if r.status == 200:
                n = json.loads(body)["usage"]["prompt_tokens"]
                if n > 0:
                    cpt = len(sample) / n
            else:
                log("calibration request: HTTP %d %s (using 4 characters per token)"
                    % (r.status, body[:200].decode("utf-8", "replace")))
        except Exception as e:
            log("calibration request failed: %s (using 4 characters per token)" % e)
        result["chars_per_token"] = round(cpt, 3)

        m0 = {}
        try:
            m0 = metrics(host, port)
        except Exception:
            pass
        poller = Poller(host, port)
        poller.start()
        lock = threading.Lock()
        recs = []
        t_start = time.monotonic()
        t_stop = t_start + a.time_limit
        stopped_by_limit = [False]

        def client(ci):
            rng = random.Random(a.seed * 1000003 + ci)
            for ri in range(a.requests):
                if time.monotonic() >= t_stop:
                    stopped_by_limit[0] = True
                    return
                ntok = rng.randint(pmin, pmax)
                nch = max(1, int(ntok * cpt))
                off = rng.randrange(0, max(1, len(text) - nch))
                chunk = text[off:off + nch]
                while len(chunk) < nch:  # a text shorter than the prompt: repeat it
                    chunk += " " + text[:nch - len(chunk)]
                body = {"model": a.model, "max_tokens": a.max_tokens, "temperature": a.temperature,
                        "seed": rng.randrange(1 << 30), "stream": True,
                        "messages": [{"role": "user", "content": "Summarize this text in one sentence:\n\n" + chunk}]}
                rec = chat_stream(host, port, body, headers, a.request_timeout)
                rec["client"] = ci
                with lock:
                    recs.append(rec)

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(a.clients)]
        log("%d clients x %d requests, prompts ~%d..%d tokens (%s, %.2f chars/token), max_tokens %d, "
            "time limit %.0f s" % (a.clients, a.requests, pmin, pmax, text_src, cpt, a.max_tokens, a.time_limit))
        for t in threads:
            t.start()
        hard = t_stop + a.request_timeout + 30
        last_report = time.monotonic()
        while any(t.is_alive() for t in threads) and time.monotonic() < hard:
            time.sleep(0.2)
            if not a.json and time.monotonic() - last_report > 10:
                last_report = time.monotonic()
                with lock:
                    n_ok = sum(1 for r in recs if r["ok"])
                    n_bad = len(recs) - n_ok
                log("  %.0f s: %d served, %d failed, %d active (max %d)"
                    % (last_report - t_start, n_ok, n_bad, poller.active, poller.max_active))
        wall = time.monotonic() - t_start
        abandoned = sum(1 for t in threads if t.is_alive())
        poller.stop_ev.set()
        poller.join(5)
        m1 = {}
        try:
            m1 = metrics(host, port)
        except Exception:
            pass

        rss_kb = None
        if pid:
            try:
                with open("/proc/%d/status" % pid) as f:
                    for l in f:
                        if l.startswith("VmHWM:"):
                            rss_kb = int(l.split()[1])
            except OSError:
                pass

        with lock:
            rs = list(recs)
        ok = [r for r in rs if r["ok"]]
        bad = [r for r in rs if not r["ok"]]
        errors = {}
        for r in bad:
            k = re.sub(r"\d+", "N", r["error"] or "?")[:160]
            errors.setdefault(k, [0, r["error"]])[0] += 1
        ttft = [r["t_first"] for r in rs if r["t_first"] is not None]
        itl = []
        for r in rs:
            ts = r["times"]
            itl += [b - c for c, b in zip(ts, ts[1:])]
        chunks = sum(len(r["times"]) for r in rs)
        gen_metric = None
        if "tq_generated_tokens_total" in m0 and "tq_generated_tokens_total" in m1:
            gen_metric = m1["tq_generated_tokens_total"] - m0["tq_generated_tokens_total"]
        prompt_metric = None
        if "tq_prompt_tokens_total" in m0 and "tq_prompt_tokens_total" in m1:
            prompt_metric = m1["tq_prompt_tokens_total"] - m0["tq_prompt_tokens_total"]

        result.update({
            "wall_s": round(wall, 3),
            "requests_served": len(ok),
            "requests_failed": len(bad) + abandoned,
            "requests_abandoned": abandoned,
            "stopped_by_time_limit": stopped_by_limit[0],
            "errors": [{"count": c, "example": e} for c, e in errors.values()],
            "content_chunks": chunks,
            "generated_tokens_per_s": round(chunks / wall, 2) if wall > 0 else None,
            "generated_tokens_metric": gen_metric,
            "generated_tokens_per_s_metric": round(gen_metric / wall, 2) if gen_metric is not None else None,
            "prompt_tokens_metric": prompt_metric,
            "prompt_tokens_per_s_metric": round(prompt_metric / wall, 2) if prompt_metric is not None else None,
            "ttft_p50_s": rnd(pct(ttft, 50)), "ttft_p99_s": rnd(pct(ttft, 99)),
            "itl_p50_s": rnd(pct(itl, 50)), "itl_p99_s": rnd(pct(itl, 99)),
            "server_peak_rss_mib": round(rss_kb / 1024.0, 1) if rss_kb is not None else None,
            "max_sequences_active": poller.max_active,
            "max_sequences_queued": poller.max_queued,
            "max_kv_bytes_in_use": poller.max_kv,
            "kv_budget_bytes": m1.get("tq_kv_budget_bytes"),
            "metrics_samples": poller.samples,
        })
    finally:
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            result["server_exit_code"] = proc.returncode

    if a.json:
        print(json.dumps(result))
    else:
        f = lambda v, scale=1.0, unit="s", fmt="%.3f": ("n/a" if v is None else (fmt % (v * scale)) + " " + unit)
        print("requests: %d served, %d failed%s (wall %.1f s)" % (
            result["requests_served"], result["requests_failed"],
            ", stopped by --time-limit" if result["stopped_by_time_limit"] else "", result["wall_s"]))
        for e in result["errors"][:5]:
            print("  %dx %s" % (e["count"], e["example"]))
        print("generated: %d content chunks, %.1f tok/s aggregate%s" % (
            result["content_chunks"], result["generated_tokens_per_s"] or 0,
            "" if gen_metric is None else "; server counted %d tokens, %.1f tok/s"
            % (gen_metric, result["generated_tokens_per_s_metric"])))
        if prompt_metric is not None:
            print("prompt: server counted %d tokens, %.1f tok/s" % (prompt_metric, result["prompt_tokens_per_s_metric"]))
        print("time to first token: p50 %s, p99 %s" % (f(result["ttft_p50_s"]), f(result["ttft_p99_s"])))
        print("inter-token latency: p50 %s, p99 %s" % (f(result["itl_p50_s"], 1000, "ms", "%.1f"),
                                                       f(result["itl_p99_s"], 1000, "ms", "%.1f")))
        print("server peak RSS (VmHWM): %s" % f(result["server_peak_rss_mib"], 1, "MiB", "%.1f"))
        print("max concurrency: %d sequences active (max queued %d; %d /metrics samples)%s" % (
            result["max_sequences_active"], result["max_sequences_queued"], result["metrics_samples"],
            "" if not result["max_kv_bytes_in_use"] else "; KV max %.1f MiB in use of %s" % (
                result["max_kv_bytes_in_use"] / 1048576.0,
                "n/a" if not result["kv_budget_bytes"] else "%.1f MiB" % (result["kv_budget_bytes"] / 1048576.0))))
        if proc is not None:
            print("server exit: %s" % result["server_exit_code"])
    if proc is not None and result.get("server_exit_code") not in (0, None) and not a.json:
        print("server stderr tail:\n%s" % tail())
    return 0 if result.get("requests_failed", 1) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
